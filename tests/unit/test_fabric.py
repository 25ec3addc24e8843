"""The leaf-spine fabric as data: nodes, links, rates, oversubscription, forwarding, wiring."""

import pytest

from topologies.controller.linkview import Wiring
from topologies.fabric import (SPINE_DPID, FabricParams, FabricTopo, TopologyError,
                               leaf_name, spine_port)


def links_by_pair(topo):
    return {frozenset((a, b)): info for a, b, info in topo.links(withInfo=True)}


def test_leaves_of_workers_under_one_spine():
    topo = FabricTopo(n_leaves=2, workers_per_leaf=3)
    assert topo.hosts() == ["w1", "w2", "w3", "w4", "w5", "w6"]
    assert sorted(topo.switches()) == ["l1", "l2", "sp1"]
    links = links_by_pair(topo)
    assert len(links) == 6 + 2
    assert {frozenset(("w1", "l1")), frozenset(("w3", "l1")), frozenset(("w4", "l2")),
            frozenset(("l1", "sp1")), frozenset(("l2", "sp1"))} <= set(links)
    # Offload off on every veth, or userspace OVS carries no TCP/UDP.
    assert all(i["txo"] is False and i["rxo"] is False for i in links.values())
    assert topo.nodeInfo("sp1")["dpid"] == "%016x" % SPINE_DPID
    assert topo.nodeInfo("l2")["dpid"] == "%016x" % 2


def test_slow_workers_and_oversubscription():
    p = FabricParams(n_leaves=2, workers_per_leaf=3, access_mbps=100, n_slow=1)
    assert p.worker_rates_mbps == [100, 100, 100, 100, 100, 25]
    assert p.uplink_rate_mbps == 100
    assert p.oversubscription == 3.0
    links = links_by_pair(p.topo())
    assert links[frozenset(("w6", "l2"))]["bw"] == 25
    assert links[frozenset(("w1", "l1"))]["bw"] == 100
    assert links[frozenset(("l1", "sp1"))]["bw"] == 100
    explicit = FabricParams(n_leaves=1, workers_per_leaf=2, worker_mbps=(50, 200),
                            uplink_mbps=125)
    assert explicit.worker_rates_mbps == [50.0, 200.0]
    assert explicit.oversubscription == 2.0


def test_cross_hosts_sit_after_the_workers_at_the_uplink_rate():
    p = FabricParams(n_leaves=2, workers_per_leaf=2, uplink_mbps=200, cross_per_leaf=1)
    topo = p.topo()
    assert p.host_names == ["w1", "w2", "w3", "w4", "x1", "x2"]
    assert p.attachment("x2") == (1, 4)
    assert links_by_pair(topo)[frozenset(("x2", "l2"))]["bw"] == 200
    table = {e["host"]: e for e in topo.forwarding_table()}
    assert table["x1"]["ip"] == "10.0.0.200" and table["w4"]["ip"] == "10.0.0.4"


def test_link_names_are_every_interface_and_queues_every_switch_port():
    p = FabricParams(n_leaves=2, workers_per_leaf=2)
    topo = p.topo()
    expected = set()
    for a, b, info in topo.links(withInfo=True):
        expected |= {f"{a}-eth{info['port1']}", f"{b}-eth{info['port2']}"}
    assert set(p.link_names()) == expected
    assert set(p.queue_intfs()) == {n for n in expected if not n.startswith("w")}


def test_switch_tables_forward_down_locally_and_up_otherwise():
    topo = FabricTopo(n_leaves=2, workers_per_leaf=2)
    tables = topo.switch_tables()
    l1 = {e["host"]: e for e in tables["l1"]["hosts"]}
    assert l1["w1"]["port"] == 2 and l1["w1"]["attached"]
    assert l1["w2"]["port"] == 3
    assert l1["w3"]["port"] == 1 and not l1["w3"]["attached"]  # up the uplink
    spine = {e["host"]: e for e in tables["sp1"]["hosts"]}
    assert spine["w1"]["port"] == spine_port(0) == 1
    assert spine["w4"]["port"] == spine_port(1) == 2
    assert tables["sp1"]["dpid"] == SPINE_DPID
    assert {name: t["dpid"] for name, t in tables.items()} == {"l1": 1, "l2": 2, "sp1": SPINE_DPID}
    # Every switch port named in a table exists in the topology.
    for switch, table in tables.items():
        ports = {info["port1"] if a == switch else info["port2"]
                 for a, b, info in topo.links(withInfo=True) if switch in (a, b)}
        assert {e["port"] for e in table["hosts"]} <= ports


def test_wiring_paths_follow_the_tree():
    wiring = Wiring(FabricTopo(n_leaves=2, workers_per_leaf=2, n_slow=1).wiring())
    assert wiring.path("w1", "w2") == ["w1>l1", "l1>w2"]
    assert wiring.path("w1", "w4") == ["w1>l1", "l1>sp1", "sp1>l2", "l2>w4"]
    assert wiring.links["l2>w4"].capacity_mbps == 25
    # Measured where the switch sees it: leaving a switch by tx, entering from a host by rx.
    assert (wiring.links["l1>sp1"].dpid, wiring.links["l1>sp1"].port,
            wiring.links["l1>sp1"].counter) == (1, 1, "tx_bytes")
    assert (wiring.links["w1>l1"].port, wiring.links["w1>l1"].counter) == (2, "rx_bytes")
    assert [(h.switch, h.port, h.next) for h in wiring.hops("w1", "w4")] == [
        ("l1", 1, "sp1"), ("sp1", 2, "l2"), ("l2", 3, "w4")]


@pytest.mark.parametrize("kwargs, words", [
    ({"n_leaves": 0}, "n_leaves"),
    ({"n_leaves": 17}, "n_leaves"),
    ({"workers_per_leaf": 0}, "workers_per_leaf"),
    ({"n_leaves": 10, "workers_per_leaf": 20}, "at most 199 workers"),
    ({"access_mbps": 0}, "access_mbps"),
    ({"uplink_mbps": 2000}, "uplink_mbps"),
    ({"n_slow": 7}, "n_slow"),
    ({"slow_frac": 0}, "slow_frac"),
    ({"worker_mbps": (100, 100)}, "one rate per worker"),
    ({"worker_mbps": (100,) * 6, "n_slow": 1}, "not both"),
    ({"cross_per_leaf": 5}, "cross_per_leaf"),
    ({"queue_pkts": 0}, "queue_pkts"),
    ({"loss_pct": 50}, "loss_pct"),
])
def test_bad_parameters_raise_one_clear_sentence(kwargs, words):
    with pytest.raises(TopologyError, match=words) as info:
        FabricParams(**kwargs)
    assert str(info.value).endswith(".")


def test_unknown_host_is_one_sentence():
    with pytest.raises(TopologyError, match="no host 'w9'"):
        FabricParams().attachment("w9")


def test_usable_from_the_mn_command_line():
    import topologies.fabric as module

    assert module.topos["fabric"] is FabricTopo
    # mn passes numbers as ints: the topology takes them.
    topo = module.topos["fabric"](n_leaves=2, workers_per_leaf=1, access_mbps=100, n_slow=1)
    assert topo.params.worker_rates_mbps == [100.0, 25.0]
    assert leaf_name(1) in topo.switches()
