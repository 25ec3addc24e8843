"""The parameter server's training loop: synchronisation modes and membership (who is alive).

Run inside the PS process by :func:`harness.hosts.node.run_ps`. One loop serves three modes
(``RunSpec.sync``, :func:`parse_sync`):

- ``bsp`` (bulk-synchronous): each *round* the PS sends the parameters to every worker that is
  ready, waits for their gradients, averages those that delivered, and takes one SGD step of
  ``lr``. Every applied gradient has staleness 0.
- ``ssp:S`` (stale-synchronous, bound ``S``): the PS applies each gradient as it arrives (a step
  of ``lr / N``) and sends that worker fresh parameters at once, unless the worker is more than
  ``S`` gradients ahead of the slowest live worker: then it waits until the slowest catches up.
- ``async``: as ``ssp`` without a bound.

In every mode a *round* is ``N`` gradients' worth of data (``N`` = the number of workers): in
``bsp`` one update; in ``ssp`` and ``async``, ``N`` arrivals, whoever sent them. ``iterations``,
``eval_every`` and the records count rounds, so the modes see the same amount of data per round.
The *staleness* of an applied gradient is the number of updates the PS applied between sending
the parameters the gradient was computed on and applying it (``bsp``: 0; ``async`` with ``N``
equal workers: about ``N - 1``). Each round's record lists who contributed and each staleness.
Under ``zeno++`` (the ``judge``) an update the validator rejects still counts as an arrival, with
its verdict in the record, but is not applied; its worker is served fresh parameters as usual.

Each worker has its own sequence of message ids: its ``k``-th parameters and its ``k``-th
gradient are message ``k``, whatever round the PS is in, so a worker that fell behind or came
back is simply at a lower ``k`` (:meth:`~transports.base.ServerEnd.recv_some`).

**Membership** (our interpretation of "the PS detects a dead or cut worker"), in runs that inject a
fault (``detect``; :func:`harness.hosts.node.run_ps` sets it when ``RunSpec.fault`` is not
``none``). A run without a fault is the classic form of its mode: the PS waits for every worker
(``bsp``: a round is as slow as its slowest gradient, the incast tail the transports are compared
on), up to the run's timeout; only a connection that ends still makes a worker *gone*. A worker is
*missing* when its gradient is overdue: ``miss_after_s`` after its parameters went out (``ssp``,
``async``) or after the round's gather began (``bsp``), or when its parameters did not arrive
within ``miss_after_s``, where ``miss_after_s = max(MISS_FLOOR_S, MISS_FACTOR x the median of the
last MISS_WINDOW turnarounds)``: 1 s unless iterations are slower than a quarter of that. It is
*gone* as soon as the transport knows its connection ended (TCP: the dead process's kernel closed
it; a datagram transport never knows). The PS goes on with the others: a ``bsp`` round averages
over those that delivered; nobody's send waits for a missing worker (it is left out of every
broadcast). A missing worker's pending gradient stays asked for: when it arrives (the worker was
stalled, or its link is back) it is *late*: ``bsp`` discards it, ``ssp``/``async`` apply it with
its staleness, and the worker is *back*: it gets the current parameters with its next message.
Parameters whose send did not finish (LTP suspends it at the deadline and resumes it when sent
again) are sent again every ``RETRY_S`` until they arrive; the gradient of those parameters is asked for meanwhile,
since a send given up at its deadline may still have reached the worker (TCP: its bytes were in the
kernel's buffer). A worker sent parameters by such a retry, between rounds, is missing again if its
gradient is overdue, as in any round. Every change is an event in ``raw/ps1.members.jsonl``
(:class:`~harness.running.runfiles.MemberEvent`), with the time, so detection time is measured.

At the end the PS collects the gradients still on their way from live workers (at most
``END_S``), writes the end marker and sends every live worker the final parameters; a worker
that is unreachable then finds the PS's summary and stops by itself (:mod:`harness.hosts.node`).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch

from harness.hosts.sync import Sync
from harness.running.runfiles import MemberEvent, PsIteration, Recorder
from harness.training.aggregators import Outcome
from transports.base import Delivery, ServerEnd

MISS_FLOOR_S = 1.0
MISS_FACTOR = 4.0
MISS_WINDOW = 10
GEN_SHIFT = 24       # a restarted worker's message ids start at generation << GEN_SHIFT
RETRY_S = 0.5        # how often parameters a worker did not get are sent again
RETRY_SEND_S = 0.1   # how long such a send may take before it is left for the next try
END_S = 5.0          # the longest the PS waits at the end for gradients still on their way
@dataclasses.dataclass
class Member:
    """One worker as the PS sees it."""

    state: str = "ready"     # ready (owed parameters msg), computing, missing, gone
    msg: int = 0             # the message id in flight (computing) or owed (ready)
    version: int = 0         # the PS's update count when the parameters of ``msg`` went out
    sent_at: float = 0.0
    clock: int = 0           # gradients of this worker the PS took
    owed: bool = False       # missing because parameters did not reach it (not a gradient)
    gen: int = 0             # how often its process was restarted (its ids start at gen << 24)


@dataclasses.dataclass
class _Round:
    """What one round collected."""

    t: int
    start: float
    ranks: list[int] = dataclasses.field(default_factory=list)
    staleness: list[int] = dataclasses.field(default_factory=list)
    deliveries: list[Delivery] = dataclasses.field(default_factory=list)
    sent: list = dataclasses.field(default_factory=list)
    broadcast_s: float = 0.0
    update_s: float = 0.0
    late: int = 0
    abandoned: int = 0
    participants: set[int] = dataclasses.field(default_factory=set)
    deadline: float = 0.0
    outcome: Outcome | None = None
    agg_f: int = 0
    agg_s: float = 0.0


class ParameterServer:
    """One training job's PS loop over a :class:`~transports.base.ServerEnd`.

    ``trainer`` holds the parameters (``params``, a flat tensor), evaluates and decides when to
    stop (``after(rounds_done)`` returns the reason, '' to go on; ``train_s`` accumulates).
    ``clock`` is the monotonic clock (the unit tests pass a fake one with a fake end).
    ``combine(deliveries)`` returns a bsp round's (:class:`~harness.training.aggregators.Outcome`,
    ``f``); without it the PS averages (``end.average``). ``judge(deliveries, version)`` (Zeno++,
    :class:`harness.hosts.robust.Judge`) takes its place in every mode: it returns the verdicts on
    updates judged one by one at parameter version ``version`` (a bsp round's all together, an
    ssp or async arrival alone) and the accepted ones averaged; when it accepts none the PS takes
    no step. ``decode(delivery)`` turns each push as
    it arrives into the dense gradient it carries (:func:`harness.training.compress.decode`;
    default: as is), before anything else (the transport's ``observe``, the aggregator) sees it.
    """

    def __init__(self, end: ServerEnd, trainer, rec: Recorder, n_workers: int, sync: Sync,
                 lr: float, started: float, clock: Callable[[], float] = time.monotonic,
                 detect: bool = True,
                 combine: Callable[[list[Delivery]], tuple[Outcome, int]] | None = None,
                 decode: Callable[[Delivery], Delivery] | None = None,
                 judge: Callable[[list[Delivery], int], Outcome] | None = None) -> None:
        self.end, self.trainer, self.rec, self.detect = end, trainer, rec, detect
        self.combine, self.judge = combine, judge
        self.decode = decode or (lambda d: d)
        self.n, self.sync, self.lr, self.started, self.clock = n_workers, sync, lr, started, clock
        self.members = [Member() for _ in range(n_workers)]
        self.version = 0
        self.turnarounds: list[float] = []
        self.last_retry = 0.0
        self.backlog: list[tuple[int, Delivery]] = []

    # ---- membership ---------------------------------------------------------------------
    def miss_after_s(self) -> float:
        """How long a gradient may be overdue before its worker counts as missing (without
        ``detect``: the run's timeout, i.e. never within a run)."""
        if not self.detect:
            return float(self.trainer.spec.timeout_s)
        recent = self.turnarounds[-MISS_WINDOW:]
        return max(MISS_FLOOR_S, MISS_FACTOR * statistics.median(recent)) if recent else \
            MISS_FLOOR_S

    def _event(self, what: str, rank: int, t: int) -> None:
        now = self.clock()
        self.rec.member(MemberEvent(what, rank, now, now - self.started, t,
                                    self.members[rank].msg))

    def _live(self) -> list[int]:
        return [r for r, m in enumerate(self.members) if m.state in ("ready", "computing")]

    def _check_gone(self, t: int) -> None:
        for r in self.end.gone():
            if self.members[r].state != "gone":
                self.members[r].state = "gone"
                self._event("gone", r, t)

    def _miss(self, r: int, t: int, owed: bool = False) -> None:
        m = self.members[r]
        if m.state in ("ready", "computing"):
            m.state, m.owed = "missing", owed
            self._event("missing", r, t)

    def _send(self, ranks: list[int], rnd: _Round) -> list[int]:
        """Send the current parameters to ``ranks`` (each its owed message); return who got them.

        A worker whose copy did not arrive within ``miss_after_s`` is missing (owed it)."""
        if not ranks:
            return []
        t0 = self.clock()
        sent = self.end.send_some({r: self.members[r].msg for r in ranks},
                                  self.trainer.params.numpy(), self.miss_after_s())
        now = self.clock()
        rnd.broadcast_s += now - t0
        self._check_gone(rnd.t)   # a send that failed because the connection ended: gone
        for r in ranks:
            m = self.members[r]
            if r in sent:
                m.state, m.version, m.sent_at, m.owed = "computing", self.version, now, False
                rnd.sent.append(sent[r])
            elif m.state == "ready":
                self._miss(r, rnd.t, owed=True)
        return [r for r in ranks if r in sent]

    def _retry_owed(self, rnd: _Round) -> None:
        """Send again the parameters a missing worker did not get (rate-limited)."""
        now = self.clock()
        if now - self.last_retry < RETRY_S:
            return
        self.last_retry = now
        owed = [r for r, m in enumerate(self.members) if m.state == "missing" and m.owed]
        for r in self._send_quiet(owed, rnd):
            self._back(r, rnd.t)

    def _back(self, r: int, t: int) -> None:
        """Worker ``r`` is reachable again. It rejoins at the pace of the others (our
        interpretation): under SSP the workers that went on must not wait for it to redo the
        gradients it missed."""
        self._event("back", r, t)
        m = self.members[r]
        others = [self.members[o].clock for o in self._live() if o != r]
        m.clock = max([m.clock] + ([min(others) - 1] if others else []))

    def _send_quiet(self, ranks: list[int], rnd: _Round) -> list[int]:
        # One worker at a time: LTP's sends to all peers share one window (shared_link), which a
        # worker that is really gone would fill for the others.
        sent = {}
        for r in ranks:
            sent.update(self.end.send_some({r: self.members[r].msg},
                                           self.trainer.params.numpy(), RETRY_SEND_S))
        for r in sent:
            m = self.members[r]
            m.state, m.version, m.sent_at, m.owed = "computing", self.version, self.clock(), False
        return list(sent)

    # ---- gradients ----------------------------------------------------------------------
    def _wanted(self) -> dict[int, int | tuple[int, ...]]:
        """Per worker, the gradient the PS waits for; a missing or gone worker may also answer
        as a restarted process, with the first id of its next generation (its join message)."""
        out: dict[int, int | tuple[int, ...]] = {}
        for r, m in enumerate(self.members):
            rejoin = (m.gen + 1) << GEN_SHIFT
            if m.state == "computing":
                out[r] = m.msg
            elif m.state == "missing":
                # Owed parameters too: a send given up at its deadline may still have reached it
                # (TCP: the bytes were in the kernel's buffer), and its gradient then comes.
                out[r] = (m.msg, rejoin)
            elif m.state == "gone":
                out[r] = (rejoin,)
        return out

    def _apply(self, grads: list[Delivery], lr: float, rnd: _Round) -> None:
        t0 = self.clock()
        step = True
        if self.judge is not None and grads:
            out = self.judge(grads, self.version)
            rnd.outcome = _joined(rnd.outcome, out)   # ssp/async: one arrival's verdict more
            vector, step = out.vector, any(out.kept)
        elif self.combine is not None and self.sync.kind == "bsp" and grads:
            rnd.outcome, rnd.agg_f = self.combine(grads)
            vector = rnd.outcome.vector
        else:
            vector = self.end.average(grads)
        rnd.agg_s += self.clock() - t0
        if step:   # a rejected update changes nothing: no new version, no new validation
            self.trainer.params.add_(torch.from_numpy(vector), alpha=-lr)
            self.version += 1
        rnd.update_s += self.clock() - t0

    def _arrived(self, r: int, d: Delivery, rnd: _Round) -> None:
        d = self.decode(d)
        m = self.members[r]
        mid = int(d.stats.get("msg_id", m.msg))
        if mid >> GEN_SHIFT > m.gen:
            # A restarted process's join message: take it back with the current parameters.
            m.gen, m.msg, m.state, m.owed = mid >> GEN_SHIFT, mid + 1, "ready", False
            self._back(r, rnd.t)
            return
        if m.state == "missing":
            self._back(r, rnd.t)   # a late gradient is no turnaround sample
        else:
            self.turnarounds.append(self.clock() - m.sent_at)
        staleness = self.version - m.version
        m.msg, m.clock = m.msg + 1, m.clock + 1
        if m.state != "gone":   # a message that was whole before its connection ended
            m.state = "ready"
        if d.received_frac == 0.0:
            # Its sender gave it up before any of it arrived (the native core's "abandoned":
            # its later DATA said so): nothing to apply; its next message is awaited.
            rnd.abandoned += 1
            return
        if self.sync.kind == "bsp":
            if r in rnd.participants and staleness == 0:
                rnd.ranks.append(r)
                rnd.staleness.append(0)
                rnd.deliveries.append(d)
            else:
                rnd.late += 1   # computed on older parameters: BSP does not apply it
            return
        self._apply([d], self.lr / self.n, rnd)
        rnd.ranks.append(r)
        rnd.staleness.append(staleness)
        rnd.deliveries.append(d)

    # ---- the loop -----------------------------------------------------------------------
    def run(self) -> tuple[int, str]:
        """Train until the trainer says stop; return (rounds done, why it stopped)."""
        t, stopped_by = 0, ""
        rnd = self._new_round(t)
        while not stopped_by:
            self._step(rnd)
            if self._round_done(rnd):
                self.end.observe(t, rnd.deliveries)   # e.g. PLOT's SNR profiling
                if self.sync.kind == "bsp":
                    self._apply(rnd.deliveries, self.lr, rnd)
                self._record(rnd)
                t += 1
                stopped_by = self.trainer.after(t)
                if not stopped_by:
                    rnd = self._new_round(t)
            elif not self._live() and self.clock() - rnd.start > self.trainer.spec.timeout_s:
                stopped_by = "workers_lost"
        return t, stopped_by

    def _new_round(self, t: int) -> _Round:
        rnd = _Round(t, self.clock())
        if self.sync.kind == "bsp":
            ready = [r for r, m in enumerate(self.members) if m.state == "ready"]
            rnd.participants = set(self._send(ready, rnd))
            rnd.deadline = self.clock() + self.miss_after_s()
        else:
            self._release(rnd)
        return rnd

    def _release(self, rnd: _Round) -> None:
        """SSP/async: send fresh parameters to every ready worker within the staleness bound."""
        live = [self.members[r].clock for r in self._live()]
        floor = min(live) if live else 0
        bound = self.sync.bound if self.sync.kind == "ssp" else None
        ready = [r for r, m in enumerate(self.members) if m.state == "ready"
                 and (bound is None or m.clock - floor <= bound)]
        self._send(ready, rnd)

    def _step(self, rnd: _Round) -> None:
        """Wait for what comes next, take it, and notice who is overdue or gone."""
        now = self.clock()
        wanted = self._wanted()
        if self.sync.kind == "bsp":
            due = [r for r in rnd.participants if r in wanted and self.members[r].state
                   == "computing"]
            until, need = rnd.deadline, max(len(due), 1)
        else:
            overdue = [m.sent_at + self.miss_after_s() for m in self.members
                       if m.state == "computing"]
            until, need = min(overdue + [now + RETRY_S]), 1
        timeout = max(until - now, 0.0)
        if self.backlog:   # arrivals beyond the last round's N come first
            wanted, timeout = {}, 0.0
        got = self.end.recv_some(wanted, need, timeout) if wanted else {}
        if not wanted and timeout > 0:
            time.sleep(min(timeout, RETRY_S))
        self._check_gone(rnd.t)
        arrivals, self.backlog = self.backlog + sorted(got.items()), []
        for i, (r, d) in enumerate(arrivals):
            if self.sync.kind != "bsp" and len(rnd.ranks) >= self.n:
                self.backlog = arrivals[i:]   # this round is full: they open the next one
                break
            self._arrived(r, d, rnd)
        now = self.clock()
        if self.sync.kind == "bsp":
            if now >= rnd.deadline:
                for r in rnd.participants:
                    if self.members[r].state == "computing":
                        self._miss(r, rnd.t)
            for r, m in enumerate(self.members):   # sent to between rounds (a retry): overdue too
                if (r not in rnd.participants and m.state == "computing"
                        and now - m.sent_at >= self.miss_after_s()):
                    self._miss(r, rnd.t)
        else:
            for r, m in enumerate(self.members):
                if m.state == "computing" and now - m.sent_at >= self.miss_after_s():
                    self._miss(r, rnd.t)
            self._release(rnd)
        self._retry_owed(rnd)

    def _round_done(self, rnd: _Round) -> bool:
        """SSP/async: N gradients arrived. BSP: nobody the round sent to is still computing; a
        round nobody could take part in (all missing) starts again with whoever is back."""
        if self.sync.kind != "bsp":
            return len(rnd.ranks) >= self.n
        if any(self.members[r].state == "computing" for r in rnd.participants):
            return False
        if rnd.deliveries:
            return True
        ready = [r for r, m in enumerate(self.members) if m.state == "ready"]
        if ready:
            rnd.participants |= set(self._send(ready, rnd))
            rnd.deadline = self.clock() + self.miss_after_s()
        return False

    def _record(self, rnd: _Round) -> None:
        end = self.clock()
        iter_s = end - rnd.start
        self.trainer.train_s += iter_s
        ds = rnd.deliveries
        self.rec.iteration(PsIteration(
            iteration=rnd.t, t_s=rnd.start - self.started, gather_end_mono=end,
            broadcast_s=rnd.broadcast_s, gather_s=max(iter_s - rnd.broadcast_s - rnd.update_s, 0),
            update_s=rnd.update_s, iter_s=iter_s,
            recv_frac=[d.received_frac for d in ds],
            segment_fracs=[list(d.segment_fracs) for d in ds],
            param_wire_bytes=[s.wire_bytes for s in rnd.sent],
            param_retransmits=[s.retransmits for s in rnd.sent],
            param_stats=[dict(s.stats) for s in rnd.sent],
            msg_stats=[d.stats for d in ds], ranks=list(rnd.ranks),
            staleness=list(rnd.staleness), late=rnd.late, abandoned=rnd.abandoned,
            missing=[r for r, m in enumerate(self.members) if m.state in ("missing", "gone")],
            **_outcome_fields(rnd)))

    # ---- the end ------------------------------------------------------------------------
    def finish(self, t: int) -> None:
        """Collect gradients still on their way (at most ``END_S``), then send every live worker
        its final parameters; the caller writes the end marker in between (``mark``)."""
        deadline = self.clock() + END_S
        while True:
            # A missing worker may only be slow (a TCP flow in its retransmission timeout): its
            # gradient is waited for too, so that it gets the final parameters rather than a
            # closed connection.
            pending = self._wanted()
            left = deadline - self.clock()
            if not pending or left <= 0:
                break
            got = self.end.recv_some(pending, len(pending), left)
            self._check_gone(t)
            for r in got:
                m = self.members[r]
                m.state, m.msg, m.owed = "ready", m.msg + 1, False
        self.rec.end()
        ready = [r for r, m in enumerate(self.members) if m.state == "ready"
                 or (m.state == "missing" and m.owed)]
        if ready:
            self.end.send_some({r: self.members[r].msg for r in ready},
                               self.trainer.params.numpy(), END_S)


def _outcome_fields(rnd: _Round) -> dict:
    """The aggregation fields of a round's record (every update kept under plain averaging)."""
    o, n = rnd.outcome, len(rnd.deliveries)
    if o is None:
        return {"agg_kept": [True] * n, "agg_reasons": ["averaged"] * n,
                "agg_scores": [None] * n, "agg_used_frac": [1.0] * n, "agg_s": rnd.agg_s}
    return {"agg_kept": list(o.kept), "agg_reasons": list(o.reasons), "agg_scores": list(o.scores),
            "agg_used_frac": list(o.used_frac), "agg_f": rnd.agg_f, "agg_s": rnd.agg_s}


def _joined(before: Outcome | None, more: Outcome) -> Outcome:
    """A round's verdicts so far followed by ``more``'s (its vector the latest)."""
    if before is None:
        return more
    return Outcome(more.vector, before.kept + more.kept, before.reasons + more.reasons,
                   before.scores + more.scores, before.used_frac + more.used_frac)


def staleness_summary(records: list[PsIteration]) -> tuple[float | None, int | None]:
    """(mean, max) staleness over every applied gradient of a run (None without any)."""
    values = np.array([s for rec in records for s in rec.staleness], dtype=float)
    return (float(values.mean()), int(values.max())) if values.size else (None, None)
