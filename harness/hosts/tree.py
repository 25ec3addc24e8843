"""Hoplite-style broadcast and reduce trees: the ``tree`` pattern's host processes.

Hoplite (SIGCOMM 2021) keeps a directory of which node holds which object, or part of it, and
lets a receiver fetch from whichever holder the directory names; every new receiver becomes a
holder, so a broadcast tree forms as the data spreads, and a node forwards the chunks it has
before it holds the whole object, so the tree is a pipeline. Here the PS is the root and keeps
the directory (:class:`~harness.hosts.directory.Directory`); one iteration ``t``:

1. **Asks.** Every worker asks the PS for a parent as soon as it is ready; the PS names one in
   the order the asks come and tells that parent whom to serve.
2. **Broadcast.** The parameters go down in ``chunks`` parts; each worker forwards every chunk to
   its children as soon as it has it. Once every worker asked, the PS tells each how many
   children it serves (the ``final`` message: the tree of this iteration is complete).
3. **Reduce.** The tree reversed: a worker adds its children's sums to its own gradient chunk by
   chunk, and forwards each summed chunk, with whose gradients it holds, as soon as it is
   complete. The PS divides each chunk by the number of gradients in it and takes its SGD step.

**Failures** (runs that inject a fault; without one every wait lasts the run's timeout, the
classic form). Every wait has the re-forming deadline :data:`REFORM_S`. A worker that did not
ask by then is *absent* from this iteration's tree; a worker that got no chunk from its parent
in time gives the iteration up, and so does its subtree (nobody forwards to it); a parent that
got no sum from a child in time goes on without it. The next iteration's tree forms from the
workers that ask: the tree routes around a dead node, and a stalled one that asks again is told
the iteration to join. Our interpretation where Hoplite re-plans within a transfer: the tree
re-forms at the next iteration, and a failure costs the subtree's gradients of one iteration.
The PS records, per iteration, whose gradients its step held and how much of each arrived, who was
absent and how long it waited for asks, and a membership event when a worker drops out of the sum
(``missing``, or ``cut_off`` when it was lost with an ancestor) or is back in it (``back``), as the
``ps`` pattern's PS does, so a tree's fault columns mean what a PS run's do. The PS's small
messages go out through an :class:`~harness.hosts.collective.Outbox` (one dead worker delays
nobody else's), and a worker receives on one thread only. ``docs/collectives.md`` says more.

Every message of iteration ``t`` has id ``t`` and is told apart by its part
(:mod:`transports.mesh`).
"""

from __future__ import annotations

import dataclasses
import threading
import time

import numpy as np
import torch

from harness.hosts.collective import (Learner, Outbox, Posted, finish_ps, members, quietly,
                                      start_ps, worker_summary)
from harness.hosts.directory import ROOT, Directory
from harness.hosts.faults import parse_fault
from harness.hosts.pattern import parse_pattern
from harness.running.runfiles import (HostSummary, MemberEvent, PsIteration, Recorder, RunFiles,
                                      WorkerIteration)
from harness.running.spec import RunSpec
from harness.training import models
from topologies.incast import PS_NAME, worker_name
from transports.base import Session, TransportError
from transports.mesh import Part, chunks

STOP = -2.0      # the PS's answer when training is over
REFORM_S = 1.0   # with a fault injected: how long any wait lasts before it counts as a failure
SKIP = -10.0     # an answer of SKIP - t: this worker fell behind; its next iteration is t


def _deadline(spec: RunSpec) -> float:
    return REFORM_S if parse_fault(spec.fault).kind != "none" else spec.timeout_s


@dataclasses.dataclass(frozen=True)
class _Parts:
    """The job's parts: the parameters' chunks (whole), the sums' chunks (the transport's
    gradient thresholds), and the small messages of the directory."""

    down: list[Part]
    up: list[Part]
    ask: int
    answer: int
    serve: list[int]       # the k-th child a worker is told to serve
    final: int             # how many children it serves, its height and the tree's depth
    who: list[int]         # per sum chunk: whose gradients it holds (see :class:`_Sum`)

    @classmethod
    def of(cls, spec: RunSpec) -> _Parts:
        pat = parse_pattern(spec.pattern)
        n_floats = models.n_params(spec.model)
        down, up = chunks(n_floats, pat["chunks"], (1.0, 1.0)), chunks(n_floats, pat["chunks"])
        first = 2 * len(down)
        serve = list(range(first + 2, first + 2 + pat["fanout"]))
        final = serve[-1] + 1
        return cls(down, up, first, first + 1, serve, final,
                   list(range(final + 1, final + 1 + len(up))))

    def all(self, n_workers: int) -> list[Part]:
        one, three = Part(0, 1, (1.0, 1.0)), Part(0, 3, (1.0, 1.0))
        return self.down + self.up + [one, one] + [one] * len(self.serve) + [three] + \
            [Part(0, n_workers, (1.0, 1.0))] * len(self.up)

    def sum_keys(self, k: int, t: int, i: int) -> list[tuple[int, int, int]]:
        """The two messages of sum chunk ``i`` from member ``k`` in iteration ``t``."""
        return [(k, t, len(self.down) + i), (k, t, self.who[i])]


def _open(spec: RunSpec, rank: int, loopback: bool, session: Session | None):
    from harness.hosts.node import make_transport

    parts = _Parts.of(spec)
    transport = make_transport(spec, session)
    return transport, parts, transport.mesh(rank, members(spec, loopback), parts.all(spec.n_workers))


def _one(x: float) -> np.ndarray:
    return np.array([x], dtype=np.float32)


# ---------------------------------------------------------------------------- reducing
@dataclasses.dataclass
class _Sum:
    """What a node's reduce gathered, chunk by chunk: the sum, whose gradients each chunk holds,
    what it sent up.

    ``who`` has a row per chunk and an entry per worker: 0 for a worker whose gradient is not in
    that chunk's sum, else the part of its chunk that reached this node (the fractions received on
    the way multiplied, an estimate that takes losses at different levels to fall on different
    floats). Each chunk travels with its row, so a chunk is averaged over exactly the gradients it
    holds, even when a child is given up after some of its chunks went up."""

    total: np.ndarray
    who: np.ndarray
    lost: list[int] = dataclasses.field(default_factory=list)   # children given up
    sent_bytes: int = 0
    wire_bytes: int = 0
    retransmits: int = 0

    def ranks(self) -> list[int]:
        """The workers with any part of their gradient in the sum."""
        return [int(r) for r in np.flatnonzero(self.who.max(axis=0))]

    def fractions(self, parts: _Parts) -> np.ndarray:
        """Per worker, the part of its gradient in the sum."""
        sizes = np.array([p.n_floats for p in parts.up], dtype=np.float64)
        return (self.who * sizes[:, None]).sum(axis=0) / sizes.sum()

    def mean(self, parts: _Parts) -> np.ndarray:
        """The sum divided, chunk by chunk, by the number of gradients in it (0 where none)."""
        out = np.zeros_like(self.total)
        for i, p in enumerate(parts.up):
            count = np.count_nonzero(self.who[i])
            if count:
                p.of(out)[:] = p.of(self.total) / np.float32(count)
        return out


def _reduce(end, parts: _Parts, t: int, kids: list[int], mine: tuple[int, np.ndarray] | None,
            spec: RunSpec, to: int | None, height: int = 1, depth: int = 1) -> _Sum:
    """Add the children's sums to ``mine`` (a worker's rank and gradient) chunk by chunk and
    forward each summed chunk to ``to``, with whose gradients it holds, as soon as every child's
    has come. Every child's messages are taken as they arrive, whichever chunk they are (a slow
    child holds up no other's). A node ``height`` levels above its lowest descendant waits that
    many deadlines, from the start of its reduce, for all its children's chunks: a failure below
    is given up by the node nearest to it first, so the sums above it still arrive in time. A
    child whose chunk has not come by then is given up from that chunk on (its chunks so far
    stay in the sum, with their rows of ``who``); the rest of its messages are abandoned. In a
    tree ``depth`` levels deep a send up waits ``depth + 1`` deadlines: the parent may be waiting
    out a failed child first."""
    wait = _deadline(spec)
    deadline = time.monotonic() + wait * max(1, height)
    wait_up = wait * (max(1, depth) + 1)
    n = parts.up[-1].offset + parts.up[-1].n_floats
    out = _Sum(np.zeros(n, np.float32) if mine is None else mine[1].copy(),
               np.zeros((len(parts.up), spec.n_workers), np.float32))
    if mine is not None:
        out.who[:, mine[0]] = 1.0
    pending = {key for k in kids for i in range(len(parts.up)) for key in parts.sum_keys(k, t, i)}
    have: dict[tuple[int, int, int], object] = {}
    for i, p in enumerate(parts.up):
        live = [k for k in kids if k not in out.lost]
        need = [key for k in live for key in parts.sum_keys(k, t, i)]
        while any(key not in have for key in need):
            left = deadline - time.monotonic()
            got = end.recv_some(sorted(pending), 1, left) if left > 0 else {}
            if not got and left <= 0:
                late = sorted({key[0] for key in need if key not in have})
                out.lost += late
                drop = [key for k in late for j in range(i, len(parts.up))
                        for key in parts.sum_keys(k, t, j)]
                end.abandon([key for key in drop if key in pending])
                pending.difference_update(drop)
                break
            have.update(got)
            pending.difference_update(got)
        for k in [k for k in live if k not in out.lost]:
            d, w = (have.pop(key) for key in parts.sum_keys(k, t, i))
            p.of(out.total)[:] += d.values
            out.who[i] += np.where(w.values > 0,
                                   np.maximum(w.values * d.received_frac, 1e-6), 0.0)
        if to is None:
            continue
        try:
            rep = end.send([to], t, len(parts.down) + i, p.of(out.total), wait_up)[0]
            end.send([to], t, parts.who[i], out.who[i], wait_up)
        except TransportError:
            to = None   # the parent is gone: this subtree's sum is lost with it
            continue
        out.sent_bytes += rep.payload_bytes
        out.wire_bytes += rep.wire_bytes
        out.retransmits += rep.retransmits
    return out


# ---------------------------------------------------------------------------- the PS
def run_ps(spec: RunSpec, files: RunFiles, loopback: bool,
           session: Session | None = None) -> HostSummary:
    """The PS in a tree: the root that holds the parameters, and the directory."""
    from harness.hosts.node import _Trainer

    rec = Recorder(files, PS_NAME)
    trainer = _Trainer(spec, rec)
    pat = parse_pattern(spec.pattern)
    n, root = spec.n_workers, spec.n_workers
    transport, parts, end = _open(spec, root, loopback, session)
    started = time.monotonic()
    expect = {w: 0 for w in range(n)}   # the iteration each worker's next ask is for
    counted = set(range(n))             # the workers whose gradients the last step held
    outbox = Outbox(end, _deadline(spec))
    with end:
        train_start_time, cpu_before = start_ps(end, trainer, spec)
        t, stopped_by = 0, ""
        while not stopped_by:
            t0 = time.monotonic()
            directory = Directory(pat["fanout"], pat["root"])
            params = trainer.params.numpy()
            feeds, ask_wait_s = _form(end, outbox, parts, t, directory, params, spec, expect)
            formed = time.monotonic()
            asked = directory.live()
            for w in asked:
                final = np.array([len(directory.children(w)), directory.height(w),
                                  directory.depth()], np.float32)
                outbox.post(w, t, parts.final, final)
            for f in feeds:
                f.join()
            t1 = time.monotonic()
            kids = directory.children(ROOT)
            got = _reduce(end, parts, t, kids, None, spec, None, directory.height(ROOT))
            t2 = time.monotonic()
            ranks, fracs = got.ranks(), got.fractions(parts)
            if ranks:
                trainer.params.add_(torch.from_numpy(got.mean(parts)), alpha=-spec.lr)
            t3 = time.monotonic()
            trainer.train_s += t3 - t0
            counted = _membership(rec, counted, ranks, directory, t, started, formed, t2)
            rec.iteration(PsIteration(
                iteration=t, t_s=t0 - started, gather_end_mono=t2, broadcast_s=t1 - t0,
                gather_s=t2 - t1, update_s=t3 - t2, iter_s=t3 - t0,
                recv_frac=[float(fracs[r]) for r in ranks],
                segment_fracs=[[float(x) for x in got.who[:, r]] for r in ranks],
                param_wire_bytes=[],
                param_retransmits=[], msg_stats=[{
                    "tree_depth": float(directory.depth()), "gradients": float(len(ranks)),
                    "ask_wait_s": ask_wait_s, "subtrees_lost": float(len(got.lost))}],
                ranks=ranks, staleness=[0] * len(ranks),
                missing=sorted(set(range(n)) - set(asked))))
            t += 1
            stopped_by = trainer.after(t)
        _stop_all(end, outbox, parts, t, spec, expect, directory.depth())
        outbox.close()
        summary = finish_ps(rec, transport, end, trainer, t, started, train_start_time,
                            stopped_by, cpu_before)
    rec.summary(summary)
    return summary


def _membership(rec: Recorder, counted: set[int], ranks: list[int], directory: Directory, t: int,
                started: float, formed: float, gathered: float) -> set[int]:
    """Record who dropped out of the sum and who is back in it; the workers the step held. A
    worker that did not ask is ``missing`` when the asks end; one whose sum did not reach a
    parent that is in the step is ``missing`` when the reduce ends; one whose parent is not in
    the step either is ``cut_off``: lost with an ancestor's sum, the price of a tree and no
    failure of its own."""
    now, asked = set(ranks), set(directory.live())
    for w in sorted(counted - now):
        parent = directory.parent(w)
        what = "missing" if w not in asked or parent == ROOT or parent in now else "cut_off"
        mono = formed if w not in asked else gathered
        rec.member(MemberEvent(what, w, mono, mono - started, t, t))
    for w in sorted(now - counted):
        rec.member(MemberEvent("back", w, gathered, gathered - started, t, t))
    return now


def _asks(end, parts: _Parts, expect: dict[int, int], wait: float) -> list[int]:
    """The workers whose next ask arrived within ``wait``."""
    got = end.recv_some([(w, i, parts.ask) for w, i in sorted(expect.items())], 1, wait)
    return [w for w, _, _ in got]


def _form(end, outbox: Outbox, parts: _Parts, t: int, directory: Directory, params: np.ndarray,
          spec: RunSpec, expect: dict[int, int]) -> tuple[list[threading.Thread], float]:
    """Answer the workers' asks in the order they come: a parent for this iteration's, the
    iteration to join for a late one. The PS feeds its own children (a thread each) and tells a
    worker parent whom it serves. Returns the feeding threads and how long the asks took after
    the first (with a fault injected, asks stop being waited for :data:`REFORM_S` after it)."""
    root, wait = spec.n_workers, _deadline(spec)
    feeds, served = [], {}
    first = None
    while any(i == t for i in expect.values()):
        left = wait if first is None else first + wait - time.monotonic()
        if first is not None and left <= 0:
            break
        for w in _asks(end, parts, expect, max(left, 1e-3) if first else spec.timeout_s):
            if expect[w] < t:   # it fell behind (stalled): join at the next iteration
                outbox.post(w, expect[w], parts.answer, _one(SKIP - (t + 1)))
                expect[w] = t + 1
                continue
            first = first or time.monotonic()
            expect[w] = t + 1
            parent = directory.ask(w)
            told = outbox.post(w, t, parts.answer, _one(root if parent == ROOT else parent))
            if parent == ROOT:
                feed = threading.Thread(target=_feed, args=(end, parts, t, w, params, told, wait),
                                        daemon=True)
                feed.start()
                feeds.append(feed)
            else:
                k = served.get(parent, 0)
                served[parent] = k + 1
                outbox.post(parent, t, parts.serve[k], _one(w))
    return feeds, (time.monotonic() - first) if first else 0.0


def _feed(end, parts: _Parts, t: int, child: int, params: np.ndarray, told: Posted,
          wait: float) -> None:
    """Send the parameters' chunks to ``child`` once it has its answer (a chunk that came first
    could take the room in the child's end the answer needs), and give up at the first that
    does not go through in time: the child is gone."""
    told.done.wait()
    if not told.ok:
        return
    for i in range(len(parts.down)):
        if not quietly(lambda i=i: end.send([child], t, i, parts.down[i].of(params), wait)):
            return


def _stop_all(end, outbox: Outbox, parts: _Parts, t: int, spec: RunSpec, expect: dict[int, int],
              depth: int) -> None:
    """Answer every live worker's next ask with STOP. With a fault, a worker may still be
    waiting out a failure for up to ``depth + 1`` deadlines (:func:`_reduce`), so asks are taken
    for ``depth + 2``; one that does not ask by then is gone or stalled, and stops once it finds
    the PS's summary."""
    wait = _deadline(spec)
    pending = dict(expect)
    deadline = time.monotonic() + (wait * (depth + 2) if wait < spec.timeout_s
                                   else spec.timeout_s)
    while pending and time.monotonic() < deadline:
        for w in _asks(end, parts, pending, max(deadline - time.monotonic(), 1e-3)):
            outbox.post(w, pending[w], parts.answer, _one(STOP))
            del pending[w]


# ---------------------------------------------------------------------------- a worker
class _Held:
    """The chunks a worker holds of this iteration's parameters, for the threads that forward
    them to its children as they arrive (None once the broadcast failed)."""

    def __init__(self, k: int) -> None:
        self.chunks: list[np.ndarray | None] = [None] * k
        self.failed = False
        self.cond = threading.Condition()

    def put(self, i: int, values: np.ndarray | None) -> None:
        with self.cond:
            if values is None:
                self.failed = True
            else:
                self.chunks[i] = values
            self.cond.notify_all()

    def get(self, i: int) -> np.ndarray | None:
        with self.cond:
            while self.chunks[i] is None and not self.failed:
                self.cond.wait()
            return self.chunks[i]


class _Broadcast:
    """One iteration's broadcast at a worker: the parameters' chunks from its parent, and from the
    PS whom it serves and the tree's shape. Everything is received on the worker's main thread (an
    end's receives and abandons are not made from two threads at once); each child is served by a
    thread of its own that forwards every chunk as soon as it is held."""

    def __init__(self, end, parts: _Parts, t: int, parent: int, spec: RunSpec) -> None:
        self.end, self.parts, self.t, self.parent = end, parts, t, parent
        self.root, self.wait, self.spec = spec.n_workers, _deadline(spec), spec
        self.held = _Held(len(parts.down))
        self.kids: list[int] = []
        self.final: tuple[int, int, int] | None = None   # children, height, the tree's depth
        self.senders: list[threading.Thread] = []

    def _told(self) -> list[tuple[int, int, int]]:
        """The PS's messages about this node still to come."""
        p, t, root = self.parts, self.t, self.root
        more = p.serve[len(self.kids):] if self.final is None else \
            p.serve[len(self.kids):self.final[0]]
        return [(root, t, k) for k in more] + ([(root, t, p.final)] if self.final is None else [])

    def _take(self, got: dict) -> None:
        """Learn from the PS's messages in ``got``: a child to serve (its forwarding starts at
        once), the final shape."""
        told = set(self._told())
        for key in sorted(k for k in got if k in told):
            d = got[key]
            if key[2] == self.parts.final:
                self.final = tuple(int(x) for x in d.values)
                continue
            child = int(d.values[0])
            self.kids.append(child)
            s = threading.Thread(target=_forward, args=(self.end, self.parts, self.t, child,
                                                        self.held, self.wait), daemon=True)
            s.start()
            self.senders.append(s)

    def pull(self) -> np.ndarray | None:
        """The parameters, each chunk within a deadline of the last (None: the parent failed, and
        this iteration is given up)."""
        params = np.empty(self.parts.down[-1].offset + self.parts.down[-1].n_floats, np.float32)
        for i, p in enumerate(self.parts.down):
            key, deadline = (self.parent, self.t, i), time.monotonic() + self.wait
            got: dict = {}
            while key not in got:
                left = deadline - time.monotonic()
                if left <= 0:
                    self._give_up(i)
                    return None
                got = self.end.recv_some([key] + self._told(), 1, left)
                self._take(got)
            p.of(params)[:] = got[key].values
            self.held.put(i, got[key].values)
        return params

    def _give_up(self, i: int) -> None:
        self.held.put(i, None)
        self.end.abandon([(self.parent, self.t, j) for j in range(i, len(self.parts.down))]
                         + self._told())

    def shape(self) -> tuple[list[int], int, int] | None:
        """Once the PS told every child: the children, this node's height and the tree's depth
        (None if it did not within the run's timeout)."""
        limit = time.monotonic() + self.spec.timeout_s
        while self._told() and time.monotonic() < limit:
            self._take(self.end.recv_some(self._told(), 1, limit - time.monotonic()))
        if self._told():
            self.end.abandon(self._told())
            return None
        return self.kids, self.final[1], self.final[2]

    def finish(self) -> None:
        """Wait for the forwarding to end."""
        for s in self.senders:
            s.join()


def _forward(end, parts: _Parts, t: int, child: int, held: _Held, wait: float) -> None:
    for i in range(len(parts.down)):
        values = held.get(i)
        if values is None or not quietly(lambda: end.send([child], t, i, values, wait)):
            return


def _ask(end, parts: _Parts, t: int, files: RunFiles, spec: RunSpec) -> float | None:
    """Ask the PS for iteration ``t``'s parent and wait for the answer in slices, looking for the
    PS's end in between (None: it ended while this worker was away: stalled, or cut off)."""
    root = spec.n_workers
    deadline = time.monotonic() + spec.timeout_s
    try:
        end.send([root], t, parts.ask, _one(1.0), spec.timeout_s)
    except TransportError:
        if files.ps_finished():
            return None
        raise
    while True:
        try:
            return float(end.recv(root, t, parts.answer, 1.0).values[0])
        except TransportError:
            if files.ps_finished():
                return None
            if time.monotonic() >= deadline:
                raise


def run_worker(spec: RunSpec, rank: int, files: RunFiles, loopback: bool,
               session: Session | None = None) -> HostSummary:
    """One worker of the tree: asks for a parent, takes and forwards the parameters' chunks,
    computes its gradient, adds its children's sums to it and forwards the sum."""

    host = worker_name(rank)
    rec = Recorder(files, host)
    learner = Learner(spec, rank)
    _, parts, end = _open(spec, rank, loopback, session)
    started, t, done = time.monotonic(), 0, 0
    with end:
        end.join(spec.timeout_s)
        while True:
            t0 = time.monotonic()
            answer = _ask(end, parts, t, files, spec)
            if answer is None or answer == STOP:
                break
            if answer <= SKIP:
                t = int(SKIP - answer)
                continue
            parent = int(answer)
            cast = _Broadcast(end, parts, t, parent, spec)
            params = cast.pull()
            t1 = time.monotonic()
            if params is not None:
                models.load_flat(learner.model, torch.from_numpy(params))
                grad, loss, compute_s = learner.gradient()
                shape = cast.shape()
                t2 = time.monotonic()
                if shape is not None:
                    kids, levels, depth = shape
                    got = _reduce(end, parts, t, kids, (rank, grad), spec, parent, levels, depth)
                    rec.iteration(WorkerIteration(
                        iteration=t, t_s=t0 - started, push_start_mono=t2, pull_s=t1 - t0,
                        compute_s=compute_s, push_s=time.monotonic() - t2, param_frac=1.0,
                        train_loss=loss, grad_bytes=got.sent_bytes, wire_bytes=got.wire_bytes,
                        packets=0, retransmits=got.retransmits))
                    done += 1
            cast.finish()
            t += 1
        summary = worker_summary(end, host, rank, done, started)
    rec.summary(summary)
    return summary
