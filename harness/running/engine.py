"""The one sweep loop: a plan of many runs into one results folder, resumably, for every kind
of run (:mod:`harness.running.kinds`).

``run_plan(plan, folder)`` writes the manifest (provenance) before the first run, skips every run
that already has a row in ``runs.csv``, runs the rest in the kind's order, grouped so that runs
sharing a network share one live network, appends each run's rows the moment it ends, reports
progress, and last draws the figures and the report. Killed at any moment, it keeps every
finished row; the same command resumes; a finished sweep run again does nothing.

One group (one network, its runs in turn) is :func:`run_group`, which writes run folders and yields
each run's rows as it ends; :func:`record` appends them. A local sweep runs the groups one after
another here; ``invoke run-sweep --cluster`` runs the same :func:`run_group` on the nodes of a Ray
cluster and records the rows on the head as they come back (:mod:`harness.running.cluster`).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from harness.running import results
from harness.running import kinds
from transports.base import UserError


class SweepError(UserError, RuntimeError):
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


@dataclasses.dataclass(frozen=True)
class Redo:
    """Which finished runs a sweep runs again before it resumes (``invoke run-sweep --redo``):
    those that ran with other code than today's (``stale``), those during which other processes
    used more than ``loaded`` of the machine's CPU (``loaded:FRAC``), those not ok (``failed``).
    Their rows leave every table of the folder (git keeps the old ones); their run folders are
    set aside when they run again. Tables an older harness wrote (other columns) are begun
    again with today's columns when every run is to run again."""

    stale: bool = False
    loaded: float | None = None
    failed: bool = False

    def __bool__(self) -> bool:
        return self.stale or self.loaded is not None or self.failed

    def wants(self, row: dict, stale: set[str]) -> bool:
        """Whether the run of ``runs.csv`` row ``row`` runs again (``stale``: the stale ids)."""
        load = row.get("other_load_frac") or "0"
        return (self.stale and row["run_id"] in stale) or \
            (self.loaded is not None and float(load) > self.loaded) or \
            (self.failed and row.get("status") != "ok")

    def text(self) -> str:
        """What it asks for, as the option's text."""
        return ",".join((["stale"] if self.stale else []) + (["failed"] if self.failed else [])
                        + ([f"loaded:{self.loaded:g}"] if self.loaded is not None else []))


def parse_redo(text: str | None) -> Redo:
    """``"stale,loaded:0.01,failed"`` (any of the three, comma-separated) -> :class:`Redo`."""
    out: dict = {}
    for item in filter(None, (t.strip() for t in (text or "").split(","))):
        name, _, value = item.partition(":")
        if name in ("stale", "failed") and not value:
            out[name] = True
            continue
        try:
            limit = float(value) if name == "loaded" else None
        except ValueError:
            limit = None
        if limit is None or not 0 <= limit < 1:
            raise SweepError(f"--redo {item!r}: write stale, failed or loaded:FRAC (FRAC the "
                             "other processes' CPU share above which a run runs again, e.g. "
                             "loaded:0.01), comma-separated.")
        out["loaded"] = limit
    return Redo(**out)


def redo_ids(kind: kinds.Kind, folder: Path, redo: Redo | None) -> set[str]:
    """The finished runs of ``folder`` that ``redo`` names (nothing is written).

    Raises :class:`SweepError` where the folder's tables have older columns and ``redo`` does
    not name every run: such tables can only be begun again."""
    runs = folder / "runs.csv"
    if not redo or not runs.exists():
        return set()
    from harness.running.provenance import stale_run_ids

    stale = stale_run_ids(folder) if redo.stale else set()
    rows = results.read_rows(runs)
    ids = {row["run_id"] for row in rows if redo.wants(row, stale)}
    try:
        results.check_tables(folder, kind.tables)
    except results.ResultsError:
        if len(ids) < len({row["run_id"] for row in rows}):
            raise SweepError(f"{folder}'s tables have other columns than this version writes, "
                             "so --redo must run all its runs again (stale does when every "
                             "run ran with older code); otherwise write to a new folder.") from None
    return ids


def take_out(kind: kinds.Kind, folder: Path, ids: set[str]) -> None:
    """Rewrite ``folder``'s tables (today's columns) without the rows of runs ``ids``, each
    through a temporary file and a rename; runs.csv last, as its rows mark runs finished."""
    for table, columns in kind.tables.items():
        path = folder / table
        rows = results.read_rows(path) if path.exists() else []
        keep = [row for row in rows if row["run_id"] not in ids]
        if len(keep) < len(rows):
            tmp = path.with_name(path.name + ".redo")
            tmp.unlink(missing_ok=True)
            results.append_rows(tmp, columns, keep)
            os.replace(tmp, path)


def redo_runs(kind: kinds.Kind, folder: Path, redo: Redo | None,
              progress: Callable[[str], None], ids: set[str] | None = None) -> int:
    """Take the runs ``redo`` names (``ids``, if the caller already asked :func:`redo_ids`) out
    of ``folder``'s tables, so the sweep runs them again; return how many."""
    ids = redo_ids(kind, folder, redo) if ids is None else ids
    if ids:
        take_out(kind, folder, ids)
    if redo:
        progress(f"{len(ids)} finished runs of {folder} run again ({redo.text()})")
    return len(ids)


def fmt_s(seconds: float) -> str:
    """``75.2`` -> ``1m15s``; ``42`` -> ``42s``."""
    seconds = int(round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


@dataclasses.dataclass
class Started:
    """A run of a group is about to start."""

    spec: object


@dataclasses.dataclass
class Finished:
    """A run of a group has ended (ok, timeout or crash): its rows by table, and how long it
    took."""

    spec: object
    rows: dict[str, list[dict]]
    run_s: float

    @property
    def row(self) -> dict:
        """Its ``runs.csv`` row."""
        return self.rows["runs.csv"][0]


def set_aside(run_dir: Path) -> None:
    """Move an interrupted attempt's folder aside (``<run_id>.interrupted-<stamp>``): raw files
    are never overwritten."""
    if run_dir.exists():
        stamp = time.strftime("%Y%m%dT%H%M%S")
        shutil.move(run_dir, run_dir.with_name(f"{run_dir.name}.interrupted-{stamp}"))


def run_group(kind: kinds.Kind, group: list, folder: Path, sweep: str,
              capture=None) -> Iterator[Started | Finished]:
    """Run ``group`` (runs of ``kind`` that share a network) on one live network into ``folder``.

    The network comes up once, under ``folder/network/``; each run writes
    ``folder/runs/<run_id>/``. Yields :class:`Started` before each run and :class:`Finished` the
    moment it ends; writes no table (the caller appends the rows: :func:`record`). The same code
    runs a local sweep and each group of a cluster sweep (:mod:`harness.running.cluster`).
    ``capture`` (a :class:`~harness.running.capture.Capture`, checked by
    :meth:`~harness.running.kinds.Kind.check_capture`) goes to every run's ``execute``.
    """
    net_dir = folder / "network" / kind.network_dir(group[0])
    with kind.network(group[0], net_dir) as site:
        for spec in group:
            run_dir = folder / "runs" / spec.run_id
            set_aside(run_dir)
            yield Started(spec)
            t0 = time.monotonic()
            extra = {"capture": capture} if capture is not None else {}
            rows = kind.execute(site, spec, run_dir, sweep, **extra)
            yield Finished(spec, rows, time.monotonic() - t0)


def record(kind: kinds.Kind, folder: Path, done: Finished) -> None:
    """Append a finished run's rows to ``folder``'s tables, dropping partial rows an interrupted
    attempt of it left; runs.csv last: its row is what marks the run finished."""
    for table in kind.tables:
        if table != "runs.csv":
            results.drop_rows(folder / table, done.spec.run_id)
    for table, columns in kind.tables.items():
        results.append_rows(folder / table, columns, done.rows.get(table, []))


class Progress:
    """The progress lines of a sweep: one as each run starts, one as it ends, with an ETA.

    ``parallel`` runs at a time (the testbeds of a cluster) divide the ETA.
    """

    def __init__(self, kind: kinds.Kind, total: int, say: Callable[[str], None],
                 parallel: int = 1) -> None:
        self.kind, self.total, self.say, self.parallel = kind, total, say, max(1, parallel)
        self.started: set[str] = set()   # a run started again (its node was lost) counts once
        self.finished = 0
        self.run_times: list[float] = []
        self.done: list[Finished] = []

    def starting(self, spec, where: str = "") -> None:
        """Say that ``spec`` starts (``where``: on which node)."""
        self.started.add(spec.run_id)
        self.say(f"[{len(self.started)}/{self.total}] {self.kind.started(spec)}{where} ...")

    def ended(self, done: Finished, where: str = "") -> None:
        """Say how ``done`` went and how long the rest should take."""
        row = done.row
        self.run_times.append(done.run_s)
        self.done.append(done)
        self.finished += 1
        left = self.total - self.finished
        eta = left * sum(self.run_times) / len(self.run_times) / self.parallel
        reason = f" ({row['reason'][:120]})" if row.get("reason") else ""
        self.say(f"    {row['status']}{reason} in {fmt_s(done.run_s)}{where}: "
                 f"{self.kind.ended(row)} | {self.finished} done, {left} left, ETA {fmt_s(eta)}")


def unfinished(plan, folder: Path, progress: Callable[[str], None]) -> list:
    """Write (or extend) the manifest and return the runs of ``plan`` without a row yet."""
    kind = kinds.of(plan.kind)
    specs = plan.specs()
    results.check_tables(folder, kind.tables)
    folder.mkdir(parents=True, exist_ok=True)
    kind.manifest(plan, specs, folder)
    done = results.finished_run_ids(folder)
    todo = [s for s in specs if s.run_id not in done]
    if not todo:
        progress(f"all {len(specs)} runs of {folder} are done; nothing to run.")
    else:
        progress(f"{len(todo)} of {len(specs)} runs to go ({len(done)} already done) -> {folder}")
    return todo


def check_capture(plan, capture) -> None:
    """Raise :class:`~harness.running.capture.CaptureError` unless every run of ``plan`` can
    capture the hosts ``capture`` names (``None``: no capture, nothing to check)."""
    if capture is not None:
        kinds.of(plan.kind).check_capture(plan.specs(), capture)


def run_plan(plan, folder: Path, progress: Callable[[str], None] = print,
             figures: bool = True, redo: Redo | None = None, capture=None) -> Path:
    """Run every unfinished run of ``plan`` into ``folder`` (first taking out the finished ones
    ``redo`` names), then its report (and, unless ``figures`` is false, its figures); return
    ``folder``. ``capture`` (:class:`~harness.running.capture.Capture`) records packets of the
    hosts it names in every run this call makes; like ``figures`` it is no run parameter."""
    kind = kinds.of(plan.kind)
    check_capture(plan, capture)   # before anything is written
    redo_runs(kind, folder, redo, progress)
    todo = unfinished(plan, folder, progress)
    if not todo:
        return folder
    said = Progress(kind, len(todo), progress)
    network_s = 0.0
    sweep_t0 = time.monotonic()
    for group in kind.groups(plan, todo):
        in_group, run_s = 0.0, 0.0
        t = time.monotonic()
        for event in run_group(kind, group, folder, plan.name, capture):
            in_group += time.monotonic() - t
            if isinstance(event, Started):
                said.starting(event.spec)
            else:
                record(kind, folder, event)
                said.ended(event)
                run_s += event.run_s
            t = time.monotonic()
        in_group += time.monotonic() - t   # the network coming down
        network_s += in_group - run_s
    total = time.monotonic() - sweep_t0
    progress(kind.summary(said.done, total, network_s)
             or f"{len(todo)} runs in {fmt_s(total)}, {network_s:.0f}s bringing networks up "
                "and down")
    draw(kind, folder, progress, figures)
    progress(f"wrote {folder}")
    return folder


def draw(kind: kinds.Kind, folder: Path, progress: Callable[[str], None],
         figures: bool = True) -> None:
    """Regenerate the report and, with ``figures``, the figures (a sweep with no ok run has
    nothing to draw)."""
    try:
        written = kind.report(folder, figures)
    except results.ResultsError as exc:
        progress(f"no figures: {exc}")
        return
    if written:
        progress(f"figures and report in {folder}")
