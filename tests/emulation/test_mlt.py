"""MLT on the real emulated incast: the bottleneck's priority bands serve and keep the marked
packets while the unmarked ones take the drops, a short ``mlt`` run trains with every gradient
part inside its loss bound, and the next scheme's run finds the plain FIFO again.

Needs root and ./setup.sh; run alone, on an idle machine (it brings up Mininet and Open vSwitch):

    sudo .venv/bin/pytest -x -q tests/emulation/test_mlt.py
"""

import json
import sys
import time

from harness.running.runfiles import RunFiles
from harness.running.runner import execute
from harness.running.spec import RunSpec
from tests.emulation.conftest import network_fixture
from topologies.incast import IncastParams, PS_NAME, worker_name
from topologies.testbed import bottleneck
from topologies.testbed.counters import parse_qdisc
from topologies.testbed.process import run
from transports import registry
from transports.mlt import level_dscp

BOTTLENECK_MBPS = 50
QUEUE_PKTS = 32
testbed = network_fixture("mlt", IncastParams(n_workers=4, bottleneck_mbps=BOTTLENECK_MBPS,
                                              queue_pkts=QUEUE_PKTS))

PORT = 6400
SIZE = 1400
COUNT = 8000            # 2.3 s at 40 Mbit/s
RATE_MBPS = 40          # each of two senders: together 1.6 times the bottleneck
DONE_S = 30.0
# A paced UDP sender that marks its datagrams: argv dst port tos count rate_mbps.
SENDER = """
import socket, sys, time
dst, port, tos, count, rate = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \\
    int(sys.argv[4]), float(sys.argv[5])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
gap, payload, t0 = (%d + 28) * 8 / (rate * 1e6), bytes(%d), time.monotonic()
for i in range(count):
    ahead = t0 + i * gap - time.monotonic()
    if ahead > 0:
        time.sleep(ahead)
    s.sendto(payload, (dst, port))
""" % (SIZE, SIZE)


def _queue_json(tb) -> str:
    return run("tc", "-s", "-j", "qdisc", "show", "dev", tb.params.bottleneck_intf)


def _wait_drained(tb, deadline_s: float) -> None:
    deadline = time.monotonic() + deadline_s
    while any(q.get("qlen", 0) for q in json.loads(_queue_json(tb))):
        assert time.monotonic() < deadline, f"the queue did not drain within {deadline_s:g} s"
        time.sleep(0.05)


def _wait_all_exit(procs, deadline_s: float) -> None:
    deadline = time.monotonic() + deadline_s
    while any(p.poll() is None for p in procs):
        assert time.monotonic() < deadline, f"the senders did not finish within {deadline_s:g} s"
        time.sleep(0.05)
    assert [p.poll() for p in procs] == [0] * len(procs)


def test_under_overload_the_low_band_drops_and_the_high_band_keeps(testbed, tmp_path):
    bands = registry.create("mlt").bottleneck_queue()   # two levels: CS1 on top, CS0 below
    testbed.queue.configure(bands)
    high, low = (level_dscp(k, 2) << 2 for k in (0, 1))
    sink = testbed.start_process(PS_NAME, [sys.executable, "-m", "topologies.impair.onoff",
                                           "sink", "--bind", testbed.host_ips()[PS_NAME],
                                           "--port", str(PORT), "--report",
                                           str(tmp_path / "sink.json")], tmp_path / "sink.log")
    try:
        before = bottleneck.parse_bands(_queue_json(testbed))
        senders = [testbed.start_process(host, [sys.executable, "-c", SENDER,
                                                testbed.host_ips()[PS_NAME], str(PORT), str(tos),
                                                str(COUNT), str(RATE_MBPS)],
                                         tmp_path / f"send-{host}.log")
                   for host, tos in ((worker_name(0), high), (worker_name(1), low))]
        try:
            _wait_all_exit(senders, DONE_S)
        finally:
            for p in senders:
                p.kill()
        _wait_drained(testbed, DONE_S)   # the low band drains once the high one is idle
        after = bottleneck.parse_bands(_queue_json(testbed))
    finally:
        sink.kill()
    sent = {k: after[k].sent_packets - before[k].sent_packets for k in after}
    drops = {k: after[k].drops - before[k].drops for k in after}
    print(json.dumps({"sent": sent, "drops": drops}))
    # The marked stream fits the link alone: served first, it is barely queued, never dropped.
    assert sent[0] >= 0.99 * COUNT and drops[0] <= 0.01 * COUNT, (sent, drops)
    # The unmarked one gets what is left, about a quarter of the link: most of it is dropped.
    assert drops[1] >= 0.4 * COUNT, (sent, drops)
    # Nothing else lost datagrams behind the queue's back (userspace OVS discards the rest of a
    # batch the queue refuses; head drop refuses none).
    assert sent[1] + drops[1] >= 0.99 * COUNT, (sent, drops)


def test_a_short_mlt_run_trains_within_its_bound_and_the_next_run_has_the_fifo(testbed,
                                                                                tmp_path):
    spec = RunSpec(transport="mlt", n_workers=4, bottleneck_mbps=BOTTLENECK_MBPS,
                   queue_pkts=QUEUE_PKTS, loss_pct=5.0, iterations=40, eval_every=20,
                   timeout_s=300)
    row, _, _ = execute(testbed, spec, tmp_path / "mlt", "test")
    assert row["status"] == "ok", row["reason"]
    assert row["iterations_done"] == spec.iterations
    assert row["final_accuracy"] > 0.5, "chance is 0.1"
    assert testbed.queue.applied == registry.create("mlt").bottleneck_queue()
    bands = bottleneck.parse_bands(_queue_json(testbed))
    assert set(bands) == {0, 1} and all(b.sent_packets > 0 for b in bands.values()), bands
    files = RunFiles(tmp_path / "mlt")
    bound = 1.0 - registry.create("mlt").options()["loss_bound"]
    below_one = 0
    for rec in files.ps_iterations():
        for fracs in rec.segment_fracs:   # one part per tensor: a tensor's fraction is its part's
            assert all(f >= bound - 1e-9 for f in fracs), (rec.iteration, fracs)
            below_one += any(f < 1.0 for f in fracs)
    assert below_one > 0, "MLT never tolerated any loss at 5 % random loss"
    for rank in range(spec.n_workers):
        stats = files.host_summary(worker_name(rank)).transport_stats
        assert stats["mlt_level_floats_0"] > 0 and stats["mlt_level_floats_1"] > 0, stats

    other = RunSpec(transport="ltp", n_workers=4, bottleneck_mbps=BOTTLENECK_MBPS,
                    queue_pkts=QUEUE_PKTS, iterations=5, eval_every=5, timeout_s=120)
    row, _, _ = execute(testbed, other, tmp_path / "ltp", "test")
    assert row["status"] == "ok", row["reason"]
    shown = json.loads(_queue_json(testbed))
    fifo = [q for q in shown if q.get("handle") == bottleneck.HANDLE]
    assert [(q["kind"], q["parent"], q["options"]["limit"]) for q in fifo] == [
        ("pfifo", bottleneck.PARENT, QUEUE_PKTS)]
    assert bottleneck.parse_bands(_queue_json(testbed)) == {}
    assert parse_qdisc(_queue_json(testbed), bottleneck.HANDLE).sent_packets > 0
