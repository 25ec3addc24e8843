"""A UDP relay on loopback that drops the datagrams a test chooses, between a PS and one worker.

The PS is told the worker is at the relay's PS-facing address and the worker is told the PS is at
its worker-facing address, so every datagram of the pair crosses the relay, in either direction,
whatever the transport's wire format: the trap tests (test_traps.py) hold any datagram transport
to the same situations, the lab 3 starter and its solution included.
"""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Callable

TO_PS, TO_WORKER = "to_ps", "to_worker"
# drop(direction, n): whether to drop the n-th datagram (from 0) relayed in that direction
Rule = Callable[[str, int], bool]


class Relay:
    """Relays between ``ps`` (the PS's address) and whoever writes to :attr:`worker_side`;
    the PS must be told the worker is at :attr:`ps_side`. A context manager."""

    def __init__(self, ps: tuple[str, int], drop: Rule | None = None):
        self.ps, self.drop = ps, drop or (lambda direction, n: False)
        self._a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)   # faces the worker
        self._b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)   # faces the PS
        for s in (self._a, self._b):
            # A message is sent as one burst; with the default buffer a relay slowed by a busy
            # machine drops some of it, a loss no trap asked for (and udp-blast never repairs).
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
            s.bind(("127.0.0.1", 0))
        self.worker_side, self.ps_side = self._a.getsockname(), self._b.getsockname()
        self.worker: tuple[str, int] | None = None
        self.relayed = {TO_PS: 0, TO_WORKER: 0}
        self.dropped = {TO_PS: 0, TO_WORKER: 0}
        self._last = time.monotonic()   # when a datagram last came in, either way
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="relay", daemon=True)

    def __enter__(self) -> Relay:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)
        self._a.close()
        self._b.close()

    def settle(self, quiet_s: float = 0.2, timeout_s: float = 10.0) -> None:
        """Return once no datagram has come in for ``quiet_s``: what was sent before the call
        has met the drop rule in force (a sender that returns at once, as a blast does, leaves
        its datagrams in the relay's buffer)."""
        end = time.monotonic() + timeout_s
        while time.monotonic() - self._last < quiet_s and time.monotonic() < end:
            time.sleep(quiet_s / 4)

    def _pass(self, direction: str, data: bytes, out: socket.socket, to) -> None:
        self._last = time.monotonic()
        n = self.relayed[direction] + self.dropped[direction]
        if self.drop(direction, n):
            self.dropped[direction] += 1
            return
        self.relayed[direction] += 1
        out.sendto(data, to)

    def _run(self) -> None:
        while not self._stop.is_set():
            ready, _, _ = select.select([self._a, self._b], [], [], 0.05)
            for sock in ready:
                data, src = sock.recvfrom(65536)
                if sock is self._a:
                    self.worker = src
                    self._pass(TO_PS, data, self._b, self.ps)
                elif self.worker is not None:
                    self._pass(TO_WORKER, data, self._a, self.worker)
