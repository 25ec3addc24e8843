"""The simulator against the testbed: the same synchronized pushes, emulated and simulated.

Emulated: ``invoke bench-transport``'s cell (:func:`harness.bench.run.run_cell`): every worker pulls
the parameters, the PS releases them all at one instant and gathers; the push time is the gather's
end minus the release, per iteration. Simulated: the same scenario (``--scenario push``) with the
same link rate, queue and loss, over several seeds. The targets (issue 16): the simulated median
within 15 % of the emulated one and the p99 within 25 %.

    sudo flock /work/emu.lock .venv/bin/python -m harness.simulation.validate --iterations 20
    --loss 0
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from harness.simulation import driver as sim

MEDIAN_TOLERANCE = 0.15
P99_TOLERANCE = 0.25


def emulate(folder: Path, workers: Sequence[int], iterations: int, loss_pct: float = 0.0,
            bandwidth_mbps: float = 100.0, queue_pkts: int = 64) -> dict[int, list[float]]:
    """Push times of ``ltp`` on the testbed, per number of workers (one testbed, the largest N)."""
    from harness.bench.run import run_cell
    from harness.hosts.zygote import Zygote
    from topologies.impair.loss import Impairment
    from topologies.incast import IncastParams
    from topologies.testbed.network import Testbed

    out = {}
    with Testbed(IncastParams(max(workers), bandwidth_mbps, None, queue_pkts, 0.0), folder / "net") as tb, \
            Zygote(folder / "net", tb.ledger) as zygote:
        if loss_pct:
            tb.ingress.configure(Impairment(loss_pct))
        for n in workers:
            cell = run_cell(tb, zygote, folder / f"ltp-{n}", "ltp", iterations, workers=n)
            if cell.status != "ok":
                raise RuntimeError(f"the emulated cell of {n} workers ended {cell.status}: {cell.reason}")
            out[n] = cell.push_s
    return out


def simulate(workers: Sequence[int], iterations: int, seeds: Sequence[int], loss_pct: float = 0.0,
             bandwidth_mbps: float = 100.0, queue_pkts: int = 64, host: str = "ideal") -> dict[int,
             list[float]]:
    """Push times of ``ltp`` in the simulator, per number of workers, all seeds pooled."""
    sim.build()
    out = {}
    for n in workers:
        pushes = []
        for seed in seeds:
            got = sim.run(sim.Cell(workers=n, bottleneck_mbps=bandwidth_mbps, queue_pkts=queue_pkts,
                                   loss=loss_pct, iterations=iterations, seed=seed, host=host))
            pushes += [r["push_s"] for r in got.iterations]
        out[n] = pushes
    return out


def compare(emulated: dict[int, list[float]], simulated: dict[int, list[float]]) -> list[dict]:
    """Per N: emulated and simulated median and p99 push times, their ratios, and the verdict."""
    rows = []
    for n in sorted(emulated):
        e, s = np.asarray(emulated[n]), np.asarray(simulated[n])
        row = {"n_workers": n, "emulated_pushes": int(e.size), "simulated_pushes": int(s.size),
               "emulated_median_s": float(np.median(e)), "simulated_median_s": float(np.median(s)),
               "emulated_p99_s": float(np.percentile(e, 99)), "simulated_p99_s": float(np.percentile(s, 99))}
        row["median_ratio"] = row["simulated_median_s"] / row["emulated_median_s"]
        row["p99_ratio"] = row["simulated_p99_s"] / row["emulated_p99_s"]
        row["within_targets"] = (abs(row["median_ratio"] - 1) <= MEDIAN_TOLERANCE
                                 and abs(row["p99_ratio"] - 1) <= P99_TOLERANCE)
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run both halves and print the comparison as JSON lines (needs root and the testbed)."""
    p = argparse.ArgumentParser(prog="python -m harness.simulation.validate")
    p.add_argument("--workers", default="8,16")
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--loss", type=float, default=0.0)
    p.add_argument("--host", default="ideal", choices=sorted(sim.HOSTS))
    p.add_argument("--folder", type=Path, default=Path("results") / "simulate-validation")
    args = p.parse_args(argv)
    workers = [int(x) for x in args.workers.split(",")]
    seeds = [int(x) for x in args.seeds.split(",")]
    folder = args.folder / time.strftime("%Y%m%dT%H%M%S")
    emulated = emulate(folder, workers, args.iterations, args.loss)
    simulated = simulate(workers, args.iterations, seeds, args.loss, host=args.host)
    (folder / "push_times.json").write_text(json.dumps({"emulated": emulated, "simulated": simulated}))
    for row in compare(emulated, simulated):
        print(json.dumps({"loss_pct": args.loss, "host": args.host, "seeds": seeds, **row}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
