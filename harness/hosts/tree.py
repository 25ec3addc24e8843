"""Hoplite-style trees: who serves whom, decided while the transfer runs (the ``tree`` pattern).

Hoplite (SIGCOMM 2021) keeps a directory of which node holds which object, or which part of it,
and lets a receiver fetch from whichever holder the directory names; because every new receiver
becomes a holder, a broadcast tree forms as the data spreads, and because a node forwards the
chunks it has before it holds the whole object, the tree is a pipeline. Here the PS keeps the
directory (:class:`Directory`), and one iteration is:

1. **Broadcast.** Every worker asks the directory for a parent as soon as it is ready for the next
   parameters (its last push is out). The directory names the live node nearest the root that
   still has a free slot (``root_fanout`` at the PS, ``fanout`` at a worker; ties: the one that
   asked first), and the asker becomes a holder in turn. A fast worker so ends up near the root
   and a slow one at a leaf, where it delays nobody. The parameters travel in ``chunks`` messages,
   each forwarded to a node's children as soon as it arrived.
2. **Reduce.** The tree of the broadcast is used backwards: a node adds its children's partial
   sums, chunk by chunk, to its own gradient and forwards the sum with the count of gradients in
   it; the PS divides by the count. The PS's link so carries ``root_fanout`` messages each way
   instead of N.
3. **A node that fails.** A receiver that waits longer than the re-forming deadline for a chunk
   reports its parent; the directory marks the parent dead, names a new parent among the live
   holders and the receiver fetches again from the chunk it lacked. The dead node's gradient and
   the sums it held for its subtree are lost for that iteration (the run records how many
   gradients each step had, and how long the re-forming took); its children re-attach the same
   way.

Where Hoplite's paper is silent, these are our choices, each a parameter of the pattern
(docs/collectives.md): the directory is the PS (not the SDN controller), and its messages travel
over the same mesh as the data; the tree is fixed for an iteration once every worker asked
(Hoplite may re-plan per object part); the reduce tree is the broadcast tree reversed (Hoplite's
reduce orders by arrival), and a node adds its children's sums once the PS said how many children
it has (the ``final`` message: a barrier at the end of the broadcast). :class:`Directory` opens no
socket and the tests drive it directly; :func:`run_ps` and :func:`run_worker` are the processes.
Every message of iteration ``t`` has id ``t`` and is told apart by its part
(:mod:`transports.mesh`).
"""

from __future__ import annotations

import dataclasses
import threading
import time

import numpy as np
import torch

from harness.hosts.collective import Learner, members
from harness.hosts.pattern import parse_pattern
from harness.running.runfiles import HostSummary, PsIteration, Recorder, RunFiles, WorkerIteration
from harness.running.spec import RunSpec
from harness.training import models
from topologies.incast import PS_NAME, worker_name
from transports.base import Session
from transports.mesh import Part, chunks

ROOT = -1   # the PS's place in the tree; workers are 0 .. N-1


class TreeError(RuntimeError):
    """The directory cannot name a parent (every holder is dead or full)."""


@dataclasses.dataclass
class _Node:
    depth: int
    asked: int                      # the order in which the node asked (the root: -1)
    parent: int | None
    children: list[int] = dataclasses.field(default_factory=list)
    dead: bool = False


class Directory:
    """One iteration's tree: who holds the object, who serves whom, who failed."""

    def __init__(self, fanout: int = 2, root_fanout: int = 1) -> None:
        if fanout < 1 or root_fanout < 1:
            raise ValueError(f"fan-outs must be at least 1, not {fanout} and {root_fanout}.")
        self.fanout, self.root_fanout = fanout, root_fanout
        self.nodes: dict[int, _Node] = {ROOT: _Node(0, -1, None)}
        self.reformed = 0   # receivers given a new parent after a failure

    def _slots(self, node: int) -> int:
        return self.root_fanout if node == ROOT else self.fanout

    def _best_holder(self, exclude: set[int]) -> int:
        free = [(n.depth, n.asked, k) for k, n in self.nodes.items()
                if not n.dead and k not in exclude and len(n.children) < self._slots(k)]
        if not free:
            raise TreeError("no live holder has a free slot: the tree cannot grow.")
        return min(free)[2]

    def _subtree(self, node: int) -> set[int]:
        out, todo = set(), [node]
        while todo:
            k = todo.pop()
            out.add(k)
            todo += self.nodes[k].children
        return out

    def ask(self, worker: int) -> int:
        """``worker`` is ready: the node it fetches from (the PS is :data:`ROOT`)."""
        if worker in self.nodes:
            raise ValueError(f"worker {worker} asked twice in one iteration.")
        parent = self._best_holder(exclude=set())
        self._attach(worker, parent, asked=len(self.nodes) - 1)
        return parent

    def _attach(self, worker: int, parent: int, asked: int) -> None:
        p = self.nodes[parent]
        p.children.append(worker)
        node = self.nodes.get(worker)
        if node is None:
            self.nodes[worker] = _Node(p.depth + 1, asked, parent)
        else:
            node.parent = parent
            self._deepen(worker, p.depth + 1)

    def _deepen(self, node: int, depth: int) -> None:
        self.nodes[node].depth = depth
        for child in self.nodes[node].children:
            self._deepen(child, depth + 1)

    def failed(self, worker: int, parent: int) -> int:
        """``worker`` got nothing from ``parent`` in time: mark ``parent`` dead and return
        ``worker``'s new parent (a live holder outside ``worker``'s own subtree)."""
        if parent == ROOT:
            raise TreeError("the PS itself stopped serving; the run cannot go on without it.")
        me = self.nodes[worker]
        me.dead = False   # it is talking: a child that blamed it while it waited was wrong
        if me.parent != parent:
            return me.parent   # already moved (reported twice)
        dead = self.nodes[parent]
        if not dead.dead:   # its own parent's slot is free again
            dead.dead = True
            self.nodes[dead.parent].children.remove(parent)
        if worker in dead.children:   # not when it already left a node blamed by mistake
            dead.children.remove(worker)
        new = self._best_holder(exclude=self._subtree(worker))
        self._attach(worker, new, me.asked)
        self.reformed += 1
        return new

    def parent(self, worker: int) -> int | None:
        """Whom ``worker`` fetches from now (None: it has not asked)."""
        node = self.nodes.get(worker)
        return node.parent if node else None

    def children(self, node: int) -> list[int]:
        """Whom ``node`` serves now, in the order they attached."""
        return list(self.nodes[node].children) if node in self.nodes else []

    def live(self) -> list[int]:
        """Workers in the tree that are not known dead, in the order they asked."""
        return [k for k, n in sorted(self.nodes.items(), key=lambda kv: kv[1].asked)
                if k != ROOT and not n.dead]

    def depth(self) -> int:
        """The deepest live worker's distance from the PS (the pipeline's length in hops)."""
        return max((n.depth for k, n in self.nodes.items() if k != ROOT and not n.dead),
                   default=0)


# ---------------------------------------------------------------------------- the processes
STOP = -2.0   # the directory's answer when training is over


@dataclasses.dataclass(frozen=True)
class _Parts:
    """The job's parts: the parameters' chunks (whole), the sums' chunks (the transport's
    gradient thresholds), and the small messages of the directory."""

    down: list[Part]
    up: list[Part]
    ask: int
    answer: int
    serve: list[int]       # the k-th child a worker is told to serve
    final: int             # how many children it serves, once every worker asked
    count: int             # the gradients a sum holds

    @classmethod
    def of(cls, spec: RunSpec) -> _Parts:
        pat = parse_pattern(spec.pattern)
        n_floats = models.n_params(spec.model)
        down, up = chunks(n_floats, pat["chunks"], (1.0, 1.0)), chunks(n_floats, pat["chunks"])
        first = 2 * len(down)
        serve = list(range(first + 2, first + 2 + pat["fanout"]))
        return cls(down, up, first, first + 1, serve, serve[-1] + 1, serve[-1] + 2)

    def all(self) -> list[Part]:
        one = Part(0, 1, (1.0, 1.0))
        return self.down + self.up + [one] * (4 + len(self.serve))


def _open(spec: RunSpec, rank: int, loopback: bool, session: Session | None):
    from harness.hosts.node import make_transport

    parts = _Parts.of(spec)
    transport = make_transport(spec, session)
    return transport, parts, transport.mesh(rank, members(spec, loopback), parts.all())


def _one(x: float) -> np.ndarray:
    return np.array([x], dtype=np.float32)


def _reduce(end, parts: _Parts, t: int, kids: list[int], mine: np.ndarray | None, spec: RunSpec,
            to: int | None) -> tuple[np.ndarray, float, list[float], dict]:
    """Add the children's sums to ``mine`` chunk by chunk, forwarding each chunk to ``to`` as it
    is complete; then the count. Returns (sum, count, each child's received fraction, what was
    sent)."""
    total = np.zeros(parts.up[-1].offset + parts.up[-1].n_floats, np.float32) if mine is None \
        else mine.copy()
    got = {k: [] for k in kids}
    sent = {"bytes": 0, "wire": 0, "retransmits": 0}
    for i, p in enumerate(parts.up):
        for k in kids:
            d = end.recv(k, t, len(parts.down) + i, spec.timeout_s)
            p.of(total)[:] += d.values
            got[k].append(d.received_frac * p.n_floats)
        if to is not None:
            rep = end.send([to], t, len(parts.down) + i, p.of(total), spec.timeout_s)[0]
            sent["bytes"] += rep.payload_bytes
            sent["wire"] += rep.wire_bytes
            sent["retransmits"] += rep.retransmits
    count = (0.0 if mine is None else 1.0) + sum(
        float(end.recv(k, t, parts.count, spec.timeout_s).values[0]) for k in kids)
    if to is not None:
        end.send([to], t, parts.count, _one(count), spec.timeout_s)
    n = len(total)
    return total, count, [sum(got[k]) / n for k in kids], sent


def run_ps(spec: RunSpec, files: RunFiles, loopback: bool,
           session: Session | None = None) -> HostSummary:
    """The PS in a tree: the root that holds the parameters, and the directory."""
    from harness.hosts.node import _Trainer, busy_frac, cpu_s, machine_cpu

    rec = Recorder(files, PS_NAME)
    trainer = _Trainer(spec, rec)
    pat = parse_pattern(spec.pattern)
    n, root = spec.n_workers, spec.n_workers
    transport, parts, end = _open(spec, root, loopback, session)
    started = time.monotonic()
    with end:
        end.join(spec.timeout_s)
        trainer.evaluate(0)
        train_start_time, cpu_before = time.time(), machine_cpu()
        t, stopped_by = 0, ""
        while True:
            t0 = time.monotonic()
            directory = Directory(pat["fanout"], pat["root"])
            if stopped_by:
                _answer_all(end, parts, t, n, spec, _one(STOP))
                break
            params = trainer.params.numpy()
            feeds = _form(end, parts, t, directory, params, spec)
            for w in range(n):
                end.send([w], t, parts.final, _one(len(directory.children(w))), spec.timeout_s)
            for f in feeds:
                f.join()
            t1 = time.monotonic()
            kids = directory.children(ROOT)
            total, count, fracs, _ = _reduce(end, parts, t, kids, None, spec, None)
            t2 = time.monotonic()
            trainer.params.add_(torch.from_numpy(total / np.float32(count)), alpha=-spec.lr)
            t3 = time.monotonic()
            trainer.train_s += t3 - t0
            rec.iteration(PsIteration(
                iteration=t, t_s=t0 - started, gather_end_mono=t2, broadcast_s=t1 - t0,
                gather_s=t2 - t1, update_s=t3 - t2, iter_s=t3 - t0, recv_frac=fracs,
                segment_fracs=[[f] for f in fracs], param_wire_bytes=[], param_retransmits=[],
                msg_stats=[{"tree_depth": float(directory.depth()), "gradients": count}],
                ranks=kids, staleness=[0] * len(kids)))
            t += 1
            stopped_by = trainer.after(t)
        train_end_time = time.time()
        if stopped_by != "iterations":
            rec.stop(stopped_by)
        summary = HostSummary(
            host=PS_NAME, role="ps", iterations=t, elapsed_s=time.monotonic() - started,
            cpu_s=cpu_s(), transport_stats=end.stats(), train_s=trainer.train_s,
            train_start_time=train_start_time, train_end_time=train_end_time,
            stopped_by=stopped_by, cpu_busy_frac=busy_frac(cpu_before, machine_cpu()),
            transport=transport.slug, transport_options=transport.options(),
            session_id=transport.session.session_id, rejections=end.rejections())
    rec.summary(summary)
    return summary


def _answer_all(end, parts: _Parts, t: int, n: int, spec: RunSpec, word: np.ndarray) -> None:
    """Take every worker's ask of iteration ``t`` and answer each with ``word``."""
    waiting = set(range(n))
    while waiting:
        got = end.recv_some([(w, t, parts.ask) for w in sorted(waiting)], 1, spec.timeout_s)
        for w, _, _ in got:
            end.send([w], t, parts.answer, word, spec.timeout_s)
            waiting.discard(w)


def _form(end, parts: _Parts, t: int, directory: Directory, params: np.ndarray,
          spec: RunSpec) -> list[threading.Thread]:
    """Answer every worker's ask in the order they come: its parent; the PS feeds its own
    children (a thread each) and tells a worker parent whom it serves."""
    n, root = spec.n_workers, spec.n_workers
    feeds, served = [], {}
    waiting = set(range(n))
    while waiting:
        got = end.recv_some([(w, t, parts.ask) for w in sorted(waiting)], 1, spec.timeout_s)
        for w, _, _ in got:
            waiting.discard(w)
            parent = directory.ask(w)
            end.send([w], t, parts.answer, _one(root if parent == ROOT else parent),
                     spec.timeout_s)
            if parent == ROOT:
                feed = threading.Thread(target=_feed, args=(end, parts, t, w, params, spec),
                                        daemon=True)
                feed.start()
                feeds.append(feed)
            else:
                k = served.get(parent, 0)
                served[parent] = k + 1
                end.send([parent], t, parts.serve[k], _one(w), spec.timeout_s)
    return feeds


def _feed(end, parts: _Parts, t: int, child: int, params: np.ndarray, spec: RunSpec) -> None:
    for i, p in enumerate(parts.down):
        end.send([child], t, i, p.of(params), spec.timeout_s)


class _Held:
    """The chunks a worker holds of this iteration's parameters, for the threads that forward
    them to its children as they arrive."""

    def __init__(self, k: int) -> None:
        self.chunks: list[np.ndarray | None] = [None] * k
        self.cond = threading.Condition()

    def put(self, i: int, values: np.ndarray) -> None:
        with self.cond:
            self.chunks[i] = values
            self.cond.notify_all()

    def get(self, i: int) -> np.ndarray:
        with self.cond:
            while self.chunks[i] is None:
                self.cond.wait()
            return self.chunks[i]


def _serve(end, parts: _Parts, t: int, held: _Held, spec: RunSpec, kids: list[int]) -> None:
    """Learn whom to serve from the directory and forward every chunk to each child (a thread
    per child); ``kids`` gets the children, complete once this returns."""
    root = spec.n_workers
    final, senders = None, []
    while final is None or len(kids) < final:
        want = [] if len(kids) >= len(parts.serve) else [(root, t, parts.serve[len(kids)])]
        if final is None:
            want.append((root, t, parts.final))
        got = end.recv_some(want, 1, spec.timeout_s)
        if (root, t, parts.final) in got:
            final = int(got[(root, t, parts.final)].values[0])
        for key, d in got.items():
            if key[2] != parts.final:
                child = int(d.values[0])
                kids.append(child)
                s = threading.Thread(target=lambda c=child: [
                    end.send([c], t, i, held.get(i), spec.timeout_s)
                    for i in range(len(parts.down))], daemon=True)
                s.start()
                senders.append(s)
    for s in senders:
        s.join()


def run_worker(spec: RunSpec, rank: int, files: RunFiles, loopback: bool,
               session: Session | None = None) -> HostSummary:
    """One worker of the tree: asks for a parent, takes and forwards the parameters' chunks,
    computes its gradient, adds its children's sums to it and forwards the sum."""
    from harness.hosts.node import cpu_s

    host, root = worker_name(rank), spec.n_workers
    rec = Recorder(files, host)
    learner = Learner(spec, rank)
    _, parts, end = _open(spec, rank, loopback, session)
    started, t = time.monotonic(), 0
    with end:
        end.join(spec.timeout_s)
        while True:
            t0 = time.monotonic()
            end.send([root], t, parts.ask, _one(1.0), spec.timeout_s)
            parent = float(end.recv(root, t, parts.answer, spec.timeout_s).values[0])
            if parent == STOP:
                break
            held, kids = _Held(len(parts.down)), []
            server = threading.Thread(target=_serve, args=(end, parts, t, held, spec, kids),
                                      daemon=True)
            server.start()
            params = np.empty(parts.down[-1].offset + parts.down[-1].n_floats, np.float32)
            for i, p in enumerate(parts.down):
                values = end.recv(int(parent), t, i, spec.timeout_s).values
                p.of(params)[:] = values
                held.put(i, values)
            t1 = time.monotonic()
            models.load_flat(learner.model, torch.from_numpy(params))
            grad, loss, compute_s = learner.gradient()
            server.join()
            t2 = time.monotonic()
            _, _, _, sent = _reduce(end, parts, t, kids, grad, spec, int(parent))
            t3 = time.monotonic()
            rec.iteration(WorkerIteration(
                iteration=t, t_s=t0 - started, push_start_mono=t2, pull_s=t1 - t0,
                compute_s=compute_s, push_s=t3 - t2, param_frac=1.0, train_loss=loss,
                grad_bytes=sent["bytes"], wire_bytes=sent["wire"], packets=0,
                retransmits=sent["retransmits"]))
            t += 1
        summary = HostSummary(host=host, role="worker", rank=rank, iterations=t,
                              elapsed_s=time.monotonic() - started, cpu_s=cpu_s(),
                              transport_stats=end.stats(), rejections=end.rejections())
    rec.summary(summary)
    return summary
