"""Bring committed results folders back to today's code: ``invoke refresh``.

A change to the code that produces a kind of run's numbers makes every folder measured with the
old code *stale* (:mod:`harness.running.provenance`); the README may cite only fresh folders. A
folder is not fresh either while runs its manifest records are missing from its table (a sweep
that stopped, or a refresh stopped after its ``--redo stale`` had dropped the stale rows).
:func:`plan` lists the stale and incomplete published folders (the README's first, then the
others by how long their runs took last time) with the commands that filled them, as their
manifests recorded them.
:func:`refresh` runs each folder's runs again through the sweep's own resumable loop
(:func:`harness.running.engine.run_plan`) with the redo ``stale,failed,loaded:FRAC``: only the
runs measured with other code, the failed ones and those during which other processes took more
than ``FRAC`` of the machine run again, and a folder is gone over again (at most ``passes``
times) while any of its runs is still loaded or failed. An interrupted refresh loses nothing: run
it again and it goes on where it stopped.

Which runs: the stale, failed and loaded rows, and every recorded run missing from the table
(a sweep's resumable loop runs whatever its table does not hold). A folder of training runs
through the PS's network reruns exactly the specs its manifest recorded (:func:`recorded_plan`:
today's preset of the same name may plan other runs, such as the blocked reference against the
unblocked one it replaced); any other folder reruns its recorded ``run-sweep`` or
``simulate`` commands into itself. Folders with other commands (the simulator's validation
against the testbed, the benchmarks', a folder that ``invoke publish`` concatenates) are listed
for refreshing by hand. The machine should be otherwise idle: a run during which anything else
used more than ``FRAC`` of it is a run to do again.
"""

from __future__ import annotations

import dataclasses
import shlex
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd

from harness.reporting.publish.context import Folder, published_folders
from harness.running import provenance
from harness.running.presets import Plan
from harness.running.results import read_table
from harness.running.spec import RunSpec
from transports import registry

PROJECT = provenance.PROJECT
# The invoke tasks whose recorded commands a refresh reruns with a redo; only run-sweep draws
# figures on its own (the others always do, and take no --no-figures).
RERUNNABLE = ("run-sweep", "simulate")
# A rerun names its own folder and pass options; a capture belongs to the sweep that asked for
# it, not to the folder's runs.
_DROP_WITH_VALUE = ("--out", "-o", "--capture", "--capture-snaplen", "--capture-mb",
                    *provenance.PASS_WITH_VALUE)


def readme_folders() -> list[str]:
    """The folders the README's generated blocks rest on, in the README's order (refreshed
    first)."""
    from harness.reporting.publish import claims   # the claims import the whole reporting side

    return list(dict.fromkeys(f for rels in claims.readme_folders().values() for f in rels))


class RefreshError(ValueError):
    """A folder named for refreshing is not a published results folder."""


@dataclasses.dataclass(frozen=True)
class Item:
    """One stale or incomplete folder: its stale runs, its runs' hours last time, its
    commands, and the recorded runs missing from its table."""

    rel: str
    stale: int
    runs: int
    hours: float
    commands: tuple[str, ...]   # ``run-sweep ...`` or ``simulate ...`` arguments, as recorded
    recorded: bool = False      # rerun the manifest's own specs (:func:`recorded_plan`)
    missing: int = 0            # runs the manifest records that the table does not hold

    @property
    def by_hand(self) -> bool:
        """Whether this module cannot rerun the folder."""
        return not self.recorded and (not self.commands or any(
            c.split(" ", 1)[0] not in RERUNNABLE for c in self.commands))


@dataclasses.dataclass(frozen=True)
class RecordedPlan(Plan):
    """A plan whose runs are the specs a folder's manifest recorded, whatever today's preset of
    its name would plan."""

    recorded: tuple[RunSpec, ...] = ()

    def specs(self) -> list[RunSpec]:
        """The recorded specs (the plan's plugins loaded first)."""
        if self.plugins:
            registry.use_plugins([PROJECT / p for p in self.plugins])
        return list(self.recorded)


def recorded_plan(folder: Path) -> RecordedPlan | None:
    """The plan of ``folder``'s recorded runs, or None when its manifest does not give back the
    same run ids today (a spec that no longer validates, or whose id changed)."""
    man = provenance.read_manifest(folder)
    plan, specs = man.get("plan", {}), man.get("specs", [])
    try:
        recorded = tuple(RunSpec(**s) for s in specs)
        base = RunSpec(**plan["base"])
    except (TypeError, ValueError, KeyError):
        return None
    if not recorded or sorted(s.run_id for s in recorded) != sorted(man.get("run_ids", [])):
        return None
    return RecordedPlan(name=plan.get("name", folder.name), transports=(), loss_pcts=(),
                        bottleneck_mbps=(), seeds=tuple(sorted({s.seed for s in recorded})),
                        base=base, order_seed=int(plan.get("order_seed", 0)),
                        blocks=int(plan.get("blocks", 1)),
                        plugins=tuple(plan.get("plugins", ())), recorded=recorded)


def recorded_commands(folder: Path, root: Path = PROJECT) -> tuple[str, ...]:
    """The invoke commands (without ``invoke``) the folder's manifest recorded, in order
    (:meth:`~harness.reporting.publish.context.Folder.commands`)."""
    cmds = Folder(folder, root).commands()
    return tuple(c.split("invoke ", 1)[1].strip() if "invoke " in c else c for c in cmds)


def again(command: str, rel: str, loaded_frac: float) -> list[str]:
    """``command``'s arguments with its output folder made ``rel`` and the redo added."""
    out = provenance.without_options(shlex.split(command), _DROP_WITH_VALUE,
                                     provenance.PASS_ALONE)
    quiet = ["--no-figures"] if out[:1] == ["run-sweep"] else []
    return out + ["--out", rel, *quiet, "--redo", f"stale,failed,loaded:{loaded_frac:g}"]


def plan(folders: Sequence[str] = (), root: Path = PROJECT) -> list[Item]:
    """The stale or incomplete folders among ``folders`` (default: every published one),
    README's first."""
    known = {str(p.relative_to(root)): p for p in published_folders(root)}
    chosen = [f.rstrip("/") for f in folders] or list(known)
    unknown = [f for f in chosen if f not in known]
    if unknown:
        raise RefreshError(f"{unknown[0]} is not a published results folder (one holding a "
                           f"runs.csv under results/); the folders are {', '.join(known)}.")
    items = []
    for rel in chosen:
        path = known[rel]
        if provenance.folder_kind(path) == "simulate" and not recorded_commands(path, root):
            continue
        stale = provenance.stale_run_ids(path)
        missing = provenance.missing_run_ids(path)
        if not stale and not missing:
            continue
        runs = read_table(path / "runs.csv")
        hours = float(runs.wall_s.sum()) / 3600 if "wall_s" in runs else float("nan")
        recorded = provenance.folder_kind(path) == "ps" and recorded_plan(path) is not None
        items.append(Item(rel, len(stale), len(runs), hours, recorded_commands(path, root),
                          recorded, len(missing)))
    first = {rel: i for i, rel in enumerate(readme_folders())}
    return sorted(items, key=lambda it: (first.get(it.rel, len(first)), it.hours, it.rel))


def unfinished(folder: Path, loaded_frac: float) -> int:
    """Runs of ``folder`` that failed or ran while other processes took more than
    ``loaded_frac`` of the machine (what another pass would run again)."""
    runs = read_table(folder / "runs.csv")
    load = runs.other_load_frac.astype(float).fillna(0) if "other_load_frac" in runs \
        else pd.Series(0.0, index=runs.index)
    return int(((load > loaded_frac) | (runs.status != "ok")).sum())


def refresh(items: Sequence[Item], loaded_frac: float = 0.01, passes: int = 3,
            root: Path = PROJECT, say: Callable[[str], None] = print) -> list[str]:
    """Rerun each item's commands into its folder (see the module docstring); return the folders
    left for refreshing by hand."""
    from harness.running import engine

    by_hand = []
    redo = engine.parse_redo(f"stale,failed,loaded:{loaded_frac:g}")
    for item in items:
        if item.by_hand:
            by_hand.append(item.rel)
            continue
        for n in range(1, passes + 1):
            if item.recorded:
                say(f"refresh {item.rel} (pass {n}): its {item.runs} recorded runs")
                engine.run_plan(recorded_plan(root / item.rel), root / item.rel, say,
                                figures=False, redo=redo)
            for command in () if item.recorded else item.commands:
                argv = again(command, item.rel, loaded_frac)
                say(f"refresh {item.rel} (pass {n}): invoke {shlex.join(argv)}")
                subprocess.run([sys.executable, "-m", "invoke", *argv], cwd=root, check=True)
            left = unfinished(root / item.rel, loaded_frac)
            say(f"refresh {item.rel}: {left} runs loaded or not ok after pass {n}")
            if not left:
                break
    return by_hand
