"""The sending half's view of its round in the multicast peer transport: what receivers report.

Sans-IO: :class:`Outbound` is one round a peer is sending (:mod:`transports.peer.mcast`) and
:meth:`Outbound.on_status` records a STATUS a receiver sent about it (a datagram the
:class:`~transports.peer.auth.Gate` already let through). A closed STATUS ends that receiver's
part of the round (the sender stops repairing for it); an open one, of the current poll pass,
says which datagrams it still misses. The sending thread and the receiving thread share an
:class:`Outbound` under the caller's lock.
"""

from __future__ import annotations

import collections
import dataclasses
import time

import numpy as np

from transports.peer import wire


def well_formed(d: wire.Datagram, rank: int, count: int, n_floats: int) -> bool:
    """Whether STATUS ``d`` can be about a message of peer ``rank`` (``count`` datagrams,
    ``n_floats`` floats): its target, count, floats and bitmap length."""
    target, _, flags, _, d_count, floats = d.tail
    return (target == rank and d_count == count and floats <= n_floats
            and (bool(flags & wire.CLOSED) or len(d.body) == -(-count // 8)))


@dataclasses.dataclass
class Outbound:
    """The round this peer is sending, as its receivers report it."""

    round: int
    receivers: list[int]
    pass_: int = 0
    answered: dict[int, np.ndarray] = dataclasses.field(default_factory=dict)  # missing seqs
    first_answer: float | None = None
    closed: dict[int, float] = dataclasses.field(default_factory=dict)         # delivered frac

    def open(self) -> list[int]:
        """The receivers that have not closed the message."""
        return [r for r in self.receivers if r not in self.closed]

    def on_status(self, d: wire.Datagram, rank: int, count: int, n_floats: int,
                  counters: collections.Counter) -> bool:
        """Record receiver ``d.sender``'s STATUS about this round of peer ``rank`` (messages of
        ``count`` datagrams, ``n_floats`` floats); False if it was malformed or not about this
        round (counted)."""
        _, pass_, flags, _, _, floats = d.tail
        if not well_formed(d, rank, count, n_floats):
            counters["malformed"] += 1
            return False
        if self.round != d.round or d.sender not in self.receivers:
            counters["stale"] += 1
            return False
        if flags & wire.CLOSED:
            self.closed.setdefault(d.sender, 0.0 if flags & wire.DROPPED else floats / n_floats)
        elif pass_ == self.pass_ and d.sender not in self.closed:
            held = np.unpackbits(np.frombuffer(d.body, dtype=np.uint8), count=count)
            self.answered[d.sender] = held == 0
            if self.first_answer is None:
                self.first_answer = time.monotonic()
        return True
