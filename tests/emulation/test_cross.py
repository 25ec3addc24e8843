"""Cross traffic on the real testbed: it crosses the bottleneck (the switch counts its bytes),
slows a TCP flow that shares it, is recorded by the runner, and leaves nothing behind."""

import json
import time

import pytest

from harness.running.runner import execute
from harness.running.spec import RunSpec
from tests.emulation.conftest import network_fixture
from topologies.impair.cross import CrossError, CrossTraffic
from topologies.incast import PS_IP, IncastParams, cross_port, worker_ip
from topologies.testbed.network import Testbed

IPERF_PORT = 5201
SECONDS = 3


def tcp_mbps(bed, folder, name) -> float:
    """Goodput of one cubic flow w1 -> ps1 over SECONDS (first second of slow start left out)."""
    server = bed.start_process("ps1", ["iperf3", "-s", "-1", "-B", PS_IP, "-p", str(IPERF_PORT)],
                               folder / f"iperf3-server-{name}.log")
    try:
        deadline = time.monotonic() + 10
        while not bed.host_run("ps1", "ss", "-Hltn", f"sport = :{IPERF_PORT}").strip():
            assert server.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        out = bed.host_run("w1", "iperf3", "-c", PS_IP, "-B", worker_ip(0), "-p", str(IPERF_PORT),
                           "-t", str(SECONDS + 1), "-O", "1", "-C", "cubic", "-J")
    finally:
        server.kill()
    return json.loads(out)["end"]["sum_received"]["bits_per_second"] / 1e6


bed = network_fixture("cross", IncastParams(n_workers=1, n_cross=2, bottleneck_mbps=100),
                      scope="class")


class TestCrossTraffic:
    def test_bulk_tcp_cross_traffic_crosses_the_bottleneck_and_slows_a_flow(self, bed, tmp_path):
        bare = tcp_mbps(bed, tmp_path, "bare")
        before = bed.meter.snapshot()
        with CrossTraffic(bed, "tcp:2", tmp_path / "cross") as traffic:
            shared = tcp_mbps(bed, tmp_path, "shared")
        after = bed.meter.snapshot()
        d = after.delta(before)
        print(f"w1 -> ps1: {bare:.1f} Mbit/s alone, {shared:.1f} Mbit/s beside 2 cross flows; "
              f"cross hosts sent {d.cross_tx_bytes / 1e6:.1f} MB; {traffic.report}")
        # Three flows share 100 Mbit/s: w1 gets about a third. Half of what it had alone is far
        # above that and far below what it gets alone.
        assert shared < 0.6 * bare
        assert d.cross_tx_bytes > 5e6
        assert d.bottleneck_tx_bytes > d.cross_tx_bytes  # the cross bytes went out toward the PS
        assert [g["pid"] for g in bed.ledger.data["groups"]] == [bed.controller_ref.pid]

    def test_on_off_udp_is_seeded_paced_and_counted(self, bed, tmp_path):
        before = bed.meter.snapshot()
        port = cross_port(0, 1)
        with CrossTraffic(bed, "udp:1:rate=40,on=50ms,off=50ms", tmp_path / "cross", seed=3) as tr:
            # Wait for traffic, never by sleeping: until the switch counted 1 MB from x1.
            deadline = time.monotonic() + 10
            while bed.meter.snapshot().ports[port].rx_bytes - before.ports[port].rx_bytes < 1_000_000:
                assert time.monotonic() < deadline, "the generator sent nothing through the switch"
                time.sleep(0.05)
        after = bed.meter.snapshot()
        sent, = [r for h, r in tr.report.items() if h == "x1"]
        sink = json.loads(next((tmp_path / "cross").glob("cross-sink-*.json")).read_text())
        rate_mbps = 8 * sent["wire_bytes"] / sent["seconds"] / 1e6
        print(f"on/off UDP: {sent}, sink {sink}, {rate_mbps:.1f} Mbit/s on average")
        assert sent["packets"] > 0 and sent["on_periods"] >= 2
        assert 0 < sink["packets"] <= sent["packets"]
        # 40 Mbit/s half of the time, minus the interpreter's start-up inside "seconds".
        assert 8 < rate_mbps < 24
        assert after.delta(before).cross_tx_bytes >= 1_000_000

    def test_too_few_cross_hosts_is_one_sentence(self, bed, tmp_path):
        with pytest.raises(CrossError, match="needs 3 cross hosts but the network has 2"):
            with CrossTraffic(bed, "tcp:3", tmp_path):
                pass

    def test_the_runner_records_cross_bytes(self, bed, tmp_path):
        spec = RunSpec(transport="tcp-cubic", n_workers=1, iterations=3, eval_every=3, timeout_s=120)
        row, _, _ = execute(bed, spec, tmp_path / "run", "test", cross="tcp:1")
        assert row["status"] == "ok", row["reason"]
        assert row["cross_tx_bytes"] > 0
        counters = json.loads((tmp_path / "run" / "counters.json").read_text())
        assert counters["delta"]["cross_tx_bytes"] == row["cross_tx_bytes"]
        assert list((tmp_path / "run" / "raw" / "cross").glob("cross-x1.json"))


def test_nothing_is_left_after_cross_traffic_and_the_testbed(tmp_path, clean_machine):
    with Testbed(IncastParams(n_workers=1, n_cross=1), tmp_path) as tb:
        with CrossTraffic(tb, "udp:1:rate=5", tmp_path / "cross"):
            pass
        assert [g["pid"] for g in tb.ledger.data["groups"]] == [tb.controller_ref.pid]
