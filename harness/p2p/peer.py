"""One peer of a peer-to-peer run: a process inside an emulated host (``w<rank+1>``).

Every peer starts from the same model (the run's seed) and trains on its own shard. A round ``t``:

1. ask the coordinator for round ``t`` (:mod:`harness.p2p.coord`): under BSP this waits until
   every round ``t-1`` message is delivered, under SSP only for the staleness bound; the answer
   names this round's receivers, the group address when the switches copy, and the pace;
2. **mix** what arrived since the last round: the new parameters are, coordinate by coordinate,
   the mean of this peer's own and every received message that holds the coordinate (a message
   closed early holds only part of them; a coordinate it misses is averaged without it). Of
   several messages from one sender, the newest counts (SSP). This is *our interpretation* of the
   seed's "average of its own and received parameters", per coordinate because of early close;
3. take ``local_steps`` SGD steps on its shard;
4. send the parameters to the receivers (:mod:`transports.peer`); the send returns once every
   receiver has closed the message (or the transport gave up on it).

After the last round a final ``sync`` (a barrier: nobody leaves while a message to it is on its
way) and a last mix; then the peer saves its parameters, from which the harness evaluates the
averaged model. Every ``eval_every`` rounds, and at the end, the peer evaluates its own model on
the test set right after the mix (so every evaluation sees a model that has taken ``t`` steps
and mixed in what they brought; time to accuracy uses the mean over peers).

Files (in the run's ``raw/``): ``<host>.jsonl`` one :class:`PeerRound` per round,
``<host>.eval.jsonl`` one :class:`PeerEval` per evaluation, ``<host>.final.npy`` the final
parameters, ``<host>.summary.json`` the transport's counters (its presence means the peer
finished).

Run by the harness as ``python -m harness.p2p.peer --run DIR --rank R --coord SOCKET --keys-fd N``
(``N``: an inherited pipe holding the run's session id and this peer's keys,
:mod:`harness.running.keys`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from harness.hosts.node import evaluate
from harness.p2p.coord import CoordinatorClient
from harness.p2p.spec import PeerSpec
from harness.running import keys as handover
from harness.training import datasets, models
from topologies.incast import worker_ip, worker_name
from transports import peer as peer_transports
from transports.base import Session


@dataclasses.dataclass
class PeerRound:
    """What one peer did in one round (times in seconds; ``*_mono`` are monotonic readings,
    comparable across hosts)."""

    round: int
    start_mono: float
    wait_s: float          # in the coordinator: barrier or staleness bound, plus the plan
    mix_s: float
    eval_s: float          # evaluating its own model (every eval_every rounds), after the mix
    compute_s: float
    send_s: float
    mixed: int             # messages mixed in at the start of this round
    mixed_frac: float | None   # their mean received fraction
    receivers: int
    delivered: int         # receivers that closed the message
    early: int             # messages this peer received and closed early, so far (cumulative)
    packets: int
    retransmits: int
    wire_bytes: int
    rate_mbps: float
    train_loss: float


@dataclasses.dataclass
class PeerEval:
    """One evaluation of this peer's own model."""

    round: int
    mono: float
    accuracy: float
    loss: float


def mix(own: np.ndarray, incoming: list) -> tuple[np.ndarray, int, float | None]:
    """Own parameters averaged with the newest message of each sender, per coordinate over the
    messages that hold it; returns (parameters, messages mixed, their mean received fraction)."""
    newest = {}
    for msg in incoming:
        if msg.sender not in newest or msg.round >= newest[msg.sender].round:
            newest[msg.sender] = msg
    if not newest:
        return own, 0, None
    total = own.astype(np.float64)
    count = np.ones(own.shape, dtype=np.float64)
    for msg in newest.values():
        if msg.mask is None:
            total += msg.values
            count += 1
        else:
            total[msg.mask] += msg.values[msg.mask]
            count += msg.mask
    fracs = [m.received_frac for m in newest.values()]
    return (total / count).astype(np.float32), len(newest), float(np.mean(fracs))


def _append(path: Path, record) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(dataclasses.asdict(record)) + "\n")


def run(spec: PeerSpec, run_dir: Path, rank: int, coord_path: Path, session: Session) -> None:
    """Train as peer ``rank`` (see the module docstring)."""
    raw = run_dir / "raw"
    host = worker_name(rank)
    model = models.build(spec.model, spec.seed)
    params = models.flat_params(model).clone().numpy()
    x_train, y_train = datasets.load(spec.dataset, "train")
    x_test, y_test = datasets.load(spec.dataset, "test")
    mine = datasets.shard(len(y_train), rank, spec.n_workers, spec.seed)
    batches = datasets.Batches(mine, np.random.default_rng(spec.seed * 1000 + rank + 1))
    ips = [worker_ip(r) for r in range(spec.n_workers)]
    coord = CoordinatorClient(coord_path, spec.timeout_s)

    def evaluation(round_: int) -> None:
        models.load_flat(model, torch.from_numpy(params.copy()))
        acc, loss = evaluate(model, x_test, y_test)
        _append(raw / f"{host}.eval.jsonl", PeerEval(round_, time.monotonic(), acc, loss))

    with peer_transports.create(spec.transport, rank, ips, spec.port, params.size, session,
                                spec.options()) as end:
        evaluation(0)
        for t in range(spec.rounds + 1):
            t0 = time.monotonic()
            plan = coord.sync(rank, t)
            t1 = time.monotonic()
            params, mixed, frac = mix(params, end.take())
            t2 = time.monotonic()
            if t and (t % spec.eval_every == 0 or plan["stop"]):
                evaluation(t)   # t rounds done, and what they brought mixed in
            te = time.monotonic()
            if plan["stop"]:
                break
            models.load_flat(model, torch.from_numpy(params.copy()))
            losses = models.sgd_steps(model, x_train, y_train, batches, spec.batch_size,
                                      spec.local_steps, spec.lr)
            params = models.flat_params(model).clone().numpy()
            t3 = time.monotonic()
            report = end.send(t, params, plan["receivers"], group=plan["group"],
                              rate_mbps=plan["rate_mbps"], timeout_s=spec.timeout_s)
            t4 = time.monotonic()
            _append(raw / f"{host}.jsonl", PeerRound(
                round=t, start_mono=t0, wait_s=t1 - t0, mix_s=t2 - t1, eval_s=te - t2,
                compute_s=t3 - te,
                send_s=t4 - t3, mixed=mixed, mixed_frac=frac, receivers=len(plan["receivers"]),
                delivered=len(report.delivered), early=end.stats().get("early_closes", 0),
                packets=report.packets, retransmits=report.retransmits,
                wire_bytes=report.wire_bytes, rate_mbps=plan["rate_mbps"],
                train_loss=float(np.mean(losses))))
        np.save(raw / f"{host}.final.npy", params)
        stats = end.stats()
    coord.close()
    (raw / f"{host}.summary.json").write_text(json.dumps({"host": host, "rank": rank,
                                                          "transport_stats": stats}))


def main(argv: list[str] | None = None) -> int:
    """Parse arguments and run as one peer; return the exit code."""
    parser = argparse.ArgumentParser(prog="python -m harness.p2p.peer",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--run", type=Path, required=True, help="the run folder (spec.json)")
    parser.add_argument("--rank", type=int, required=True, help="this peer's rank, 0-based")
    parser.add_argument("--coord", type=Path, required=True, help="the coordinator's socket")
    parser.add_argument(handover.FLAG, type=int, required=True, dest="keys_fd", metavar="N",
                        help="an inherited descriptor holding the run's session and this peer's "
                             "keys")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    spec = PeerSpec.from_json((args.run / "spec.json").read_text())
    run(spec, args.run, args.rank, args.coord, handover.read_fd(args.keys_fd))
    return 0


if __name__ == "__main__":
    sys.exit(main())
