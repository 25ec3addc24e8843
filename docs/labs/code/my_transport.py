"""Lab 3's starter: your own loss-tolerant transport over UDP (docs/labs/lab3-*.md).

Fill in every TODO. The skeleton imports, registers the slug ``my-udp`` and opens its sockets, so
the tests can load it from the start; until the TODOs are done it fails them. Check your work:

    LTP_TRANSPORTS=docs/labs/code/my_transport.py .venv/bin/pytest tests/conformance -k my-udp

(test_transports.py: the contract of transports/base.py; test_traps.py: the two traps of lost
datagrams the page describes). The finished example is in docs/labs/instructor/: read it after
yours passes, or when you are stuck.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence

import numpy as np

from transports import filling, registry
from transports.base import (Addr, Delivery, Layout, Option, SendReport, ServerEnd, Transport,
                             WorkerEnd)

PS_RANK = 0xFFFF     # the rank your datagrams use for the PS


class MyTransport(Transport):
    """Send each datagram once and keep what arrives (then improve it: question 3)."""

    LABEL = "my-udp"
    OPTIONS = (
        Option("rate_mbps", 0.0, "float", 0, 10_000, unit="Mbit/s",
               help="fixed pacing rate (0: unpaced)"),
        Option("rx_drop_frac", 0.0, "float", 0, 0.99, unit="fraction",
               help="test hook: drop this fraction of received data (the conformance tests "
                    "use it to make your transport lose datagrams on loopback)"),
        Option("seed", 1, "int", 0, None, help="seeds the drop hook"),
    )

    def serve(self, bind: Addr, workers: Sequence[Addr], layout: Layout) -> MyServer:
        return MyServer(self._options, bind, list(workers), layout)

    def connect(self, rank: int, bind: Addr, server: Addr, layout: Layout) -> MyWorker:
        return MyWorker(self._options, rank, bind, server, layout)


def _socket(bind: Addr) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(tuple(bind))
    return sock


class MyServer(ServerEnd):
    """The PS's end: one socket, every worker's address known in advance (``workers[rank]``)."""

    def __init__(self, options: dict, bind: Addr, workers: list[Addr], layout: Layout):
        self.options, self.workers, self.layout = options, workers, layout
        self.sock = _socket(bind)
        self.filler = filling.Filler("masked-mean")   # filler.apply(rank, delivery) fills holes

    def wait_for_workers(self, timeout_s: float) -> None:
        # TODO: wait until every worker said hello, answering each; raise TransportTimeout
        #       after timeout_s. A worker may say hello again (its first answer was lost).
        raise NotImplementedError("TODO: MyServer.wait_for_workers")

    def gather(self, msg_id: int, timeout_s: float) -> list[Delivery]:
        # TODO: one Delivery per worker rank for message msg_id: values, and a mask of the
        #       floats that arrived. Close a worker's message when it is complete, when nothing
        #       new came for a while, or when that worker already sends a later message (trap 2).
        raise NotImplementedError("TODO: MyServer.gather")

    def broadcast(self, msg_id: int, values: np.ndarray, timeout_s: float) -> list[SendReport]:
        # TODO: send values as message msg_id to every worker; one SendReport per worker.
        raise NotImplementedError("TODO: MyServer.broadcast")

    def average(self, deliveries: Sequence[Delivery]) -> np.ndarray:
        return filling.masked_mean(deliveries)

    def close(self) -> None:
        self.sock.close()


class MyWorker(WorkerEnd):
    """A worker's end: one socket, the PS's address known in advance."""

    def __init__(self, options: dict, rank: int, bind: Addr, server: Addr, layout: Layout):
        self.options, self.rank, self.server, self.layout = options, rank, server, layout
        self.sock = _socket(bind)

    def join(self, timeout_s: float) -> None:
        # TODO: say hello to the PS until it answers. If the PS's parameters arrive instead of
        #       the answer (the answer was lost, trap 1), keep them for pull: do not drop them.
        raise NotImplementedError("TODO: MyWorker.join")

    def push(self, msg_id: int, values: np.ndarray, timeout_s: float) -> SendReport:
        # TODO: cut values into datagrams (header: your rank, msg_id, offset, count) and send
        #       each once, paced at rate_mbps if it is above 0.
        raise NotImplementedError("TODO: MyWorker.push")

    def pull(self, msg_id: int, timeout_s: float) -> Delivery:
        # TODO: the parameters of message msg_id as they arrived (what did not arrive: the
        #       previous value, or zeros the first time), with the mask of what did.
        raise NotImplementedError("TODO: MyWorker.pull")

    def close(self) -> None:
        self.sock.close()


if "my-udp" not in registry.REGISTRY:
    registry.register(registry.TransportInfo(
        "my-udp", "My UDP", "#17becf", "*", f"{__name__}:MyTransport", {}, True,
        "lab 3: your own transport", {"rx_drop_frac": 0.1}))
