"""What the collective patterns' host processes share (``tree``, ``ring``;
:mod:`harness.hosts.pattern`): the job's members, a worker's local training, and the PS's outbox
(each worker's messages sent in order by a thread of its own).

Every host of a collective run is a *member* of one mesh job (:mod:`transports.mesh`): the
workers are members ``0 .. N-1`` in rank order and the PS's host is member ``N``. In a tree the
PS is the root and the directory; in a ring it carries no gradient and is the ring's clock and
evaluator: it starts each iteration with a 4-byte message to every worker, takes a short report
from each when the iteration is done, and gets worker 0's model when it evaluates (our
interpretation: the run's records and its stopping rule stay the PS's, as in the ``ps`` pattern).
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time

import numpy as np
import torch

from harness.running.runfiles import HostSummary
from harness.running.spec import RunSpec
from harness.training import datasets, models
from topologies.incast import PS_IP, PS_NAME, worker_ip
from transports.base import Addr, TransportError

# A worker's report at the end of an iteration (the ``done`` part), in this order.
REPORT = ("lost_floats", "recv_floats", "compute_s", "exchange_s", "train_loss", "sent_bytes",
          "wire_bytes", "retransmits")


def members(spec: RunSpec, loopback: bool) -> list[Addr]:
    """Every member's address: the workers by rank, then the PS's host (member ``N``)."""
    if loopback:
        return [("127.0.0.1", spec.port + 1 + r) for r in range(spec.n_workers)] + \
            [("127.0.0.1", spec.port)]
    return [(worker_ip(r), spec.port) for r in range(spec.n_workers)] + [(PS_IP, spec.port)]


class Learner:
    """One worker's model and its shard of the training set: gradients out, steps in."""

    def __init__(self, spec: RunSpec, rank: int) -> None:
        self.spec = spec
        self.model = models.build(spec.model, spec.seed)   # every member starts from the same
        self.x, self.y = datasets.load(spec.dataset, "train")
        mine = datasets.shard(len(self.y), rank, spec.n_workers, spec.seed)
        self.batches = datasets.Batches(mine, np.random.default_rng(spec.seed * 1000 + rank + 1))

    def gradient(self) -> tuple[np.ndarray, float, float]:
        """(this worker's gradient on its next batch, the batch's loss, the compute seconds)."""
        t0 = time.monotonic()
        losses = models.sgd_steps(self.model, self.x, self.y, self.batches,
                                  self.spec.batch_size, 1, self.spec.lr, apply=False)
        return models.flat_grads(self.model).numpy().copy(), float(losses[-1]), \
            time.monotonic() - t0

    def step(self, mean: np.ndarray) -> None:
        """Take one SGD step of the run's ``lr`` along ``mean``."""
        params = models.flat_params(self.model)
        params.add_(torch.from_numpy(np.asarray(mean, dtype=np.float32)), alpha=-self.spec.lr)
        models.load_flat(self.model, params)

    def params(self) -> np.ndarray:
        """The model's parameters, flat."""
        return models.flat_params(self.model).numpy().copy()


def start_ps(end, trainer, spec: RunSpec) -> tuple[float, tuple[int, int]]:
    """At the PS's start of a collective run: every member joined, the first evaluation; the
    wall clock and the machine's CPU counters training starts at."""
    from harness.hosts.node import machine_cpu

    end.join(spec.timeout_s)
    trainer.evaluate(0)
    return time.time(), machine_cpu()


def finish_ps(rec, transport, end, trainer, t: int, started: float, train_start_time: float,
              stopped_by: str, cpu_before) -> HostSummary:
    """At the PS's end of a collective run: the stop marker if training ended early, and the
    summary (the ``ps`` pattern's fields), for the caller to write once its end is closed."""
    from harness.hosts.node import busy_frac, cpu_s, machine_cpu

    train_end_time = time.time()
    if stopped_by != "iterations":
        rec.stop(stopped_by)
    return HostSummary(
        host=PS_NAME, role="ps", iterations=t, elapsed_s=time.monotonic() - started,
        cpu_s=cpu_s(), transport_stats=end.stats(), train_s=trainer.train_s,
        train_start_time=train_start_time, train_end_time=train_end_time, stopped_by=stopped_by,
        cpu_busy_frac=busy_frac(cpu_before, machine_cpu()), transport=transport.slug,
        transport_options=transport.options(), session_id=transport.session.session_id,
        rejections=end.rejections())


def worker_summary(end, host: str, rank: int, iterations: int, started: float) -> HostSummary:
    """A collective worker's summary, read from its end while it is still open."""
    from harness.hosts.node import cpu_s

    return HostSummary(host=host, role="worker", rank=rank, iterations=iterations,
                       elapsed_s=time.monotonic() - started, cpu_s=cpu_s(),
                       transport_stats=end.stats(), rejections=end.rejections())


def quietly(call) -> bool:
    """Run a send or receive whose failure the pattern survives; whether it succeeded."""
    try:
        call()
        return True
    except TransportError:
        return False


@dataclasses.dataclass
class Posted:
    """A message in the outbox: whether it went through, once ``done`` is set."""

    ok: bool = False
    done: threading.Event = dataclasses.field(default_factory=threading.Event)


class Outbox:
    """A PS's small messages to the workers (a tree's answers, whom to serve, its shape), each
    worker's sent in order by a thread of its own: a send to a dead or stopped worker waits out
    its deadline (``wait``) and holds up no message to another."""

    def __init__(self, end, wait: float) -> None:
        self.end, self.wait = end, wait
        self.queues: dict[int, queue.SimpleQueue] = {}
        self.threads: list[threading.Thread] = []

    def post(self, w: int, msg_id: int, part: int, values: np.ndarray) -> Posted:
        """Queue a message to ``w``; what becomes of it."""
        if w not in self.queues:
            self.queues[w] = queue.SimpleQueue()
            thread = threading.Thread(target=self._run, args=(w, self.queues[w]), daemon=True)
            thread.start()
            self.threads.append(thread)
        posted = Posted()
        self.queues[w].put((msg_id, part, values, posted))
        return posted

    def _run(self, w: int, q: queue.SimpleQueue) -> None:
        while (item := q.get()) is not None:
            msg_id, part, values, posted = item
            posted.ok = quietly(lambda: self.end.send([w], msg_id, part, values, self.wait))
            posted.done.set()

    def close(self) -> None:
        """Send what is posted, then stop."""
        for q in self.queues.values():
            q.put(None)
        for thread in self.threads:
            thread.join()
