"""The process that runs on each emulated host: the parameter server or one worker.

Started by the runner inside a Mininet host (its own network namespace and process group)::

    python -m harness.node --run RUN --role ps [--session RUN/session.key]
    python -m harness.node --run RUN --role worker --rank 3 [--session RUN/session.key]

where ``RUN`` is the run folder holding ``spec.json`` (layout: :mod:`harness.runfiles`) and the
session file holds the run's session id and key, which the runner drew for this run and gives
every host (over the shared file system, never the emulated network).
Bulk-synchronous data-parallel training, one iteration ``t``:

1. the PS broadcasts the parameters (message ``t``) to every worker;
2. each worker loads them, computes a gradient on one batch of its own shard of the training set,
   and pushes it (message ``t``) to the PS;
3. the PS gathers one gradient per worker (a loss-tolerant transport may deliver part of one,
   with a mask), lets the transport observe them, averages them, and takes an SGD step;
4. every ``eval_every`` iterations (and before the first and after the last) the PS measures
   test accuracy.

Training ends after ``iterations``, or earlier when the spec says so: at the first evaluation
that reaches ``target_accuracy`` (``stop_at_target``), or once the PS's training time (its
iterations, evaluations excluded) passes ``max_train_s``. To end early the PS writes the run's
stop marker and then broadcasts the parameters one last time; a worker that finds the marker
after a pull stops instead of pushing, so every host finishes cleanly and writes its summary.
The marker travels outside the emulated network (the hosts share the machine's file system), as
the benchmarks' barrier does.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from harness import datasets, models
from harness.runfiles import (EvalRecord, HostSummary, PsIteration, Recorder, RunFiles,
                              WorkerIteration, read_session)
from harness.spec import RunSpec
from topologies.incast import PS_IP, PS_NAME, worker_ip, worker_name
from transports import registry
from transports.base import Addr, Session, Transport


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
    transport = make_transport(spec, session)
    ps_addr, worker_addrs = addresses(spec, loopback)
    started = time.monotonic()
    with transport.serve(ps_addr, worker_addrs, layout) as end:
        end.wait_for_workers(spec.timeout_s)
        trainer.evaluate(0)
        train_start_time, stopped_by, t = time.time(), "", 0
        cpu_before = machine_cpu()
        while not stopped_by:
            t0 = time.monotonic()
            sent = end.broadcast(t, trainer.params.numpy(), spec.timeout_s)
            t1 = time.monotonic()
            got = end.gather(t, spec.timeout_s)
            t2 = time.monotonic()
            end.observe(t, got)   # e.g. PLOT's SNR profiling; counted in update_s as before
            grad = torch.from_numpy(end.average(got))
            trainer.params.add_(grad, alpha=-spec.lr)
            t3 = time.monotonic()
            trainer.train_s += t3 - t0
            rec.iteration(PsIteration(
                iteration=t, t_s=t0 - started, gather_end_mono=t2, broadcast_s=t1 - t0,
                gather_s=t2 - t1, update_s=t3 - t2, iter_s=t3 - t0,
                recv_frac=[d.received_frac for d in got],
                segment_fracs=[list(d.segment_fracs) for d in got],
                param_wire_bytes=[r.wire_bytes for r in sent],
                param_retransmits=[r.retransmits for r in sent],
                msg_stats=[d.stats for d in got]))
            t += 1
            stopped_by = trainer.after(t)
        train_end_time = time.time()
        cpu_busy = busy_frac(cpu_before, machine_cpu())
        if stopped_by != "iterations":
            # The workers wait in pull(t): release them with the final parameters and the marker.
            rec.stop(stopped_by)
            end.broadcast(t, trainer.params.numpy(), spec.timeout_s)
        summary = HostSummary(
            host=PS_NAME, role="ps", iterations=t, elapsed_s=time.monotonic() - started,
            cpu_s=cpu_s(), transport_stats=end.stats(), train_s=trainer.train_s,
            train_start_time=train_start_time, train_end_time=train_end_time,
            stopped_by=stopped_by, cpu_busy_frac=cpu_busy, transport=transport.slug,
            transport_options=transport.options(), session_id=transport.session.session_id,
            rejections=end.rejections())
    rec.summary(summary)
    return summary


def run_worker(spec: RunSpec, rank: int, files: RunFiles, loopback: bool,
               session: Session | None = None) -> HostSummary:
    """Train as worker ``rank``; return the summary."""
    host = worker_name(rank)
    rec = Recorder(files, host)
    model = models.build(spec.model, spec.seed)
    layout = models.layout(model)
    x_train, y_train = datasets.load(spec.dataset, "train")
    mine = datasets.shard(len(y_train), rank, spec.n_workers, spec.seed)
    rng = np.random.default_rng(spec.seed * 1000 + rank + 1)
    order, pos = rng.permutation(mine), 0
    transport = make_transport(spec, session)
    ps_addr, worker_addrs = addresses(spec, loopback)
    started = time.monotonic()
    done = 0
    with transport.connect(rank, worker_addrs[rank], ps_addr, layout) as end:
        end.join(spec.timeout_s)
        for t in range(spec.iterations):
            t0 = time.monotonic()
            params = end.pull(t, spec.timeout_s)
            t1 = time.monotonic()
            if files.stop_marker.exists():
                break   # the PS ended training; these are its final parameters
            models.load_flat(model, torch.from_numpy(params.values))
            if pos + spec.batch_size > len(order):
                order, pos = rng.permutation(mine), 0
            batch = order[pos:pos + spec.batch_size]
            pos += spec.batch_size
            model.zero_grad(set_to_none=False)
            loss = F.cross_entropy(model(x_train[batch]), y_train[batch])
            loss.backward()
            grad = models.flat_grads(model).numpy()
            t2 = time.monotonic()
            sent = end.push(t, grad, spec.timeout_s)
            t3 = time.monotonic()
            rec.iteration(WorkerIteration(
                iteration=t, t_s=t0 - started, push_start_mono=t2, pull_s=t1 - t0,
                compute_s=t2 - t1, push_s=t3 - t2, param_frac=params.received_frac,
                train_loss=loss.item(), grad_bytes=sent.payload_bytes, wire_bytes=sent.wire_bytes,
                packets=sent.packets, retransmits=sent.retransmits))
            done = t + 1
        summary = HostSummary(host=host, role="worker", rank=rank, iterations=done,
                              elapsed_s=time.monotonic() - started, cpu_s=cpu_s(),
                              transport_stats=end.stats(), session_id=transport.session.session_id,
                              rejections=end.rejections())
    rec.summary(summary)
    return summary


def main(argv: list[str] | None = None) -> int:
    """Parse arguments and run as the PS or a worker; return the exit code."""
    parser = argparse.ArgumentParser(prog="python -m harness.node", description=__doc__.split("\n")[0])
    parser.add_argument("--run", type=Path, required=True,
                        help="the run folder, holding spec.json; records go to its raw/")
    parser.add_argument("--role", choices=("ps", "worker"), required=True)
    parser.add_argument("--rank", type=int, default=0, help="worker rank, 0-based")
    parser.add_argument("--loopback", action="store_true",
                        help="use 127.0.0.1 with one port per host instead of the topology's IPs")
    parser.add_argument("--session", type=Path, default=None,
                        help="the run's session file (default: RUN/session.key if it exists; "
                             "without one the transport opens in a session of its own)")
    args = parser.parse_args(argv)
    # Nine processes share two cores: one thread each keeps them from fighting.
    torch.set_num_threads(1)
    files = RunFiles(args.run)
    spec = RunSpec.from_json(files.spec.read_text())
    path = args.session or (files.session if files.session.exists() else None)
    session = read_session(path) if path else None
    if args.role == "ps":
        run_ps(spec, files, args.loopback, session)
    else:
        run_worker(spec, args.rank, files, args.loopback, session)
    return 0


if __name__ == "__main__":
    sys.exit(main())
