"""UDP blast: the simplest loss-tolerant transport, written against the shared interface (lab 3).

Every message is cut into datagrams and sent exactly once, optionally paced at a fixed rate; no
acknowledgements, no retransmissions. The receiver keeps whatever arrives and closes a message
when it is complete, when nothing new has arrived for ``quiet_ms``, or when the sender has
already moved on to a later message. The PS averages each coordinate over the workers that
delivered it (masked mean); a worker keeps its previous value of a parameter that did not arrive.

It is short on purpose: run it next to ``ltp`` to see what acknowledgements, retransmissions and
congestion control buy. Load it with::

    LTP_TRANSPORTS=docs/labs/instructor/udp_blast.py .venv/bin/invoke run-sweep --transports udp-blast,ltp

Datagram: a 24-byte header (magic ``UDPB``, sender rank with 65535 for the PS, message id, float
offset, float count, message length in floats) and then the float32 values.
"""

from __future__ import annotations

import select
import socket
import struct
import time
from collections.abc import Sequence

import numpy as np

from transports import filling, registry
from transports.base import (Addr, Delivery, Layout, Option, SendReport, ServerEnd, Transport,
                             TransportTimeout, WorkerEnd)

MAGIC = b"UDPB"
HEADER = struct.Struct("!4sHxxIIII")
PS_RANK = 0xFFFF
HELLO, HELLO_ACK = b"HELO", b"HACK"


class UdpBlast(Transport):
    """Send once, keep what arrives."""

    LABEL = "udp-blast"
    # One row per option: the checks, `invoke transports` and the docs all read this table.
    OPTIONS = (
        Option("rate_mbps", 0.0, "float", 0, 10_000, unit="Mbit/s",
               help="fixed pacing rate, the only congestion control udp-blast has (0: unpaced)"),
        Option("quiet_ms", 20.0, "float", 0.001, 10_000, unit="ms",
               help="a message closes once nothing new arrived for this long"),
        Option("packet_floats", 350, "int", 1, 362, unit="floats",
               help="floats per datagram (362 fill a 1472-byte datagram)"),
        Option("rx_drop_frac", 0.0, "float", 0, 0.99, unit="fraction",
               help="test hook: drop this seeded fraction of received data"),
        Option("seed", 1, "int", 0, None, help="seeds the drop hook"),
    )

    def serve(self, bind: Addr, workers: Sequence[Addr], layout: Layout) -> BlastServer:
        return BlastServer(self._options, bind, list(workers), layout)

    def connect(self, rank: int, bind: Addr, server: Addr, layout: Layout) -> BlastWorker:
        return BlastWorker(self._options, rank, bind, server, layout)


class _Socket:
    """One UDP socket, the send and receive loops, and the reassembly of messages."""

    def __init__(self, options: dict, rank: int, bind: Addr, peers: list[Addr],
                 layout: Layout) -> None:
        self.o, self.rank, self.peers, self.layout = options, rank, peers, layout
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        self.sock.bind(bind)
        self.rng = np.random.default_rng(options["seed"] + rank)
        self.pending: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        self.newest: dict[int, int] = {}  # sender rank -> the latest message id seen from it

    def send(self, peer: Addr, msg_id: int, values: np.ndarray) -> SendReport:
        payload = np.ascontiguousarray(values, dtype=np.float32)
        n, step, wire = payload.size, self.o["packet_floats"], 0
        gap_s = (step * 4 + HEADER.size + 42) * 8 / (self.o["rate_mbps"] * 1e6) \
            if self.o["rate_mbps"] else 0.0
        next_t = time.monotonic()
        for off in range(0, n, step):
            chunk = payload[off:off + step]
            dgram = HEADER.pack(MAGIC, self.rank, msg_id, off, chunk.size, n) + chunk.tobytes()
            if gap_s:  # fixed-rate pacing: the only congestion control udp-blast has
                while time.monotonic() < next_t:
                    pass
                next_t += gap_s
            try:
                self.sock.sendto(dgram, peer)
            except OSError:
                pass  # a full socket buffer is just more loss
            wire += len(dgram)
        return SendReport(payload.nbytes, wire, packets=-(-n // step))

    def receive(self, senders: list[int], msg_id: int, timeout_s: float) -> list[Delivery]:
        """Collect ``msg_id`` from each sender (by rank) until complete, quiet or superseded."""
        deadline = time.monotonic() + timeout_s
        quiet_s = self.o["quiet_ms"] / 1000
        last_new = None
        while True:
            done = [self._complete(s, msg_id) or self.newest.get(s, -1) > msg_id for s in senders]
            if all(done):
                break
            now = time.monotonic()
            if last_new is not None and now - last_new > quiet_s:
                break
            if now > deadline:
                raise TransportTimeout(f"no datagram of message {msg_id} arrived in time")
            wait = quiet_s if last_new is None else max(0.0, quiet_s - (now - last_new))
            if select.select([self.sock], [], [], min(wait, deadline - now))[0]:
                if self._read_one(msg_id):
                    last_new = time.monotonic()
            elif last_new is None and any(self._has(s, msg_id) for s in senders):
                last_new = now
        return [self._take(s, msg_id) for s in senders]

    def _read_one(self, msg_id: int) -> bool:
        """Read one datagram; True if it carried new data of ``msg_id``."""
        data, addr = self.sock.recvfrom(65536)
        if data == HELLO and addr in self.peers:
            self.sock.sendto(HELLO_ACK, addr)  # its first answer was lost: answer again
            return False
        return self.ingest(data, msg_id)

    def ingest(self, data: bytes, msg_id: int) -> bool:
        """Keep one data datagram; True if it carried new data of ``msg_id``."""
        if len(data) < HEADER.size or data[:4] != MAGIC:
            return False
        _, sender, mid, off, count, total = HEADER.unpack_from(data)
        if total != self.layout.n_floats or off + count > total \
                or len(data) != HEADER.size + 4 * count:
            return False  # malformed
        self.newest[sender] = max(mid, self.newest.get(sender, -1))
        if mid < msg_id:
            return False  # stale: that message is closed
        if self.o["rx_drop_frac"] and self.rng.random() < self.o["rx_drop_frac"]:
            return False  # injected loss, for the conformance tests
        values, mask = self.pending.setdefault(
            (sender, mid), (np.zeros(total, np.float32), np.zeros(total, bool)))
        values[off:off + count] = np.frombuffer(data, np.float32, count, HEADER.size)
        mask[off:off + count] = True
        return mid == msg_id

    def _has(self, sender: int, msg_id: int) -> bool:
        return (sender, msg_id) in self.pending

    def _complete(self, sender: int, msg_id: int) -> bool:
        entry = self.pending.get((sender, msg_id))
        return entry is not None and bool(entry[1].all())

    def _take(self, sender: int, msg_id: int) -> Delivery:
        values, mask = self.pending.pop(
            (sender, msg_id), (np.zeros(self.layout.n_floats, np.float32),
                               np.zeros(self.layout.n_floats, bool)))
        frac = float(mask.mean())
        if frac == 1.0:
            return Delivery.whole(values, self.layout)
        fracs = tuple(float(mask[s.offset:s.offset + s.length].mean()) for s in self.layout.segments)
        return Delivery(values, mask, frac, fracs, {"packets": float(mask.sum())})

    def close(self) -> None:
        self.sock.close()


class BlastServer(ServerEnd):
    """The PS end."""

    def __init__(self, options, bind, workers, layout):
        self.net = _Socket(options, PS_RANK, bind, workers, layout)
        self.filler = filling.Filler("masked-mean")

    def wait_for_workers(self, timeout_s: float) -> None:
        deadline, greeted = time.monotonic() + timeout_s, set()
        while len(greeted) < len(self.net.peers):
            if time.monotonic() > deadline:
                raise TransportTimeout("not every worker said hello in time")
            if select.select([self.net.sock], [], [], 0.05)[0]:
                data, addr = self.net.sock.recvfrom(65536)
                if data == HELLO and addr in self.net.peers:
                    greeted.add(addr)
                    self.net.sock.sendto(HELLO_ACK, addr)

    def gather(self, msg_id, timeout_s):
        got = self.net.receive(list(range(len(self.net.peers))), msg_id, timeout_s)
        return [self.filler.apply(r, d) for r, d in enumerate(got)]

    def broadcast(self, msg_id, values, timeout_s):
        return [self.net.send(peer, msg_id, values) for peer in self.net.peers]

    def average(self, deliveries):
        return filling.masked_mean(deliveries)

    def close(self):
        self.net.close()


class BlastWorker(WorkerEnd):
    """A worker's end."""

    def __init__(self, options, rank, bind, server, layout):
        self.net = _Socket(options, rank, bind, [server], layout)
        self.filler = filling.Filler("previous")

    def join(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.net.sock.sendto(HELLO, self.net.peers[0])
            if select.select([self.net.sock], [], [], 0.05)[0]:
                data = self.net.sock.recvfrom(65536)[0]
                if data == HELLO_ACK:
                    return
                if data[:4] == MAGIC:  # the answer was lost, but the PS has started: keep the data
                    self.net.ingest(data, 0)
                    return
        raise TransportTimeout("the PS did not answer hello in time")

    def push(self, msg_id, values, timeout_s):
        return self.net.send(self.net.peers[0], msg_id, values)

    def pull(self, msg_id, timeout_s):
        return self.filler.apply(0, self.net.receive([PS_RANK], msg_id, timeout_s)[0])

    def close(self):
        self.net.close()


if "udp-blast" not in registry.REGISTRY:
    registry.register(registry.TransportInfo(
        "udp-blast", "UDP blast", "#bcbd22", "*", f"{__name__}:UdpBlast", {}, True,
        "lab 3: send once, no ACKs, no retransmissions, optional fixed-rate pacing",
        {"rx_drop_frac": 0.1}))
