"""The process that runs on each emulated host: the parameter server or one worker.

Started by the runner inside a Mininet host (its own network namespace and process group)::

    python -m harness.node --spec RUN/spec.json --role ps --out RUN/raw
    python -m harness.node --spec RUN/spec.json --role worker --rank 3 --out RUN/raw

Bulk-synchronous data-parallel training, one iteration ``t``:

1. the PS broadcasts the parameters (message ``t``) to every worker;
2. each worker loads them, computes a gradient on one batch of its own shard of the training set,
   and pushes it (message ``t``) to the PS;
3. the PS gathers one gradient per worker (a loss-tolerant transport may deliver part of one,
   with a mask), averages them, and takes an SGD step;
4. every ``eval_every`` iterations (and before the first and after the last) the PS measures
   test accuracy.

Each process appends one JSON line per iteration to ``OUT/<host>.jsonl`` (timings, bytes,
received fractions; ``*_mono`` fields are ``time.monotonic()`` readings, comparable across hosts
because every namespace shares the machine's monotonic clock) and writes ``OUT/<host>.summary.json`` when it finishes; the PS also writes
``OUT/<host>.eval.jsonl``. These raw files are written once and never edited.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from harness import datasets, models
from harness.spec import RunSpec
from topologies.incast import PS_IP, PS_NAME, worker_ip, worker_name
from transports import registry
from transports.base import Addr


def addresses(spec: RunSpec, loopback: bool) -> tuple[Addr, list[Addr]]:
    """(PS address, worker addresses by rank): the topology's, or distinct ports on 127.0.0.1."""
    if loopback:
        return ("127.0.0.1", spec.port), [("127.0.0.1", spec.port + 1 + r)
                                          for r in range(spec.n_workers)]
    return (PS_IP, spec.port), [(worker_ip(r), spec.port) for r in range(spec.n_workers)]


class Recorder:
    """Write-once JSON-lines output of one host."""

    def __init__(self, out: Path, host: str) -> None:
        out.mkdir(parents=True, exist_ok=True)
        self.out = out
        self.host = host
        self.files = {}

    def write(self, kind: str, record: dict) -> None:
        """Append ``record`` to ``<host><kind>.jsonl`` (the file is created, never reopened)."""
        if kind not in self.files:
            self.files[kind] = open(self.out / f"{self.host}{kind}.jsonl", "x", buffering=1)
        self.files[kind].write(json.dumps(record) + "\n")

    def summary(self, record: dict) -> None:
        """Write the final summary; its presence means the host finished."""
        for f in self.files.values():
            f.close()
        (self.out / f"{self.host}.summary.json").write_text(json.dumps(record, indent=1))


def evaluate(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) of ``model`` on a test set."""
    with torch.no_grad():
        logits = model(x)
        return float((logits.argmax(1) == y).float().mean()), float(F.cross_entropy(logits, y))


def run_ps(spec: RunSpec, out: Path, loopback: bool) -> dict:
    """Serve one training job; return the summary."""
    rec = Recorder(out, PS_NAME)
    model = models.build(spec.model, spec.seed)
    layout = models.layout(model)
    x_test, y_test = datasets.load(spec.dataset, "test")
    params = models.flat_params(model).clone()
    transport = registry.create(spec.transport, spec.options())
    ps_addr, worker_addrs = addresses(spec, loopback)
    started = time.monotonic()
    with transport.serve(ps_addr, worker_addrs, layout) as end:
        end.wait_for_workers(spec.timeout_s)

        def record_eval(iteration: int) -> None:
            t0 = time.monotonic()
            acc, loss = evaluate(model, x_test, y_test)
            rec.write(".eval", {"iteration": iteration, "accuracy": acc, "test_loss": loss,
                                "eval_s": time.monotonic() - t0})

        models.load_flat(model, params)
        record_eval(0)
        train_s = 0.0
        train_start_time = time.time()
        for t in range(spec.iterations):
            t0 = time.monotonic()
            sent = end.broadcast(t, params.numpy(), spec.timeout_s)
            t1 = time.monotonic()
            got = end.gather(t, spec.timeout_s)
            t2 = time.monotonic()
            end.observe(t, got)   # e.g. PLOT's SNR profiling; counted in update_s as before
            grad = torch.from_numpy(end.average(got))
            params.add_(grad, alpha=-spec.lr)
            t3 = time.monotonic()
            train_s += t3 - t0
            rec.write("", {
                "iteration": t, "t_s": t0 - started, "gather_end_mono": t2,
                "broadcast_s": t1 - t0, "gather_s": t2 - t1,
                "update_s": t3 - t2, "iter_s": t3 - t0,
                "recv_frac": [d.received_frac for d in got],
                "segment_fracs": [list(d.segment_fracs) for d in got],
                "param_wire_bytes": [r.wire_bytes for r in sent],
                "param_retransmits": [r.retransmits for r in sent],
                "msg_stats": [d.stats for d in got],
            })
            done = t + 1
            if done % spec.eval_every == 0 or done == spec.iterations:
                models.load_flat(model, params)
                record_eval(done)
        summary = {"host": PS_NAME, "role": "ps", "iterations": spec.iterations,
                   "train_s": train_s, "elapsed_s": time.monotonic() - started,
                   "train_start_time": train_start_time, "train_end_time": time.time(),
                   "transport": transport.slug, "transport_options": transport.options(),
                   "transport_stats": end.stats()}
    rec.summary(summary)
    return summary


def run_worker(spec: RunSpec, rank: int, out: Path, loopback: bool) -> dict:
    """Train as worker ``rank``; return the summary."""
    host = worker_name(rank)
    rec = Recorder(out, host)
    model = models.build(spec.model, spec.seed)
    layout = models.layout(model)
    x_train, y_train = datasets.load(spec.dataset, "train")
    mine = datasets.shard(len(y_train), rank, spec.n_workers, spec.seed)
    rng = np.random.default_rng(spec.seed * 1000 + rank + 1)
    order, pos = rng.permutation(mine), 0
    transport = registry.create(spec.transport, spec.options())
    ps_addr, worker_addrs = addresses(spec, loopback)
    started = time.monotonic()
    with transport.connect(rank, worker_addrs[rank], ps_addr, layout) as end:
        end.join(spec.timeout_s)
        for t in range(spec.iterations):
            t0 = time.monotonic()
            params = end.pull(t, spec.timeout_s)
            t1 = time.monotonic()
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
            rec.write("", {
                "iteration": t, "t_s": t0 - started, "push_start_mono": t2,
                "pull_s": t1 - t0, "compute_s": t2 - t1,
                "push_s": t3 - t2, "param_frac": params.received_frac, "train_loss": loss.item(),
                "grad_bytes": sent.payload_bytes, "wire_bytes": sent.wire_bytes,
                "packets": sent.packets, "retransmits": sent.retransmits,
            })
        summary = {"host": host, "role": "worker", "rank": rank, "iterations": spec.iterations,
                   "elapsed_s": time.monotonic() - started, "transport_stats": end.stats()}
    rec.summary(summary)
    return summary


def main(argv: list[str] | None = None) -> int:
    """Parse arguments and run as the PS or a worker; return the exit code."""
    parser = argparse.ArgumentParser(prog="python -m harness.node", description=__doc__.split("\n")[0])
    parser.add_argument("--spec", type=Path, required=True, help="the run's spec.json")
    parser.add_argument("--role", choices=("ps", "worker"), required=True)
    parser.add_argument("--rank", type=int, default=0, help="worker rank, 0-based")
    parser.add_argument("--out", type=Path, required=True, help="folder for this host's records")
    parser.add_argument("--loopback", action="store_true",
                        help="use 127.0.0.1 with one port per host instead of the topology's IPs")
    args = parser.parse_args(argv)
    # Nine processes share two cores: one thread each keeps them from fighting.
    torch.set_num_threads(1)
    spec = RunSpec.from_json(args.spec.read_text())
    if args.role == "ps":
        run_ps(spec, args.out, args.loopback)
    else:
        run_worker(spec, args.rank, args.out, args.loopback)
    return 0


if __name__ == "__main__":
    sys.exit(main())
