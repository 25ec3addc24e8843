"""The simulator against the testbed: the same synchronized pushes, emulated and simulated.

Emulated: ``invoke bench-transport``'s cell (:func:`harness.bench.run.run_cell`): every worker pulls
the parameters, the PS releases them all at one instant and gathers; the push time is the gather's
end minus the release, per iteration. Simulated: the same scenario (``--scenario push``) with the
same link rate, queue and loss, over several seeds. The targets (issue 16): the simulated median
within 15 % of the emulated one and the p99 within 25 %. ``ltp`` is compared with the core in the
simulator, ``tcp-cubic`` with the simulator's TCP reference model (``tcp-ref``, issue 28).

    sudo flock /work/emu.lock .venv/bin/python -m harness.simulation.validate --iterations 20
    --loss 0 --transports ltp,tcp-cubic --workers 8,16,32
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from harness.running.results import SIM_VALIDATION_COLUMNS, append_rows, read_rows
from harness.simulation import driver as sim

MEDIAN_TOLERANCE = 0.15
P99_TOLERANCE = 0.25
# The testbed's scheme -> the simulator's model of it.
SIMULATED = {"ltp": "ltp", "tcp-cubic": "tcp-ref"}
FOLDER = Path(__file__).resolve().parents[2] / "results" / "simulate-validation"
TABLE = "validation.csv"


def emulate(folder: Path, workers: Sequence[int], iterations: int, loss_pct: float = 0.0,
            bandwidth_mbps: float = 100.0, queue_pkts: int = 64,
            slug: str = "ltp") -> dict[int, list[float]]:
    """Push times of ``slug`` on the testbed, per number of workers (one testbed, the largest N)."""
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
            cell = run_cell(tb, zygote, folder / f"{slug}-{n}", slug, iterations, workers=n)
            if cell.status != "ok":
                raise RuntimeError(f"the emulated cell of {n} workers ended {cell.status}: {cell.reason}")
            out[n] = cell.push_s
    return out


def simulate(workers: Sequence[int], iterations: int, seeds: Sequence[int], loss_pct: float = 0.0,
             bandwidth_mbps: float = 100.0, queue_pkts: int = 64, host: str = "ideal",
             transport: str = "ltp") -> dict[int, list[float]]:
    """Push times of ``transport`` in the simulator, per number of workers, all seeds pooled."""
    sim.build()
    out = {}
    for n in workers:
        pushes = []
        for seed in seeds:
            got = sim.run(sim.Cell(transport=transport, workers=n, bottleneck_mbps=bandwidth_mbps,
                                   queue_pkts=queue_pkts,
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
    p.add_argument("--transports", default="ltp",
                   help=f"comma-separated, of {', '.join(SIMULATED)}")
    p.add_argument("--folder", type=Path, default=FOLDER)
    args = p.parse_args(argv)
    workers = [int(x) for x in args.workers.split(",")]
    seeds = [int(x) for x in args.seeds.split(",")]
    slugs = args.transports.split(",")
    unknown = [x for x in slugs if x not in SIMULATED]
    if unknown:
        p.error(f"no simulated model of {', '.join(unknown)}; choose from {', '.join(SIMULATED)}")
    args.folder.mkdir(parents=True, exist_ok=True)
    for slug in slugs:   # one testbed per scheme; each scheme's rows are kept as it ends
        done = {int(r["n_workers"]) for r in read_rows(args.folder / TABLE)
                if r["transport"] == slug and float(r["loss_pct"]) == args.loss
                and r["host"] == args.host}
        todo = [n for n in workers if n not in done]
        if not todo:
            continue
        raw = args.folder / "raw" / f"{slug}-loss{args.loss:g}-{time.strftime('%Y%m%dT%H%M%S')}"
        emulated = emulate(raw, todo, args.iterations, args.loss, slug=slug)
        simulated = simulate(todo, args.iterations, seeds, args.loss, host=args.host,
                             transport=SIMULATED[slug])
        (raw / "push_times.json").write_text(json.dumps({"emulated": emulated,
                                                         "simulated": simulated}))
        rows = [table_row(slug, args.loss, args.host, seeds, row)
                for row in compare(emulated, simulated)]
        append_rows(args.folder / TABLE, SIM_VALIDATION_COLUMNS, rows)
        for row in rows:
            print(json.dumps(row), flush=True)
    return 0


def table_row(slug: str, loss_pct: float, host: str, seeds: Sequence[int], row: dict) -> dict:
    """A row of ``validation.csv``: the comparison of one N, stamped with the code it ran."""
    from harness.running.fingerprint import fingerprint
    from harness.running.provenance import git_state

    return {"transport": slug, "loss_pct": loss_pct, "host": host,
            "seeds": "+".join(str(s) for s in seeds), **row, "git_commit": git_state()[0],
            "code_fingerprint": fingerprint("simulate").digest,
            "testbed_fingerprint": fingerprint("ps").digest}


if __name__ == "__main__":
    raise SystemExit(main())
