"""Run a plan of many runs into one results folder, resumably.

``run_plan(plan, folder)`` writes the manifest (provenance) before the first run, skips every run
that already has a row in ``runs.csv``, runs the rest in a shuffled order (seed recorded) grouped
so that runs sharing a topology share one live network (only the loss rate changes between them),
appends each run's rows the moment it ends, and reports progress. Killed at any moment, it keeps
every finished row; the same command resumes; a finished sweep re-run does nothing.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

from harness import results
from harness.presets import Plan
from harness.runfiles import RunFiles
from harness.runner import execute, git_state, spawn_forked
from harness.spec import RunSpec
from harness.zygote import Zygote
from topologies.network import Testbed


class SweepError(RuntimeError):
    """The results folder cannot take this sweep."""


def _version(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True).stdout.splitlines()[0].strip()
    except (OSError, IndexError):
        return "unknown"


def provenance() -> dict:
    """Versions of everything that shapes a result, and the project's git state."""
    commit, dirty = git_state()
    import mininet.net
    import torch

    def pkg(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "unknown"

    return {
        "git_commit": commit, "git_dirty": dirty, "kernel": platform.release(),
        "python": platform.python_version(), "mininet": mininet.net.VERSION,
        "openvswitch": _version(["ovs-vswitchd", "--version"]), "os_ken": pkg("os-ken"),
        "torch": torch.__version__, "numpy": pkg("numpy"), "pandas": pkg("pandas"),
        "host": platform.node(), "command": " ".join(sys.argv),
    }


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


def _network_dir(spec: RunSpec) -> str:
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
                 "plugins": plan.plugins,
                 "base": plan.base.as_dict()},
        "run_ids": ids, "specs": [s.as_dict() for s in specs], "provenance": provenance(),
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
            "runs_added": len(added), "dimensions": dims, "provenance": provenance()})
    path.write_text(json.dumps(old, indent=1, default=list))


def order(specs: list[RunSpec], seed: int) -> list[list[RunSpec]]:
    """Group runs by the network they need, shuffling groups and runs with ``seed``."""
    rng = random.Random(seed)
    groups: dict[tuple, list[RunSpec]] = {}
    for spec in specs:
        groups.setdefault(spec.network_key, []).append(spec)
    out = list(groups.values())
    rng.shuffle(out)
    for group in out:
        rng.shuffle(group)
    return out


def _fmt_s(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def run_plan(plan: Plan, folder: Path, progress: Callable[[str], None] = print) -> Path:
    """Run every unfinished run of ``plan`` into ``folder``; return ``folder``."""
    specs = plan.specs()
    _write_manifest(plan, specs, folder)
    done = results.finished_run_ids(folder)
    todo = [s for s in specs if s.run_id not in done]
    if not todo:
        progress(f"all {len(specs)} runs of {folder} are done; nothing to run.")
        return folder
    progress(f"{len(todo)} of {len(specs)} runs to go ({len(done)} already done) -> {folder}")
    finished, run_times, overheads, training = 0, [], [], 0.0
    sweep_t0 = time.monotonic()
    network_s = 0.0
    for group in order(todo, plan.order_seed):
        network = group[0].network
        net_dir = folder / "network" / _network_dir(group[0])
        t_up = time.monotonic()
        with Testbed(network, net_dir) as testbed, Zygote(net_dir, testbed.ledger) as zygote:
            network_s += time.monotonic() - t_up
            spawn = spawn_forked(testbed, zygote)
            for spec in group:
                run_dir = folder / "runs" / spec.run_id
                if run_dir.exists():
                    # An earlier attempt was interrupted: keep its files aside, never overwrite.
                    stamp = time.strftime("%Y%m%dT%H%M%S")
                    RunFiles(run_dir).session.unlink(missing_ok=True)   # a dead run's key: gone
                    shutil.move(run_dir, run_dir.with_name(f"{spec.run_id}.interrupted-{stamp}"))
                for table in ("curves.csv", "iterations.csv"):
                    results.drop_rows(folder / table, spec.run_id)
                delay = f" delay {spec.delay_ms:g} ms" if spec.delay_ms else ""
                cross = f" cross {spec.cross}" if spec.cross != "none" else ""
                if spec.byzantine != "0" or spec.aggregator != "mean":
                    cross += f" byzantine {spec.byzantine} aggregator {spec.aggregator}"
                if spec.compress != "none" or spec.local_steps > 1:
                    cross += f" compress {spec.compress} H={spec.local_steps}"
                    cross += f" reset {spec.error_reset}" if spec.compress != "none" else ""
                loss = spec.loss_model or f"{spec.loss_pct:g}%"
                progress(f"[{finished + 1}/{len(todo)}] {spec.scheme} loss {loss} "
                         f"bw {spec.bottleneck_mbps:g} Mbit/s{delay}{cross} seed {spec.seed} ...")
                t0 = time.monotonic()
                row, curves, iterations = execute(testbed, spec, run_dir, plan.name, spawn)
                training += time.monotonic() - t0 - row["overhead_s"]
                # runs.csv last: its row is what marks the run finished.
                results.append_rows(folder / "curves.csv", results.CURVES_COLUMNS, curves)
                results.append_rows(folder / "iterations.csv", results.ITERATIONS_COLUMNS,
                                    iterations)
                results.append_rows(folder / "runs.csv", results.RUNS_COLUMNS, [row])
                run_times.append(time.monotonic() - t0)
                overheads.append(row["overhead_s"])
                finished += 1
                left = len(todo) - finished
                acc = row["final_accuracy"]
                progress(
                    f"    {row['status']}{' (' + row['reason'][:120] + ')' if row['reason'] else ''}"
                    f" in {_fmt_s(run_times[-1])}: accuracy "
                    f"{'-' if acc is None else f'{acc:.3f}'}, "
                    f"{row['iters_per_s'] or 0:.2f} it/s, measured loss "
                    f"{row['measured_loss_pct']:.2f}%, queue drops {row['queue_drops']}, "
                    f"overhead {row['overhead_s']:.1f}s"
                    f" | {finished} done, {left} left, ETA "
                    f"{_fmt_s(left * sum(run_times) / len(run_times))}")
            t_down = time.monotonic()
        network_s += time.monotonic() - t_down
    total = time.monotonic() - sweep_t0
    progress(f"overhead: {sum(overheads) / len(overheads):.1f}s per run, {network_s:.0f}s bringing "
             f"networks up and down; {100 * (total - training) / total:.1f}% of the sweep's "
             f"{_fmt_s(total)} was not training")
    _draw(folder, progress)
    progress(f"wrote {folder}")
    return folder


def _draw(folder: Path, progress: Callable[[str], None]) -> None:
    """Regenerate the figures and the report (a sweep with no ok run has nothing to draw)."""
    from harness import figures

    try:
        figures.make(folder)
    except results.ResultsError as exc:
        progress(f"no figures: {exc}")
        return
    progress(f"figures in {folder / 'figures'}, report {folder / 'report.md'}")
