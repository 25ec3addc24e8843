"""TCP's end of a collective (:class:`~transports.mesh.MeshEnd`): one connection per pair of
members, the congestion control of the transport on every socket.

The member with the lower number connects, sends a hello (magic, its number) and the other
accepts it if it comes from the address the job gave that member. Every message is a header
(magic, sender, part, message id, payload length) and the part's float32 values. A reader thread
per connection files whole messages by (sender, message id, part) until :meth:`TcpMesh.recv`
takes them; a send writes to each receiver's connection in turn, under that connection's lock.
TCP is reliable, so every Delivery is whole.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Sequence

import numpy as np

from transports.base import Addr, Delivery, Layout, SendReport, TransportError, TransportTimeout
from transports.mesh import MeshEnd, Part
from transports.tcp import HELLO, MAGIC, _recv_exact, _set_cc, tcp_counters, tune_connected

FRAME = struct.Struct("!4sIIQQ")   # magic, sender, part, message id, payload bytes


def _read_all(conn: socket.socket, view: memoryview) -> None:
    """Fill ``view`` from a blocking socket (a reader thread waits as long as the job lasts)."""
    got = 0
    while got < len(view):
        n = conn.recv_into(view[got:])
        if n == 0:
            raise TransportError("the member closed the connection")
        got += n


class TcpMesh(MeshEnd):
    """One member's end: a listener, and one connection to every other member."""

    def __init__(self, rank: int, members: Sequence[Addr], parts: Sequence[Part], cc: str) -> None:
        self.rank, self.parts, self.cc = rank, list(parts), cc
        self.members = list(members)
        self.conns: dict[int, socket.socket] = {}
        self.locks: dict[int, threading.Lock] = {}
        self.inbox: dict[tuple[int, int, int], np.ndarray] = {}
        self.arrived = threading.Condition()
        self.failed: dict[int, str] = {}     # member -> why its connection ended
        self.abandoned: set[tuple[int, int, int]] = set()
        self.readers: list[threading.Thread] = []
        self.closed = False
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.listener.bind(members[rank])
            self.listener.listen(len(members))
        except BaseException:
            self.listener.close()
            raise

    # ---- joining ---------------------------------------------------------------------------

    def join(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for m in range(self.rank + 1, len(self.members)):
            self._dial(m, deadline)
        while len(self.conns) < len(self.members) - 1:
            self._accept(deadline)
        for m, conn in self.conns.items():
            t = threading.Thread(target=self._read, args=(m, conn), daemon=True,
                                 name=f"tcp-mesh-{self.rank}-from-{m}")
            t.start()
            self.readers.append(t)

    def _ready(self, m: int, conn: socket.socket) -> None:
        tune_connected(conn, self.cc)
        conn.settimeout(None)
        self.conns[m], self.locks[m] = conn, threading.Lock()

    def _dial(self, m: int, deadline: float) -> None:
        while True:
            conn = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            _set_cc(conn, self.cc)   # before the handshake, so slow start is the asked one's
            conn.settimeout(max(deadline - time.monotonic(), 1e-3))
            try:
                conn.connect(self.members[m])
                conn.sendall(HELLO.pack(MAGIC, self.rank))
                return self._ready(m, conn)
            except (ConnectionRefusedError, socket.timeout) as exc:
                conn.close()
                if time.monotonic() >= deadline:
                    raise TransportTimeout(f"member {m} did not accept before the deadline") from exc
                time.sleep(0.01)   # it has not opened its listener yet

    def _accept(self, deadline: float) -> None:
        self.listener.settimeout(max(deadline - time.monotonic(), 1e-3))
        try:
            conn, (ip, _) = self.listener.accept()
        except socket.timeout as exc:
            raise TransportTimeout("not every member connected before the deadline") from exc
        hello = bytearray(HELLO.size)
        try:
            _recv_exact(conn, memoryview(hello), deadline)
        except TransportError:
            conn.close()
            return
        magic, m = HELLO.unpack(hello)
        # Only a lower-numbered member dials, and only from the address the job gave it.
        if magic != MAGIC or not m < self.rank or self.members[m][0] != ip or m in self.conns:
            conn.close()
            return
        self._ready(m, conn)

    # ---- receiving -------------------------------------------------------------------------

    def _read(self, m: int, conn: socket.socket) -> None:
        head = bytearray(FRAME.size)
        try:
            while True:
                _read_all(conn, memoryview(head))
                magic, sender, part, msg_id, nbytes = FRAME.unpack(head)
                if magic != MAGIC or sender != m or part >= len(self.parts) \
                        or nbytes != 4 * self.parts[part].n_floats:
                    raise TransportError(f"member {m} sent a malformed message")
                values = np.empty(nbytes // 4, dtype=np.float32)
                _read_all(conn, memoryview(values).cast("B"))
                with self.arrived:
                    if (m, msg_id, part) in self.abandoned:
                        self.abandoned.discard((m, msg_id, part))
                    else:
                        self.inbox[(m, msg_id, part)] = values
                        self.arrived.notify_all()
        except (OSError, TransportError) as exc:
            with self.arrived:
                self.failed[m] = str(exc) or type(exc).__name__
                self.arrived.notify_all()

    def abandon(self, keys: Sequence[tuple[int, int, int]]) -> None:
        with self.arrived:
            for key in keys:
                if self.inbox.pop(key, None) is None:
                    self.abandoned.add(key)

    def recv(self, frm: int, msg_id: int, part: int, timeout_s: float) -> Delivery:
        deadline = time.monotonic() + timeout_s
        key = (frm, msg_id, part)
        with self.arrived:
            while key not in self.inbox:
                if frm in self.failed and not self.closed:
                    raise TransportError(f"the connection to member {frm} ended: "
                                         f"{self.failed[frm]}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TransportTimeout(f"part {part} of message {msg_id} from member {frm} "
                                           "did not arrive before the deadline")
                self.arrived.wait(left)
            values = self.inbox.pop(key)
        return Delivery.whole(values, Layout.single(len(values)))

    def recv_some(self, wanted: Sequence[tuple[int, int, int]], min_count: int,
                  timeout_s: float) -> dict[tuple[int, int, int], Delivery]:
        deadline = time.monotonic() + timeout_s
        with self.arrived:
            while True:
                here = [key for key in wanted if key in self.inbox]
                left = deadline - time.monotonic()
                if len(here) >= min(min_count, len(wanted)) or left <= 0:
                    break
                self.arrived.wait(left)
            got = {key: self.inbox.pop(key) for key in here}
        return {key: Delivery.whole(v, Layout.single(len(v))) for key, v in got.items()}

    # ---- sending ---------------------------------------------------------------------------

    def send(self, to: Sequence[int], msg_id: int, part: int, values: np.ndarray,
             timeout_s: float) -> list[SendReport]:
        payload = self.payload(part, values)
        head = FRAME.pack(MAGIC, self.rank, part, msg_id, payload.nbytes)
        reports = []
        for m in to:
            conn = self.conns[m]
            with self.locks[m]:
                # The send's own deadline (SO_SNDTIMEO): settimeout would make the socket
                # non-blocking under the reader thread's feet.
                whole, frac = divmod(max(timeout_s, 1e-3), 1.0)
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO,
                                struct.pack("ll", int(whole), int(frac * 1e6)))
                try:
                    conn.sendall(head)
                    conn.sendall(memoryview(payload).cast("B"))
                except BlockingIOError as exc:
                    raise TransportTimeout(f"sending to member {m} took longer than "
                                           f"{timeout_s:g} s") from exc
            reports.append(SendReport(payload.nbytes, payload.nbytes + FRAME.size))
        return reports

    # ---- counters and closing --------------------------------------------------------------

    def stats(self) -> dict[str, float]:
        retrans = 0
        for conn in self.conns.values():
            try:
                retrans += tcp_counters(conn)[0]
            except OSError:
                pass
        return {"retransmits": float(retrans), "connections_ended": float(len(self.failed))}

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for conn in self.conns.values():
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()
        self.listener.close()
        for t in self.readers:
            t.join(timeout=2.0)
