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

    def serve(self, bind: Addr, workers: Sequence[Addr], layout: Layout) -> TcpServer:
        return TcpServer(bind, workers, layout, self._options["cc"])

    def connect(self, rank: int, bind: Addr, server: Addr, layout: Layout) -> TcpWorker:
        return TcpWorker(rank, bind, server, layout, self._options["cc"])


class TcpServer(ServerEnd):
    """The PS end: accepts one connection per worker and multiplexes them."""

    def __init__(self, bind: Addr, workers: Sequence[Addr], layout: Layout, cc: str) -> None:
        self.layout = layout
        self.cc = cc
        self.worker_ips = [ip for ip, _ in workers]
        self.socks: list[socket.socket | None] = [None] * len(workers)
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
            hello = bytearray(HELLO.size)
            try:
                _recv_exact(conn, memoryview(hello), deadline)
            except TransportError:
                conn.close()
                self.rejected_peers += 1
                continue
            magic, rank = HELLO.unpack(hello)
            # A connection counts only if it comes from the address the topology gave that rank.
            if magic != MAGIC or rank >= len(self.socks) or self.worker_ips[rank] != peer_ip:
                conn.close()
                self.rejected_peers += 1
                continue
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            effective = _set_cc(conn, self.cc)
            if effective != self.cc:
                raise TransportError(f"the kernel applied {effective!r} instead of {self.cc!r}")
            conn.setblocking(False)
            self.socks[rank] = conn

    def gather(self, msg_id: int, timeout_s: float) -> list[Delivery]:
        deadline = time.monotonic() + timeout_s
        n = len(self.socks)
        headers = [bytearray(HEADER.size) for _ in range(n)]
        bodies = [np.empty(self.layout.n_floats, dtype=np.float32) for _ in range(n)]
        views = [memoryview(h) for h in headers]
        in_body = [False] * n
        got = [0] * n
        sel = selectors.DefaultSelector()
        for rank, sock in enumerate(self.socks):
            sel.register(sock, selectors.EVENT_READ, rank)
        try:
            pending = n
            while pending:
                for key, _ in sel.select(_remaining(deadline)):
                    rank = key.data
                    sock = self.socks[rank]
                    n_read = sock.recv_into(views[rank][got[rank]:])
                    if n_read == 0:
                        raise TransportError(f"worker {rank} closed its connection")
                    got[rank] += n_read
                    if got[rank] < len(views[rank]):
                        continue
                    if not in_body[rank]:
                        magic, sender, mid, nbytes = HEADER.unpack(headers[rank])
                        if magic != MAGIC or sender != rank or mid != msg_id:
                            raise TransportError(
                                f"worker {rank} sent message {mid} while {msg_id} was expected"
                            )
                        if nbytes != self.layout.n_bytes:
                            raise TransportError(f"worker {rank} sent {nbytes} bytes, not "
                                                 f"{self.layout.n_bytes}")
                        in_body[rank], got[rank] = True, 0
                        views[rank] = memoryview(bodies[rank]).cast("B")
                    else:
                        sel.unregister(sock)
                        pending -= 1
        finally:
            sel.close()
        return [Delivery.whole(body, self.layout) for body in bodies]

    def broadcast(self, msg_id: int, values: np.ndarray, timeout_s: float) -> list[SendReport]:
        deadline = time.monotonic() + timeout_s
        payload = memoryview(np.ascontiguousarray(values, dtype=np.float32)).cast("B")
        before = [tcp_counters(s)[0] for s in self.socks]
        bufs = []
        for rank in range(len(self.socks)):
            header = HEADER.pack(MAGIC, 0, msg_id, len(payload))
            bufs.append([memoryview(header), payload])
        sel = selectors.DefaultSelector()
        for rank, sock in enumerate(self.socks):
            sel.register(sock, selectors.EVENT_WRITE, rank)
        try:
            pending = len(self.socks)
            while pending:
                for key, _ in sel.select(_remaining(deadline)):
                    rank = key.data
                    parts = bufs[rank]
                    try:
                        sent = self.socks[rank].sendmsg(parts)
                    except BlockingIOError:
                        continue
                    while sent and parts:
                        if sent >= len(parts[0]):
                            sent -= len(parts[0])
                            parts.pop(0)
                        else:
                            parts[0] = parts[0][sent:]
                            sent = 0
                    if not parts:
                        sel.unregister(self.socks[rank])
                        pending -= 1
        finally:
            sel.close()
        after = [tcp_counters(s)[0] for s in self.socks]
        wire = len(payload) + HEADER.size
        return [SendReport(len(payload), wire, retransmits=after[r] - before[r])
                for r in range(len(self.socks))]

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

    def __init__(self, rank: int, bind: Addr, server: Addr, layout: Layout, cc: str) -> None:
        self.rank = rank
        self.bind = bind
        self.server = server
        self.layout = layout
        self.cc = cc
        self.sock: socket.socket | None = None
        self.cc_effective = ""

    def join(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.cc_effective = _set_cc(sock, self.cc)
            if self.cc_effective != self.cc:
                raise TransportError(f"the kernel applied {self.cc_effective!r} instead of {self.cc!r}")
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
        payload = memoryview(np.ascontiguousarray(values, dtype=np.float32)).cast("B")
        before = tcp_counters(self.sock)[0]
        self.sock.settimeout(timeout_s)
        try:
            self.sock.sendmsg([HEADER.pack(MAGIC, self.rank, msg_id, len(payload))])
            self.sock.sendall(payload)
        except socket.timeout as exc:
            raise TransportTimeout("the PS did not take the gradient before the deadline") from exc
        retrans = tcp_counters(self.sock)[0] - before
        return SendReport(len(payload), len(payload) + HEADER.size, retransmits=retrans)

    def pull(self, msg_id: int, timeout_s: float) -> Delivery:
        deadline = time.monotonic() + timeout_s
        header = bytearray(HEADER.size)
        _recv_exact(self.sock, memoryview(header), deadline)
        magic, sender, mid, nbytes = HEADER.unpack(header)
        if magic != MAGIC or mid != msg_id or nbytes != self.layout.n_bytes:
            raise TransportError(f"the PS sent message {mid} ({nbytes} bytes) while {msg_id} "
                                 "was expected")
        body = np.empty(self.layout.n_floats, dtype=np.float32)
        _recv_exact(self.sock, memoryview(body).cast("B"), deadline)
        return Delivery.whole(body, self.layout)

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
