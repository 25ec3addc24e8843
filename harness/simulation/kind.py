"""The simulate kind of run: a named grid of simulated runs, and how the one sweep loop
(:mod:`harness.running.engine`) runs it: no network to bring up, each run one process of the
simulator (:mod:`.driver`), its rows into ``pushes.csv``, ``iterations.csv`` and ``runs.csv``.
Also the simulator's own cost as a benchmark (``invoke bench-simulate``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from harness.running import kinds, results
from harness.simulation.driver import Cell, SimulationError, build, loss_text, plot_segments, run


@dataclasses.dataclass(frozen=True)
class SimPlan:
    """A named grid of simulated runs."""

    kind: ClassVar[str] = "simulate"   # its kind of run (harness.running.kinds)
    name: str
    cells: tuple[Cell, ...]
    description: str = ""

    def specs(self) -> list[Cell]:
        """Every run of the plan, in order."""
        return list(self.cells)


def _fill(columns, row: dict) -> dict:
    """``row`` with every column of the table (what a crashed run did not report: empty)."""
    return {c.name: row.get(c.name) for c in columns}


class SimKind(kinds.Kind):
    """Simulated runs: no network to bring up; each run is one process of the simulator."""

    name = "simulate"
    tables = {"pushes.csv": results.SIM_PUSH_COLUMNS,
              "iterations.csv": results.SIM_ITERATION_COLUMNS,
              "runs.csv": results.SIM_RUNS_COLUMNS}

    @contextlib.contextmanager
    def network(self, spec: Cell, net_dir: Path):
        from harness.running import provenance

        build()
        record = provenance.manifest("simulate")
        yield {"segments": None,
               "stamp": {"git_commit": record["git_commit"], "git_dirty": record["git_dirty"],
                         "code_fingerprint": record["fingerprint"]["digest"],
                         **provenance.run_columns()}}

    def execute(self, site: dict, spec: Cell, run_dir: Path, sweep: str) -> dict[str, list[dict]]:
        from harness.running import provenance

        if spec.scheme == "plot" and site["segments"] is None:
            site["segments"] = plot_segments()
        meter = provenance.LoadMeter()
        meter.start()
        started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        got = run(spec, site["segments"] if spec.scheme == "plot" else None)
        got.summary.update(started_at=started, **site["stamp"], other_load_frac=meter.stop())
        return {"pushes.csv": [_fill(results.SIM_PUSH_COLUMNS, r) for r in got.pushes],
                "iterations.csv": [_fill(results.SIM_ITERATION_COLUMNS, r)
                                   for r in got.iterations],
                "runs.csv": [_fill(results.SIM_RUNS_COLUMNS, got.summary)]}

    def manifest(self, plan: SimPlan, specs: list[Cell], folder: Path) -> None:
        from harness.running import provenance

        path = folder / "manifest.json"
        if not path.exists():
            path.write_text(json.dumps({"kind": "simulate", "preset": plan.name,
                                        "cells": [c.key() for c in specs],
                                        "provenance": provenance.manifest("simulate")}, indent=1))
            return
        # Another grid into the same folder (more workers, another loss): its cells join the
        # folder's with their own command, which a refresh reruns too (as the PS's extensions).
        old = json.loads(path.read_text())
        known = {c.get("run_id") for c in old.get("cells", [])}
        added = [c.key() for c in specs if c.run_id not in known]
        if added:
            old["cells"] = list(old.get("cells", [])) + added
            old.setdefault("extended", []).append(
                provenance.extension("simulate", cells_added=len(added)))
            path.write_text(json.dumps(old, indent=1))

    def started(self, spec: Cell) -> str:
        return (f"{spec.transport} N={spec.workers} {spec.bottleneck_mbps:g} Mbit/s "
                f"loss {loss_text(spec.loss)} seed {spec.seed}")

    def ended(self, row: dict) -> str:
        return (f"mean received fraction {row['mean_recv_frac'] or 0:.3f}, "
                f"{row['virtual_s'] or 0:.4f} virtual s, {row['events'] or 0:,} events in "
                f"{row['wall_s'] or 0:.1f} s, {row['peak_rss_mb'] or 0:.0f} MB")

    def report(self, folder: Path, figures: bool = True) -> list[Path]:
        from harness.simulation import figures as drawing

        return drawing.draw(folder) if figures else []


KIND = SimKind()


def bench(workers: Sequence[int], bandwidth_mbps: float, iterations: int, min_pushes: int = 1024,
          echo=print) -> list[dict]:
    """The simulator's own cost at each N (``ltp``, synchronized pushes, no loss): wall time,
    events, events per second, peak memory, and the PS core's CPU time per datagram (measured
    around the PS endpoint's calls), printed and returned, one row per N. Each N runs
    ``iterations`` iterations, more where N is small (at least ``min_pushes`` pushes in all), so
    every row's time per datagram is an average over many datagrams. A benchmark, not a test: the
    figures depend on the machine and its load."""
    if min_pushes < 0:
        raise SimulationError(f"--min-pushes must be 0 or more, not {min_pushes}.")
    build()
    echo(f"simulator cost: ltp, synchronized pushes, {bandwidth_mbps:g} Mbit/s links, queue 256 "
         f"packets, {iterations} iterations (at least {min_pushes:,} pushes a run)")
    echo(f"  {'N':>6} {'iterations':>10} {'virtual s':>9} {'wall s':>8} {'events':>11} "
         f"{'events/s':>10} {'peak MB':>8} {'wall/virtual':>12} {'PS core us/datagram':>19}")
    rows = []
    for n in workers:
        its = max(iterations, -(-min_pushes // n))
        got = run(Cell(workers=n, bottleneck_mbps=bandwidth_mbps, queue_pkts=256,
                       iterations=its)).summary
        rows.append(got)
        if got["status"] != "ok":
            echo(f"  {n:>6} {its:>10} {got['status']}: {got['reason']}")
            continue
        echo(f"  {n:>6} {its:>10} {got['virtual_s']:9.4f} {got['wall_s']:8.2f} "
             f"{got['events']:11,} {got['events_per_s']:10,.0f} {got['peak_rss_mb']:8.1f} "
             f"{got['wall_s'] / got['virtual_s']:12.0f} {got['ps_core_us_per_datagram']:19.3f}")
    per = [(r["n_workers"], r["ps_core_us_per_datagram"]) for r in rows if r["status"] == "ok"]
    if len(per) > 1:
        (n_lo, lo), (n_hi, hi) = min(per, key=lambda x: x[1]), max(per, key=lambda x: x[1])
        echo(f"  PS core time per datagram: the largest ({hi:.3f} us at N = {n_hi:,}) is "
             f"{hi / lo:.2f}x the smallest ({lo:.3f} us at N = {n_lo:,})")
    return rows
