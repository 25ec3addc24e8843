"""LTP's end of a collective (:class:`~transports.mesh.MeshEnd`): one native endpoint per member,
every other member a peer.

Each part of the job (:class:`~transports.mesh.Part`) is a segment of its own, so the core knows
every part's exact size and closes each on its own thresholds: a part with thresholds (the
parameters' chunks: whole) gets them as the segment's policy, the others close on the
transport's gradient thresholds. A part's message arrives, closes and is taken on its own, so a
tree node forwards one chunk while the next is still arriving. Holes are filled by the
transport's filler per sender and part (``masked-mean`` fills zeros here: a collective adds
partial sums, and a count per coordinate is not carried).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from transports import filling, native
from transports.base import (Addr, Delivery, Layout, OptionError, SendReport, Session,
                             TransportTimeout)
from transports.ltp import _NativeEnd
from transports.ltp_messages import _delivery, _Messages
from transports.mesh import MeshEnd, Part


ABANDON_S = 30.0   # an abandoned message not taken by then is forgotten (the core evicted it)


class LtpMesh(_NativeEnd, MeshEnd):
    """One member's end: one socket, one peer slot per other member (``slot[member]``); on the
    wire a member's rank is its number."""

    def __init__(self, options: Mapping[str, Any], settings: Mapping[str, float], rank: int,
                 members: Sequence[Addr], parts: Sequence[Part], session: Session) -> None:
        if not 0 <= rank < len(members) <= native.rank_server():
            raise OptionError(f"an LTP collective has 1 to {native.rank_server()} members and "
                              f"this end's rank is one of them, not {rank} of {len(members)}.")
        self.rank, self.parts = rank, list(parts)
        self.others = [m for m in range(len(members)) if m != rank]
        self.linger_s = options["linger_ms"] / 1000.0
        self.filler = filling.Filler("zero" if options["filler"] == "masked-mean"
                                     else options["filler"])
        self.abandoned: dict[tuple[int, int, int], float] = {}   # key -> when given up
        whole = max(p.offset + p.n_floats for p in self.parts)
        self.net = _Messages(settings, rank, members[rank], Layout.single(whole), (),
                             options["rx_drop_frac"], session,
                             [(i, p.n_floats) for i, p in enumerate(self.parts)])
        self.end = self.net.end
        try:
            for i, p in enumerate(self.parts):
                if p.thresholds is not None:
                    self.end.set_policy(i, *p.thresholds)
            self.slot = {m: self.net.add_peer(m, members[m]) for m in self.others}
        except BaseException:
            self.end.close()
            raise

    def join(self, timeout_s: float) -> None:
        for m in self.others:
            self.end.join(self.slot[m], timeout_s, what=f"member {self.rank} joining member {m}")

    def send(self, to: Sequence[int], msg_id: int, part: int, values: np.ndarray,
             timeout_s: float) -> list[SendReport]:
        payload = self.payload(part, values)
        # A send not finished by the deadline is suspended (partial): it sends nothing more, gives
        # its slot to any later send and its window up at its probe timeout, so a member that
        # died does not hold this end's sends, and the caller hears of it.
        sent = self.net.send_parts([self.slot[m] for m in to], msg_id, [(part, payload)], 0,
                                   timeout_s, partial=True)
        late = [m for m, rep in zip(to, sent) if rep is None]
        if late:
            raise TransportTimeout(f"part {part} of message {msg_id} did not reach member "
                                   f"{late[0]} within {timeout_s:g} s")
        return sent

    def abandon(self, keys: Sequence[tuple[int, int, int]]) -> None:
        now = time.monotonic()
        self.abandoned.update({key: now for key in keys})
        self._drain()

    def _drain(self) -> None:
        """Take whatever abandoned messages closed (and forget those given up long ago: a sender
        that died mid-message leaves one the core evicts once idle)."""
        if not self.abandoned:
            return
        now = time.monotonic()
        keys = [k for k, at in self.abandoned.items() if now - at < ABANDON_S]
        got = self._take(keys, 0, 0.0) if keys else {}
        self.abandoned = {k: self.abandoned[k] for k in keys if k not in got}

    def recv(self, frm: int, msg_id: int, part: int, timeout_s: float) -> Delivery:
        self._drain()
        n = self.parts[part].n_floats
        values, mask = np.empty(n, dtype=np.float32), np.empty(n, dtype=np.bool_)
        got = self.end.recv([native.RecvItem(self.slot[frm], msg_id, part, values, mask)], timeout_s,
                            what=f"receiving part {part} of message {msg_id} from member {frm}")
        delivery = _delivery(Layout.single(n), values, mask, got, [part])
        return self.filler.apply(frm * len(self.parts) + part, delivery)

    def recv_some(self, wanted: Sequence[tuple[int, int, int]], min_count: int,
                  timeout_s: float) -> dict[tuple[int, int, int], Delivery]:
        self._drain()
        return self._take(wanted, min_count, timeout_s)

    def _take(self, wanted: Sequence[tuple[int, int, int]], min_count: int,
              timeout_s: float) -> dict[tuple[int, int, int], Delivery]:
        bufs, items = [], []
        for frm, msg_id, part in wanted:
            n = self.parts[part].n_floats
            values, mask = np.empty(n, dtype=np.float32), np.empty(n, dtype=np.bool_)
            bufs.append((values, mask))
            items.append(native.RecvItem(self.slot[frm], msg_id, part, values, mask))
        got = self.end.recv_some(items, min(min_count, len(items)), max(timeout_s, 0.0),
                                 what="receiving from whichever member sends first")
        out = {}
        for key, (values, mask), stats in zip(wanted, bufs, got):
            if stats is not None:
                d = _delivery(Layout.single(len(values)), values, mask, [stats], [key[2]])
                out[key] = self.filler.apply(key[0] * len(self.parts) + key[2], d)
        return out
