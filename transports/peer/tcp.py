"""The TCP baseline of the peer transports: unicast copies over TCP.

Slug ``tcp``. Every peer listens on its own address and port. A sender opens one connection per
receiver the first time it sends to it and keeps it for later rounds; :meth:`TcpPeer.send`
writes the message to its k receivers concurrently (one short-lived thread per receiver) and
returns when each has acknowledged, or at the timeout. A connection that failed or timed out in
the middle of a message is closed (a byte stream cannot take back half a message) and opened
again at the next send.

Framing, network byte order: a 20-byte header (magic ``LTPq``, session u32, sender u16, two zero
bytes, round u32, payload length u32) then the float32 payload. The receiver's reader thread (one
per accepted connection) checks the header, reads the payload, delivers an
:class:`~transports.peer.base.Incoming` (``mask`` None, ``received_frac`` 1.0) and answers with
the round as a 4-byte ack. A header with the wrong magic, session, length, or a sender whose
address is not the connection's source closes the connection and is counted.

Counting: a :class:`~transports.peer.base.SendReport`'s ``wire_bytes`` is, per receiver, the
framed message plus 40 bytes of IP+TCP headers per 1448-byte segment, and ``packets`` that number
of segments (handshakes and pure ACKs are not counted); ``retransmits`` is the growth of the
kernel's retransmitted-segment counter (``TCP_INFO``) over the send. Option ``cc`` sets the
congestion control on every socket with ``TCP_CONGESTION`` (accepted connections inherit the
listener's) and is read back.
"""

from __future__ import annotations

import collections
import select
import socket
import struct
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from transports.base import Option, Session, TransportError
from transports.peer.base import Incoming, PeerEnd, SendReport
from transports.tcp import CC_CHOICES, _set_cc, tcp_counters

MAGIC = b"LTPq"
HEADER = struct.Struct("!4sIHxxII")
ACK = struct.Struct("!I")
SEGMENT_BYTES = 1448        # MSS on a 1500-byte MTU with timestamps
SEGMENT_HEADER_BYTES = 40   # IPv4 + TCP
TICK_S = 0.1                # the threads look at the stop flag this often
CONNECT_RETRY_S = 0.05      # a receiver not listening yet (or gone) is tried again this often
STATS_KEYS = ("messages_out", "delivered", "send_failures", "malformed", "foreign", "stranger",
              "truncated")


class _Stopped(Exception):
    """The end is closing."""


class TcpPeer(PeerEnd):
    """One peer of the TCP baseline (see the module docstring)."""

    SLUG = "tcp"
    OPTIONS = (
        Option("cc", "cubic", "choice", choices=CC_CHOICES,
               help="congestion control, set on every socket with TCP_CONGESTION and read back"),
    )

    def __init__(self, rank: int, ips: Sequence[str], port: int, n_floats: int,
                 session: Session, options: Mapping[str, Any] | None = None, *,
                 ports: Sequence[int] | None = None) -> None:
        super().__init__(rank, ips, port, n_floats, session, options, ports=ports)
        self.cc = self.options["cc"]
        self._counters: collections.Counter = collections.Counter()
        self._lock = threading.Lock()    # guards _counters, _conns and _readers
        self._send_lock = threading.Lock()
        self._conns: dict[int, socket.socket] = {}
        self._readers: list[tuple[socket.socket, threading.Thread]] = []
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            effective = _set_cc(self._listener, self.cc)
            if effective != self.cc:
                raise TransportError(f"the kernel applied {effective!r} instead of {self.cc!r}.")
            self._listener.bind(self.addrs[rank])
            self._listener.listen(self.n_peers + 4)
        except BaseException:
            self._listener.close()
            raise
        self._acceptor = threading.Thread(target=self._accept_loop, daemon=True,
                                          name=f"tcp-peer-{rank}")
        self._acceptor.start()

    def _count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._counters[name] += n

    # --- sending -----------------------------------------------------------------------------

    def send(self, round_: int, values: np.ndarray, receivers: Sequence[int], *,
             group: str | None = None, rate_mbps: float = 100.0,
             timeout_s: float = 30.0) -> SendReport:
        """As :meth:`PeerEnd.send`; ``group`` is refused (TCP has no multicast) and
        ``rate_mbps`` ignored (TCP's congestion control sets the pace)."""
        ranks = self._check_send(round_, values, receivers, group, rate_mbps, timeout_s)
        if group is not None:
            raise ValueError("the tcp peer transport sends unicast copies only; pass group=None.")
        t0 = time.monotonic()
        deadline = t0 + timeout_s
        header = HEADER.pack(MAGIC, self.session.session_id, self.rank, int(round_),
                             4 * self.n_floats)
        payload = memoryview(np.ascontiguousarray(values)).cast("B")
        results: dict[int, int] = {}   # receiver -> retransmitted segments, once acknowledged
        with self._send_lock:
            threads = [threading.Thread(target=self._send_one,
                                        args=(r, int(round_), header, payload, deadline, results),
                                        daemon=True) for r in ranks]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        n_bytes = len(header) + len(payload)
        segments = -(-n_bytes // SEGMENT_BYTES)
        self._count("messages_out", len(ranks))
        return SendReport(seconds=time.monotonic() - t0, packets=segments * len(ranks),
                          retransmits=sum(results.values()),
                          wire_bytes=(n_bytes + SEGMENT_HEADER_BYTES * segments) * len(ranks),
                          delivered={r: 1.0 for r in ranks if r in results},
                          unfinished=tuple(r for r in ranks if r not in results))

    def _send_one(self, r: int, round_: int, header: bytes, payload: memoryview,
                  deadline: float, results: dict[int, int]) -> None:
        sock = None
        try:
            sock = self._connection(r, deadline)
            if sock is None:
                return
            retrans0, _ = tcp_counters(sock)
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            sock.sendall(header)
            sock.sendall(payload)
            ack = _recv_exact(sock, ACK.size)
            if ACK.unpack(ack)[0] != round_:
                raise TransportError(f"peer {r} acknowledged another round.")
            results[r] = tcp_counters(sock)[0] - retrans0
        except (OSError, TransportError):
            self._count("send_failures")
            with self._lock:
                if self._conns.get(r) is sock:
                    del self._conns[r]
            if sock is not None:
                sock.close()

    def _connection(self, r: int, deadline: float) -> socket.socket | None:
        """The kept connection to ``r``, opened if needed (retried until the deadline)."""
        with self._lock:
            sock = self._conns.get(r)
        while sock is None and not self._stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                sock = socket.create_connection(self.addrs[r], timeout=left,
                                                source_address=(self.addrs[self.rank][0], 0))
            except (ConnectionRefusedError, socket.timeout):
                time.sleep(min(CONNECT_RETRY_S, max(0.0, deadline - time.monotonic())))
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            effective = _set_cc(sock, self.cc)
            if effective != self.cc:
                sock.close()
                raise TransportError(f"the kernel applied {effective!r} instead of {self.cc!r}.")
            with self._lock:
                self._conns[r] = sock
        return sock

    # --- receiving (the background threads) --------------------------------------------------

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                ready, _, _ = select.select([self._listener], [], [], TICK_S)
                if not ready:
                    continue
                conn, (peer_ip, _) = self._listener.accept()
            except (OSError, ValueError):
                return
            conn.settimeout(TICK_S)
            t = threading.Thread(target=self._read_loop, args=(conn, peer_ip), daemon=True,
                                 name=f"tcp-peer-{self.rank}-reader")
            with self._lock:
                self._readers.append((conn, t))
            t.start()

    def _read_loop(self, conn: socket.socket, peer_ip: str) -> None:
        try:
            while True:
                head = self._read(conn, HEADER.size, first=True)
                if head is None:
                    return
                magic, session, sender, round_, n_bytes = HEADER.unpack(head)
                if magic != MAGIC:
                    self._count("malformed")
                    return
                if session != self.session.session_id:
                    self._count("foreign")
                    return
                if (sender >= self.n_peers or sender == self.rank
                        or self.addrs[sender][0] != peer_ip):
                    self._count("stranger")
                    return
                if n_bytes != 4 * self.n_floats:
                    self._count("malformed")
                    return
                values = np.empty(self.n_floats, dtype=np.float32)
                if self._read(conn, n_bytes, into=memoryview(values).cast("B")) is None:
                    return
                self._count("delivered")
                self._deliver(Incoming(sender, round_, values, None, 1.0, False))
                conn.sendall(ACK.pack(round_))
        except (OSError, _Stopped):
            return
        finally:
            conn.close()

    def _read(self, conn: socket.socket, n: int, *, first: bool = False,
              into: memoryview | None = None) -> bytes | memoryview | None:
        """Exactly ``n`` bytes (into ``into`` if given); None at the end of the stream."""
        view = into if into is not None else memoryview(bytearray(n))
        got = 0
        while got < n:
            if self._stop.is_set():
                raise _Stopped
            try:
                k = conn.recv_into(view[got:])
            except socket.timeout:
                continue
            if k == 0:
                if not (first and got == 0):
                    self._count("truncated")
                return None
            got += k
        return view if into is not None else bytes(view)

    # --- the rest of the contract ------------------------------------------------------------

    def stats(self) -> dict[str, float]:
        """Counters, every one of :data:`STATS_KEYS`: ``messages_out``, ``delivered``,
        ``send_failures``, and connections closed because of a ``malformed``, ``foreign``
        (session), ``stranger`` (source) or ``truncated`` message."""
        with self._lock:
            return {k: float(self._counters[k]) for k in STATS_KEYS}

    def _shut(self) -> None:
        self._acceptor.join(timeout=2 * TICK_S + 1.0)
        self._listener.close()
        with self._lock:
            conns, self._conns = list(self._conns.values()), {}
            readers = list(self._readers)
        for sock in conns:
            sock.close()
        for _, t in readers:
            t.join(timeout=2 * TICK_S + 1.0)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            raise TransportError("the peer closed the connection before acknowledging.")
        got += k
    return bytes(buf)
