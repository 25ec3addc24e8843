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
(:func:`harness.running.metrics.bounds_s`). :class:`RingNode` touches no socket: it is told what
arrived and says what to send, so the tests drive N of them through an in-memory ring;
:func:`run_ps` (the ring's clock) and :func:`run_worker` are the host processes (:mod:`harness.hosts.collective`
says what the PS's host does in a ring). A step sends all its pieces to the next worker, then
takes the previous worker's.

A loss-tolerant transport may deliver part of a share; its filler has already put values where
coordinates were lost (:class:`~transports.base.Delivery`). In the reduce phase those values are
added like any others. In the gather phase a lost coordinate leaves this worker's sum of it as it
was (its own share of the sum so far): our interpretation, since without a PS nobody holds the
true value, and it is why ring workers' models may drift apart under loss (the run records how
far, ``models_spread``).
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from harness.hosts.collective import REPORT, Learner, finish_ps, members, worker_summary, start_ps
from harness.hosts.pattern import parse_pattern
from harness.running.runfiles import HostSummary, PsIteration, Recorder, RunFiles, WorkerIteration
from harness.running.spec import RunSpec
from harness.training import models
from topologies.incast import PS_NAME, worker_name
from transports.base import Session
from transports.mesh import Part

PHASES = ("reduce", "gather")
# What the clock's message to the workers says (one float).
STOP, RUN, RUN_THEN_MODEL, MODEL_THEN_STOP = 0.0, 1.0, 2.0, 3.0


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


# ---------------------------------------------------------------------------- the processes
@dataclasses.dataclass(frozen=True)
class _Parts:
    """The job's parts: every piece of every share, then the clock's word, a worker's report and
    worker 0's model."""

    data: list[Part]
    go: int
    done: int
    model: int

    @classmethod
    def of(cls, spec: RunSpec) -> _Parts:
        n, pieces = spec.n_workers, parse_pattern(spec.pattern)["pieces"]
        n_floats = models.n_params(spec.model)
        data = [Part(p.start, p.stop - p.start) for s in shares(n_floats, n)
                for p in pieces_of(s, pieces)]
        if len(data) != n * pieces:
            raise ValueError(f"shares of {n_floats // n} floats cannot be cut into {pieces} pieces.")
        return cls(data, len(data), len(data) + 1, len(data) + 2)

    def all(self, n_floats: int) -> list[Part]:
        whole = (1.0, 1.0)
        return self.data + [Part(0, 1, whole), Part(0, len(REPORT), whole),
                            Part(0, n_floats, whole)]


def _open(spec: RunSpec, rank: int, loopback: bool, session: Session | None):
    from harness.hosts.node import make_transport

    parts = _Parts.of(spec)
    transport = make_transport(spec, session)
    return transport, parts, transport.mesh(rank, members(spec, loopback),
                                            parts.all(models.n_params(spec.model)))


def run_ps(spec: RunSpec, files: RunFiles, loopback: bool,
              session: Session | None = None) -> HostSummary:
    """The PS's host in a ring: starts each iteration, records it, evaluates, decides the end."""
    from harness.hosts.node import _Trainer

    rec = Recorder(files, PS_NAME)
    trainer = _Trainer(spec, rec)
    n, me = spec.n_workers, spec.n_workers
    transport, parts, end = _open(spec, me, loopback, session)
    started = time.monotonic()
    workers = list(range(n))
    with end:
        train_start_time, cpu_before = start_ps(end, trainer, spec)
        t, stopped_by = 0, ""
        while not stopped_by:
            done = t + 1
            due = done % spec.eval_every == 0 or done == spec.iterations
            t0 = time.monotonic()
            end.send(workers, t, parts.go, np.array([RUN_THEN_MODEL if due else RUN], np.float32),
                     spec.timeout_s)
            t1 = time.monotonic()
            reports = [end.recv(r, 2 * t, parts.done, spec.timeout_s).values for r in workers]
            t2 = time.monotonic()
            trainer.train_s += t2 - t0
            _record(rec, t, t0 - started, t1 - t0, t2 - t1, t2, reports)
            capped = spec.max_train_s is not None and trainer.train_s >= spec.max_train_s
            if due:
                trainer.params = _model(end, parts, spec, 2 * t + 1)
            elif capped:   # the accuracy the run ends with: worker 0's model, then everyone stops
                end.send(workers, t + 1, parts.go, np.array([MODEL_THEN_STOP], np.float32),
                         spec.timeout_s)
                trainer.params = _model(end, parts, spec, 2 * t + 1)
            stopped_by = trainer.after(done)
            if stopped_by and (due or not capped):
                end.send(workers, t + 1, parts.go, np.array([STOP], np.float32), spec.timeout_s)
            t = done
        summary = finish_ps(rec, transport, end, trainer, t, started, train_start_time,
                            stopped_by, cpu_before)
    rec.summary(summary)
    return summary


def _model(end, parts: _Parts, spec: RunSpec, msg_id: int):
    import torch

    return torch.from_numpy(end.recv(0, msg_id, parts.model, spec.timeout_s).values.copy())


def _record(rec: Recorder, t: int, t_s: float, go_s: float, wait_s: float, end_mono: float,
            reports: list[np.ndarray]) -> None:
    """The clock's record of iteration ``t``: the workers' reports in the PS's table."""
    got = [dict(zip(REPORT, map(float, r))) for r in reports]
    fracs = [1.0 - g["lost_floats"] / g["recv_floats"] if g["recv_floats"] else 1.0 for g in got]
    rec.iteration(PsIteration(
        iteration=t, t_s=t_s, gather_end_mono=end_mono, broadcast_s=go_s, gather_s=wait_s,
        update_s=0.0, iter_s=go_s + wait_s, recv_frac=fracs, segment_fracs=[[f] for f in fracs],
        param_wire_bytes=[0] * len(got), param_retransmits=[0] * len(got), msg_stats=got,
        ranks=list(range(len(got))), staleness=[0] * len(got)))


def run_worker(spec: RunSpec, rank: int, files: RunFiles, loopback: bool,
               session: Session | None = None) -> HostSummary:
    """One worker of the ring: waits for the clock, all-reduces its gradient, steps, reports."""

    host, n, clock = worker_name(rank), spec.n_workers, spec.n_workers
    rec = Recorder(files, host)
    learner = Learner(spec, rank)
    _, parts, end = _open(spec, rank, loopback, session)
    per_share = len(parts.data) // n
    started, t, link = time.monotonic(), 0, 0   # link: message ids on the ring link so far
    with end:
        end.join(spec.timeout_s)
        while True:
            t0 = time.monotonic()
            word = float(end.recv(clock, t, parts.go, spec.timeout_s).values[0])
            if word in (STOP, MODEL_THEN_STOP):
                if word == MODEL_THEN_STOP and rank == 0:
                    end.send([clock], 2 * t - 1, parts.model, learner.params(), spec.timeout_s)
                break
            grad, loss, compute_s = learner.gradient()
            t1 = time.monotonic()
            node = RingNode(rank, n, grad, per_share)
            sent = wire = retrans = received = 0
            for step in range(2 * (n - 1)):
                st = node.steps[step]
                for k, values in enumerate(node.outgoing(step)):
                    rep = end.send([(rank + 1) % n], link + k, st.send_share * per_share + k,
                                   values, spec.timeout_s)[0]
                    sent, wire, retrans = (sent + rep.payload_bytes, wire + rep.wire_bytes,
                                           retrans + rep.retransmits)
                for k in range(len(node.pieces[st.recv_share])):
                    d = end.recv((rank - 1) % n, link + k, st.recv_share * per_share + k,
                                 spec.timeout_s)
                    received += len(d.values)
                    node.incoming(step, k, d.values, d.mask)
                link += per_share
            learner.step(node.mean())
            t2 = time.monotonic()
            report = [node.lost_floats, received, compute_s, t2 - t1, loss, sent, wire, retrans]
            end.send([clock], 2 * t, parts.done, np.array(report, np.float32), spec.timeout_s)
            if word == RUN_THEN_MODEL and rank == 0:
                end.send([clock], 2 * t + 1, parts.model, learner.params(), spec.timeout_s)
            rec.iteration(WorkerIteration(
                iteration=t, t_s=t0 - started, push_start_mono=t1, pull_s=t1 - t0 - compute_s,
                compute_s=compute_s, push_s=t2 - t1,
                param_frac=1.0 - node.lost_floats / received if received else 1.0,
                train_loss=loss, grad_bytes=sent, wire_bytes=wire, packets=0, retransmits=retrans))
            t += 1
        summary = worker_summary(end, host, rank, t, started)
    rec.summary(summary)
    return summary
