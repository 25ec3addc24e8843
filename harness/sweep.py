"""Run a plan of many runs into one results folder, resumably.

``run_plan(plan, folder)`` writes the manifest (provenance) before the first run, skips every run
that already has a row in ``runs.csv``, runs the rest in a shuffled order (seed recorded) grouped
so that runs sharing a topology share one live network (only the loss rate changes between them),
appends each run's rows the moment it ends, and reports progress. Killed at any moment, it keeps
every finished row; the same command resumes; a finished sweep re-run does nothing.

One group (one network, its runs in turn) is :func:`run_group`, which writes run folders and
yields each run's rows as it ends; :func:`record` appends them. A local sweep runs the groups one
after another here; ``invoke run-sweep --cluster`` runs the same :func:`run_group` on the nodes
of a Ray cluster and records the rows on the head as they come back (:mod:`harness.cluster`).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import random
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from harness import provenance, results
from harness.presets import Plan
from harness.runfiles import RunFiles
from harness.runner import execute, spawn_forked
from harness.spec import RunSpec
from harness.zygote import Zygote
from topologies.network import Testbed


class SweepError(RuntimeError):
    """The results folder cannot take this sweep."""


def check_folder(folder: Path) -> None:
    """Raise :class:`SweepError` unless ``folder`` is (or can become) a writable directory.

    Nothing is created: a folder that does not exist yet is judged by its nearest existing parent.
    """
    probe = folder
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise SweepError(f"{probe} is a file, so {folder} cannot be a results folder; "
                         "choose another --out.")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise SweepError(f"{probe} is not writable, so results cannot go to {folder}; "
                         "choose another --out.")
    if (folder / "runs.csv").exists() and not os.access(folder / "runs.csv", os.W_OK):
        raise SweepError(f"{folder / 'runs.csv'} is not writable; choose another --out.")


def network_dir(spec: RunSpec) -> str:
    """The name of the folder (under ``network/``) of the network ``spec`` runs on."""
    wl = "" if spec.worker_link_mbps is None else f"_wl{spec.worker_link_mbps:g}"
    cross = f"_x{spec.n_cross}" if spec.n_cross else ""
    return f"n{spec.n_workers}_bw{spec.bottleneck_mbps:g}{wl}_q{spec.queue_pkts}{cross}"


def _write_manifest(plan: Plan, specs: list[RunSpec], folder: Path) -> None:
    path = folder / "manifest.json"
    ids = sorted(s.run_id for s in specs)
    if path.exists():
        old = json.loads(path.read_text())
        if sorted(old["run_ids"]) == ids:
            return
        base = json.loads(json.dumps(plan.base.as_dict()))
        if old["plan"]["name"] != plan.name or old["plan"]["base"] != base:
            raise SweepError(f"{folder} holds a different sweep ({old['plan']['name']}); "
                             "give this one another folder with --out.")
        _extend_manifest(path, old, plan, specs)
        return
    manifest = {
        "created_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "plan": {"name": plan.name, **plan.dimensions(), "order_seed": plan.order_seed,
                 "plugins": plan.plugins, "blocks": plan.blocks,
                 "base": plan.base.as_dict()},
        "run_ids": ids, "specs": [s.as_dict() for s in specs],
        "provenance": provenance.manifest("ps"),
    }
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest, indent=1))


def _extend_manifest(path: Path, old: dict, plan: Plan, specs: list[RunSpec]) -> None:
    """The same preset with the same base, over other values of its dimensions (more seeds,
    another loss rate, a chunk run on its own): the folder's sweep grows to the union. The plan
    in the manifest becomes the union of both grids; each extension keeps its own provenance
    (every row also names its commit)."""
    known = set(old["run_ids"])
    added = [s for s in specs if s.run_id not in known]
    dims = plan.dimensions()
    for name, values in dims.items():
        have = list(old["plan"].get(name, []))
        have += [v for v in (list(values)) if v not in have]
        old["plan"][name] = have
    old["run_ids"] = sorted(known | {s.run_id for s in added})
    old["specs"] += [s.as_dict() for s in added]
    if added:
        old.setdefault("extended", []).append({
            "at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "runs_added": len(added), "dimensions": dims,
            "provenance": provenance.manifest("ps")})
    path.write_text(json.dumps(old, indent=1, default=list))


def order(specs: list[RunSpec], seed: int, block_of=None) -> list[list[RunSpec]]:
    """Group runs by the network they need, shuffling groups and runs with ``seed``.

    ``block_of(seed)`` (a blocked plan's :meth:`~harness.presets.Plan.block_of`) cuts each
    group by block: the blocks run one after another, each on a network of its own."""
    rng = random.Random(seed)
    block_of = block_of or (lambda s: 0)
    groups: dict[tuple, list[RunSpec]] = {}
    for spec in specs:
        groups.setdefault((block_of(spec.seed), spec.network_key), []).append(spec)
    blocks: dict[int, list[list[RunSpec]]] = {}
    for (block, _), group in groups.items():
        blocks.setdefault(block, []).append(group)
    out = []
    for block in sorted(blocks):
        mine = blocks[block]
        rng.shuffle(mine)
        for group in mine:
            rng.shuffle(group)
        out += mine
    return out


def fmt_s(seconds: float) -> str:
    """``75.2`` -> ``1m15s``; ``42`` -> ``42s``."""
    seconds = int(round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


@dataclasses.dataclass
class Started:
    """A run of a group is about to start."""

    spec: RunSpec


@dataclasses.dataclass
class Finished:
    """A run of a group has ended (ok, timeout or crash): its rows, and how long it took."""

    spec: RunSpec
    row: dict
    curves: list[dict]
    iterations: list[dict]
    run_s: float


def set_aside(run_dir: Path) -> None:
    """Move an interrupted attempt's folder aside (``<run_id>.interrupted-<stamp>``): raw files
    are never overwritten."""
    if run_dir.exists():
        stamp = time.strftime("%Y%m%dT%H%M%S")
        RunFiles(run_dir).session.unlink(missing_ok=True)   # a dead run's key: gone
        shutil.move(run_dir, run_dir.with_name(f"{run_dir.name}.interrupted-{stamp}"))


def run_group(group: list[RunSpec], folder: Path, sweep: str) -> Iterator[Started | Finished]:
    """Run ``group`` (runs that share a network) on one live network into ``folder``.

    The network (and its fork server) comes up once, under ``folder/network/``; each run writes
    ``folder/runs/<run_id>/``. Yields :class:`Started` before each run and :class:`Finished` the
    moment it ends; writes no table (the caller appends the rows: :func:`record`). The same code
    runs a local sweep and each group of a cluster sweep (:mod:`harness.cluster`).
    """
    net_dir = folder / "network" / network_dir(group[0])
    with Testbed(group[0].network, net_dir) as testbed, Zygote(net_dir, testbed.ledger) as zygote:
        spawn = spawn_forked(testbed, zygote)
        for spec in group:
            run_dir = folder / "runs" / spec.run_id
            set_aside(run_dir)
            yield Started(spec)
            t0 = time.monotonic()
            row, curves, iterations = execute(testbed, spec, run_dir, sweep, spawn)
            yield Finished(spec, row, curves, iterations, time.monotonic() - t0)


# A sweep folder's tables and their columns, in the order a run's rows are appended.
TABLES = {"curves.csv": results.CURVES_COLUMNS, "iterations.csv": results.ITERATIONS_COLUMNS,
          "runs.csv": results.RUNS_COLUMNS}


def record(folder: Path, done: Finished) -> None:
    """Append a finished run's rows to ``folder``'s tables, dropping partial rows an interrupted
    attempt of it left; runs.csv last: its row is what marks the run finished."""
    for table in ("curves.csv", "iterations.csv"):
        results.drop_rows(folder / table, done.spec.run_id)
    rows = {"curves.csv": done.curves, "iterations.csv": done.iterations, "runs.csv": [done.row]}
    for table, columns in TABLES.items():
        results.append_rows(folder / table, columns, rows[table])


class Progress:
    """The progress lines of a sweep: one as each run starts, one as it ends, with an ETA.

    ``parallel`` runs at a time (the testbeds of a cluster) divide the ETA.
    """

    def __init__(self, total: int, say: Callable[[str], None], parallel: int = 1) -> None:
        self.total, self.say, self.parallel = total, say, max(1, parallel)
        self.started: set[str] = set()   # a run started again (its node was lost) counts once
        self.finished = 0
        self.run_times: list[float] = []
        self.overheads: list[float] = []

    def starting(self, spec: RunSpec, where: str = "") -> None:
        """Say that ``spec`` starts (``where``: on which node)."""
        self.started.add(spec.run_id)
        delay = f" delay {spec.delay_ms:g} ms" if spec.delay_ms else ""
        cross = f" cross {spec.cross}" if spec.cross != "none" else ""
        if spec.byzantine != "0" or spec.aggregator != "mean":
            cross += f" byzantine {spec.byzantine} aggregator {spec.aggregator}"
        if spec.compress != "none" or spec.local_steps > 1:
            cross += f" compress {spec.compress} H={spec.local_steps}"
            cross += f" reset {spec.error_reset}" if spec.compress != "none" else ""
        loss = spec.loss_model or f"{spec.loss_pct:g}%"
        self.say(f"[{len(self.started)}/{self.total}] {spec.scheme} loss {loss} "
                 f"bw {spec.bottleneck_mbps:g} Mbit/s{delay}{cross} seed {spec.seed}{where} ...")

    def ended(self, done: Finished, where: str = "") -> None:
        """Say how ``done`` went and how long the rest should take."""
        row = done.row
        self.run_times.append(done.run_s)
        self.overheads.append(row["overhead_s"])
        self.finished += 1
        left = self.total - self.finished
        acc = row["final_accuracy"]
        eta = left * sum(self.run_times) / len(self.run_times) / self.parallel
        self.say(
            f"    {row['status']}{' (' + row['reason'][:120] + ')' if row['reason'] else ''}"
            f" in {fmt_s(done.run_s)}{where}: accuracy "
            f"{'-' if acc is None else f'{acc:.3f}'}, "
            f"{row['iters_per_s'] or 0:.2f} it/s, measured loss "
            f"{row['measured_loss_pct']:.2f}%, queue drops {row['queue_drops']}, "
            f"overhead {row['overhead_s']:.1f}s"
            f" | {self.finished} done, {left} left, ETA {fmt_s(eta)}")


def unfinished(plan: Plan, folder: Path, progress: Callable[[str], None]) -> list[RunSpec]:
    """Write (or extend) the manifest and return the runs of ``plan`` without a row yet."""
    specs = plan.specs()
    results.check_tables(folder, TABLES)
    _write_manifest(plan, specs, folder)
    done = results.finished_run_ids(folder)
    todo = [s for s in specs if s.run_id not in done]
    if not todo:
        progress(f"all {len(specs)} runs of {folder} are done; nothing to run.")
    else:
        progress(f"{len(todo)} of {len(specs)} runs to go ({len(done)} already done) -> {folder}")
    return todo


def run_plan(plan: Plan, folder: Path, progress: Callable[[str], None] = print) -> Path:
    """Run every unfinished run of ``plan`` into ``folder``; return ``folder``."""
    todo = unfinished(plan, folder, progress)
    if not todo:
        return folder
    said = Progress(len(todo), progress)
    training = network_s = 0.0
    sweep_t0 = time.monotonic()
    for group in order(todo, plan.order_seed, plan.block_of):
        in_group, run_s = 0.0, 0.0
        t = time.monotonic()
        for event in run_group(group, folder, plan.name):
            in_group += time.monotonic() - t
            if isinstance(event, Started):
                said.starting(event.spec)
            else:
                record(folder, event)
                said.ended(event)
                run_s += event.run_s
                training += event.run_s - event.row["overhead_s"]
            t = time.monotonic()
        in_group += time.monotonic() - t   # the network coming down
        network_s += in_group - run_s
    total = time.monotonic() - sweep_t0
    progress(f"overhead: {sum(said.overheads) / len(said.overheads):.1f}s per run, "
             f"{network_s:.0f}s bringing networks up and down; "
             f"{100 * (total - training) / total:.1f}% of the sweep's {fmt_s(total)} was not "
             "training")
    draw(folder, progress)
    progress(f"wrote {folder}")
    return folder


def draw(folder: Path, progress: Callable[[str], None]) -> None:
    """Regenerate the figures and the report (a sweep with no ok run has nothing to draw)."""
    from harness.reporting import figures

    try:
        figures.make(folder)
    except results.ResultsError as exc:
        progress(f"no figures: {exc}")
        return
    progress(f"figures in {folder / 'figures'}, report {folder / 'report.md'}")
