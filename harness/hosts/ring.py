"""Ring all-reduce among the workers, without a PS: the ``ring`` pattern's schedule.

The N workers, in rank order, form a ring: worker ``i`` sends only to ``i + 1`` and receives only
from ``i - 1`` (mod N). The gradient is cut into N *shares* of consecutive coordinates; every
message carries one share, or a *piece* of one when the pattern pipelines (a link carries piece
``k + 1`` while the receiver adds up piece ``k``).

1. **Reduce-scatter**, steps ``s = 0 .. N-2``: worker ``i`` sends its running sum of share
   ``(i - s) mod N`` and adds what it receives, share ``(i - s - 1) mod N``, to its own. After
   N - 1 steps it holds the whole sum of share ``(i + 1) mod N``.
2. **All-gather**, steps ``s = 0 .. N-2``: worker ``i`` sends share ``(i + 1 - s) mod N``, which
   it holds whole, and keeps what it receives, share ``(i - s) mod N``.

Each worker sends 2(N - 1)/N of a gradient and receives as much, whatever N is: the bound of an
iteration is that many bytes over one worker link, plus 2(N - 1) steps of latency
(:mod:`harness.hosts.patterns`). Nothing here touches a socket: :class:`RingNode` is told what
arrived and says what to send, so the tests drive N of them through an in-memory ring.

A loss-tolerant transport may deliver part of a share; its filler has already put values where
coordinates were lost (:class:`~transports.base.Delivery`). In the reduce phase those values are
added like any others. In the gather phase a lost coordinate leaves this worker's sum of it as it
was (its own share of the sum so far): our interpretation, since without a PS nobody holds the
true value, and it is why ring workers' models may drift apart under loss (the run records how
far, ``models_spread``).
"""

from __future__ import annotations

import dataclasses

import numpy as np

PHASES = ("reduce", "gather")


@dataclasses.dataclass(frozen=True)
class Step:
    """One step of a worker's schedule: the share it sends and the share it receives."""

    phase: str
    index: int          # within the phase, 0 .. N-2
    send_share: int
    recv_share: int


def shares(n_floats: int, n: int) -> list[slice]:
    """The coordinates of each of ``n`` shares: consecutive, sizes differing by one at most."""
    if n < 1 or n_floats < n:
        raise ValueError(f"a ring of {n} workers needs at least {n} coordinates, not {n_floats}.")
    bounds = np.linspace(0, n_floats, n + 1).round().astype(int)
    return [slice(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]


def schedule(rank: int, n: int) -> list[Step]:
    """Worker ``rank``'s 2(N - 1) steps, reduce-scatter then all-gather."""
    if not 0 <= rank < n:
        raise ValueError(f"rank must be 0 to {n - 1}, not {rank}.")
    reduce = [Step("reduce", s, (rank - s) % n, (rank - s - 1) % n) for s in range(n - 1)]
    gather = [Step("gather", s, (rank + 1 - s) % n, (rank - s) % n) for s in range(n - 1)]
    return reduce + gather


def message_id(iteration: int, step: int, piece: int, n: int, pieces: int) -> int:
    """The id of one message on one ring link: distinct across iterations, steps and pieces (a
    link carries one sender's messages only, so ids need not name the sender)."""
    return (iteration * 2 * (n - 1) + step) * pieces + piece


def pieces_of(share: slice, pieces: int) -> list[slice]:
    """A share cut into ``pieces`` consecutive pieces (fewer when the share is shorter)."""
    size = share.stop - share.start
    k = max(1, min(pieces, size))
    return [slice(share.start + p.start, share.start + p.stop) for p in shares(size, k)]


class RingNode:
    """One worker's side of one all-reduce: its running sums, its schedule, what it filled."""

    def __init__(self, rank: int, n: int, gradient: np.ndarray, pieces: int = 1) -> None:
        self.rank, self.n = rank, n
        self.sums = np.array(gradient, dtype=np.float32, copy=True)
        self.steps = schedule(rank, n)
        self.shares = shares(len(self.sums), n)
        self.pieces = [pieces_of(s, pieces) for s in self.shares]
        self.lost_floats = 0       # coordinates whose value a transport filled, both phases

    def outgoing(self, step: int) -> list[np.ndarray]:
        """The messages (one per piece) this worker sends at ``step``: copies of its sums."""
        share = self.steps[step].send_share
        return [self.sums[p].copy() for p in self.pieces[share]]

    def incoming(self, step: int, piece: int, values: np.ndarray,
                 mask: np.ndarray | None = None) -> None:
        """Fold in piece ``piece`` of what arrived at ``step`` (``mask``: False where lost)."""
        st = self.steps[step]
        where = self.pieces[st.recv_share][piece]
        values = np.asarray(values, dtype=np.float32)
        if values.shape != (where.stop - where.start,):
            raise ValueError(f"step {step} piece {piece} carries {where.stop - where.start} "
                             f"values, not {values.shape}.")
        if mask is not None:
            self.lost_floats += int(np.count_nonzero(~mask))
        if st.phase == "reduce":
            self.sums[where] += values
        elif mask is None:
            self.sums[where] = values
        else:
            self.sums[where] = np.where(mask, values, self.sums[where])

    def mean(self) -> np.ndarray:
        """The all-reduced gradient divided by N: every worker's step."""
        return self.sums / np.float32(self.n)
