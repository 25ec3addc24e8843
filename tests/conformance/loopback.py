"""What the loopback conformance tests share: ports on 127.0.0.1, and a retry when one was taken.

A port found free is free only a moment: between the probe and the transport's own bind another
socket (an ephemeral port of any connection on the machine) may take it. :func:`on_free_ports`
therefore runs a job on fresh ports again when it failed because an address was in use, so the
race costs a retry instead of a red CI run.
"""

from __future__ import annotations

import contextlib
import errno
import socket
import threading
from typing import Callable, Iterator, TypeVar

from harness.bench.loopback import free_ports

T = TypeVar("T")
ATTEMPTS = 5


def address_in_use(exc: BaseException | None, _depth: int = 0) -> bool:
    """Whether ``exc``, or an exception it carries (cause, context, a list in its arguments, an
    exception group's members), says an address was already in use."""
    if exc is None or _depth > 8:
        return False
    if getattr(exc, "errno", None) == errno.EADDRINUSE:
        return True
    text = str(exc)
    if "EADDRINUSE" in text or "Address already in use" in text:
        return True
    inner = [*getattr(exc, "exceptions", ()), *_flat(exc.args), exc.__cause__, exc.__context__]
    return any(address_in_use(e, _depth + 1) for e in inner if isinstance(e, BaseException))


def _flat(items) -> list:
    """The items of nested lists and tuples (a list of (rank, exception) pairs, say)."""
    out = []
    for item in items:
        out.extend(_flat(item) if isinstance(item, (list, tuple)) else [item])
    return out


def on_free_ports(n: int, job: Callable[[list[int]], T],
                  kind: int = socket.SOCK_DGRAM) -> T:
    """``job(ports)`` on ``n`` free ports; run again on fresh ports, up to :data:`ATTEMPTS`
    times in all, when it failed because one of them was taken in between."""
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return job(free_ports(n, kind))
        except Exception as exc:
            if attempt == ATTEMPTS or not address_in_use(exc):
                raise
    raise AssertionError("unreachable")


def train_in_threads(server, connect: Callable, n_workers: int, iterations: int,
                     push: Callable, params: Callable, gathered: Callable,
                     timeout_s: float) -> None:
    """One PS (``server``, an end not yet entered) in this thread and ``n_workers`` workers in
    threads, ``iterations`` rounds: the PS broadcasts ``params(t)`` and hands what it gathers to
    ``gathered(t, deliveries)``; worker ``rank`` (its end from ``connect(rank)``) pulls and
    pushes ``push(t, rank, pulled)``. A worker's exception is raised here."""
    errors: list[BaseException] = []

    def worker(rank: int) -> None:
        try:
            with connect(rank) as end:
                end.join(timeout_s)
                for t in range(iterations):
                    end.push(t, push(t, rank, end.pull(t, timeout_s)), timeout_s)
        except Exception as exc:   # surfaced in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(r,)) for r in range(n_workers)]
    for th in threads:
        th.start()
    try:
        with server:
            server.wait_for_workers(timeout_s)
            for t in range(iterations):
                server.broadcast(t, params(t), timeout_s)
                gathered(t, server.gather(t, timeout_s))
    finally:
        for th in threads:
            th.join(timeout_s)
    if errors:
        raise errors[0]


@contextlib.contextmanager
def policy_recording_ends(monkeypatch, slug: str, layout, n_workers: int) -> Iterator[Callable]:
    """A maker of ``slug``'s PS ends on loopback (no traffic): ``serve(options, n_workers)``
    returns the end and the list of every per-segment policy any end set, ``(segment, lo, hi)``,
    as the core was told; every end is closed on exit."""
    from transports import native, registry

    calls: list[tuple] = []
    original = native.Endpoint.set_policy

    def record(self, segment, lo, hi):
        calls.append((segment, lo, hi))
        original(self, segment, lo, hi)

    monkeypatch.setattr(native.Endpoint, "set_policy", record)
    ends = []

    def serve(options, n_workers=n_workers):
        ports = free_ports(n_workers + 1)
        t = registry.create(slug, options)
        end = t.serve(("127.0.0.1", ports[0]), [("127.0.0.1", p) for p in ports[1:]], layout)
        ends.append(end)
        return end, calls

    try:
        yield serve
    finally:
        for end in ends:
            end.end.close()
