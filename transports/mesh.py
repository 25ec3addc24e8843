"""The contract of a collective's transport: every member sends to, and receives from, any other.

The PS's transports pair one server with its workers (:class:`~transports.base.ServerEnd`,
:class:`~transports.base.WorkerEnd`). A collective (a broadcast or reduce tree, ring all-reduce:
:mod:`harness.hosts.tree`, :mod:`harness.hosts.ring`) moves pieces of the model between any two
members instead, and a tree decides while it runs who sends to whom. So a transport that serves
collectives opens one :class:`MeshEnd` per member (:meth:`~transports.base.Transport.mesh`),
which reaches every other member of the job.

A receiver takes the messages of one link in the order of their ids (LTP refuses an id older
than one it took, whatever the part), so a collective gives every message of one iteration the
same id, the iteration's, and tells them apart by part.

Messages are cut into *parts* known to every member in advance (:class:`Part`): a part is a
range of the model's float vector with a number of its own, and a message id names one use of
it (an iteration's chunk, a ring step's share). A transport may tell its receivers each part's
exact size (LTP's core refuses anything else) and close each part on its own thresholds (a part
that holds parameters is received whole, one that holds gradients may close early).
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Sequence

import numpy as np

from transports.base import Delivery, End, Layout, SendReport


@dataclasses.dataclass(frozen=True)
class Part:
    """One piece of the messages of a collective: where it lies in the model's vector and how a
    loss-tolerant receiver may close it (``None``: the transport's own thresholds for gradients;
    ``(1.0, 1.0)``: whole, as parameters are)."""

    offset: int
    n_floats: int
    thresholds: tuple[float, float] | None = None

    def of(self, values: np.ndarray) -> np.ndarray:
        """This part's values of a full-length vector."""
        return values[self.offset:self.offset + self.n_floats]


def chunks(n_floats: int, k: int, thresholds: tuple[float, float] | None = None) -> list[Part]:
    """``n_floats`` cut into ``k`` consecutive parts whose sizes differ by one at most."""
    if not 1 <= k <= n_floats:
        raise ValueError(f"{n_floats} floats cannot be cut into {k} parts.")
    bounds = np.linspace(0, n_floats, k + 1).round().astype(int)
    return [Part(int(a), int(b - a), thresholds) for a, b in zip(bounds[:-1], bounds[1:])]


def part_layout(layout: Layout, part: Part) -> Layout:
    """The model's segments that fall inside ``part``, cut to it (what PLOT bounds per layer)."""
    sizes = []
    end = part.offset + part.n_floats
    for s in layout.segments:
        lo, hi = max(s.offset, part.offset), min(s.offset + s.length, end)
        if hi > lo:
            sizes.append((s.name, hi - lo))
    return Layout.from_sizes(sizes)


class MeshEnd(End):
    """One member's end of a collective job: parts of messages to and from any other member.

    Members are numbered 0 .. M-1 in the order the job's addresses were given; this end is one
    of them (``rank``).
    """

    rank: int
    parts: Sequence[Part]

    @abc.abstractmethod
    def join(self, timeout_s: float) -> None:
        """Block until every other member can be reached, or raise
        :class:`~transports.base.TransportTimeout`."""

    def payload(self, part: int, values: np.ndarray) -> np.ndarray:
        """``values`` as part ``part``'s contiguous float32 payload (a ValueError if it is not that
        part's size)."""
        payload = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
        if payload.size != self.parts[part].n_floats:
            raise ValueError(f"part {part} has {self.parts[part].n_floats} floats, "
                             f"not {payload.size}.")
        return payload

    @abc.abstractmethod
    def send(self, to: Sequence[int], msg_id: int, part: int, values: np.ndarray,
             timeout_s: float) -> list[SendReport]:
        """Send ``values`` (the part's floats) as message ``msg_id`` of part ``part`` to every
        member in ``to``; one report each, in that order."""

    @abc.abstractmethod
    def recv(self, frm: int, msg_id: int, part: int, timeout_s: float) -> Delivery:
        """Receive message ``msg_id`` of part ``part`` from member ``frm`` (its values: the part's
        floats, filled where lost)."""

    @abc.abstractmethod
    def abandon(self, keys: Sequence[tuple[int, int, int]]) -> None:
        """This end will never ask for these (member, message id, part): take and drop them when
        they come. A receiver that stops waiting for a member (it failed, or fell behind) must
        say so, or the member's late messages keep room the next ones need (LTP holds a few
        messages per peer until they are taken)."""

    @abc.abstractmethod
    def recv_some(self, wanted: Sequence[tuple[int, int, int]], min_count: int,
                  timeout_s: float) -> dict[tuple[int, int, int], Delivery]:
        """Whichever of the (member, message id, part) in ``wanted`` arrive first: returns once
        ``min_count`` have, or at the deadline with those that have (perhaps none; not an error).
        One not returned stays pending, and asking again gets it."""
