"""The delay line on the real testbed: the RTT grows by twice the one-way delay and comes back
when it is removed, TCP still fills most of the link through it, and nothing is left behind."""

import json
import os
import re
import statistics
import time
from pathlib import Path

import pytest

from tests.emulation.conftest import network
from topologies.impair import delay
from topologies.impair.delay import DelayLine
from topologies.incast import PS_IP, IncastParams, worker_ip
from topologies.testbed.network import Testbed

IPERF_PORT = 5201
LISTEN_S = 10.0
TIME_RE = re.compile(r"time=([0-9.]+) ms")


def rtt_ms(bed, src: str = "w1", dst: str = PS_IP, count: int = 20) -> list[float]:
    """Per-packet RTTs from ``src`` to ``dst``. ``-U`` times in user space: plain ping takes the
    reply's kernel receive stamp, set before the delay at the pinger's own ingress."""
    out = bed.host_run(src, "ping", "-n", "-U", "-c", str(count), "-i", "0.05", "-W", "2", dst)
    times = [float(t) for t in TIME_RE.findall(out)]
    assert len(times) == count, out
    return times


def delay_helpers() -> list[int]:
    """PIDs of running nfq-delay helpers (ours: matched by the built binary's path)."""
    me = str(delay.BINARY).encode()
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
        except OSError:
            continue
        if argv0 == me:
            found.append(int(pid))
    return found


def tcp_mbps(bed, folder: Path, name: str, seconds: int = 5) -> float:
    """Goodput of one cubic flow w1 -> ps1 (iperf3, first second of slow start left out)."""
    server_log = folder / f"iperf3-server-{name}.log"
    server = bed.start_process("ps1", ["iperf3", "-s", "-1", "-B", PS_IP, "-p", str(IPERF_PORT)],
                               server_log)
    try:
        deadline = time.monotonic() + LISTEN_S
        while not bed.host_run("ps1", "ss", "-Hltn", f"sport = :{IPERF_PORT}").strip():
            assert server.poll() is None, server_log.read_text()
            assert time.monotonic() < deadline, "iperf3 did not listen in time"
            time.sleep(0.02)
        out = bed.host_run("w1", "iperf3", "-c", PS_IP, "-B", worker_ip(0), "-p", str(IPERF_PORT),
                           "-t", str(seconds + 1), "-O", "1", "-C", "cubic", "-J")
    finally:
        server.kill()
    (folder / f"iperf3-client-{name}.json").write_text(out)
    return json.loads(out)["end"]["sum_received"]["bits_per_second"] / 1e6


@pytest.fixture(scope="class")
def bed(tmp_path_factory):
    delay.binary()  # a missing build fails here with "run ./setup.sh", not deep inside a test
    folder = tmp_path_factory.mktemp("delay")
    with network(IncastParams(n_workers=2), folder) as tb:
        line = DelayLine(tb)
        try:
            yield tb, line
        finally:
            line.stop()


class TestDelayLine:
    def test_rtt_grows_by_twice_the_delay_and_returns(self, bed):
        tb, line = bed
        base = statistics.median(rtt_ms(tb))
        line.set(10)
        assert line.delay_ms == 10.0
        with_delay = statistics.median(rtt_ms(tb))
        line.set(0)
        after = statistics.median(rtt_ms(tb))
        print(f"median RTT w1->ps1: {base:.3f} ms bare, {with_delay:.3f} ms with 10 ms each way, "
              f"{after:.3f} ms after removing it")
        # 10 ms at ps1's ingress (request) and 10 ms at w1's (reply), plus the helper's own
        # wake-up and two extra kernel/user crossings per direction.
        assert 18.0 <= with_delay - base <= 25.0
        assert abs(after - base) < 1.0
        assert delay_helpers() == []
        # The helpers on the path saw every ping, were never overloaded, and let every packet go.
        for host in ("ps1", "w1"):
            c = line.counters[host]
            assert c["packets"] >= 20 and c["missed_ids"] == 0 and c["ring_full"] == 0, c
            assert c["packets"] == c["released"] + c["accepted_at_stop"], c
            assert c["dropped_at_unbind"] == 0, c

    def test_half_a_millisecond_is_resolved(self, bed):
        tb, line = bed
        base = rtt_ms(tb, count=40)
        line.set(0.5)
        try:
            delayed = rtt_ms(tb, count=40)
        finally:
            line.set(0)
        least = min(delayed) - min(base)
        typical = statistics.median(delayed) - statistics.median(base)
        print(f"RTT added by 0.5 ms each way: {least:.3f} ms least, {typical:.3f} ms median")
        # No packet may leave early, so even the fastest delayed ping is 1 ms above the fastest
        # bare one (the minima: a median of bare pings through the userspace switch wanders by
        # a few tenths of a millisecond between samples). Typically it is 1 ms plus the helpers'
        # own wake-ups (0.1-0.25 ms per pass, more when busy). Not applied would add ~0.2 ms;
        # rounded up to 1 ms each way, above 2.
        assert least >= 0.9
        assert typical <= 1.9

    def test_tcp_still_fills_most_of_the_link_with_5_ms(self, bed, tmp_path):
        tb, line = bed
        bare = tcp_mbps(tb, tmp_path, "bare")
        line.set(5)
        try:
            mbps = tcp_mbps(tb, tmp_path, "delay5")
        finally:
            line.set(0)
        c = line.counters
        print(f"one cubic flow w1->ps1: {bare:.1f} Mbit/s bare, {mbps:.1f} Mbit/s with 5 ms each "
              f"way; ps1 helper: {c['ps1']}")
        # With RTT ~10.5 ms the bandwidth-delay product (~90 full-size packets) exceeds the
        # 64-packet bottleneck queue, but cubic (beta 0.7) keeps the link busy after a loss as
        # long as the queue holds ~0.4 BDP, so the window alone would allow ~90 %. What limits
        # it on 2 cores is CPU: userspace OVS forwards every packet, and each helper carries the
        # kernel's receive work for the packets it releases (~30 us of CPU per packet), so the
        # result swings with other load (on a shared 2-vCPU VM: 37-93 Mbit/s with the delay,
        # 50-86 bare, in nine and five runs), so a fixed floor failed on a busy machine. The
        # bare flow measured just before on the same machine is the yardstick: half of it still
        # fails a helper that stalls, drops or reorders (its counters are checked below too).
        assert mbps > 0.5 * bare, f"{mbps:.1f} Mbit/s with delay, {bare:.1f} bare"
        assert c["ps1"]["packets"] > 20_000
        assert c["ps1"]["missed_ids"] == 0 and c["ps1"]["ring_full"] == 0
        assert c["ps1"]["max_backlog"] < c["ps1"]["maxlen"]


def test_nothing_is_left_after_stop_and_leaving_the_testbed(tmp_path, clean_machine):
    delay.binary()
    with Testbed(IncastParams(n_workers=2), tmp_path) as tb:
        line = DelayLine(tb)
        try:
            line.set(10)
            assert len(delay_helpers()) == 3  # ps1, w1, w2
            line.stop()
            assert delay_helpers() == []
            assert not any("NFQUEUE" in tb.host_run(h, "iptables-nft", "-t", "raw", "-S")
                           for h in tb.host_names())
            line.stop()  # idempotent
            line.set(2)  # and left running: leaving the testbed must take the helpers down too
            assert len(delay_helpers()) == 3
        except BaseException:
            line.stop()
            raise
    assert delay_helpers() == []  # the testbed's ledger took them down
