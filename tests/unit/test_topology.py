"""The incast topology as data: nodes, links, ports, addresses, and parameter checks."""

import pytest

from topologies.incast import (PS_IP, IncastParams, IncastTopo, TopologyError, mac_for,
                               worker_ip, worker_port)


def test_star_has_workers_ps_and_one_switch():
    topo = IncastTopo(n_workers=8)
    assert topo.hosts() == ["ps1"] + [f"w{i}" for i in range(1, 9)]
    assert topo.switches() == ["s1"]
    assert len(topo.links()) == 9
    assert all("s1" in (a, b) for a, b in topo.links())


def test_ps_link_is_the_single_bottleneck():
    topo = IncastTopo(n_workers=4, bottleneck_mbps=50, worker_link_mbps=200)
    links = {a if b == "s1" else b: info for a, b, info in topo.links(withInfo=True)}
    assert links["ps1"]["bw"] == 50
    assert all(links[f"w{i}"]["bw"] == 200 for i in range(1, 5))
    # Offload must be off on every veth, or userspace OVS carries no TCP/UDP.
    assert all(info["txo"] is False and info["rxo"] is False for info in links.values())


def test_worker_links_default_to_bottleneck_rate():
    topo = IncastTopo(n_workers=2, bottleneck_mbps=80)
    assert {info["bw"] for _, _, info in topo.links(withInfo=True)} == {80}


def test_forwarding_table_matches_ports_and_addresses():
    topo = IncastTopo(n_workers=3)
    table = {e["host"]: e for e in topo.forwarding_table()}
    assert table["ps1"] == {"host": "ps1", "ip": PS_IP, "mac": "00:00:00:00:00:fe", "port": 1}
    assert table["w3"]["ip"] == worker_ip(2) == "10.0.0.3"
    assert table["w3"]["port"] == worker_port(2) == 4
    assert table["w3"]["mac"] == mac_for("10.0.0.3")
    links = topo.links(withInfo=True)
    ports = {(a if b == "s1" else b): info["port2"] for a, b, info in links}
    assert all(ports[h] == e["port"] for h, e in table.items())


@pytest.mark.parametrize("kwargs, words", [
    ({"n_workers": 0}, "n_workers"),
    ({"n_workers": 254}, "n_workers"),
    ({"bottleneck_mbps": 0}, "bottleneck_mbps"),
    ({"bottleneck_mbps": -5}, "bottleneck_mbps"),
    ({"queue_pkts": 0}, "queue_pkts"),
    ({"loss_pct": -1}, "loss_pct"),
    ({"loss_pct": 50}, "loss_pct"),
    ({"worker_link_mbps": 10, "bottleneck_mbps": 100}, "worker_link_mbps"),
])
def test_bad_parameters_raise_one_clear_sentence(kwargs, words):
    with pytest.raises(TopologyError, match=words) as info:
        IncastTopo(**kwargs)
    assert str(info.value).endswith(".")
    with pytest.raises(TopologyError):
        IncastParams(**kwargs)


def test_usable_from_the_mn_command_line():
    import topologies.incast as module

    assert module.topos["incast"] is IncastTopo


def test_what_the_testbed_asks_of_a_topology():
    params = IncastParams(n_workers=2)
    topo = params.topo()
    assert isinstance(topo, IncastTopo) and topo.params == params
    assert topo.switch_tables() == {"s1": {"dpid": 1, "hosts": topo.forwarding_table()}}
    assert topo.queue_intfs() == ["s1-eth1"]  # the bottleneck only
    assert not hasattr(topo, "wiring")  # so the star runs without the multicast app
