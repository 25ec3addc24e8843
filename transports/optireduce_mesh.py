"""OptiReduce's end of a collective (:class:`~transports.mesh.MeshEnd`): LTP's mesh end with a
deadline and the Hadamard transform on every loss-tolerant part.

A part with thresholds (the parameters' chunks, the directory's and the clock's messages) is
LTP's, untouched. A part without (a ring's shares, a tree's sums: :class:`~transports.mesh.Part`)
is *coded*:

- **Sending**, its floats go through :class:`~transports.hadamard.HadamardCode` (seeded by this
  member's number, the message id and the part) unless ``hadamard`` is off.
- **Receiving**, the message's clock starts when this end first asks for it (``recv`` or
  ``recv_some``), and its deadline is the :class:`~transports.optireduce.AdaptiveTimeout` of its
  part at that moment. Until then the core closes it only whole (policy 1.0: LTP's
  retransmissions repair what is lost). At the deadline the end gives it up: it lowers the part's
  policy to 0 for one call (the core closes the message at its next turn with whatever has
  arrived, as soon as ``max_wait_ms`` has passed since its first packet), takes it, and puts the
  policy back. A message of which nothing arrived is delivered as all lost and abandoned (taken
  and dropped if it comes later). The part's time to its close, over the fraction that arrived,
  is the rule's next sample.
- The delivery's ``values`` are the decoded floats, with the lost coded coordinates filled with
  zero *before* the inverse transform; its ``mask`` is the coded vector's (True where a coded
  coordinate arrived), so ``received_frac`` and the patterns' counts of lost floats say how much
  arrived; under the transform they do not say where: every decoded float carries a share of the
  loss. With ``hadamard`` off the mask is the floats' own and the filler is zero.

The core's policy is per part, not per message: giving a part up also closes any other message
of that part that is open at that moment. In a tree those are the same chunk from the node's other
children, which were asked at the same moment and fall due with it; in a ring a sender that ran
a whole round ahead could have the same part's next message open (see docs/optireduce.md).

The end counts in :meth:`stats` (so in every host's summary): ``deadline_closes`` (parts given up
at their deadline), ``deadline_empty`` (of those, parts of which nothing had arrived) and
``deadline_lost_floats`` (coded floats that had not arrived in parts given up).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from transports.base import Addr, Delivery, Session, TransportTimeout
from transports.hadamard import HadamardCode
from transports.ltp_mesh import LtpMesh
from transports.mesh import Part
from transports.optireduce import GIVE_UP, WHOLE, AdaptiveTimeout

FORCE_MARGIN_S = 0.005   # how long past max_wait_ms a give-up waits for the core's next turn

Key = tuple[int, int, int]   # (member, message id, part)


class OptiReduceMesh(LtpMesh):
    """One member's end: LTP's mesh end, each coded part with a deadline and the transform."""

    def __init__(self, options: Mapping[str, Any], settings: Mapping[str, float], rank: int,
                 members: Sequence[Addr], parts: Sequence[Part], session: Session) -> None:
        # Lost coded coordinates are zero: the core writes zero where nothing arrived.
        super().__init__({**options, "filler": "zero"}, settings, rank, members, parts, session)
        self.coded = [p.thresholds is None for p in self.parts]
        self.code = (HadamardCode(options["hadamard_seed"], options["hadamard_block_floats"])
                     if options["hadamard"] else None)
        self.rule = AdaptiveTimeout.of(options)
        self.force_s = options["max_wait_ms"] / 1000.0 + FORCE_MARGIN_S
        self.asked: dict[Key, tuple[float, float]] = {}   # key -> (first ask, deadline)
        self.counts = {"deadline_closes": 0.0, "deadline_empty": 0.0, "deadline_lost_floats": 0.0}

    @property
    def exact(self) -> bool:
        """Whether every part arrives bit for bit when none of it is lost (not when coded: the
        transform rounds to float32)."""
        return self.code is None

    # ------------------------------------------------------------------ the transform
    def _encode(self, part: int, msg_id: int, payload: np.ndarray) -> np.ndarray:
        """What goes on the wire for this member's message ``msg_id`` of ``part``."""
        if self.code is None or not self.coded[part]:
            return payload
        return self.code.encode(payload, self.rank, msg_id, part)

    def _decode(self, key: Key, delivery: Delivery) -> Delivery:
        """A coded part's delivery with its floats decoded (lost coded floats already zero)."""
        frm, msg_id, part = key
        if self.code is not None and self.coded[part] and delivery.received_frac > 0:
            delivery.values = self.code.decode(delivery.values, frm, msg_id, part)
        return delivery

    def send(self, to: Sequence[int], msg_id: int, part: int, values: np.ndarray,
             timeout_s: float):
        coded = self._encode(part, msg_id, self.payload(part, values))
        return super().send(to, msg_id, part, coded, timeout_s)

    # ------------------------------------------------------------------ receiving
    def recv(self, frm: int, msg_id: int, part: int, timeout_s: float) -> Delivery:
        if not self.coded[part]:
            return super().recv(frm, msg_id, part, timeout_s)
        key = (frm, msg_id, part)
        got = self.recv_some([key], 1, timeout_s)
        if key not in got:
            raise TransportTimeout(f"part {part} of message {msg_id} from member {frm} did not "
                                   f"close within {timeout_s:g} s")
        return got[key]

    def recv_some(self, wanted: Sequence[Key], min_count: int,
                  timeout_s: float) -> dict[Key, Delivery]:
        self._drain()
        start = time.monotonic()
        limit = start + max(timeout_s, 0.0)
        for key in wanted:
            self._ask(key, start)
        out: dict[Key, Delivery] = {}
        while True:
            now = time.monotonic()
            late = [k for k in wanted if k not in out and k in self.asked
                    and self.asked[k][1] <= now]
            if late:
                out.update(self._give_up(late))
            rest = [k for k in wanted if k not in out]
            need = min_count - len(out)
            due = min((self.asked[k][1] for k in rest if k in self.asked), default=limit)
            wait = min(limit, due) - time.monotonic()
            if not rest:
                return out
            if need <= 0 or (wait <= 0 and time.monotonic() >= limit):
                # Enough (or the caller's deadline): take what else closed, without waiting.
                out.update(self._closed(rest, 0, 0.0))
                return out
            out.update(self._closed(rest, need, max(wait, 0.0)))

    def _ask(self, key: Key, now: float) -> None:
        """Start the clock of a coded part's message the first time it is asked for."""
        if self.coded[key[2]] and key not in self.asked:
            self.asked[key] = (now, now + self.rule.timeout_s(key[2]))

    def _closed(self, keys: Sequence[Key], min_count: int,
                wait_s: float) -> dict[Key, Delivery]:
        """Take whichever of ``keys`` closed (LTP's ``recv_some``), decoded and learned from."""
        got = self._take(keys, min_count, wait_s)
        return {key: self._finish(key, d) for key, d in got.items()}

    def _finish(self, key: Key, delivery: Delivery, given_up: bool = False) -> Delivery:
        """A coded part's delivery: its sample for the rule, its stats, its floats decoded (a
        whole part's goes as it is)."""
        asked = self.asked.pop(key, None)
        if asked is not None:
            now = time.monotonic()
            self.rule.observe(key[2], now - asked[0], delivery.received_frac)
            delivery.stats.update(wait_s=now - asked[0], deadline_s=asked[1] - asked[0],
                                  given_up=float(given_up))
        return self._decode(key, delivery)

    def _give_up(self, keys: Sequence[Key]) -> dict[Key, Delivery]:
        """Close ``keys`` (whose deadlines passed) with whatever of them arrived."""
        segments = sorted({key[2] for key in keys})
        for segment in segments:
            self.end.set_policy(segment, *GIVE_UP)
        try:
            got = self._take(keys, len(keys), self.force_s)
        finally:
            for segment in segments:
                self.end.set_policy(segment, *WHOLE)
        out = {}
        for key in keys:
            d = got.get(key)
            empty = d is None
            if empty:
                d = self._nothing(key)
                self.counts["deadline_empty"] += 1
            whole = d.received_frac >= 1.0   # it completed at the deadline: nothing given up
            if not whole:
                self.counts["deadline_closes"] += 1
                self.counts["deadline_lost_floats"] += int(np.count_nonzero(~d.mask))
            out[key] = self._finish(key, d, given_up=not whole)
            if empty:   # all lost; taken and dropped if it comes later
                LtpMesh.abandon(self, [key])
        return out

    def _nothing(self, key: Key) -> Delivery:
        n = self.parts[key[2]].n_floats
        return Delivery(np.zeros(n, np.float32), np.zeros(n, np.bool_), 0.0, (0.0,),
                        {"filled_frac": 1.0})

    def abandon(self, keys: Sequence[Key]) -> None:
        for key in keys:
            self.asked.pop(key, None)
        super().abandon(keys)

    def stats(self) -> dict[str, float]:
        return {**super().stats(), **self.counts}
