"""A sweep's tables, read back and arranged for figures and the report (never the raw files).

:func:`load` reads ``runs.csv``, ``curves.csv`` and ``iterations.csv`` of a sweep folder into a
:class:`Sweep`: every run, the ok runs with derived columns (speedup over ``tcp-cubic``, per
iteration rates), the schemes in registry order with their colours and markers, and the
*conditions*: the settings other than scheme, loss and seed that vary in the sweep (bottleneck
rate, delay, workers, queue, loss model, cross traffic, synchronisation mode, fault), which
figures use as facets.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd

from harness.reporting import stats
from harness.running.results import ResultsError, read_table
from transports import registry

BASELINE = "tcp-cubic"
# Settings that can vary across a sweep besides scheme, loss rate and seed, with their labels.
# ``loss_kind`` is derived: the loss model without its mean (uniform, or ge with its burst length,
# or get with its burst duration).
CONDITION_COLUMNS = {"bottleneck_mbps": "{:g} Mbit/s", "delay_ms": "+{:g} ms one way",
                     "n_workers": "{:g} workers", "queue_pkts": "queue {:g}",
                     "loss_kind": "{} loss", "cross": "cross {}", "sync": "{}",
                     "fault": "fault {}", "byzantine": "byzantine {}", "aggregator": "{}",
                     "compress": "compress {}", "local_steps": "H={:g}",
                     "error_reset": "reset {:g}", "reset_mode": "{}", "holdout": "holdout {:g}",
                     "pattern": "{}"}
CONDITION_DEFAULTS = {"loss_kind": "uniform", "cross": "none", "sync": "bsp", "fault": "none",
                      "byzantine": "0", "aggregator": "mean", "compress": "none",
                      "local_steps": 1, "error_reset": 1, "reset_mode": "drop", "holdout": 0,
                      "pattern": "ps"}
# Conditions with figures and a report section of their own, not the generic regime facets.
OWN_SECTIONS = ("bottleneck_mbps", "sync", "fault", "byzantine", "aggregator", "compress",
                "local_steps", "error_reset", "reset_mode", "holdout")


def loss_kind(model_text: str) -> str:
    """``ge:loss=5,burst=4`` -> ``ge burst=4``; ``get:loss=5,burst_ms=2`` -> ``get burst_ms=2``;
    ``uniform:5`` -> ``uniform``."""
    kind, _, params = str(model_text).partition(":")
    rest = [p for p in params.split(",") if p and not p.startswith("loss=")]
    if kind in ("", "nan", "uniform"):
        return "uniform"
    return kind + (" " + ",".join(rest) if rest else "")
# Per-run metrics divided by the iterations the run completed, for figures that compare runs of
# different lengths.
PER_ITERATION = ("retransmits", "queue_drops", "early_closes", "retx_avoided")


def slug_of(scheme: str) -> str:
    """The transport slug of a scheme (``ltp+filler=zero`` -> ``ltp``)."""
    return scheme.split("+", 1)[0]


def is_tcp(scheme: str) -> bool:
    """True for the kernel TCP schemes."""
    return slug_of(scheme).startswith("tcp-")


@dataclasses.dataclass
class Sweep:
    """A sweep's tables and how to draw its schemes."""

    folder: Path
    runs: pd.DataFrame      # every run, any status
    ok: pd.DataFrame        # ok runs, with derived columns
    curves: pd.DataFrame    # evaluation points of ok runs
    iters: pd.DataFrame     # per-iteration rows of ok runs
    order: list[str]        # schemes, registry order first
    palette: dict[str, str]
    markers: dict[str, str]
    names: dict[str, str]
    varying: list[str]      # condition columns with more than one value
    block_of: dict[int, int] | None = None
    """seed -> block in a blocked sweep (its manifest's plan cut the seeds into blocks, each
    run on a testbed of its own): its cells are summarised over blocks (:func:`stats.blocked`)."""

    def cond_label(self, row) -> str:
        """The facet label of a row (or of a dict of condition values)."""
        parts = [CONDITION_COLUMNS[c].format(row[c]) for c in self.varying
                 if not (c == "delay_ms" and not row[c])
                 and not (c in CONDITION_DEFAULTS and row[c] == CONDITION_DEFAULTS[c])]
        return ", ".join(parts) or "all runs"

    def conditions(self) -> list[tuple]:
        """Every combination of the varying condition columns present, sorted."""
        if not self.varying:
            return [()]
        return sorted(self.ok[self.varying].drop_duplicates().itertuples(index=False, name=None))

    def at(self, frame: pd.DataFrame, cond: tuple) -> pd.DataFrame:
        """The rows of ``frame`` under condition ``cond`` (see :meth:`conditions`)."""
        mask = pd.Series(True, index=frame.index)
        for col, value in zip(self.varying, cond):
            mask &= frame[col] == value
        return frame[mask]

    def label(self, cond: tuple) -> str:
        """The label of condition ``cond``."""
        return self.cond_label(dict(zip(self.varying, cond)))

    def estimate(self, frame: pd.DataFrame, scheme: str, column: str) -> stats.Estimate:
        """Median and interval of ``column`` over the runs of ``scheme`` in ``frame`` (over its
        blocks in a blocked sweep)."""
        return self.ci(frame[frame.scheme == scheme], column)

    def ci(self, frame: pd.DataFrame, column: str) -> stats.Estimate:
        """Median and interval of ``column`` over the runs of ``frame`` (one cell), over their
        blocks in a blocked sweep."""
        if self.block_of:
            return stats.blocked(stats.by_seed(frame, column), self.block_of)
        return stats.median_ci(frame[column])

    def compare(self, a_name: str, a: pd.Series, b_name: str, b: pd.Series,
                **kw) -> stats.Verdict:
        """:func:`stats.compare`, by block in a blocked sweep."""
        return stats.compare(a_name, a, b_name, b, block_of=self.block_of, **kw)

    def best(self, cells: dict, higher_is_better: bool = True) -> tuple[list[str], str]:
        """:func:`stats.best`, by block in a blocked sweep."""
        return stats.best(cells, higher_is_better, block_of=self.block_of)

    def ratio(self, mine: pd.Series, base: pd.Series) -> stats.Estimate:
        """``mine`` over ``base`` (Series by seed): per block in a blocked sweep, else the
        median per-seed ratio where they share seeds, else the ratio of medians."""
        if self.block_of:
            return stats.blocked_pairs(mine, base, self.block_of)
        if stats.common_seeds(mine, base) >= 2:
            return stats.paired(mine, base)
        return stats.ratio_ci(mine, base)

    def series(self, frame: pd.DataFrame, scheme: str, column: str) -> pd.Series:
        """``column`` over the runs of ``scheme`` in ``frame``, indexed by seed (what
        :func:`stats.compare` pairs)."""
        return stats.by_seed(frame[frame.scheme == scheme], column)

    def tta_series(self, frame: pd.DataFrame, scheme: str) -> pd.Series:
        """Time to the target accuracy over the runs of ``scheme`` in ``frame``, indexed by seed,
        a run that never reached it infinitely late."""
        mine = frame[frame.scheme == scheme]
        times = mine.time_to_target_s.astype(float).where(reached(mine), float("inf"))
        return pd.Series(times.to_numpy(), index=mine.seed.to_numpy())

    def time_to_target(self, frame: pd.DataFrame, scheme: str) -> stats.Estimate:
        """Median and interval of the time to the target accuracy over the runs of ``scheme`` in
        ``frame``, runs that never reached it counted as infinitely late
        (:func:`stats.censored_median_ci`)."""
        mine = frame[frame.scheme == scheme]
        return stats.censored_median_ci(mine.time_to_target_s, reached(mine))

    def seeds_per_cell(self) -> tuple[int, int]:
        """(fewest, most) ok runs in any cell."""
        keys = ["scheme", "loss_pct", *CONDITION_COLUMNS]
        counts = self.ok.groupby(keys).run_id.count()
        return int(counts.min()), int(counts.max())


def reached(frame: pd.DataFrame) -> pd.Series:
    """Per run: whether an evaluation reached the target accuracy (the column may have been
    read as text)."""
    return frame.target_reached.astype(str).str.lower().eq("true")


def tta_of(frame: pd.DataFrame) -> pd.Series:
    """Time to the target accuracy of the runs, indexed by seed (what :func:`stats.compare`
    pairs); a run that never reached it is infinitely late."""
    times = frame.time_to_target_s.astype(float).where(reached(frame), float("inf"))
    return pd.Series(times.to_numpy(), index=frame.seed.to_numpy())


def tta_est(frame: pd.DataFrame) -> stats.Estimate:
    """The censored median time to target over the runs (:func:`stats.censored_median_ci`):
    ``inf`` once half the runs missed it."""
    return stats.censored_median_ci(frame.time_to_target_s, reached(frame))


def look(schemes):
    """Colour, marker and legend name per scheme: the registry's for a bare slug; for a slug with
    options, the slug's marker with a colour of its own and the options in the name."""
    import seaborn as sns

    palette, markers, names = {}, {}, {}
    extra = iter(sns.color_palette("dark", 10).as_hex() + sns.color_palette("pastel", 10).as_hex())
    for scheme in schemes:
        slug = slug_of(scheme)
        try:
            info = registry.get(slug)
            color, marker, name = info.color, info.marker, info.display_name
        except registry.UnknownTransport:  # a sweep made by another version
            color, marker, name = "#777777", "x", slug
        if scheme != slug:
            color, name = next(extra, "#444444"), f"{name} ({scheme.split('+', 1)[1]})"
        palette[scheme], markers[scheme], names[scheme] = color, marker, name
    return palette, markers, names


def _with_ratio(ok: pd.DataFrame) -> pd.DataFrame:
    """Add ``speedup``: iterations/s over tcp-cubic's median in the same cell (same seed set)."""
    keys = ["loss_pct", *CONDITION_COLUMNS]
    base = ok[ok.scheme == BASELINE].groupby(keys).iters_per_s.median().rename("base_iters_per_s")
    out = ok.join(base, on=keys)
    out["speedup"] = out.iters_per_s / out.base_iters_per_s
    return out


def load(folder: Path) -> Sweep:
    """The tables of the sweep in ``folder``; :class:`ResultsError` if it has no ok run."""
    runs_csv = folder / "runs.csv"
    if not runs_csv.exists():
        raise ResultsError(f"{runs_csv} does not exist; run a sweep into {folder} first.")
    try:
        runs = read_table(runs_csv).copy()   # one block per dtype: the inserts below stay cheap
        curves = read_table(folder / "curves.csv") if (folder / "curves.csv").exists() \
            else pd.DataFrame(columns=["run_id"])
        iters = read_table(folder / "iterations.csv") if (folder / "iterations.csv").exists() \
            else pd.DataFrame(columns=["run_id"])
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ResultsError(f"a table in {folder} is not a CSV this harness wrote ({exc}).") \
            from None
    runs["loss_kind"] = (runs["loss_model"].map(loss_kind) if "loss_model" in runs
                         else CONDITION_DEFAULTS["loss_kind"])
    # sweeps written before these columns existed
    for col in ("cross", "sync", "fault", "byzantine", "aggregator", "reset_mode", "pattern"):
        if col not in runs:
            runs[col] = CONDITION_DEFAULTS[col]
        runs[col] = runs[col].astype(object).fillna(CONDITION_DEFAULTS[col]).astype(str)
    for col in ("compress", "local_steps", "error_reset", "holdout"):
        if col not in runs:
            runs[col] = CONDITION_DEFAULTS[col]
        filled = runs[col].astype(object).fillna(CONDITION_DEFAULTS[col])
        runs[col] = filled.astype(str) if col == "compress" else pd.to_numeric(filled)
    needed = {"run_id", "status", "scheme", "loss_pct", "seed", "iters_per_s",
              *(set(CONDITION_COLUMNS) - set(CONDITION_DEFAULTS))}
    missing = sorted(needed - set(runs.columns))
    if missing:
        raise ResultsError(f"{runs_csv} lacks the column {missing[0]!r}; it was not written by "
                           "this version of the harness.")
    for col in needed - {"run_id", "status", "scheme"}:
        try:
            runs[col] = pd.to_numeric(runs[col])
        except (ValueError, TypeError):
            raise ResultsError(f"{runs_csv} has a value in column {col!r} that is not a number; "
                               "it was not written by this harness.") from None
    ok = runs[runs.status == "ok"].copy()
    if ok.empty:
        raise ResultsError(f"{runs_csv} has no run with status ok to draw.")
    for col in PER_ITERATION:
        if col in ok:
            ok[f"{col}_per_iter"] = ok[col] / ok.iterations_done.where(ok.iterations_done > 0)
    ok = _with_ratio(ok)
    order = [s for s in registry.slugs() if s in set(ok.scheme)]
    order += sorted(set(ok.scheme) - set(order))
    palette, markers, names = look(order)
    varying = [c for c in CONDITION_COLUMNS if ok[c].nunique() > 1]
    ids = set(ok.run_id)
    return Sweep(folder, runs, ok, curves[curves.run_id.isin(ids)], iters[iters.run_id.isin(ids)],
                 order, palette, markers, names, varying, _blocks(folder))


def _blocks(folder: Path) -> dict[int, int] | None:
    """seed -> block from the manifest of a blocked sweep (None for an unblocked one)."""
    import json

    path = folder / "manifest.json"
    plan = json.loads(path.read_text()).get("plan", {}) if path.exists() else {}
    blocks, seeds = int(plan.get("blocks") or 1), list(plan.get("seeds") or [])
    if blocks < 2 or not seeds:
        return None
    per = -(-len(seeds) // blocks)
    return {int(s): i // per for i, s in enumerate(seeds)}


def best_tcp(frame: pd.DataFrame) -> str | None:
    """The TCP scheme with the highest median throughput over ``frame``'s runs."""
    tcp = frame[frame.scheme.map(is_tcp)]
    if tcp.empty:
        return None
    return str(tcp.groupby("scheme").iters_per_s.median().idxmax())
