"""The published results folders, each loaded once, with what a finding cites of it.

A :class:`Folder` is one committed results folder (``results/...`` holding a ``runs.csv``): its
tables, its manifest, its kind of run, whether today's code still has its fingerprint, and the
citation a finding gives for it (folder, commands, commits, seeds, runs, hours).
:class:`Context` hands out folders by path and caches them for one build.
"""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

import pandas as pd

from harness.reporting import stats, tables
from harness.reporting.report import counted, seed_text
from harness.running import provenance
from harness.running.results import read_table

PROJECT = provenance.PROJECT
RESULTS = PROJECT / "results"


def published_folders(root: Path = PROJECT) -> list[Path]:
    """Every results folder under ``root/results`` that holds a ``runs.csv`` git does not ignore,
    sorted. A benchmark's or a lab's scratch output in an ignored folder (``results/bench/``, say)
    is the workspace's, not the project's: publishing it would cite a folder no clone has. Where
    ``root`` is no git checkout, every folder counts."""
    found = [p for p in (root / "results").glob("**/runs.csv")
             if "runs" not in p.parent.relative_to(root / "results").parts]
    ignored = _git_ignored(root, found)
    return sorted(p.parent for p in found if p not in ignored)


def _git_ignored(root: Path, paths: list[Path]) -> set[Path]:
    """The ``paths`` git ignores in the checkout at ``root`` (none where it is no checkout)."""
    if not paths:
        return set()
    try:
        got = subprocess.run(["git", "-C", str(root), "check-ignore", "--stdin"],
                             input="\n".join(str(p.relative_to(root)) for p in paths),
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return set()
    if got.returncode not in (0, 1):   # 1: nothing ignored; anything else: no checkout
        return set()
    return {root / line for line in got.stdout.splitlines() if line}


class MissingFolder(LookupError):
    """A finding needs a results folder that has not been run (or committed)."""


class Folder:
    """One results folder, read lazily."""

    def __init__(self, path: Path, root: Path = PROJECT) -> None:
        self.path = Path(path)
        self.root = root
        try:
            self.rel = str(self.path.resolve().relative_to(Path(root).resolve()))
        except ValueError:   # a folder outside the project (run-sweep --out elsewhere)
            self.rel = str(self.path)
        if not (self.path / "runs.csv").exists():
            raise MissingFolder(f"`{self.rel}/` has not been run (it holds no runs.csv)")
        self.kind = provenance.folder_kind(self.path)

    @functools.cached_property
    def runs(self) -> pd.DataFrame:
        """Every run of the folder (``runs.csv``)."""
        return read_table(self.path / "runs.csv")

    @functools.cached_property
    def ok(self) -> pd.DataFrame:
        """The ok runs (all of them for a simulation, whose rows are all summaries)."""
        return self.runs[self.runs.status == "ok"] if "status" in self.runs else self.runs

    @functools.cached_property
    def sweep(self) -> tables.Sweep:
        """The tables arranged for reports (PS sweeps)."""
        return tables.load(self.path)

    @functools.cached_property
    def manifest(self) -> dict:
        """The folder's manifest."""
        return provenance.read_manifest(self.path)

    @functools.cached_property
    def freshness(self) -> provenance.Freshness:
        """Whether today's code still has the fingerprint its runs ran with."""
        return provenance.freshness(self.path)

    @property
    def fresh(self) -> bool:
        """True when every run ran with today's code."""
        return self.freshness.fresh

    def commands(self) -> list[str]:
        """The commands that filled the folder, in order (the manifest's record, without the
        options of a pass over it: :func:`~harness.running.provenance.filling_command`)."""
        man = self.manifest
        entries = [man.get("provenance", {})] + [e.get("provenance", {})
                                                 for e in man.get("extended", [])]
        out = []
        for entry in entries:
            cmd = provenance.filling_command(str(entry.get("command", "")).strip())
            if cmd:
                cmd = ".venv/bin/invoke " + cmd.split("invoke ", 1)[1] if "invoke " in cmd \
                    else cmd
                if cmd not in out:
                    out.append(cmd)
        return out

    def seeds(self) -> list[int]:
        """The seeds of its runs."""
        return sorted(int(s) for s in self.ok.seed.unique()) if "seed" in self.ok else []

    def commits(self) -> list[str]:
        """The commits its runs ran at (12 hex digits), or the commit that added the table."""
        if "git_commit" in self.runs:
            return sorted({str(c)[:12] for c in self.runs.git_commit})
        table = self.manifest.get("table_commit", "")
        return [table[:12]] if table else []

    def hours(self) -> float:
        """The runs' own time (wall clock of each run, summed), in hours."""
        return float(self.runs.wall_s.sum()) / 3600 if "wall_s" in self.runs else float("nan")

    def cite(self) -> str:
        """``results/tta/`` (30 runs, seeds 0-2, 0.5 h of runs, commits ...)."""
        hours = self.hours()
        time = (f", {hours:.1f} h of runs" if hours >= 0.1 else
                f", {60 * hours:.0f} min of runs" if hours >= 1 / 120 else
                ", under a minute of runs") if hours == hours else ""
        commits = self.commits()
        commit_text = (f", commit{'s' if len(commits) > 1 else ''} {', '.join(commits)}"
                       if 0 < len(commits) <= 3 else
                       f", {len(commits)} commits (each run's in runs.csv)" if commits else "")
        seeds = self.seeds()
        reps = sorted(int(r) for r in self.ok.repeat.unique()) \
            if not seeds and "repeat" in self.ok else []
        which = (f"repetition{'' if len(reps) == 1 else 's'} {seed_text(reps)}" if reps else
                 f"seed{'' if len(seeds) == 1 else 's'} {seed_text(seeds)}")
        return f"`{self.rel}/` ({counted(len(self.runs), 'run')}, {which}{time}{commit_text})"

    def status(self) -> str:
        """``fresh`` or the stale sentence."""
        return "fresh at today's code" if self.fresh else self.freshness.text()


class Context:
    """The folders of one build, each loaded once."""

    def __init__(self, root: Path = PROJECT) -> None:
        self.root = root
        self._folders: dict[str, Folder] = {}

    def folder(self, rel: str) -> Folder:
        """The folder at ``rel`` (``results/reference``)."""
        rel = rel.rstrip("/")
        if rel not in self._folders:
            self._folders[rel] = Folder(self.root / rel, self.root)
        return self._folders[rel]

    def all(self) -> list[Folder]:
        """Every published folder."""
        return [self.folder(str(p.relative_to(self.root))) for p in published_folders(self.root)]


def est(values, spec: str = ".2f", unit: str = "") -> str:
    """``4.17 [3.90, 4.30]`` for a column of runs."""
    return stats.median_ci(values).fmt(spec, unit)
