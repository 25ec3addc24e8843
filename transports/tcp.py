"""TCP transport: one TCP connection per worker, congestion control chosen per socket.

Slugs ``tcp-cubic``, ``tcp-reno`` and ``tcp-bbr`` differ only in the ``cc`` option, which is set on
every socket with ``TCP_CONGESTION`` and read back; a run fails if the kernel put a different
algorithm in effect (a new Mininet host inherits the machine default, which is not what was asked).
``tcp-cubic-lowrto`` adds ``rto_min_ms`` (5 ms), set on every host's route (``ip route change ...
rto_min``); each worker reports the RTO in effect (``rto_ms`` in its summary).

Framing: a worker opens the connection and sends a hello (magic, rank); every message is a
24-byte header (magic, sender rank, message id, payload length) followed by the float32 payload.
TCP is reliable, so every :class:`~transports.base.Delivery` is whole (``received_frac == 1.0``).
The server multiplexes its workers with one selector, so the 8-to-1 gather and the 1-to-8
broadcast move all flows at once, as they would on a real parameter server.
"""

from __future__ import annotations

import selectors
import socket
import struct
import time
from collections.abc import Sequence

import numpy as np

from transports.base import (
    Addr,
    Delivery,
    Layout,
    Option,
    SendReport,
    ServerEnd,
    Transport,
    TransportError,
    TransportTimeout,
    WorkerEnd,
)

MAGIC = b"LTPT"
HELLO = struct.Struct("!4sI")
HEADER = struct.Struct("!4sIQQ")
CC_CHOICES = ("cubic", "reno", "bbr")
_PS_SENDER = 0   # the sender field of the PS's messages

# struct tcp_info (linux/tcp.h): 8 one-byte fields, then u32 fields; tcpi_rto is the first u32,
# tcpi_total_retrans the 24th.
_TCP_INFO_LEN = 104
_TCPI_RTO_OFFSET = 8
_TCPI_TOTAL_RETRANS_OFFSET = 8 + 23 * 4


def _set_cc(sock: socket.socket, cc: str) -> str:
    """Ask for congestion control ``cc`` on ``sock`` and return the algorithm in effect."""
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
    except OSError as exc:
        raise TransportError(
            f"the kernel refused TCP congestion control {cc!r} ({exc.strerror}); see "
            "/proc/sys/net/ipv4/tcp_available_congestion_control for the ones it has."
        ) from exc
    return cc_in_effect(sock)


def tune_connected(conn: socket.socket, cc: str) -> None:
    """Make a new connection ready for gradients: no Nagle delay, and congestion control ``cc``
    exactly (the connection is closed and TransportError raised if the kernel applied another)."""
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    effective = _set_cc(conn, cc)
    if effective != cc:
        conn.close()
        raise TransportError(f"the kernel applied {effective!r} instead of {cc!r}")


def cc_in_effect(sock: socket.socket) -> str:
    """The congestion control algorithm the kernel applies to ``sock``."""
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).split(b"\0")[0].decode()


def tcp_counters(sock: socket.socket) -> tuple[int, int]:
    """(total retransmitted segments, current RTO in microseconds) of ``sock`` from TCP_INFO."""
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_LEN)
    (rto_us,) = struct.unpack_from("I", info, _TCPI_RTO_OFFSET)
    (retrans,) = struct.unpack_from("I", info, _TCPI_TOTAL_RETRANS_OFFSET)
    return retrans, rto_us


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TransportTimeout("a peer did not answer before the deadline")
    return left


def _recv_exact(sock: socket.socket, view: memoryview, deadline: float) -> None:
    got = 0
    while got < len(view):
        sock.settimeout(_remaining(deadline))
        try:
            n = sock.recv_into(view[got:])
        except socket.timeout as exc:
            raise TransportTimeout("a peer did not answer before the deadline") from exc
        if n == 0:
            raise TransportError("the peer closed the connection in the middle of a message")
        got += n


class TcpTransport(Transport):
    """Plain TCP with a per-socket congestion control."""

    LABEL = "TCP"
    MESH = True
    REJOIN = True
    OPTIONS = (
        Option("cc", "cubic", "choice", choices=CC_CHOICES,
               help="congestion control, set on every socket with TCP_CONGESTION and read back"),
        Option("rto_min_ms", None, "float", 1, 1000, unit="ms", nullable=True,
               help="minimum RTO on every host's route (null: the kernel's 200 ms)"),
    )

    def host_commands(self, intf: str, subnet: str) -> list[str]:
        """With ``rto_min_ms``, lower the minimum retransmission timeout on the host's route.

        The classic incast mitigation: Linux's minimum RTO is 200 ms, which dwarfs a
        sub-millisecond RTT; ``rto_min`` is a per-route attribute, so it is set per host.
        """
        rto = self._options["rto_min_ms"]
        if rto is None:
            return []
        return [f"ip route change {subnet} dev {intf} rto_min {rto:g}ms"]

    def serve(self, bind: Addr, workers: Sequence[Addr], layout: Layout,
              up: Layout | None = None) -> TcpServer:
        return TcpServer(bind, workers, layout, self._options["cc"], up)

    def connect(self, rank: int, bind: Addr, server: Addr, layout: Layout,
                up: Layout | None = None) -> TcpWorker:
        return TcpWorker(rank, bind, server, layout, self._options["cc"], up)

    def mesh(self, rank: int, members: Sequence[Addr], parts: Sequence):
        """Member ``rank``'s end of a collective (:class:`~transports.tcp_mesh.TcpMesh`)."""
        from transports.tcp_mesh import TcpMesh   # it builds on this module

        return TcpMesh(rank, members, parts, self._options["cc"])


class _Inbox:
    """One worker's incoming byte stream, parsed into messages across calls.

    A message may arrive over several calls (the PS gave up waiting in one and asks again in the
    next), so where the parser stands is kept here, never in a call's locals: the stream stays
    in step whatever the deadlines.
    """

    def __init__(self, n_floats: int) -> None:
        self.n_floats = n_floats
        self.reset()

    def reset(self) -> None:
        self.header = bytearray(HEADER.size)
        self.view = memoryview(self.header)
        self.got = 0
        self.body: np.ndarray | None = None
        self.msg_id = -1
        self.done: list[tuple[int, np.ndarray]] = []   # whole messages not yet handed out

    def feed(self, sock: socket.socket, rank: int, n_bytes: int) -> bool:
        """Read what the socket has; False at the end of the stream."""
        n_read = sock.recv_into(self.view[self.got:])
        if n_read == 0:
            return False
        self.got += n_read
        if self.got < len(self.view):
            return True
        if self.body is None:
            magic, sender, mid, nbytes = HEADER.unpack(self.header)
            if magic != MAGIC or sender != rank or nbytes != n_bytes:
                raise TransportError(f"worker {rank} sent a malformed message header "
                                     f"(message {mid}, {nbytes} bytes)")
            self.msg_id = mid
            self.body = np.empty(self.n_floats, dtype=np.float32)
            self.view, self.got = memoryview(self.body).cast("B"), 0
        else:
            self.done.append((self.msg_id, self.body))
            self.body, self.view, self.got = None, memoryview(self.header), 0
        return True

    def take(self, msg_id: int | tuple[int, ...]) -> tuple[int, np.ndarray] | None:
        """(id, values) of the first whole message among ``msg_id`` (one id or several); older
        ones the PS no longer wants are dropped."""
        ids = (msg_id,) if isinstance(msg_id, int) else tuple(msg_id)
        while self.done and self.done[0][0] < min(ids):
            self.done.pop(0)
        if self.done and self.done[0][0] in ids:
            return self.done.pop(0)
        if self.done:
            raise TransportError(f"a worker sent message {self.done[0][0]} while {ids} was "
                                 "expected")
        return None


class _Outbox:
    """One message on its way to one worker: what is left of it to write."""

    def __init__(self, msg_id: int, header: bytes, payload: memoryview) -> None:
        self.msg_id = msg_id
        self.parts = [memoryview(header), payload]

    def write(self, sock: socket.socket) -> bool:
        """Write what the socket takes; True once the whole message is written."""
        try:
            sent = sock.sendmsg(self.parts)
        except BlockingIOError:
            return False
        while sent and self.parts:
            if sent >= len(self.parts[0]):
                sent -= len(self.parts[0])
                self.parts.pop(0)
            else:
                self.parts[0] = self.parts[0][sent:]
                sent = 0
        return not self.parts


class TcpServer(ServerEnd):
    """The PS end: accepts one connection per worker and multiplexes them.

    Each worker's stream has an :class:`_Inbox` and at most one :class:`_Outbox` that outlive
    the calls, so a deadline never leaves a stream out of step. A connection that ends (the
    worker's process died: its kernel sent FIN or RST) is closed and its rank reported by
    :meth:`gone`: TCP tells the PS at once, where a datagram transport cannot.
    """

    def __init__(self, bind: Addr, workers: Sequence[Addr], layout: Layout, cc: str,
                 up: Layout | None = None) -> None:
        self.layout = layout
        self.up = up or layout   # what the workers push
        self.cc = cc
        self.worker_ips = [ip for ip, _ in workers]
        self.socks: list[socket.socket | None] = [None] * len(workers)
        self.inbox = [_Inbox(self.up.n_floats) for _ in workers]
        self.outbox: list[_Outbox | None] = [None] * len(workers)
        self._gone: set[int] = set()
        self.rejected_peers = 0
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        _set_cc(self.listener, cc)
        self.listener.bind(bind)
        self.listener.listen(len(workers) + 4)

    def wait_for_workers(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while any(s is None for s in self.socks):
            self.listener.settimeout(_remaining(deadline))
            try:
                conn, (peer_ip, _) = self.listener.accept()
            except socket.timeout as exc:
                raise TransportTimeout("not every worker connected before the deadline") from exc
            rank = self._admit(conn, peer_ip, deadline)
            if rank is not None:
                self.socks[rank] = conn

    def _admit(self, conn: socket.socket, peer_ip: str, deadline: float) -> int | None:
        """Read a new connection's hello and set it up; its rank, or None (closed and counted as
        rejected) unless it comes from the address the topology gave that rank."""
        hello = bytearray(HELLO.size)
        try:
            _recv_exact(conn, memoryview(hello), deadline)
        except TransportError:
            conn.close()
            self.rejected_peers += 1
            return None
        magic, rank = HELLO.unpack(hello)
        if magic != MAGIC or rank >= len(self.socks) or self.worker_ips[rank] != peer_ip:
            conn.close()
            self.rejected_peers += 1
            return None
        tune_connected(conn, self.cc)
        conn.setblocking(False)
        return rank

    def _accept_again(self, deadline: float) -> None:
        """A connection after the start: a restarted worker. It replaces the rank's old one."""
        try:
            conn, (peer_ip, _) = self.listener.accept()
        except (BlockingIOError, socket.timeout):
            return
        rank = self._admit(conn, peer_ip, min(deadline, time.monotonic() + 1.0))
        if rank is None:
            return
        if self.socks[rank] is not None:
            self.socks[rank].close()
        self.socks[rank], self.outbox[rank] = conn, None
        self.inbox[rank].reset()
        self._gone.discard(rank)

    def _lose(self, rank: int) -> None:
        sock = self.socks[rank]
        if sock is not None:
            sock.close()
        self.socks[rank], self.outbox[rank] = None, None
        self._gone.add(rank)

    def _pump(self, deadline: float, readers: set[int], until) -> None:
        """Move bytes: read from ``readers``, write every pending outbox, until ``until()`` or the
        deadline (one last look at the deadline)."""
        while True:
            live_r = [r for r in readers if self.socks[r] is not None]
            live_w = [r for r, box in enumerate(self.outbox)
                      if box is not None and self.socks[r] is not None]
            if until():
                return
            sel = selectors.DefaultSelector()
            try:
                # A worker whose process was restarted connects again: take it back.
                sel.register(self.listener, selectors.EVENT_READ, None)
                for r in set(live_r) | set(live_w):
                    events = ((selectors.EVENT_READ if r in live_r else 0)
                              | (selectors.EVENT_WRITE if r in live_w else 0))
                    sel.register(self.socks[r], events, r)
                left = deadline - time.monotonic()
                for key, events in sel.select(max(left, 0.0)):
                    rank = key.data
                    if rank is None:
                        self._accept_again(deadline)
                        continue
                    try:
                        if events & selectors.EVENT_READ:
                            if not self.inbox[rank].feed(self.socks[rank], rank,
                                                         self.up.n_bytes):
                                self._lose(rank)
                                continue
                        if events & selectors.EVENT_WRITE and self.outbox[rank] is not None:
                            if self.outbox[rank].write(self.socks[rank]):
                                self.outbox[rank] = None
                    except (ConnectionResetError, BrokenPipeError, TimeoutError):
                        self._lose(rank)
            finally:
                sel.close()
            if left <= 0:
                return

    def recv_some(self, wanted, min_count: int, timeout_s: float) -> dict[int, Delivery]:
        deadline = time.monotonic() + timeout_s
        got: dict[int, Delivery] = {}
        lost_before = len(self._gone)

        def enough() -> bool:
            for rank, mid in wanted.items():
                if rank not in got:
                    whole = self.inbox[rank].take(mid)
                    if whole is not None:
                        got[rank] = Delivery.whole(whole[1], self.up, msg_id=whole[0])
            # A connection that ended returns at once too: the caller learns it now, not at the
            # deadline (a worker that is gone will not deliver).
            return len(got) >= min_count or len(self._gone) > lost_before

        self._pump(deadline, set(wanted), enough)
        enough()
        return got

    def send_some(self, messages, values: np.ndarray, timeout_s: float) -> dict[int, SendReport]:
        deadline = time.monotonic() + timeout_s
        payload = memoryview(np.array(values, dtype=np.float32, copy=True)).cast("B")
        ranks = [r for r in messages if self.socks[r] is not None]
        before = {r: tcp_counters(self.socks[r])[0] for r in ranks}
        for r in ranks:
            box = self.outbox[r]
            if box is None or box.msg_id != messages[r]:   # the same message still going: keep it
                self.outbox[r] = _Outbox(messages[r], HEADER.pack(MAGIC, 0, messages[r],
                                                                  len(payload)), payload)
        self._pump(deadline, set(), lambda: all(self.outbox[r] is None for r in ranks))
        wire = len(payload) + HEADER.size
        return {r: SendReport(len(payload), wire,
                              retransmits=tcp_counters(self.socks[r])[0] - before[r])
                for r in ranks if self.socks[r] is not None and self.outbox[r] is None}

    def gone(self) -> set[int]:
        return set(self._gone)

    def gather(self, msg_id: int, timeout_s: float) -> list[Delivery]:
        n = len(self.socks)
        deadline = time.monotonic() + timeout_s
        got: dict[int, Delivery] = {}
        while len(got) < n:
            left = {r: msg_id for r in range(n) if r not in got}
            got.update(self.recv_some(left, len(left), max(deadline - time.monotonic(), 0.0)))
            lost = sorted(self._gone - set(got))
            if lost:
                raise TransportError(f"worker {lost[0]} closed its connection")
            if len(got) < n and time.monotonic() >= deadline:
                raise TransportTimeout("a peer did not answer before the deadline")
        return [got[r] for r in range(n)]

    def broadcast(self, msg_id: int, values: np.ndarray, timeout_s: float) -> list[SendReport]:
        n = len(self.socks)
        sent = self.send_some({r: msg_id for r in range(n)}, values, timeout_s)
        lost = sorted(self._gone - set(sent))
        if lost:
            raise TransportError(f"worker {lost[0]} closed its connection")
        if len(sent) < n:
            raise TransportTimeout("a peer did not answer before the deadline")
        return [sent[r] for r in range(n)]

    def stats(self) -> dict[str, float | str]:
        live = [s for s in self.socks if s is not None]
        return {
            "tcp_total_retrans": float(sum(tcp_counters(s)[0] for s in live)),
            "rejected_peers": float(self.rejected_peers),
        }

    def close(self) -> None:
        for sock in self.socks:
            if sock is not None:
                sock.close()
        self.socks = [None] * len(self.socks)
        self.listener.close()


class TcpWorker(WorkerEnd):
    """A worker's end: one blocking connection to the PS."""

    def __init__(self, rank: int, bind: Addr, server: Addr, layout: Layout, cc: str,
                 up: Layout | None = None) -> None:
        self.rank = rank
        self.bind = bind
        self.server = server
        self.layout = layout
        self.up = up or layout
        self.cc = cc
        self.sock: socket.socket | None = None
        self.cc_effective = ""
        self._rx = _Inbox(layout.n_floats)
        self._tx: tuple[_Outbox, int, int] | None = None   # a push cut short by its deadline

    def join(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            tune_connected(sock, self.cc)
            self.cc_effective = self.cc
            sock.bind((self.bind[0], 0))
            sock.settimeout(min(1.0, _remaining(deadline)))
            try:
                sock.connect(self.server)
                break
            except (ConnectionRefusedError, socket.timeout, OSError):
                # The PS may not be listening yet: retry until the deadline, a short wait each time.
                sock.close()
                time.sleep(min(0.05, _remaining(deadline)))
        sock.sendall(HELLO.pack(MAGIC, self.rank))
        self.sock = sock

    def push(self, msg_id: int, values: np.ndarray, timeout_s: float) -> SendReport:
        """Send message ``msg_id``; at the deadline, raise :class:`TransportTimeout` keeping what
        is left of it, so the next call with the same id goes on where this one stopped."""
        if self._tx is None or self._tx[0].msg_id != msg_id:
            payload = memoryview(np.ascontiguousarray(values, dtype=np.float32)).cast("B")
            if len(payload) != self.up.n_bytes:
                raise TransportError(f"the message has {len(payload) // 4} floats but the layout "
                                     f"has {self.up.n_floats}.")
            header = HEADER.pack(MAGIC, self.rank, msg_id, len(payload))
            self._tx = (_Outbox(msg_id, header, payload), tcp_counters(self.sock)[0], len(payload))
        box, before, nbytes = self._tx
        deadline = time.monotonic() + timeout_s
        while True:
            self.sock.settimeout(max(deadline - time.monotonic(), 1e-3))
            try:
                if box.write(self.sock):
                    break
            except socket.timeout as exc:
                raise TransportTimeout("the PS did not take the gradient before the deadline") \
                    from exc
            except OSError as exc:
                raise TransportError(f"the connection to the PS failed ({exc})") from exc
        self._tx = None
        retrans = tcp_counters(self.sock)[0] - before
        return SendReport(nbytes, nbytes + HEADER.size, retransmits=retrans)

    def pull(self, msg_id: int, timeout_s: float) -> Delivery:
        """Receive message ``msg_id``; at the deadline, raise :class:`TransportTimeout` keeping
        what arrived, so the next call goes on where this one stopped."""
        deadline = time.monotonic() + timeout_s
        while True:
            got = self._rx.take(msg_id)
            if got is not None:
                return Delivery.whole(got[1], self.layout)
            self.sock.settimeout(max(deadline - time.monotonic(), 1e-3))
            try:
                alive = self._rx.feed(self.sock, _PS_SENDER, self.layout.n_bytes)
            except socket.timeout as exc:
                raise TransportTimeout("the PS sent nothing before the deadline") from exc
            except OSError as exc:   # a reset: the PS's end closed with our data unread
                raise TransportError(f"the connection to the PS failed ({exc})") from exc
            if not alive:
                raise TransportError("the PS closed the connection")

    def stats(self) -> dict[str, float | str]:
        if self.sock is None:
            return {}
        retrans, rto_us = tcp_counters(self.sock)
        return {"tcp_total_retrans": float(retrans), "rto_ms": rto_us / 1000.0,
                "cc": self.cc_effective}

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
