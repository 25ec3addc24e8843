"""Statistics over seeds: medians with bootstrap confidence intervals, and honest comparisons.

The unit of observation is a run: a seed varies the model's initialisation, the data order and
the transports' own randomness (the kernel's loss rules draw their own), so two runs of one cell
differ by chance alone. Every cell of every table and figure is summarised by the **median over
its runs and a 95 % percentile-bootstrap confidence interval** of that median (resampling runs,
:data:`N_BOOT` resamples, a fixed seed so the same table gives the same interval). With three runs
the interval of a median spans about their range: wide on purpose.

A comparison names a winner only where the two intervals do not overlap and each cell has at
least :data:`MIN_RUNS` runs; otherwise it says "within noise" (or that there are too few runs). A ratio of two cells (a speedup) gets its own interval by resampling both cells.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import pandas as pd

N_BOOT = 4000
MIN_RUNS = 3   # fewer runs than this in a cell: no comparison is stated
LEVEL = 0.95
SEED = 20231


@dataclasses.dataclass(frozen=True)
class Estimate:
    """A median with its confidence interval over ``n`` runs (NaN when there is no run)."""

    value: float
    lo: float
    hi: float
    n: int

    def overlaps(self, other: Estimate) -> bool:
        """True if the two intervals share any value (so neither is clearly larger)."""
        return not (self.lo > other.hi or other.lo > self.hi)

    def fmt(self, spec: str = ".2f", unit: str = "") -> str:
        """``'3.21 [3.02, 3.40]'``: the median and its interval (an infinite value, a time that
        was never reached, as ``not reached``)."""
        if np.isnan(self.value):
            return "-"

        def one(x: float, unit: str = "") -> str:
            return "not reached" if np.isinf(x) else f"{x:{spec}}{unit}"

        return f"{one(self.value, unit)} [{one(self.lo)}, {one(self.hi)}]"


def _clean(values: Sequence[float]) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    return arr[~np.isnan(arr)]


def _resampled_medians(arr: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    idx = rng.integers(0, arr.size, size=(N_BOOT, arr.size))
    return np.median(arr[idx], axis=1)


def median_ci(values: Sequence[float]) -> Estimate:
    """The median of ``values`` (NaN ignored) and its bootstrap confidence interval."""
    arr = _clean(values)
    if arr.size == 0:
        return Estimate(float("nan"), float("nan"), float("nan"), 0)
    boot = _resampled_medians(arr, np.random.default_rng(SEED))
    tail = 100 * (1 - LEVEL) / 2
    return Estimate(float(np.median(arr)), float(np.percentile(boot, tail)),
                    float(np.percentile(boot, 100 - tail)), int(arr.size))


def censored_median_ci(values: Sequence[float], reached: Sequence[bool]) -> Estimate:
    """The median time to an event over runs, with its bootstrap interval, where runs that never
    reached the event (``reached`` false: stopped at a cap) count as infinitely late.

    Dropping those runs would make a scheme that often misses look fast; counting them at the cap
    would put a number on what was not measured. As infinities they order correctly: the median
    is ``inf`` ("not reached") once half the runs missed, and an interval bound is ``inf`` when
    enough resamples are mostly misses. The interval's bounds are resampled medians themselves
    (lower and higher order statistics rather than interpolation, which infinities forbid)."""
    arr = np.where(np.asarray(reached, dtype=bool), np.asarray(values, dtype=float), np.inf)
    arr = arr[~np.isnan(arr)]
    if arr.size == 0:
        return Estimate(float("nan"), float("nan"), float("nan"), 0)
    boot = _resampled_medians(arr, np.random.default_rng(SEED))
    tail = 100 * (1 - LEVEL) / 2
    return Estimate(float(np.median(arr)), float(np.percentile(boot, tail, method="lower")),
                    float(np.percentile(boot, 100 - tail, method="higher")), int(arr.size))


def ratio_ci(num: Sequence[float], den: Sequence[float]) -> Estimate:
    """median(num) / median(den), with an interval from resampling both independently."""
    a, b = _clean(num), _clean(den)
    if a.size == 0 or b.size == 0 or np.median(b) == 0:
        return Estimate(float("nan"), float("nan"), float("nan"), 0)
    rng = np.random.default_rng(SEED)
    boot = _resampled_medians(a, rng) / _resampled_medians(b, rng)
    tail = 100 * (1 - LEVEL) / 2
    return Estimate(float(np.median(a) / np.median(b)), float(np.percentile(boot, tail)),
                    float(np.percentile(boot, 100 - tail)), int(min(a.size, b.size)))


def diff_ci(a: Sequence[float], b: Sequence[float]) -> Estimate:
    """median(a) - median(b), with an interval from resampling both independently."""
    x, y = _clean(a), _clean(b)
    if x.size == 0 or y.size == 0:
        return Estimate(float("nan"), float("nan"), float("nan"), 0)
    rng = np.random.default_rng(SEED)
    boot = _resampled_medians(x, rng) - _resampled_medians(y, rng)
    tail = 100 * (1 - LEVEL) / 2
    return Estimate(float(np.median(x) - np.median(y)), float(np.percentile(boot, tail)),
                    float(np.percentile(boot, 100 - tail)), int(min(x.size, y.size)))


def cells(df: pd.DataFrame, keys: list[str], column: str) -> pd.DataFrame:
    """One row per cell (``keys``): ``n``, ``median``, ``lo``, ``hi`` of ``column`` over its runs."""
    rows = []
    for key, group in df.groupby(keys, dropna=False, sort=True):
        est = median_ci(group[column])
        key = key if isinstance(key, tuple) else (key,)
        rows.append({**dict(zip(keys, key)), "n": est.n, "median": est.value, "lo": est.lo,
                     "hi": est.hi})
    return pd.DataFrame(rows, columns=keys + ["n", "median", "lo", "hi"])


def compare(a_name: str, a: Estimate, b_name: str, b: Estimate, higher_is_better: bool = True,
            spec: str = ".2f", unit: str = "") -> str:
    """One sentence: which of two estimates is better, or that they are within noise."""
    if min(a.n, b.n) < MIN_RUNS:
        return (f"{a_name} {a.fmt(spec, unit)} and {b_name} {b.fmt(spec, unit)}: fewer than "
                f"{MIN_RUNS} runs in a cell, so no comparison is stated.")
    if a.overlaps(b):
        return (f"{a_name} {a.fmt(spec, unit)} and {b_name} {b.fmt(spec, unit)}: within noise "
                f"(the 95 % intervals overlap).")
    first_better = (a.value > b.value) == higher_is_better
    win, lose = ((a_name, a), (b_name, b)) if first_better else ((b_name, b), (a_name, a))
    return (f"{win[0]} {win[1].fmt(spec, unit)} beats {lose[0]} {lose[1].fmt(spec, unit)} "
            f"(intervals separate).")


def chance_wins(comparisons: int, runs: int) -> str:
    """One sentence: how many of ``comparisons`` one-sided "beats" verdicts between cells of
    ``runs`` runs each chance alone would give when nothing differs.

    With ``runs`` runs a cell's interval spans about their range, so "A beats B" means every run
    of A beat every run of B: under no difference that happens with probability
    1 / C(2 runs, runs) (1 in 20 for three runs against three)."""
    import math

    p = 1 / math.comb(2 * runs, runs)
    return (f"With {runs} runs per cell, chance alone makes one such verdict in "
            f"{round(1 / p)} comparisons; this sweep made {comparisons} (about "
            f"{comparisons * p:.1f} expected by chance), so a single small win is weak evidence.")


def best(estimates: dict[str, Estimate], higher_is_better: bool = True) -> tuple[list[str], str]:
    """(names that cannot be told apart from the best, one sentence saying so)."""
    valid = {k: e for k, e in estimates.items() if e.n > 0}
    if not valid:
        return [], "no runs."
    if len(valid) == 1:
        only = next(iter(valid))
        return [only], f"only {only} ran here: nothing to compare it with."
    if min(e.n for e in valid.values()) < MIN_RUNS:
        top = (max if higher_is_better else min)(valid, key=lambda k: valid[k].value)
        return [top], (f"highest median: {top}, but with fewer than {MIN_RUNS} runs in a cell "
                       "no winner is named.")
    top = (max if higher_is_better else min)(valid, key=lambda k: valid[k].value)
    tied = [k for k, e in valid.items() if k != top and e.overlaps(valid[top])]
    if not tied:
        return [top], f"best: {top} (its interval separates from every other)."
    return [top] + tied, (f"best by median: {top}, but within noise of "
                          f"{', '.join(tied)} (intervals overlap).")
