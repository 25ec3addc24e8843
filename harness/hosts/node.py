"""The process that runs on each emulated host: the parameter server or one worker.

Started by the runner inside a Mininet host (its own network namespace and process group)::

    python -m harness.hosts.node --run RUN --role ps [--keys-fd N]
    python -m harness.hosts.node --run RUN --role worker --rank 3 [--keys-fd N]

where ``RUN`` is the run folder holding ``spec.json`` (layout: :mod:`harness.running.runfiles`) and
descriptor ``N``, inherited from the runner, is a pipe holding the run's session id and the keys
of this host's pairs, nobody else's (:mod:`harness.running.keys`; never a file, never the
emulated network). Data-parallel training; in
bulk-synchronous mode (``bsp``), one iteration ``t``:

1. the PS broadcasts the parameters (message ``t``) to every worker;
2. each worker loads them, computes a gradient on one batch of its own shard of the training set
   (of the part the PS did not hold out as its validation set, ``RunSpec.holdout``),
   and pushes it (message ``t``) to the PS; a Byzantine worker (``RunSpec.byzantine``, the
   highest ranks) pushes its attack's vector instead (:mod:`harness.training.byzantine`);
   a compressing worker under ``reset_mode`` ``cser`` loads them plus its residual, and after
   every ``error_reset`` such rounds spends one pushing its residual instead
   (:mod:`harness.training.compress`);
3. the PS gathers one gradient per worker (a loss-tolerant transport may deliver part of one,
   with a mask), lets the transport observe them, combines them by the run's aggregation rule
   (averages them by default; :mod:`harness.training.aggregators`), and takes an SGD step;
4. every ``eval_every`` iterations (and before the first and after the last) the PS measures
   test accuracy.

A worker only ever pulls its next parameters (its own message ``k``) and pushes its gradient
(message ``k``); the PS decides whom it sends what when, which is all the synchronisation modes
and the handling of missing workers change (:mod:`harness.hosts.ps`). A straggler fault
(``straggler:Fx``) makes its worker sleep ``F - 1`` times its compute time after each gradient.

Training ends after ``iterations``, or earlier when the spec says so: at the first evaluation
that reaches ``target_accuracy`` (``stop_at_target``), or once the PS's training time (its
iterations, evaluations excluded) passes ``max_train_s``. At the end the PS writes the run's end
marker (and, when it ends early, the stop marker with the reason) and sends every live worker the
parameters one last time; a worker that finds the end marker after a pull stops instead of
pushing, so every host finishes cleanly and writes its summary. A worker the PS could not reach
at the end (its link cut, or stalled) stops once it finds the PS's summary. The markers travel
outside the emulated network (the hosts share the machine's file system), as the benchmarks'
barrier does.
"""

from __future__ import annotations

import argparse
import importlib
import resource
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from harness.hosts.faults import parse_fault
from harness.hosts.pattern import parse_pattern
from harness.hosts.ps import GEN_SHIFT, ParameterServer
from harness.hosts.sync import parse_sync
from harness.running import keys as handover
from harness.running.runfiles import EvalRecord, HostSummary, Recorder, RunFiles, WorkerIteration
from harness.running.spec import RunSpec
from harness.training import datasets, models
from harness.training.aggregators import ZENOPP
from harness.training.byzantine import corrupt, parse_byzantine
from harness.training.compress import decode, parse_compress, residual_keeper, up_layout
from harness.hosts.robust import Judge, honest_estimate, make_combine
from topologies.incast import PS_IP, PS_NAME, worker_ip, worker_name
from transports import registry
from transports.base import Addr, Session, Transport, TransportError, TransportTimeout

SLICE_S = 1.0   # a worker waits for the PS in slices this long, looking for its end in between
PS_CLOSE_S = 10.0   # from the PS closing its end (linger included) to its summary


def addresses(spec: RunSpec, loopback: bool) -> tuple[Addr, list[Addr]]:
    """(PS address, worker addresses by rank): the topology's, or distinct ports on 127.0.0.1."""
    if loopback:
        return ("127.0.0.1", spec.port), [("127.0.0.1", spec.port + 1 + r)
                                          for r in range(spec.n_workers)]
    return (PS_IP, spec.port), [(worker_ip(r), spec.port) for r in range(spec.n_workers)]


def cpu_s() -> float:
    """User plus system CPU time of this process so far, all its threads included."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def machine_cpu() -> tuple[int, int]:
    """(busy, total) jiffies of all the machine's cores (``/proc/stat`` is not per namespace)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)   # idle + iowait
    return sum(fields[:8]) - idle, sum(fields[:8])


def busy_frac(before: tuple[int, int], after: tuple[int, int]) -> float | None:
    """The machine's busy fraction between two :func:`machine_cpu` readings."""
    total = after[1] - before[1]
    return (after[0] - before[0]) / total if total > 0 else None


def evaluate(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) of ``model`` on a test set."""
    with torch.no_grad():
        logits = model(x)
        return float((logits.argmax(1) == y).float().mean()), float(F.cross_entropy(logits, y))


class _Trainer:
    """The PS's model, its evaluations and its decision to stop."""

    def __init__(self, spec: RunSpec, rec: Recorder) -> None:
        self.spec = spec
        self.rec = rec
        self.model = models.build(spec.model, spec.seed)
        self.params = models.flat_params(self.model).clone()
        self.x_test, self.y_test = datasets.load(spec.dataset, "test")
        self.train_s = 0.0

    def evaluate(self, iteration: int) -> float:
        """Record the test accuracy after ``iteration`` updates; return it."""
        t0 = time.monotonic()
        models.load_flat(self.model, self.params)
        acc, loss = evaluate(self.model, self.x_test, self.y_test)
        self.rec.evaluation(EvalRecord(iteration, acc, loss, time.monotonic() - t0, self.train_s))
        return acc

    def after(self, done: int) -> str:
        """Evaluate if due; return why training stops after ``done`` iterations ('' if not)."""
        spec = self.spec
        due = done % spec.eval_every == 0 or done == spec.iterations
        reached = due and self.evaluate(done) >= spec.target_accuracy
        if done == spec.iterations:
            return "iterations"
        if spec.stop_at_target and reached:
            return "target"
        if spec.max_train_s is not None and self.train_s >= spec.max_train_s:
            if not due:
                self.evaluate(done)   # the accuracy the run ends with
            return "time_cap"
        return ""


def make_transport(spec: RunSpec, session: Session | None) -> Transport:
    """The run's transport, in the run's session (without one, in a session of its own)."""
    transport = registry.create(spec.transport, spec.options())
    if session is not None:
        transport.use_session(session)
    return transport


def run_ps(spec: RunSpec, files: RunFiles, loopback: bool,
           session: Session | None = None) -> HostSummary:
    """Serve one training job; return the summary."""
    rec = Recorder(files, PS_NAME)
    trainer = _Trainer(spec, rec)
    layout = models.layout(trainer.model)
    comp = parse_compress(spec.compress)
    transport = make_transport(spec, session)
    ps_addr, worker_addrs = addresses(spec, loopback)
    started = time.monotonic()
    # A transport is asked for a push layout of its own only when the pushes are compressed.
    up = {"up": up_layout(layout, comp)} if comp.on else {}
    with transport.serve(ps_addr, worker_addrs, layout, **up) as end:
        end.wait_for_workers(spec.timeout_s)
        trainer.evaluate(0)
        train_start_time = time.time()
        cpu_before = machine_cpu()
        # Missing-worker detection only where a fault is injected: a fault-free run is classic
        # BSP/SSP/async, every gradient waited for (docs/faults.md).
        # zeno++ judges each update on its own (every sync mode); the other rules combine a
        # bsp round.
        judge = (Judge(spec, trainer.model, trainer.params, end)
                 if spec.aggregator == ZENOPP else None)
        combine = (make_combine(spec, trainer.model, trainer.params, end)
                   if spec.aggregator not in ("mean", ZENOPP) else None)
        server = ParameterServer(end, trainer, rec, spec.n_workers, parse_sync(spec.sync),
                                 spec.lr, started, detect=parse_fault(spec.fault).kind != "none",
                                 combine=combine, judge=judge,
                                 decode=(lambda d: decode(d, layout, comp)) if comp.on else None)
        t, stopped_by = server.run()
        train_end_time = time.time()
        cpu_busy = busy_frac(cpu_before, machine_cpu())
        if stopped_by != "iterations":
            rec.stop(stopped_by)
        server.finish(t)
        summary = HostSummary(
            host=PS_NAME, role="ps", iterations=t, elapsed_s=time.monotonic() - started,
            cpu_s=cpu_s(), transport_stats=end.stats(), train_s=trainer.train_s,
            train_start_time=train_start_time, train_end_time=train_end_time,
            stopped_by=stopped_by, cpu_busy_frac=cpu_busy, transport=transport.slug,
            transport_options=transport.options(), session_id=transport.session.session_id,
            rejections=end.rejections())
    rec.summary(summary)
    return summary


def _patiently(call, files: RunFiles, timeout_s: float):
    """``call(slice_s)`` until it returns, in slices of ``SLICE_S``; None once the PS has finished
    (it will send nothing more: this worker was unreachable at the end), TransportTimeout after
    ``timeout_s``. Both transports keep a message's progress across slices."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return call(max(min(SLICE_S, deadline - time.monotonic()), 1e-3))
        except TransportTimeout:
            if files.ps_finished():
                return None
            if time.monotonic() >= deadline:
                raise
        except TransportError:
            # The PS closed its end while this worker was away; its summary follows the close.
            until = time.monotonic() + PS_CLOSE_S
            while not files.ps_finished() and time.monotonic() < until:
                time.sleep(0.05)
            if files.ps_finished():
                return None
            raise


def _update(model: torch.nn.Module, pulled: torch.Tensor, spec: RunSpec, x_train: torch.Tensor,
            y_train: torch.Tensor, batches: datasets.Batches) -> tuple[list[float], np.ndarray]:
    """(losses, update in gradient units) of ``local_steps`` SGD steps from ``pulled``."""
    # load_flat makes the parameters views of ``pulled``: local steps need a copy.
    models.load_flat(model, pulled.clone() if spec.local_steps > 1 else pulled)
    # One step leaves its gradient to push; several are applied locally.
    losses = models.sgd_steps(model, x_train, y_train, batches, spec.batch_size,
                              spec.local_steps, spec.lr, apply=spec.local_steps > 1)
    if spec.local_steps > 1:
        # The update in gradient units: the PS's step of lr lands on the local model.
        return losses, ((pulled - models.flat_params(model)) / spec.lr).numpy()
    return losses, models.flat_grads(model).numpy()


def run_worker(spec: RunSpec, rank: int, files: RunFiles, loopback: bool,
               session: Session | None = None, generation: int = 0) -> HostSummary:
    """Train as worker ``rank``; return the summary.

    ``generation`` > 0: this process replaces one that was killed (``restart@K:Ts``). Its
    message ids start at ``generation << GEN_SHIFT``, and it first pushes a join message with
    that id (zeros), which the PS answers with the current parameters; its records are
    ``<host>.g<generation>.*``.
    """
    host = worker_name(rank)
    rec = Recorder(files, host if not generation else f"{host}.g{generation}")
    model = models.build(spec.model, spec.seed)
    layout = models.layout(model)
    x_train, y_train = datasets.load(spec.dataset, "train")
    mine = datasets.shard(len(y_train), rank, spec.n_workers, spec.seed, spec.holdout)
    batches = datasets.Batches(mine, np.random.default_rng(spec.seed * 1000 + rank + 1))
    fault = parse_fault(spec.fault)
    slow = fault.factor if fault.kind == "straggler" and fault.rank(spec.n_workers) == rank else 1
    attack = parse_byzantine(spec.byzantine)
    byzantine = rank in attack.ranks(spec.n_workers)
    attack_rng = np.random.default_rng([spec.seed, rank, 0xA77])
    comp = parse_compress(spec.compress)
    keeper = residual_keeper(layout, comp, spec.error_reset, spec.reset_mode, spec.lr)
    transport = make_transport(spec, session)
    ps_addr, worker_addrs = addresses(spec, loopback)
    started = time.monotonic()
    done = 0
    pushes = up_layout(layout, comp)
    up = {"up": pushes} if comp.on else {}
    with transport.connect(rank, worker_addrs[rank], ps_addr, layout, **up) as end:
        end.join(spec.timeout_s)
        k, joined = generation << GEN_SHIFT, True
        if generation:
            zeros = np.zeros(pushes.n_floats, dtype=np.float32)
            joined = _patiently(lambda s: end.push(k, zeros, s), files, spec.timeout_s) is not None
            k += 1
        while joined:
            t0 = time.monotonic()
            params = _patiently(lambda s: end.pull(k, s), files, spec.timeout_s)
            t1 = time.monotonic()
            if params is None or files.end_marker.exists():
                break   # the PS ended training; these are its final parameters
            syncing = keeper.due()   # a cser round that pushes the residual, no gradient
            if syncing:
                grad, losses = keeper.sync(), [float("nan")]
            else:
                # The local model: the pulled parameters (cser: plus this worker's residual).
                losses, grad = _update(model, torch.from_numpy(keeper.local(params.values)),
                                       spec, x_train, y_train, batches)
                if byzantine:   # on the real update, before compression and the real transport
                    grad = corrupt(attack, grad, spec.n_workers, attack_rng,
                                   lambda: honest_estimate(model, x_train, y_train, spec, k,
                                                           spec.n_workers - attack.count))
                grad = keeper.push(grad)
            if slow > 1:
                time.sleep((slow - 1) * (time.monotonic() - t1))
            t2 = time.monotonic()
            sent = _patiently(lambda s: end.push(k, grad, s), files, spec.timeout_s)
            if sent is None:
                break
            t3 = time.monotonic()
            rec.iteration(WorkerIteration(
                iteration=k, t_s=t0 - started, push_start_mono=t2, pull_s=t1 - t0,
                compute_s=t2 - t1, push_s=t3 - t2, param_frac=params.received_frac,
                train_loss=float(np.mean(losses)), grad_bytes=sent.payload_bytes, wire_bytes=sent.wire_bytes,
                packets=sent.packets, retransmits=sent.retransmits, byzantine=byzantine,
                residual_sync=syncing))
            k += 1
            done += 1
        summary = HostSummary(host=host, role="worker", rank=rank, iterations=done,
                              elapsed_s=time.monotonic() - started, cpu_s=cpu_s(),
                              transport_stats=end.stats(), session_id=transport.session.session_id,
                              rejections=end.rejections())
    rec.summary(summary)
    return summary


def main(argv: list[str] | None = None) -> int:
    """Parse arguments and run as the PS or a worker; return the exit code."""
    parser = argparse.ArgumentParser(prog="python -m harness.hosts.node", description=__doc__.split("\n")[0])
    parser.add_argument("--run", type=Path, required=True,
                        help="the run folder, holding spec.json; records go to its raw/")
    parser.add_argument("--role", choices=("ps", "worker"), required=True)
    parser.add_argument("--rank", type=int, default=0, help="worker rank, 0-based")
    parser.add_argument("--rejoin", type=int, default=0, metavar="GENERATION",
                        help="this worker replaces a killed one (its restart count)")
    parser.add_argument("--loopback", action="store_true",
                        help="use 127.0.0.1 with one port per host instead of the topology's IPs")
    parser.add_argument(handover.FLAG, type=int, default=None, dest="keys_fd", metavar="N",
                        help="an inherited descriptor holding the run's session id and this "
                             "host's keys (without one the transport opens in a session of its "
                             "own, and can talk to no other process's ends)")
    args = parser.parse_args(argv)
    # Nine processes share two cores: one thread each keeps them from fighting.
    torch.set_num_threads(1)
    files = RunFiles(args.run)
    spec = RunSpec.from_json(files.spec.read_text())
    session = handover.read_fd(args.keys_fd) if args.keys_fd is not None else None
    kind = parse_pattern(spec.pattern).kind
    if kind != "ps":   # a collective: its module has the two roles (harness.hosts.pattern)
        module = importlib.import_module(f"harness.hosts.{kind}")
        if args.role == "ps":
            module.run_ps(spec, files, args.loopback, session)
        else:
            module.run_worker(spec, args.rank, files, args.loopback, session)
    elif args.role == "ps":
        run_ps(spec, files, args.loopback, session)
    else:
        run_worker(spec, args.rank, files, args.loopback, session, args.rejoin)
    return 0


if __name__ == "__main__":
    sys.exit(main())
