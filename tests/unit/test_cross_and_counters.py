"""Cross traffic's flows, the counter snapshot's figures, the names of the star with cross
hosts, and the one host-process handle (no root)."""

import dataclasses
import json
import subprocess
import sys

import pytest

from topologies.impair.cross import OnOffUdp, TcpFlows, parse_cross
from topologies.incast import (BOTTLENECK_INTF, IncastParams, IncastTopo, TopologyError,
                               cross_ip, cross_port, intf, switch_intf)
from topologies.testbed.counters import LossCounters, PortCounters, QueueCounters, Snapshot
from topologies.testbed.ledger import Ledger
from topologies.testbed.process import HostProcess


def test_every_flow_gets_its_own_host_in_order():
    spec = parse_cross("tcp:2+udp:2")
    assert spec.n_hosts == 4
    assert spec.flows() == [(0, TcpFlows(2), 0), (1, TcpFlows(2), 1),
                            (2, OnOffUdp(2), 0), (3, OnOffUdp(2), 1)]


# ---- the star with cross hosts -------------------------------------------------------------------

def test_cross_hosts_follow_the_workers():
    topo = IncastTopo(n_workers=3, n_cross=2, bottleneck_mbps=50, worker_link_mbps=200)
    assert topo.hosts() == ["ps1", "w1", "w2", "w3", "x1", "x2"]
    table = {e["host"]: e for e in topo.forwarding_table()}
    assert table["x1"] == {"host": "x1", "ip": "10.0.0.200", "mac": "00:00:00:00:00:c8",
                           "port": 5}
    assert table["x2"]["port"] == cross_port(1, 3) == 6 and table["x2"]["ip"] == cross_ip(1)
    links = {a if b == "s1" else b: info for a, b, info in topo.links(withInfo=True)}
    assert links["x1"]["bw"] == links["w1"]["bw"] == 200  # cross links at the worker rate
    assert links["x2"]["txo"] is False and links["x2"]["port2"] == 6


def test_names_come_from_one_place():
    params = IncastParams(n_workers=2, n_cross=1)
    assert params.host_names == ["ps1", "w1", "w2", "x1"]
    assert params.worker_ports == [2, 3] and params.cross_ports == [4]
    assert intf("w1") == "w1-eth0" and switch_intf(4) == "s1-eth4"
    assert BOTTLENECK_INTF == "s1-eth1"
    assert params.link_names() == ["ps1-eth0", "s1-eth1", "w1-eth0", "s1-eth2", "w2-eth0",
                                   "s1-eth3", "x1-eth0", "s1-eth4"]
    names = IncastTopo(n_workers=2, n_cross=1).links(withInfo=True)
    built = [n for a, b, i in names for n in (f"{a}-eth{i['port1']}", f"{b}-eth{i['port2']}")]
    assert sorted(built) == sorted(params.link_names())


@pytest.mark.parametrize("kwargs, words", [
    ({"n_cross": -1}, "n_cross"), ({"n_cross": 54}, "n_cross"),
    ({"n_cross": 1, "n_workers": 200}, "below 200"),
])
def test_bad_cross_host_counts_raise(kwargs, words):
    with pytest.raises(TopologyError, match=words):
        IncastParams(**kwargs)


# ---- counters ------------------------------------------------------------------------------------

def snap(t, ports, sent, drops, impair, retrans, cross=(4,)):
    return Snapshot(t=t, ports={p: PortCounters(**v) for p, v in ports.items()},
                    bottleneck=QueueCounters(sent_packets=sent, drops=drops),
                    impair=impair, tcp={h: {"TcpRetransSegs": retrans} for h in impair},
                    ps_port=1, worker_ports=(2, 3), cross_ports=cross)


def test_delta_gives_the_runs_figures():
    before = snap(0.0, {1: {"tx_bytes": 100, "tx_packets": 10}, 2: {"rx_packets": 10},
                        3: {"rx_packets": 5}, 4: {"rx_packets": 0, "rx_bytes": 0}},
                  sent=10, drops=1,
                  impair={"ps1": LossCounters(100, 5, 2), "w1": LossCounters(50, 0, 0)},
                  retrans=3)
    after = snap(1.0, {1: {"tx_bytes": 10_100, "tx_packets": 120}, 2: {"rx_packets": 60},
                       3: {"rx_packets": 45, "tx_packets": 3}, 4: {"rx_packets": 30,
                                                                   "rx_bytes": 45_000}},
                 sent=120, drops=4,
                 impair={"ps1": LossCounters(1100, 105, 27), "w1": LossCounters(150, 0, 0)},
                 retrans=10)
    d = after.delta(before)
    assert d.arrived_packets == 1100 and d.random_drops == 100
    assert d.measured_loss_pct == pytest.approx(100 * 100 / 1100)
    assert d.loss_bursts == 25 and d.mean_burst_pkts == 4.0
    # In on every port: 50 + 40 from the workers and 30 from the cross host; out: 110 toward the
    # PS and 3 toward a worker (any pattern's traffic counts).
    assert d.queue_drops == 7
    assert d.queue_drops_tc == 3
    assert d.bottleneck_tx_bytes == 10_000 and d.cross_tx_bytes == 45_000
    assert d.tcp_retransmits == 14
    assert set(d.as_dict()) == {f.name for f in dataclasses.fields(d)}


def test_uniform_loss_counts_no_bursts():
    same = {1: {}, 2: {}, 3: {}}
    before = snap(0, same, 0, 0, {"ps1": LossCounters(0, 0)}, 0, cross=())
    after = snap(1, same, 0, 0, {"ps1": LossCounters(10, 1)}, 0, cross=())
    d = after.delta(before)
    assert d.loss_bursts is None and d.mean_burst_pkts is None and d.cross_tx_bytes == 0


def test_snapshot_round_trips_through_json():
    s = snap(2.5, {1: {"tx_bytes": 7}, 2: {}, 3: {}, 4: {}}, 3, 0,
             {"ps1": LossCounters(9, 1, 1)}, 2)
    assert Snapshot.from_dict(json.loads(json.dumps(s.to_dict()))) == s


# ---- one process handle --------------------------------------------------------------------------

def test_a_popen_handle_polls_kills_its_group_and_leaves_the_ledger(tmp_path):
    ledger = Ledger(tmp_path / "ledger.json")
    ledger.claim()
    popen = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             start_new_session=True)
    proc = HostProcess("w1", tmp_path / "log", ledger, popen=popen)
    assert proc.poll() is None and len(ledger.data["groups"]) == 1
    proc.kill()
    assert proc.poll() is not None and ledger.data["groups"] == []


def test_a_forked_handle_reads_its_status_file(tmp_path):
    ledger = Ledger(tmp_path / "ledger.json")
    ledger.claim()
    status = tmp_path / "status"
    child = subprocess.Popen([sys.executable, "-c",
                              f"open({str(status)!r}, 'w').write('3')"], start_new_session=True)
    proc = HostProcess("w2", tmp_path / "log", ledger, pid=child.pid, status_path=status)
    child.wait()
    assert proc.poll() == 3
    status.unlink()
    assert proc.poll() == -1  # gone without a status: died abnormally
    proc.kill()
    assert ledger.data["groups"] == []
    with pytest.raises(ValueError):
        HostProcess("w3", tmp_path / "log", ledger, pid=1)
