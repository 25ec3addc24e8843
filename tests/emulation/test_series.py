"""bench-series on real kernels: the rtnetlink qdisc reader on an HTB-shaped FIFO of a namespace
of its own (the queue fills and drops exactly as tc counts it), and the whole benchmark on the
incast testbed (every sender sampled every few milliseconds, the queue within its limit, every
push acknowledged and none faster than the link allows)."""

import os
import re
import subprocess
import sys

import pandas as pd
import pytest

from harness.bench import series
from topologies.incast import worker_name

PROJECT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Inside the namespace: read the FIFO, send a burst it cannot drain at 1 Mbit/s, read it again.
BURST = """
import socket, sys
from harness.bench import series
r = series.QdiscReader("sa", "10:")
before = r.read()
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(60):
    s.sendto(b"x" * 1000, ("10.99.0.3", 9))
print(*before, *r.read())
"""


@pytest.fixture
def netns():
    name = f"ltps{os.getpid()}"
    run = lambda *a: subprocess.run(a, check=True, capture_output=True)   # noqa: E731
    run("ip", "netns", "add", name)
    try:
        # No IPv6: its router solicitations and MLD reports, sent on their own timers once the
        # link is up, would add to the FIFO's counts between the reader's read and tc's.
        for conf in ("all", "default"):
            run("ip", "netns", "exec", name, "sysctl", "-qw",
                f"net.ipv6.conf.{conf}.disable_ipv6=1")
        run("ip", "-n", name, "link", "add", "sa", "type", "veth", "peer", "name", "sb")
        for dev, ip in (("sa", "10.99.0.1/24"), ("sb", "10.99.0.2/24")):
            run("ip", "-n", name, "addr", "add", ip, "dev", dev)
            run("ip", "-n", name, "link", "set", dev, "up")
        # 10.99.0.3: not an address of the namespace, so the burst leaves through sa's queue
        run("ip", "-n", name, "neigh", "add", "10.99.0.3", "lladdr", "02:00:00:00:00:03", "dev",
            "sa")
        run("tc", "-n", name, "qdisc", "add", "dev", "sa", "root", "handle", "5:", "htb",
            "default", "1")
        run("tc", "-n", name, "class", "add", "dev", "sa", "parent", "5:", "classid", "5:1",
            "htb", "rate", "1mbit")
        run("tc", "-n", name, "qdisc", "add", "dev", "sa", "parent", "5:1", "handle", "10:",
            "pfifo", "limit", "20")
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)


def test_the_qdisc_reader_sees_the_fifo_fill_and_drop(netns):
    out = subprocess.run(["ip", "netns", "exec", netns, sys.executable, "-c", BURST],
                         check=True, capture_output=True, text=True, cwd=PROJECT,
                         env={**os.environ, "PYTHONPATH": PROJECT})
    pkts0, bytes0, drops0, pkts, nbytes, drops = map(int, out.stdout.split())
    assert (pkts0, bytes0, drops0) == (0, 0, 0)
    assert 15 <= pkts <= 20 and nbytes >= pkts * 1000      # full, or nearly: 1 Mbit/s drains
    assert drops >= 60 - 20 - 5                            # a few left the queue meanwhile
    tc = subprocess.run(["tc", "-n", netns, "-s", "qdisc", "show", "dev", "sa"], check=True,
                        capture_output=True, text=True).stdout
    assert f"dropped {drops}," in tc                       # the kernel's own count, the same
    fifo = tc[tc.index("qdisc pfifo 10:"):]
    sent, dropped, queued = map(int, re.search(
        r"Sent \d+ bytes (\d+) pkt \(dropped (\d+),.*?backlog \d+b (\d+)p", fifo, re.S).groups())
    assert sent + dropped + queued == 60                  # the burst and nothing else


def test_the_series_of_a_small_incast(tmp_path):
    pushes, period, n_bytes, workers, mbps, queue = 3, 0.3, 437_544, 4, 100.0, 16
    path = series.run("tcp-cubic", workers, mbps, queue, 0.0, pushes, period, n_bytes, 1.0,
                      tmp_path / "series")
    s = pd.read_csv(path)
    assert (tmp_path / "series" / "series.png").stat().st_size > 10_000
    senders = {worker_name(r) for r in range(workers)}
    assert set(s.source) == senders | {"queue"}
    for source, d in s[s.metric.isin(["cwnd", "queue_pkts"])].groupby("source"):
        gaps = d.time_s.sort_values().diff().dropna()
        assert gaps.median() < 0.005, (source, gaps.median())   # sampled every few ms at most
    q = s[s.metric == "queue_pkts"].value
    assert 0 < q.max() <= queue                                 # 4 senders at once fill it
    acked = s[s.metric == "bytes_acked"].groupby("source").value.max()
    assert (acked >= pushes * n_bytes).all(), acked
    bound = workers * n_bytes * 8 / (mbps * 1e6)
    times = series.push_times(s, pushes, period, n_bytes)
    assert all(t >= 0.9 * bound for t in times), (times, bound)   # nothing beats the link
