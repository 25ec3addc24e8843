"""The results tables: their columns (with units) and append-only, crash-safe writers.

A sweep folder holds

- ``manifest.json``: provenance, written before the first run;
- ``runs.csv``: one row per finished run (ok, timeout or crash), appended the moment it ends;
- ``curves.csv``: long form, one row per (run, evaluation point);
- ``iterations.csv``: long form, one row per (run, iteration) as the PS saw it;
- ``runs/<run_id>/``: the run's raw files (spec, per-host logs and records, counters).

Rows are appended with a flush and an fsync, so a sweep killed at any moment keeps every row it
wrote; a half-written last line (power loss) is dropped when the table is read back.
``docs/results-schema.md`` is generated from :data:`RUNS_COLUMNS` and :data:`CURVES_COLUMNS`.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from transports.base import UserError


class ResultsError(UserError, RuntimeError):
    """A results table does not have the expected columns."""


@dataclasses.dataclass(frozen=True)
class Column:
    """One column of a results table."""

    name: str
    unit: str
    description: str


# Every table's columns are data: harness/running/columns.toml, one section per table.
_COLUMNS = Path(__file__).with_name("columns.toml")


def _section(name: str) -> tuple[Column, ...]:
    """The columns of section ``name`` of :data:`_COLUMNS`, in order."""
    with open(_COLUMNS, "rb") as f:
        table = tomllib.load(f)[name]
    return tuple(Column(col, unit, about) for col, (unit, about) in table.items())


# What every kind of run records of the code and the machine it ran on
# (harness/running/provenance.py).
PROVENANCE_COLUMNS = _section("provenance")
RUNS_COLUMNS = _section("runs") + PROVENANCE_COLUMNS
ITERATIONS_COLUMNS = _section("iterations")
CURVES_COLUMNS = _section("curves")
# Peer-to-peer sweeps (harness.p2p): their own tables, in their own results folders.
P2P_COLUMNS = _section("p2p_runs") + PROVENANCE_COLUMNS
P2P_CURVE_COLUMNS = _section("p2p_curves")
# A simulated run (harness/simulation, docs/simulation.md): its settings lead every table's rows.
SIM_KEY_COLUMNS = _section("sim_key")
SIM_RUNS_COLUMNS = SIM_KEY_COLUMNS + _section("sim_runs") + PROVENANCE_COLUMNS
SIM_ITERATION_COLUMNS = SIM_KEY_COLUMNS + _section("sim_iterations")
SIM_PUSH_COLUMNS = SIM_KEY_COLUMNS + _section("sim_pushes")
# The benchmarks' tables (invoke bench-transport, under .state/bench/transport-<stamp>/).
BENCH_LOOPBACK_COLUMNS = _section("bench_loopback")
LOOPBACK_RUNS_COLUMNS = _section("loopback_runs") + PROVENANCE_COLUMNS
SIM_VALIDATION_COLUMNS = _section("sim_validation")
BENCH_PUSH_COLUMNS = _section("bench_push")


def names(columns: Iterable[Column]) -> list[str]:
    """The column names, in order."""
    return [c.name for c in columns]


def _format(value) -> str:
    if hasattr(value, "item") and not isinstance(value, (list, tuple, dict, str)):
        value = value.item()  # numpy scalars
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, sort_keys=True)
    return str(value)


def _check_header(path: Path, header: list[str]) -> None:
    with open(path, newline="") as f:
        existing = next(csv.reader(f), [])
    if existing != header:
        raise ResultsError(f"{path} has other columns than this version writes; "
                           "write the sweep to a new folder.")


def check_tables(folder: Path, tables: Mapping[str, tuple[Column, ...]]) -> None:
    """Refuse a folder whose tables (file name -> columns) another version of the harness wrote.
    A sweep asks before its first run, so a refused resume costs no run and changes no file."""
    for name, columns in tables.items():
        path = folder / name
        if path.exists() and path.stat().st_size:
            _check_header(path, names(columns))


def append_rows(path: Path, columns: tuple[Column, ...], rows: Iterable[Mapping]) -> None:
    """Append ``rows`` to the CSV at ``path`` (header first if new), then flush and fsync."""
    header = names(columns)
    rows = list(rows)
    for row in rows:
        missing = set(header) - set(row)
        extra = set(row) - set(header)
        if missing or extra:
            raise ResultsError(f"row for {path.name} does not match its schema "
                               f"(missing {sorted(missing)}, unexpected {sorted(extra)}).")
    new = not path.exists() or path.stat().st_size == 0
    if not new:
        _check_header(path, header)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    if new:
        writer.writerow(header)
    for row in rows:
        writer.writerow([_format(row[h]) for h in header])
    with open(path, "a", newline="") as f:
        f.write(buf.getvalue())
        f.flush()
        os.fsync(f.fileno())


def read_rows(path: Path) -> list[dict[str, str]]:
    """Complete rows of a CSV written by :func:`append_rows` (an unterminated last line is dropped)."""
    if not path.exists():
        return []
    text = path.read_text()
    if text and not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
    return list(csv.DictReader(io.StringIO(text)))


# Columns that name things (a run, a commit, a code fingerprint): text, even when a value is all
# digits (a fingerprint such as 265933038540), which pandas would otherwise read as a number.
IDENTITY_COLUMNS = ("run_id", "git_commit", "code_fingerprint", "testbed_fingerprint")


def read_table(path: Path):
    """A table as a pandas DataFrame, its identity columns (:data:`IDENTITY_COLUMNS`) as text."""
    import pandas as pd

    return pd.read_csv(path, dtype={c: str for c in IDENTITY_COLUMNS})


def finished_run_ids(folder: Path) -> set[str]:
    """Ids of the runs that already have a row in ``runs.csv``."""
    return {row["run_id"] for row in read_rows(folder / "runs.csv")}


def drop_rows(path: Path, run_id: str) -> None:
    """Rewrite ``path`` without the rows of ``run_id`` (for partial output of an interrupted run)."""
    rows = read_rows(path)
    keep = [r for r in rows if r["run_id"] != run_id]
    if len(keep) == len(rows):
        return
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(keep)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def schema_markdown() -> str:
    """The Markdown body of ``docs/results-schema.md``."""
    out = []
    for title, columns in (("runs.csv", RUNS_COLUMNS), ("curves.csv", CURVES_COLUMNS),
                           ("iterations.csv", ITERATIONS_COLUMNS),
                           ("runs.csv of a peer-to-peer sweep", P2P_COLUMNS),
                           ("curves.csv of a peer-to-peer sweep", P2P_CURVE_COLUMNS),
                           ("runs.csv of a simulation", SIM_RUNS_COLUMNS),
                           ("iterations.csv of a simulation", SIM_ITERATION_COLUMNS),
                           ("pushes.csv of a simulation", SIM_PUSH_COLUMNS),
                           ("loopback.csv of bench-transport", BENCH_LOOPBACK_COLUMNS),
                           ("runs.csv of bench-transport's loopback part",
                            LOOPBACK_RUNS_COLUMNS),
                           ("push_times.csv of bench-transport", BENCH_PUSH_COLUMNS),
                           ("validation.csv of the simulator's validation",
                            SIM_VALIDATION_COLUMNS)):
        out += [f"## `{title}`", "", "| column | unit | meaning |", "|---|---|---|"]
        out += [f"| `{c.name}` | {c.unit} | {c.description} |" for c in columns]
        out.append("")
    return "\n".join(out)
