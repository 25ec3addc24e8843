"""The kind of run the testbed was built for: a PS and its workers training over the emulated
incast star (specs: :mod:`harness.running.spec`; plans: :mod:`harness.running.presets`; one run:
:func:`harness.running.runner.execute`).

Runs that need the same network (workers, bottleneck, queue, cross-traffic hosts) share one
live network and its fork server; groups and the runs in them go in a shuffled order whose seed
the manifest records, and a blocked plan runs its blocks one after another, each on a network
of its own.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import random
from pathlib import Path

from harness.running import capture as capture_files
from harness.running import provenance, results
from harness.running.capture import Capture
from harness.running import kinds
from harness.running.engine import SweepError, fmt_s
from harness.running.fingerprint import run_kind
from harness.running.presets import Plan
from harness.running.spec import RunSpec


def network_dir(spec: RunSpec) -> str:
    """The name of the folder (under ``network/``) of the network ``spec`` runs on."""
    wl = "" if spec.worker_link_mbps is None else f"_wl{spec.worker_link_mbps:g}"
    cross = f"_x{spec.n_cross}" if spec.n_cross else ""
    return f"n{spec.n_workers}_bw{spec.bottleneck_mbps:g}{wl}_q{spec.queue_pkts}{cross}"


def order(specs: list[RunSpec], seed: int, block_of=None) -> list[list[RunSpec]]:
    """Group runs by the network they need, shuffling groups and runs with ``seed``.

    ``block_of(seed)`` (a blocked plan's :meth:`~harness.running.presets.Plan.block_of`) cuts each
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


def write_manifest(plan: Plan, specs: list[RunSpec], folder: Path) -> None:
    """Write the manifest of a new folder, or check that the folder holds this sweep (the same
    preset and base; other values of its dimensions extend it)."""
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
                 **({"regimes": [dict(r) for r in plan.regimes]} if plan.regimes else {}),
                 "base": plan.base.as_dict()},
        "run_ids": ids, "specs": [s.as_dict() for s in specs],
        "provenance": provenance.manifest("ps", _other_kinds(specs)),
    }
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(manifest, indent=1))


def _other_kinds(specs: list[RunSpec]) -> list[str]:
    """The kinds of code besides ``ps`` that runs of ``specs`` record (:func:`run_kind`)."""
    return sorted({run_kind(s.pattern) for s in specs} - {"ps"})


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
        old.setdefault("extended", []).append(provenance.extension(
            "ps", _other_kinds(added), runs_added=len(added), dimensions=dims))
    path.write_text(json.dumps(old, indent=1, default=list))


class PsKind(kinds.Kind):
    """PS training on the incast star."""

    name = "ps"
    tables = {"curves.csv": results.CURVES_COLUMNS, "iterations.csv": results.ITERATIONS_COLUMNS,
              "runs.csv": results.RUNS_COLUMNS}

    def groups(self, plan: Plan, todo: list[RunSpec]) -> list[list[RunSpec]]:
        return order(todo, plan.order_seed, plan.block_of)

    def network_dir(self, spec: RunSpec) -> str:
        return network_dir(spec)

    @contextlib.contextmanager
    def network(self, spec: RunSpec, net_dir: Path):
        from harness.hosts.zygote import Zygote
        from harness.running.runner import spawn_forked
        from topologies.testbed.network import Testbed

        with Testbed(spec.network, net_dir) as testbed, \
                Zygote(net_dir, testbed.ledger) as zygote:
            yield testbed, spawn_forked(testbed, zygote)

    def execute(self, site, spec: RunSpec, run_dir: Path, sweep: str,
                capture: Capture | None = None) -> dict[str, list[dict]]:
        from harness.running.runner import execute

        testbed, spawn = site
        row, curves, iterations = execute(testbed, spec, run_dir, sweep, spawn, capture=capture)
        # run_dir is <folder>/runs/<run_id>: the sweep's manifest says which runs have captures
        capture_files.note(run_dir.parent.parent, spec.run_id, capture)
        return {"curves.csv": curves, "iterations.csv": iterations, "runs.csv": [row]}

    def check_capture(self, specs: list[RunSpec], capture: Capture) -> None:
        for spec in specs:
            capture.check_hosts(spec.network.host_names, f"run {spec.run_id}")

    def manifest(self, plan: Plan, specs: list[RunSpec], folder: Path) -> None:
        write_manifest(plan, specs, folder)

    def started(self, spec: RunSpec) -> str:
        delay = f" delay {spec.delay_ms:g} ms" if spec.delay_ms else ""
        cross = f" cross {spec.cross}" if spec.cross != "none" else ""
        if spec.byzantine != "0" or spec.aggregator != "mean":
            cross += f" byzantine {spec.byzantine} aggregator {spec.aggregator}"
        if spec.compress != "none" or spec.local_steps > 1:
            cross += f" compress {spec.compress} H={spec.local_steps}"
            cross += f" reset {spec.error_reset}" if spec.compress != "none" else ""
            cross += " cser" if spec.reset_mode == "cser" else ""
        loss = spec.loss_model or f"{spec.loss_pct:g}%"
        return (f"{spec.scheme} loss {loss} bw {spec.bottleneck_mbps:g} Mbit/s{delay}{cross} "
                f"seed {spec.seed}")

    def ended(self, row: dict) -> str:
        acc = row["final_accuracy"]
        return (f"accuracy {'-' if acc is None else f'{acc:.3f}'}, "
                f"{row['iters_per_s'] or 0:.2f} it/s, measured loss "
                f"{row['measured_loss_pct']:.2f}%, queue drops {row['queue_drops']}, "
                f"overhead {row['overhead_s']:.1f}s")

    def summary(self, done: list, total_s: float, network_s: float) -> str:
        overheads = [d.row["overhead_s"] for d in done]
        training = sum(d.run_s - d.row["overhead_s"] for d in done)
        return (f"overhead: {sum(overheads) / len(overheads):.1f}s per run, "
                f"{network_s:.0f}s bringing networks up and down; "
                f"{100 * (total_s - training) / total_s:.1f}% of the sweep's {fmt_s(total_s)} "
                "was not training")

    def report(self, folder: Path, figures: bool = True) -> list[Path]:
        from harness.reporting import figures as drawing

        return drawing.make(folder, figures)


KIND = PsKind()
