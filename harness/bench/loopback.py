"""The loopback part of ``invoke bench-transport``: push goodput and CPU per byte over 127.0.0.1.

One worker and the PS run in this process (two threads, plus whatever threads the transport
starts: LTP's progress thread per end). Per push ``k``: the PS broadcasts, the worker pulls and
says it is ready, the PS starts the clock and releases the worker, the worker pushes, and the
clock stops when the PS's gather returns. The release is a fresh event per push, so a worker can
never start a push before the clock does.

CPU per byte: the process's CPU time (user + system, all threads; ``time.process_time()``, the
sum ``getrusage(RUSAGE_SELF)`` reports) spent between the clock's start and stop of every push,
summed over the pushes and divided by the bytes pushed. Both ends' work is in it (sender and
receiver share the process), as is any time a thread spends polling instead of sleeping; the
broadcast between pushes is not. Other processes' load slows the goodput but does not enter the
CPU figure, which makes it the steadier of the two on a shared machine; it still moves with the
load (a vCPU the host takes away while a thread runs is counted as that thread's CPU, and the
caches are shared), which is why the benchmark repeats. Python's cyclic garbage collector runs
once before the pushes: a full collection of this process lasts as long as many pushes, and
without it the allocation count put one in the same push of every run. (Holding the collector off
during the pushes instead kept cyclic garbage alive, and fresh memory cost TCP's receive path
more CPU per byte.)

Repetitions (:func:`harness.bench.kind.plan`): every scheme once per repetition, the schemes'
order rotated from one repetition to the next, so two schemes compared run seconds apart and in
both orders; :func:`from_tables` reads a folder's runs back and :func:`summary` gives each
scheme's median and range over repetitions and its ratio to a reference scheme, paired by
repetition.

    >>> push = loopback_push("ltp", 4 * 1024 * 1024, 20)
    >>> push.goodput_gbps, push.cpu_s_per_gb
"""

from __future__ import annotations

import dataclasses
import gc
import socket
import statistics
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from harness.bench.names import FLOOR, MAC_PREFIX, mac_algorithm
from transports.base import parse_scheme
from transports.peer import PEER_PREFIX


@dataclasses.dataclass(frozen=True)
class LoopbackPushes:
    """Push times and CPU times of one scheme at one message size (one repetition)."""

    scheme: str
    n_bytes: int
    push_s: tuple[float, ...]
    cpu_s: tuple[float, ...]
    repeat: int = 0

    @property
    def median_s(self) -> float:
        """Median push time."""
        return float(np.median(self.push_s))

    @property
    def goodput_gbps(self) -> float:
        """Message bits over the median push time, in Gbit/s."""
        return self.n_bytes * 8 / self.median_s / 1e9

    @property
    def cpu_s_per_gb(self) -> float:
        """CPU seconds of the process per 10^9 bytes pushed (all pushes together)."""
        return sum(self.cpu_s) / (self.n_bytes * len(self.push_s) / 1e9)

    def rows(self) -> list[dict]:
        """One tidy row per push."""
        return [{"transport": self.scheme, "bytes": self.n_bytes, "repeat": self.repeat,
                 "push": k, "push_s": t, "cpu_s": c}
                for k, (t, c) in enumerate(zip(self.push_s, self.cpu_s))]


def free_ports(n: int, kind: int = socket.SOCK_DGRAM) -> list[int]:
    """``n`` distinct ports that were free on 127.0.0.1 a moment ago, for UDP and for TCP alike
    (a scheme binds either kind). ``kind`` is the kind probed first: its port-0 bind picks the
    number (TCP's skips ports an earlier connection still holds in TIME_WAIT), and the same number
    must also bind for the other kind. Every probe stays open until all are drawn. The loopback
    conformance tests take theirs here too (tests/conformance/loopback.py)."""
    other = socket.SOCK_STREAM if kind == socket.SOCK_DGRAM else socket.SOCK_DGRAM
    held: list[socket.socket] = []
    ports: list[int] = []
    try:
        while len(ports) < n:
            first = socket.socket(socket.AF_INET, kind)
            held.append(first)
            first.bind(("127.0.0.1", 0))
            port = first.getsockname()[1]
            second = socket.socket(socket.AF_INET, other)
            held.append(second)
            try:
                second.bind(("127.0.0.1", port))
            except OSError:
                continue          # taken for the other kind: hold it (so it is not drawn again)
            ports.append(port)
        return ports
    finally:
        for s in held:
            s.close()


def loopback_push(scheme: str, n_bytes: int, pushes: int, repeat: int = 0) -> LoopbackPushes:
    """Time ``pushes`` pushes of ``n_bytes`` from one worker to the PS over 127.0.0.1
    (``repeat`` numbers the repetition this is, for its rows)."""
    from transports import registry
    from transports.base import Layout

    layout = Layout.single(n_bytes // 4)
    ps_port, w_port = free_ports(2, socket.SOCK_STREAM)
    ps_addr, w_addr = ("127.0.0.1", ps_port), ("127.0.0.1", w_port)
    transport = registry.create(*parse_scheme(scheme))
    payload = np.ones(layout.n_floats, np.float32)
    ready = threading.Semaphore(0)
    go = [threading.Event() for _ in range(pushes)]
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            with transport.connect(0, w_addr, ps_addr, layout) as end:
                end.join(30)
                for k in range(pushes):
                    end.pull(k, 30)
                    ready.release()
                    go[k].wait(60)
                    end.push(k, payload, 30)
        except BaseException as exc:   # re-raised in the caller's thread
            errors.append(exc)

    times, cpu = [], []
    gc.collect()
    with transport.serve(ps_addr, [w_addr], layout) as end:
        thread = threading.Thread(target=worker, daemon=True)
        thread.start()
        try:
            end.wait_for_workers(30)
            for k in range(pushes):
                end.broadcast(k, payload, 30)
                if not ready.acquire(timeout=60):
                    break
                c0, t0 = time.process_time(), time.monotonic()
                go[k].set()
                end.gather(k, 30)
                times.append(time.monotonic() - t0)
                cpu.append(time.process_time() - c0)
        finally:
            for event in go:
                event.set()   # a worker still waiting must not outlive the PS
            thread.join(60)
    if errors:
        raise errors[0]
    return LoopbackPushes(scheme, n_bytes, tuple(times), tuple(cpu), repeat)


# The pace a peer sender is asked for: far above what loopback carries, so the transport's own
# cost sets the time, not its pacer.
PEER_RATE_MBPS = 1_000_000.0


def peer_push(scheme: str, n_bytes: int, pushes: int, repeat: int = 0) -> LoopbackPushes:
    """Time ``pushes`` sends of ``n_bytes`` from peer 0 to peer 1 of a peer-to-peer transport
    (``scheme``: :data:`PEER_PREFIX` and a slug of :mod:`transports.peer`, options allowed) over
    127.0.0.1, both peers in this process: a push lasts from the send call until it returns,
    every receiver having confirmed; its CPU is the process's over that time (both peers, their
    receiving threads included), as for :func:`loopback_push`."""
    from transports import peer
    from transports.base import Session

    slug, options = peer.parse(scheme[len(PEER_PREFIX):])
    n_floats = n_bytes // 4
    ports = free_ports(2, socket.SOCK_STREAM)
    session = Session.draw()
    ends = []
    times, cpu = [], []
    values = np.ones(n_floats, np.float32)
    gc.collect()
    try:
        for rank in range(2):
            ends.append(peer.create(slug, rank, ["127.0.0.1"] * 2, 0, n_floats, session, options,
                                    ports=ports))
        for k in range(pushes):
            c0, t0 = time.process_time(), time.monotonic()
            report = ends[0].send(k, values, [1], rate_mbps=PEER_RATE_MBPS, timeout_s=60)
            times.append(time.monotonic() - t0)
            cpu.append(time.process_time() - c0)
            if report.unfinished or report.delivered.get(1, 0.0) < 1.0:
                raise RuntimeError(f"{scheme}: push {k} was not delivered whole "
                                   f"({report.delivered}, unfinished {report.unfinished})")
            ends[1].take()
    finally:
        for end in ends:
            end.close()
    return LoopbackPushes(scheme, n_bytes, tuple(times), tuple(cpu), repeat)


# The largest UDP payload over IPv4, the size of a loopback datagram at the path MTU
# (docs/ltp-protocol.md §6): the MAC covers about that much per datagram.
DATAGRAM_BYTES = 65_507


def _tag_pieces(tag, key, data, n_bytes: int, piece: int) -> None:
    """One tag per ``piece``-byte piece of the ``n_bytes`` at ``data`` (the last one shorter)."""
    for k, at in enumerate(range(0, n_bytes, piece)):
        tag(key, k, data + at, min(piece, n_bytes - at))


def mac_push(scheme: str, n_bytes: int, pushes: int, repeat: int = 0) -> LoopbackPushes:
    """What ``auth`` costs a push at the least: the core's MAC (``scheme``: :data:`MAC_PREFIX`
    and one of the core's algorithms, :func:`harness.bench.names.mac_algorithm`) over
    ``n_bytes`` twice, as the sender seals every datagram and the receiver checks it, in
    :data:`DATAGRAM_BYTES`-byte datagrams.

    The library's one-shot functions (``ltp_gmac128``, ``ltp_siphash24``) set up a key on every
    call, which the core does once per peer; so each pass runs twice, in pieces of the datagram
    size and of a quarter of it, and only the part that grows with the bytes is kept (time per
    pass ``(4 * t_whole - t_quarter) / 3``: a fixed cost per call cancels). A push's time and its
    CPU time are that, for both passes; no socket and no other thread is involved, so its CPU is
    the calling thread's (the process's would add whatever an idle library thread spins)."""
    from transports.native._ltp_cffi import ffi, lib

    tag = {"gmac128": lib.ltp_gmac128,
           "siphash24": lambda key, pseq, msg, n: lib.ltp_siphash24(key, msg, n)}[
        mac_algorithm(scheme)]
    key = ffi.new("uint8_t[16]", bytes(range(16)))
    payload = np.ones(n_bytes // 4, np.float32)
    data = ffi.cast("uint8_t *", ffi.from_buffer(payload))
    times, cpu = [], []
    gc.collect()
    for _ in range(pushes):
        passes = []
        for piece in (DATAGRAM_BYTES, DATAGRAM_BYTES // 4):
            c0, t0 = time.thread_time(), time.perf_counter()
            _tag_pieces(tag, key, data, payload.nbytes, piece)
            passes.append((time.perf_counter() - t0, time.thread_time() - c0))
        (t_whole, c_whole), (t_quarter, c_quarter) = passes
        times.append(max(2 * (4 * t_whole - t_quarter) / 3, 1e-9))
        cpu.append(max(2 * (4 * c_whole - c_quarter) / 3, 0.0))
    return LoopbackPushes(scheme, payload.nbytes, tuple(times), tuple(cpu), repeat)


NATIVE = Path(__file__).resolve().parents[2] / "transports" / "native"


def floor_push(scheme: str, n_bytes: int, pushes: int, repeat: int = 0) -> LoopbackPushes:
    """What any transport over UDP pays a push on loopback at the least (``scheme``:
    :data:`~harness.bench.names.FLOOR`): the message in the largest datagrams, sent with
    sendmmsg and received with recvmmsg into its place by two threads of one process, nothing
    else (``transports/native/tests/bench_udp_floor.c``, built here if it is not). Its push
    times and CPU (the process's, both threads) are the program's own, per push, as
    :func:`loopback_push` takes them for a transport."""
    import subprocess

    binary = NATIVE / "build" / "bench_udp_floor"
    made = subprocess.run(["make", "-s", "-C", str(NATIVE), "build/bench_udp_floor"],
                          capture_output=True, text=True)
    if made.returncode != 0:
        raise RuntimeError(f"{scheme}: building {binary.name} failed: {made.stderr.strip()}")
    gc.collect()
    out = subprocess.run([str(binary), str(n_bytes), str(pushes)], capture_output=True,
                         text=True, timeout=120)
    if out.returncode != 0:
        raise RuntimeError(f"{scheme}: {out.stderr.strip()}")
    rows = [tuple(map(float, line.split())) for line in out.stdout.split("\n") if line.strip()]
    return LoopbackPushes(scheme, n_bytes, tuple(t for t, _ in rows), tuple(c for _, c in rows),
                          repeat)


def from_tables(folder: Path) -> list[LoopbackPushes]:
    """The ok runs of a loopback folder (``runs.csv`` and ``loopback.csv``, written by the sweep
    loop through :mod:`harness.bench.kind`), in the order they ran."""
    from harness.running.results import read_table

    if not (folder / "runs.csv").exists():
        return []
    runs = read_table(folder / "runs.csv")
    ok = runs[runs.status == "ok"]
    if ok.empty:
        return []
    pushes = dict(tuple(read_table(folder / "loopback.csv").sort_values("push")
                        .groupby("run_id")))   # an ok run has pushes, so the table exists
    return [LoopbackPushes(str(run.transport), int(run.bytes), tuple(pushes[run.run_id].push_s),
                           tuple(pushes[run.run_id].cpu_s), int(run.repeat))
            for run in ok.itertuples()]


@dataclasses.dataclass(frozen=True)
class Spread:
    """The median of some repetitions' values and their range."""

    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        """The spread of ``values`` (at least one)."""
        return cls(float(statistics.median(values)), float(min(values)), float(max(values)))


@dataclasses.dataclass(frozen=True)
class SchemeSummary:
    """One scheme at one size over its repetitions: goodput and CPU per GB, and both as ratios to
    the reference scheme's in the same repetitions (None for the reference itself, or without
    one)."""

    scheme: str
    n_bytes: int
    repeats: int
    goodput_gbps: Spread
    cpu_s_per_gb: Spread
    goodput_ratio: Spread | None
    cpu_ratio: Spread | None


def summary(runs: Sequence[LoopbackPushes], reference: str | None) -> list[SchemeSummary]:
    """Per (size, scheme), in first-run order: the spreads over repetitions, and the ratios to
    ``reference`` paired by repetition (goodput: scheme / reference; CPU per GB likewise)."""
    by_key: dict[tuple[int, str], dict[int, LoopbackPushes]] = {}
    for run in runs:
        by_key.setdefault((run.n_bytes, run.scheme), {})[run.repeat] = run
    out = []
    for (n_bytes, scheme), reps in by_key.items():
        ref = by_key.get((n_bytes, reference)) if reference and scheme != reference else None
        pairs = [(reps[r], ref[r]) for r in reps if ref and r in ref]
        goodput_ratio = Spread.of([a.goodput_gbps / b.goodput_gbps for a, b in pairs]) \
            if pairs else None
        cpu_ratio = Spread.of([a.cpu_s_per_gb / b.cpu_s_per_gb for a, b in pairs]) \
            if pairs else None
        out.append(SchemeSummary(
            scheme, n_bytes, len(reps), Spread.of([p.goodput_gbps for p in reps.values()]),
            Spread.of([p.cpu_s_per_gb for p in reps.values()]), goodput_ratio, cpu_ratio))
    return out
