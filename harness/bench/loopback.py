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
CPU figure, which makes it the steadier of the two on a shared machine.

    >>> push = loopback_push("ltp", 4 * 1024 * 1024, 20)
    >>> push.goodput_gbps, push.cpu_s_per_gb
"""

from __future__ import annotations

import dataclasses
import socket
import threading
import time

import numpy as np

from transports.base import parse_scheme


@dataclasses.dataclass(frozen=True)
class LoopbackPushes:
    """Push times and CPU times of one scheme at one message size."""

    scheme: str
    n_bytes: int
    push_s: tuple[float, ...]
    cpu_s: tuple[float, ...]

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
        return [{"transport": self.scheme, "bytes": self.n_bytes, "push": k, "push_s": t,
                 "cpu_s": c} for k, (t, c) in enumerate(zip(self.push_s, self.cpu_s))]


def _free_udp_ports(n: int) -> list[int]:
    ports = []
    for _ in range(n):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    return ports


def loopback_push(scheme: str, n_bytes: int, repeats: int) -> LoopbackPushes:
    """Time ``repeats`` pushes of ``n_bytes`` from one worker to the PS over 127.0.0.1."""
    from transports import registry
    from transports.base import Layout

    layout = Layout.single(n_bytes // 4)
    ps_port, w_port = _free_udp_ports(2)
    ps_addr, w_addr = ("127.0.0.1", ps_port), ("127.0.0.1", w_port)
    transport = registry.create(*parse_scheme(scheme))
    payload = np.ones(layout.n_floats, np.float32)
    ready = threading.Semaphore(0)
    go = [threading.Event() for _ in range(repeats)]
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            with transport.connect(0, w_addr, ps_addr, layout) as end:
                end.join(30)
                for k in range(repeats):
                    end.pull(k, 30)
                    ready.release()
                    go[k].wait(60)
                    end.push(k, payload, 30)
        except BaseException as exc:   # re-raised in the caller's thread
            errors.append(exc)

    times, cpu = [], []
    with transport.serve(ps_addr, [w_addr], layout) as end:
        thread = threading.Thread(target=worker, daemon=True)
        thread.start()
        try:
            end.wait_for_workers(30)
            for k in range(repeats):
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
    return LoopbackPushes(scheme, n_bytes, tuple(times), tuple(cpu))
