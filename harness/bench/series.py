"""Millisecond time series of an incast: the bottleneck queue and every sender's TCP state.

``invoke bench-series`` brings up the incast star, applies a TCP scheme's host settings (its
``rto_min`` for ``tcp-cubic-lowrto``) and the random loss asked for, and has every worker push one
gradient-sized message to the PS at the same instants, ``pushes`` times, ``period`` apart: a
training run's synchronized incast without the training. While it runs it samples, every
``interval_ms``:

- the bottleneck queue (the FIFO under the switch port toward the PS, handle ``10:``): its length
  in packets and bytes and its drops so far, read over rtnetlink (one RTM_GETQDISC for that qdisc
  a sample, no process started);
- each sender's TCP_INFO, read by the sender itself on its own socket: congestion window, smoothed
  RTT, congestion state (4, *loss*: waiting out a retransmission timeout), retransmissions so
  far, segments in flight, bytes acknowledged.

The samples go to ``series.csv`` in long form (``time_s``, ``source``, ``metric``, ``value``;
time is ``time.monotonic()``, which every namespace of the machine shares, from the first push)
with the metrics of :data:`METRICS`, and to a figure, ``series.png``: the queue above, the
windows below, each timeout marked. The printed summary gives each push's time against the
physical bound, the queue's peak and how much of the time it was full, and the timeouts waited
out. Lab 1 uses it (docs/labs/lab1-incast-and-tcp.md).

The hosts' processes::

    python -m harness.bench.series sink --port P --workers N
    python -m harness.bench.series send --ip IP --port P --start T --pushes K --period S \\
        --bytes B --cc cubic --interval-ms 1 --out FILE
"""

from __future__ import annotations

import argparse
import csv
import selectors
import socket
import struct
import sys
import threading
import time
from pathlib import Path

import pandas as pd

# rtnetlink (linux/rtnetlink.h, linux/netlink.h, linux/gen_stats.h)
RTM_NEWQDISC, RTM_GETQDISC = 36, 38
NLM_F_REQUEST, NLM_F_ECHO = 1, 8   # ECHO: the reply comes to us, not only to the TC group
NLMSG_ERROR = 2
TCA_STATS2, TCA_STATS_QUEUE = 7, 3
_NLMSG = struct.Struct("=IHHII")          # length, type, flags, sequence, port
_TCMSG = struct.Struct("=BxxxiIII")       # family, ifindex, handle, parent, info
_RTATTR = struct.Struct("=HH")            # length, type
_QUEUE = struct.Struct("=IIIII")          # qlen, backlog (bytes), drops, requeues, overlimits
# struct tcp_info (linux/tcp.h): 8 one-byte fields (the state first, the congestion state
# second), 24 u32 fields, then u64 fields (pacing rate, max pacing rate, bytes acked, ...).
_TCP_INFO = struct.Struct("=8B24I3Q")
TCP_CA_LOSS = 4                           # the congestion state of a retransmission timeout
# What series.csv holds, by metric: its unit and what it is.
METRICS = {
    "queue_pkts": ("packets", "packets in the bottleneck FIFO"),
    "queue_bytes": ("bytes", "bytes in the bottleneck FIFO"),
    "queue_drops": ("packets", "packets the FIFO dropped since the testbed came up"),
    "cwnd": ("segments", "the sender's congestion window"),
    "srtt_ms": ("ms", "the sender's smoothed RTT"),
    "ca_state": ("", "the sender's congestion state: 0 open, 1 disorder, 2 CWR, 3 recovery, "
                     "4 loss (a retransmission timeout)"),
    "retrans": ("segments", "the sender's retransmissions so far"),
    "unacked": ("segments", "the sender's segments in flight"),
    "bytes_acked": ("bytes", "the sender's bytes acknowledged since it connected"),
}
# The longest a sender waits after its last push for the rest to be acknowledged (seconds); the
# queue is read until every sender exits (at most twice this past the pushes' schedule).
ACK_WAIT_S = 30.0
SENDER_FIELDS = ("time_s", "cwnd", "srtt_ms", "ca_state", "retrans", "unacked", "bytes_acked")


class QdiscReader:
    """One qdisc's queue counters, read over rtnetlink in the caller's network namespace."""

    def __init__(self, dev: str, handle: str):
        self.ifindex = socket.if_nametoindex(dev)
        major, _, minor = handle.partition(":")
        self.handle = (int(major, 16) << 16) | int(minor or "0", 16)
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        self.sock.bind((0, 0))
        self.sock.settimeout(1.0)
        self.seq = 0
        # every request asks for the same qdisc: only the header's sequence number changes
        self.body = _TCMSG.pack(socket.AF_UNSPEC, self.ifindex, self.handle, 0, 0)

    def read(self) -> tuple[int, int, int]:
        """(packets, bytes, drops) of the qdisc now."""
        self.seq += 1
        self.sock.send(_NLMSG.pack(_NLMSG.size + len(self.body), RTM_GETQDISC,
                                   NLM_F_REQUEST | NLM_F_ECHO, self.seq, 0) + self.body)
        while True:
            data = self.sock.recv(65536)
            length, kind, _, seq, _ = _NLMSG.unpack_from(data)
            if seq != self.seq:
                continue
            if kind == NLMSG_ERROR:
                code = -struct.unpack_from("=i", data, _NLMSG.size)[0]
                raise OSError(code, f"rtnetlink refused to read qdisc {self.handle:#x} "
                                    f"of interface {self.ifindex}")
            return parse_qdisc(data[_NLMSG.size:length])

    def close(self) -> None:
        self.sock.close()


def _attrs(data: bytes, offset: int = 0):
    """(type, payload) of each rtattr in ``data`` from ``offset``."""
    while offset + _RTATTR.size <= len(data):
        length, kind = _RTATTR.unpack_from(data, offset)
        if length < _RTATTR.size:
            return
        yield kind & 0x3FFF, data[offset + _RTATTR.size:offset + length]
        offset += (length + 3) & ~3


def parse_qdisc(msg: bytes) -> tuple[int, int, int]:
    """(packets, bytes, drops) from an RTM_NEWQDISC message's body (a tcmsg and its rtattrs)."""
    for kind, payload in _attrs(msg, _TCMSG.size):
        if kind == TCA_STATS2:
            for inner, value in _attrs(payload):
                if inner == TCA_STATS_QUEUE:
                    qlen, backlog, drops, _, _ = _QUEUE.unpack_from(value)
                    return qlen, backlog, drops
    raise ValueError("the qdisc message carries no queue statistics")


def tcp_state(sock: socket.socket) -> tuple[int, float, int, int, int, int]:
    """(cwnd, srtt in ms, congestion state, retransmissions, in flight, bytes acked)."""
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO.size)
    f = _TCP_INFO.unpack(raw.ljust(_TCP_INFO.size, b"\0"))
    u32 = f[8:32]
    return u32[18], u32[15] / 1000.0, f[1], u32[23], u32[4], f[34]


# ---- on the hosts ------------------------------------------------------------------------------


def sink(port: int, workers: int) -> None:
    """Accept ``workers`` connections and read them to their end."""
    with socket.create_server(("", port)) as server:
        conns = [server.accept()[0] for _ in range(workers)]
    sel = selectors.DefaultSelector()
    for c in conns:
        sel.register(c, selectors.EVENT_READ)
    while sel.get_map():
        for key, _ in sel.select():
            if not key.fileobj.recv(1 << 20):
                sel.unregister(key.fileobj)
                key.fileobj.close()


def send(ip: str, port: int, start: float, pushes: int, period_s: float, n_bytes: int, cc: str,
         interval_s: float, out: Path) -> None:
    """Push ``n_bytes`` at ``start + k * period_s`` for each k, sampling TCP_INFO throughout;
    write the samples to ``out`` (time from ``start``)."""
    from transports.tcp import tune_connected

    sock = socket.create_connection((ip, port))
    tune_connected(sock, cc)
    base = tcp_state(sock)[5]
    samples, done = [], threading.Event()

    def sample() -> None:
        tick = time.monotonic()
        while not done.is_set():
            cwnd, srtt, ca, retrans, unacked, acked = tcp_state(sock)
            samples.append((time.monotonic() - start, cwnd, srtt, ca, retrans, unacked,
                            acked - base))
            tick += interval_s
            time.sleep(max(0.0, tick - time.monotonic()))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    payload = b"\0" * n_bytes
    for k in range(pushes):
        time.sleep(max(0.0, start + k * period_s - time.monotonic()))
        sock.sendall(payload)
    # Sample until the last byte is acknowledged: a tail lost more than once waits out backed-off
    # retransmission timeouts (0.2, 0.4, 0.8 s, ...), so the series must not stop a fixed 2 s after
    # the last push; ACK_WAIT_S only bounds a connection that never completes.
    deadline = time.monotonic() + ACK_WAIT_S
    while tcp_state(sock)[5] - base < pushes * n_bytes and time.monotonic() < deadline:
        time.sleep(interval_s)
    time.sleep(2 * interval_s)
    done.set()
    sampler.join()
    sock.close()
    with open(out, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(SENDER_FIELDS)
        w.writerows(samples)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m harness.bench.series")
    sub = p.add_subparsers(dest="role", required=True)
    s = sub.add_parser("sink")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--workers", type=int, required=True)
    w = sub.add_parser("send")
    w.add_argument("--ip", required=True)
    w.add_argument("--port", type=int, required=True)
    w.add_argument("--start", type=float, required=True, help="time.monotonic() of the 1st push")
    w.add_argument("--pushes", type=int, required=True)
    w.add_argument("--period", type=float, required=True, help="seconds between pushes")
    w.add_argument("--bytes", type=int, required=True)
    w.add_argument("--cc", required=True)
    w.add_argument("--interval-ms", type=float, required=True)
    w.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    if a.role == "sink":
        sink(a.port, a.workers)
    else:
        send(a.ip, a.port, a.start, a.pushes, a.period, a.bytes, a.cc, a.interval_ms / 1000,
             a.out)
    return 0


# ---- the orchestration (in the root namespace) --------------------------------------------------


PORT = 5301
START_DELAY_S = 1.0      # from starting the senders to the first push: every sender connected


def series_args(scheme: str, workers: int, bandwidth_mbps: float, queue_pkts: int,
                loss_pct: float, pushes: int, period_s: float, n_bytes: int,
                interval_ms: float) -> tuple:
    """The arguments of :func:`run`, validated (one sentence on a bad one)."""
    from harness.bench.run import BenchError
    from topologies.incast import IncastParams
    from transports import registry
    from transports.tcp import TcpTransport

    if not issubclass(registry.get(scheme).transport_class(), TcpTransport):
        raise BenchError(f"--scheme must be a TCP scheme (tcp-cubic, tcp-cubic-lowrto, tcp-bbr, "
                         f"tcp-reno), not {scheme!r}: the series reads TCP's own state.")
    IncastParams(workers, bandwidth_mbps, None, queue_pkts, loss_pct)
    for name, value, low, high in (("--pushes", pushes, 1, 1000), ("--period", period_s, 0.01, 60),
                                   ("--bytes", n_bytes, 1, 1 << 30),
                                   ("--interval", interval_ms, 0.5, 1000)):
        if not low <= value <= high:
            raise BenchError(f"{name} must be from {low:g} to {high:g}, not {value!r}.")
    return (scheme, workers, bandwidth_mbps, queue_pkts, loss_pct, pushes, period_s, n_bytes,
            interval_ms)


def run(scheme: str, workers: int, bandwidth_mbps: float, queue_pkts: int, loss_pct: float,
        pushes: int, period_s: float, n_bytes: int, interval_ms: float,
        folder: Path | None = None) -> Path:
    """Bring the incast up, push and sample as the module docstring says, write ``series.csv``
    and ``series.png`` into ``folder`` (a new one under the benchmarks' folder unless given),
    print the summary; return the table's path."""
    from harness.bench.run import BENCH_DIR, listening_in, push_bound_s
    from harness.running.runner import apply_host_settings
    from topologies.impair.loss import Impairment
    from topologies.incast import BOTTLENECK_INTF, PS_IP, PS_NAME, IncastParams, worker_name
    from topologies.testbed.bottleneck import HANDLE
    from topologies.testbed.network import Testbed, TestbedError
    from transports import registry

    folder = folder or BENCH_DIR / time.strftime("series-%Y%m%dT%H%M%S")
    transport = registry.create(scheme, {})
    params = IncastParams(workers, bandwidth_mbps, None, queue_pkts, 0.0)
    impairment = Impairment(loss_pct)
    raw = folder / "raw"
    with Testbed(params, folder / "network") as tb:
        apply_host_settings(tb, transport)
        tb.ingress.configure(impairment)
        python = [sys.executable, "-m", "harness.bench.series"]
        procs = [tb.start_process(PS_NAME, python + ["sink", "--port", str(PORT), "--workers",
                                                     str(workers)], raw / "sink.log")]
        try:
            deadline = time.monotonic() + 10
            while not listening_in(tb.host(PS_NAME).pid, PORT):
                if time.monotonic() > deadline:
                    raise TestbedError("the sink on ps1 did not listen within 10 s.")
                time.sleep(0.02)
            start = time.monotonic() + START_DELAY_S
            senders = {}
            for r in range(workers):
                host = worker_name(r)
                senders[host] = raw / f"{host}.csv"
                procs.append(tb.start_process(host, python + [
                    "send", "--ip", PS_IP, "--port", str(PORT), "--start", repr(start),
                    "--pushes", str(pushes), "--period", repr(period_s), "--bytes", str(n_bytes),
                    "--cc", transport.options()["cc"], "--interval-ms", repr(interval_ms),
                    "--out", str(senders[host])], raw / f"{host}.log"))
            queue = _sample_queue(QdiscReader(BOTTLENECK_INTF, HANDLE), start, interval_ms / 1000,
                                  procs[1:], start + pushes * period_s + 2 * ACK_WAIT_S)
        finally:
            for p in procs:
                p.kill()
        missing = [h for h, f in senders.items() if not f.exists()]
        if missing:
            raise TestbedError(f"no samples from {', '.join(missing)}: see {raw}/*.log.")
    series = long_form(queue, {h: pd.read_csv(f) for h, f in senders.items()})
    path = folder / "series.csv"
    series.to_csv(path, index=False)
    figure(series, queue_pkts, folder / "series.png")
    _summary(series, pushes, period_s, n_bytes, push_bound_s(workers, n_bytes, bandwidth_mbps),
             queue_pkts)
    return path


def _sample_queue(reader: QdiscReader, start: float, interval_s: float, senders: list,
                  deadline: float) -> pd.DataFrame:
    """The queue every ``interval_s`` from just before ``start`` until the senders exit."""
    rows = []
    tick = start - 0.05
    try:
        while any(p.poll() is None for p in senders) and time.monotonic() < deadline:
            time.sleep(max(0.0, tick - time.monotonic()))
            pkts, nbytes, drops = reader.read()
            rows.append((time.monotonic() - start, pkts, nbytes, drops))
            tick += interval_s
    finally:
        reader.close()
    return pd.DataFrame(rows, columns=["time_s", "queue_pkts", "queue_bytes", "queue_drops"])


def _summary(series: pd.DataFrame, pushes: int, period_s: float, n_bytes: int, bound_s: float,
             queue_limit: int) -> None:
    times = push_times(series, pushes, period_s, n_bytes)
    ratios = pd.Series(times) / bound_s
    print(f"pushes: {pushes}, each {n_bytes:,} bytes from every worker; the bound "
          f"{bound_s * 1e3:.1f} ms; push time over the bound: median {ratios.median():.2f}, "
          f"max {ratios.max():.2f} (to the sampling interval)")
    q = series[(series.metric == "queue_pkts") & (series.time_s >= 0)]
    drops = series[series.metric == "queue_drops"].value
    print(f"bottleneck queue: peak {q.value.max():.0f} of {queue_limit} packets, at the limit in "
          f"{(q.value >= queue_limit - 1).mean():.1%} of the samples, "
          f"{drops.max() - drops.min():.0f} drops")
    lost = timeouts(series)
    print(f"retransmission timeouts waited out: {sum(lost.values())} in all; per sender "
          + ", ".join(f"{h} {n}" for h, n in sorted(lost.items())))


# ---- the samples -------------------------------------------------------------------------------


def long_form(queue: pd.DataFrame, senders: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """series.csv's rows: the queue's samples (columns time_s, queue_pkts, queue_bytes,
    queue_drops) and each sender's (:data:`SENDER_FIELDS`), one row per metric and instant."""
    parts = [queue.melt("time_s", var_name="metric").assign(source="queue")]
    parts += [d.melt("time_s", var_name="metric").assign(source=host)
              for host, d in senders.items()]
    out = pd.concat(parts, ignore_index=True)[["time_s", "source", "metric", "value"]]
    return out.sort_values(["time_s", "source", "metric"], kind="stable", ignore_index=True)


def push_times(series: pd.DataFrame, pushes: int, period_s: float, n_bytes: int) -> list[float]:
    """Each push's time: from its instant until the last sender had it acknowledged (to the
    sampling interval; NaN if a sender never did)."""
    acked = series[series.metric == "bytes_acked"]
    out = []
    for k in range(pushes):
        ends = []
        for _, d in acked.groupby("source"):
            reached = d[d.value >= (k + 1) * n_bytes].time_s
            ends.append(reached.min() if len(reached) else float("nan"))
        out.append(max(ends) - k * period_s if ends else float("nan"))
    return out


def timeouts(series: pd.DataFrame) -> dict[str, int]:
    """Per sender, how many times it entered the loss state (a retransmission timeout)."""
    ca = series[series.metric == "ca_state"].sort_values("time_s")
    out = {}
    for host, d in ca.groupby("source"):
        lost = (d.value == TCP_CA_LOSS).astype(int)
        out[host] = int((lost.diff().fillna(lost) > 0).sum())
    return out


def figure(series: pd.DataFrame, queue_limit: int, path: Path) -> None:
    """The queue (packets) above, each sender's window (segments) below, timeouts marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(9, 6))
    q = series[series.metric == "queue_pkts"]
    top.plot(q.time_s * 1000, q.value, drawstyle="steps-post", lw=0.8)
    top.axhline(queue_limit, ls="--", color="grey", lw=0.8, label=f"limit ({queue_limit})")
    top.set_ylabel("bottleneck queue (packets)")
    top.legend(loc="upper right")
    cw = series[series.metric == "cwnd"]
    sns.lineplot(data=cw.assign(time_ms=cw.time_s * 1000), x="time_ms", y="value",
                 hue="source", lw=0.8, ax=bottom, drawstyle="steps-post", estimator=None)
    ca = series[(series.metric == "ca_state") & (series.value == TCP_CA_LOSS)]
    if len(ca):
        bottom.scatter(ca.time_s * 1000, [0] * len(ca), marker="x", color="red", s=12,
                       label="in a timeout")
    bottom.set_ylabel("congestion window (segments)")
    bottom.set_xlabel("time since the first push (ms)")
    bottom.legend(loc="upper right", fontsize="small", ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
