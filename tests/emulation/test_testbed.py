"""The real testbed: Mininet hosts, userspace OVS, the os-ken controller, PyTorch training."""

import json
import sys

import pytest

from harness.running.runfiles import RunFiles
from harness.running.runner import execute
from harness.running.spec import RunSpec
from tests.emulation.conftest import network_fixture
from topologies.controller.control import ControlError
from topologies.impair.loss import Impairment
from topologies.incast import IncastParams
from topologies.testbed import network

GRADIENT_BYTES = 4 * 109_386


testbed = network_fixture("testbed", IncastParams(n_workers=2, bottleneck_mbps=100,
                                                   queue_pkts=64))


def test_gradient_bytes_cross_the_bottleneck(testbed, tmp_path):
    spec = RunSpec(transport="tcp-cubic", n_workers=2, iterations=5, eval_every=5, timeout_s=120)
    row, curves, _ = execute(testbed, spec, tmp_path / "run", "test")
    assert row["status"] == "ok", row["reason"]
    assert row["iterations_done"] == 5
    assert row["grad_payload_bytes"] == 2 * 5 * GRADIENT_BYTES
    # The switch sent at least every gradient byte toward the PS (plus headers), and not wildly
    # more.
    assert 2 * 5 * GRADIENT_BYTES <= row["bottleneck_tx_bytes"] < 1.2 * 2 * 5 * GRADIENT_BYTES
    # The controller's own statistics saw the same traffic on the PS port.
    stats = [json.loads(line) for line in (tmp_path / "run" / "port_stats.jsonl").open()]
    ps_port = [s for s in stats if s["port"] == 1]
    assert ps_port, "the controller emitted no statistics during the run"
    assert ps_port[-1]["tx_bytes"] - ps_port[0]["tx_bytes"] > 0
    assert [c["iteration"] for c in curves] == [0, 5]


def test_measured_loss_is_near_the_configured_rate(testbed):
    testbed.ingress.configure(Impairment(5.0))
    try:
        before = testbed.meter.snapshot()
        sender = ("import socket,time\n"
                  "s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n"
                  "for i in range(20000):\n"
                  "    s.sendto(b'x'*200,('10.0.0.254',9))\n"
                  "    time.sleep(0.00005) if i % 10 == 0 else None\n")
        testbed.host_run("w1", sys.executable, "-c", sender)
        after = testbed.meter.snapshot()
    finally:
        testbed.ingress.configure(Impairment(0.0))
    arrived = after.impair["ps1"].arrived - before.impair["ps1"].arrived
    dropped = after.impair["ps1"].dropped - before.impair["ps1"].dropped
    # Enough samples: an unpaced blast also loses packets before the impairment (the sender's
    # socket and the switch queue) when the 2 cores are busy (14,595 of 20,000 arrived once).
    assert arrived > 10000
    # 5% of >= 10000 packets: the standard deviation is <= 0.22 points, so 1 point is > 4.5 sigma.
    assert abs(100.0 * dropped / arrived - 5.0) < 1.0
    assert after.delta(before).measured_loss_pct > 3.0


def test_training_reaches_well_above_chance(testbed, tmp_path):
    spec = RunSpec(transport="tcp-reno", n_workers=2, iterations=40, eval_every=20,
                   loss_pct=1.0, timeout_s=180)
    row, curves, _ = execute(testbed, spec, tmp_path / "run", "test")
    assert row["status"] == "ok", row["reason"]
    assert row["final_accuracy"] > 0.5, "chance is 0.1"
    assert 0.3 < row["measured_loss_pct"] < 2.0
    assert curves[-1]["accuracy"] == row["final_accuracy"]


def test_a_hung_run_is_killed_and_recorded(testbed, tmp_path):
    spec = RunSpec(transport="tcp-cubic", n_workers=2, iterations=100000, timeout_s=8)
    row, _, _ = execute(testbed, spec, tmp_path / "run", "test")
    assert row["status"] == "timeout"
    assert "still running" in row["reason"]
    groups = [g["pid"] for g in testbed.ledger.data["groups"]]
    assert groups == [testbed.controller_ref.pid], "the run's processes stayed in the ledger"


def test_lowered_rto_applies_to_its_run_only(testbed, tmp_path):
    def worker_rto_ms(transport, folder):
        spec = RunSpec(transport=transport, n_workers=2, iterations=3, eval_every=3, timeout_s=120)
        row, _, _ = execute(testbed, spec, folder, "test")
        assert row["status"] == "ok", row["reason"]
        return RunFiles(folder).host_summary("w1").transport_stats["rto_ms"]

    # Below the kernel's 200 ms floor; not a tighter bound: the RTO is the smoothed RTT plus the
    # larger of four deviations and the minimum, and delayed ACKs on loaded cores add tens of ms.
    assert worker_rto_ms("tcp-cubic-lowrto", tmp_path / "low") < 200
    # The next run on the same network gets the kernel's 200 ms floor back.
    assert worker_rto_ms("tcp-cubic", tmp_path / "default") >= 200


def test_the_controller_cuts_and_restores_a_link_in_the_switch(testbed):
    def reaches_ps(host):
        try:
            testbed.host_run(host, "ping", "-c", "1", "-W", "1", "10.0.0.254")
            return True
        except network.TestbedError:
            return False

    assert reaches_ps("w1") and reaches_ps("w2")
    t_cut = testbed.control.cut("w1")
    try:
        assert not reaches_ps("w1"), "the cut let a ping through"
        assert reaches_ps("w2"), "the cut took another host down too"
        # The host itself is untouched: its interface is up, the failure is in the network.
        assert "state UP" in testbed.host_run("w1", "ip", "link", "show", "w1-eth0")
    finally:
        t_restore = testbed.control.restore("w1")
    assert reaches_ps("w1")
    events = [json.loads(line) for line in testbed.events_path.read_text().splitlines()]
    assert [(e["op"], e["host"], e["t"]) for e in events[-2:]] == [
        ("cut", "w1", t_cut), ("restore", "w1", t_restore)]
    with pytest.raises(ControlError, match="no host named"):
        testbed.control.cut("w9")
