"""The receiving half of the multicast peer transport: reassembly, closing, answers to polls.

Sans-IO: :class:`Inbound` is handed decoded datagrams (:mod:`transports.peer.wire`) that the
:class:`~transports.peer.auth.Gate` let through (session, source address, tag and replay window
checked), returns the STATUS datagram to send back (if any, sealed by the ``seal`` it was given),
and hands every message it closes to a ``deliver`` callable. It holds at most one open
message per sender: a float32 buffer of ``n_floats`` preallocated with zeros (so what never
arrives reads 0) and one bool per datagram.

A message closes

- when it is complete (delivered whole, ``mask`` None);
- at a POLL, if the fraction of coordinates held is at least ``close_frac`` (delivered early);
- at the sender's CLOSE, with what it holds: delivered if that is at least ``min_frac``,
  otherwise dropped (and counted);
- when a newer round from the same sender arrives: delivered early if it holds ``close_frac``,
  otherwise dropped (counted as ``superseded``).

After closing it remembers the last :data:`KEEP_CLOSED` rounds of each sender, so it keeps
answering POLL and CLOSE for them with a closed STATUS and ignores late DATA for them. DATA,
POLL or CLOSE for a round older than the newest one seen from that sender and not remembered is
stale: dropped and counted, never answered.

**The round window.** A round more than ``round_window`` past this peer's *progress* (the newest
round it has sent itself or accepted from any sender; -1 before any) is refused and counted
(``out_of_window``) before it opens anything, so that one datagram with a far-future round (say
0xFFFFFFFF) cannot make every later genuine round of its sender stale. The progress is shared by
all senders because rounds advance together in training (BSP: peers are at most one round apart,
SSP with bound S: S + 1), while a receiver may not hear from a given sender for many rounds
when it is not chosen as that sender's receiver; anchoring on that sender's own newest round
would lock a sender out after a gap longer than the window. A round inside the window opens as
before (with auth off, a forgery there still makes the rounds below it stale: the window bounds
the damage of one datagram to ``round_window`` rounds of one sender; the MAC prevents it).
"""

from __future__ import annotations

import collections
from collections.abc import Callable

import numpy as np

from transports.peer import wire
from transports.peer.base import Incoming

KEEP_CLOSED = 8

ROUND_WINDOW = 64   # the mcast option round_window's default: see docs/peer-transports.md

Seal = Callable[..., bytes]
"""What seals a STATUS: ``seal(kind, round, *tail, body=b"")`` -> the whole datagram
(:meth:`transports.peer.auth.Sealer.seal`)."""

DropHook = Callable[[int, int, int], bool]
"""Test hook: called with (sender, round, seq) for every valid DATA datagram; True drops it."""


def datagram_count(n_floats: int, payload_bytes: int) -> int:
    """How many DATA datagrams carry a message of ``n_floats`` floats."""
    per = payload_bytes // 4
    return -(-n_floats // per)


class _Message:
    """One sender's message being reassembled."""

    __slots__ = ("round", "values", "bytes", "have", "n_have")

    def __init__(self, round_: int, n_floats: int, count: int) -> None:
        self.round = round_
        self.values = np.zeros(n_floats, dtype=np.float32)
        self.bytes = self.values.view(np.uint8)
        self.have = np.zeros(count, dtype=bool)
        self.n_have = 0


class Inbound:
    """Every sender's messages as this peer receives them (see the module docstring)."""

    def __init__(self, rank: int, n_floats: int, payload_bytes: int, seal: Seal,
                 close_frac: float, min_frac: float, deliver: Callable[[Incoming], None],
                 counters: collections.Counter, drop: DropHook | None = None, *,
                 round_window: int = ROUND_WINDOW) -> None:
        self.rank = rank
        self.n_floats = n_floats
        self.payload_bytes = payload_bytes
        self.per = payload_bytes // 4
        self.count = datagram_count(n_floats, payload_bytes)
        self.last_bytes = 4 * n_floats - (self.count - 1) * payload_bytes
        self.seal = seal
        self.round_window = round_window
        self.own_round = -1    # the newest round this peer sent (written by its sending thread)
        self._progress = -1    # the newest round accepted from any sender
        self.close_frac = close_frac
        self.min_frac = min_frac
        self.deliver = deliver
        self.counters = counters
        self.drop = drop
        self._open: dict[int, _Message] = {}
        self._latest: dict[int, int] = {}
        self._closed: dict[int, collections.OrderedDict[int, tuple[int, int]]] = {}

    # --- datagrams ---------------------------------------------------------------------------

    def on_datagram(self, d: wire.Datagram) -> bytes | None:
        """One DATA, POLL or CLOSE the gate let through (what a receiver is handed): the STATUS
        to send back, if any."""
        if d.kind == wire.DATA:
            self.on_data(d)
            return None
        return self.on_poll(d) if d.kind == wire.POLL else self.on_close(d)

    def on_data(self, d: wire.Datagram) -> None:
        """Store one DATA datagram's payload."""
        seq, count = d.tail
        expected = self.last_bytes if seq == self.count - 1 else self.payload_bytes
        if count != self.count or seq >= count or len(d.body) != expected:
            self.counters["malformed"] += 1
            return
        if d.round in self._closed.get(d.sender, ()):
            self.counters["late"] += 1   # a repair another receiver asked for, or a duplicate
            return
        msg = self._message(d.sender, d.round)
        if msg is None:
            return
        if self.drop is not None and self.drop(d.sender, d.round, seq):
            self.counters["test_dropped"] += 1
            return
        if msg.have[seq]:
            self.counters["duplicate_data"] += 1
            return
        start = seq * self.payload_bytes
        msg.bytes[start:start + expected] = np.frombuffer(d.body, dtype=np.uint8)
        msg.have[seq] = True
        msg.n_have += 1
        if msg.n_have == self.count:
            self._close(d.sender, msg, 0.0)

    def on_poll(self, d: wire.Datagram) -> bytes | None:
        """Answer a POLL with a STATUS, closing the message first if it holds ``close_frac``."""
        pass_, count = d.tail
        if count != self.count:
            self.counters["malformed"] += 1
            return None
        msg = self._message(d.sender, d.round)
        if msg is not None and self._frac(msg) >= self.close_frac:
            self._close(d.sender, msg, self.close_frac)
        return self._status(d.sender, d.round, pass_)

    def on_close(self, d: wire.Datagram) -> bytes | None:
        """The sender gave up repairing: close with what is held, and confirm."""
        (count,) = d.tail
        if count != self.count:
            self.counters["malformed"] += 1
            return None
        msg = self._message(d.sender, d.round)
        if msg is not None:
            self._close(d.sender, msg, self.min_frac)
        return self._status(d.sender, d.round, 0)

    # --- state -------------------------------------------------------------------------------

    def _message(self, sender: int, round_: int) -> _Message | None:
        """The open message (sender, round), started if the round is new; None if it is closed
        or stale."""
        if round_ in self._closed.get(sender, ()):
            return None
        msg = self._open.get(sender)
        if msg is not None and msg.round == round_:
            return msg
        if round_ <= self._latest.get(sender, -1):
            self.counters["stale"] += 1
            return None
        if round_ > max(self._progress, self.own_round) + self.round_window:
            self.counters["out_of_window"] += 1
            return None
        if msg is not None:   # a newer round supersedes it
            if self._frac(msg) >= self.close_frac:
                self._close(sender, msg, self.close_frac)
            else:
                self.counters["superseded"] += 1
                self._record(sender, msg.round, wire.CLOSED | wire.DROPPED, self._floats(msg))
                del self._open[sender]
        self._latest[sender] = round_
        self._progress = max(self._progress, round_)
        msg = self._open[sender] = _Message(round_, self.n_floats, self.count)
        return msg

    def _floats(self, msg: _Message) -> int:
        short = self.per - (self.n_floats - (self.count - 1) * self.per)
        return msg.n_have * self.per - (short if msg.have[-1] else 0)

    def _frac(self, msg: _Message) -> float:
        return self._floats(msg) / self.n_floats

    def _close(self, sender: int, msg: _Message, floor: float) -> None:
        """Close ``msg``: deliver it if it holds at least ``floor`` of the vector, else drop it."""
        del self._open[sender]
        floats = self._floats(msg)
        complete = msg.n_have == self.count
        frac = floats / self.n_floats
        if not complete and frac < floor:
            self.counters["dropped_below_min"] += 1
            self._record(sender, msg.round, wire.CLOSED | wire.DROPPED, floats)
            return
        mask = None if complete else np.repeat(msg.have, self.per)[:self.n_floats]
        self.counters["delivered"] += 1
        self.counters["early_closes"] += 0 if complete else 1
        self._record(sender, msg.round, wire.CLOSED, floats)
        self.deliver(Incoming(sender, msg.round, msg.values, mask, frac, not complete))

    def _record(self, sender: int, round_: int, flags: int, floats: int) -> None:
        closed = self._closed.setdefault(sender, collections.OrderedDict())
        closed[round_] = (flags, floats)
        while len(closed) > KEEP_CLOSED:
            closed.popitem(last=False)

    def _status(self, sender: int, round_: int, pass_: int) -> bytes | None:
        """The STATUS for (sender, round): closed, or what is held; None if it is stale."""
        record = self._closed.get(sender, {}).get(round_)
        if record is not None:
            flags, floats = record
            return self.seal(wire.STATUS, round_, sender, pass_, flags, 0, self.count, floats)
        msg = self._open.get(sender)
        if msg is None or msg.round != round_:
            return None
        return self.seal(wire.STATUS, round_, sender, pass_, 0, 0, self.count, self._floats(msg),
                         body=np.packbits(msg.have).tobytes())
