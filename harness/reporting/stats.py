"""Statistics over seeds: intervals whose coverage is what they say, paired comparisons, and a
count of every comparison a report makes.

The unit of observation is a run: a seed sets the model's initialisation, the data order and the
transports' own randomness, so two runs of one cell differ by chance alone, and runs of two cells
with the same seed are a *pair*.

**The interval of a median** is distribution-free: of a cell's ``n`` runs sorted, the ``k``-th
smallest and the ``k``-th largest bracket the median of the distribution the runs come from with
probability ``1 - 2 P(Binomial(n, 1/2) <= k - 1)``, whatever that distribution is (it needs only
independent runs). :func:`rank` takes the largest ``k`` whose coverage is at least :data:`LEVEL`;
below six runs not even ``k = 1`` (the range) reaches 95 %, so the range is shown with the coverage
it has: 75 % for three runs, 50 % for two, none for one. Every interval carries its coverage
(:attr:`Estimate.coverage`) and every report labels it. A time that was never reached (a run
stopped at its cap) is infinitely late: order statistics handle it, so a median is "not reached"
once half the runs missed.

**A comparison** of two cells whose runs share seeds is *paired*: the per-seed ratio (or
difference) gets the same distribution-free interval, and the verdict is "better" or "worse"
when that interval excludes 1 (or 0), "within noise" otherwise. Were there no difference (a
per-seed ratio whose median is 1), a verdict other than "within noise" comes out with probability
at most ``1 - coverage``: 2.1 % with ten pairs, 3.1 % with six, 25 % with three. Cells without
common seeds are compared *unpaired*: a verdict needs their two intervals to separate, whose
probability under no difference (both cells drawn from one distribution) :func:`separation_rate`
computes. Either way the verdict carries that rate (:attr:`Verdict.false_rate`), and
:func:`tally` adds up the comparisons of a report, so a report can say how many it made and how
many "beyond noise" verdicts chance alone would give among them.

An unpaired ratio or difference of two medians (:func:`ratio_ci`, :func:`diff_ci`) takes the
bounds of the two intervals; it covers the true ratio whenever both intervals cover their
medians, so its coverage is at least the product of theirs, and it is labelled "at least".
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
from collections.abc import Iterator, Mapping, Sequence

import numpy as np
import pandas as pd

LEVEL = 0.95      # the coverage an interval aims at
MIN_RUNS = 3      # fewer runs (or pairs) than this in a cell: no comparison is stated
SEED = 20231      # for the Monte Carlo of separation_rate
N_PERMUTATIONS = 100_000


@functools.lru_cache(maxsize=None)
def coverage(n: int, k: int) -> float:
    """Probability that [k-th smallest, k-th largest] of ``n`` independent runs holds their
    distribution's median (0 when there is no such interval)."""
    if n < 2 or not 1 <= k <= n // 2:
        return 0.0
    return 1.0 - 2 * sum(math.comb(n, i) for i in range(k)) / 2 ** n   # exact to any n


@functools.lru_cache(maxsize=None)
def rank(n: int) -> int:
    """The ``k`` of the interval of ``n`` runs: the largest with coverage >= :data:`LEVEL`, or 1
    (the range) when none reaches it."""
    k, tail, term, total = 1, 1, 1, 2 ** n   # tail: the sum of C(n, i) for i < k; term C(n, k-1)
    while k + 1 <= n // 2:
        term = term * (n - k + 1) // k      # C(n, k)
        if 1.0 - 2 * (tail + term) / total < LEVEL:
            break
        k, tail = k + 1, tail + term
    return k


def level_text(cov: float, at_least: bool = False) -> str:
    """``97.9 %`` (``>= 95.8 %`` for a bound); ``no interval`` for one run."""
    if not cov:
        return "no interval"
    pct = 100 * cov
    text = f"{pct:.1f} %" if pct < 99.95 else "99.9 %"
    return (">= " if at_least else "") + text


@dataclasses.dataclass(frozen=True)
class Estimate:
    """A median with its interval over ``n`` runs (NaN when there is no run) and the interval's
    coverage (:func:`coverage`; a lower bound when ``at_least``)."""

    value: float
    lo: float
    hi: float
    n: int
    coverage: float = 0.0
    at_least: bool = False
    over: str = "runs"        # what n counts: runs, or blocks (:func:`blocked`)

    def overlaps(self, other: Estimate) -> bool:
        """True if the two intervals share any value (so neither is clearly larger)."""
        return not (self.lo > other.hi or other.lo > self.hi)

    def excludes(self, x: float) -> bool:
        """True if ``x`` lies outside the interval."""
        return bool(self.lo > x or self.hi < x)

    @property
    def label(self) -> str:
        """The interval's coverage as text (``97.9 %``)."""
        return level_text(self.coverage, self.at_least)

    def fmt(self, spec: str = ".2f", unit: str = "") -> str:
        """``'3.21 [3.02, 3.40]'``: the median and its interval (an infinite value, a time that
        was never reached, as ``not reached``; one run: the value alone)."""
        if np.isnan(self.value):
            return "-"

        def one(x: float, unit: str = "") -> str:
            if np.isinf(x):
                return "not reached" if x > 0 else "-inf"
            return f"{x:{spec}}{unit}"

        if self.n < 2:
            return one(self.value, unit) + f" (one {self.over[:-1]})"
        return f"{one(self.value, unit)} [{one(self.lo)}, {one(self.hi)}]"


NO_ESTIMATE = Estimate(float("nan"), float("nan"), float("nan"), 0)


def _order(arr: np.ndarray, value: float | None = None) -> Estimate:
    """The median of ``arr`` (no NaN; infinities allowed) with its order-statistic interval."""
    n = arr.size
    if n == 0:
        return NO_ESTIMATE
    s = np.sort(arr)
    med = float(np.median(s)) if value is None else value
    if np.isnan(med):   # inf - inf in the middle: the median is the upper middle value
        med = float(s[n // 2])
    if n < 2:
        return Estimate(med, med, med, 1, 0.0)
    k = rank(n)
    return Estimate(med, float(s[k - 1]), float(s[n - k]), n, coverage(n, k))


def _clean(values) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    return arr[~np.isnan(arr)]


def median_ci(values: Sequence[float]) -> Estimate:
    """The median of ``values`` (NaN ignored) and its distribution-free interval."""
    return _order(_clean(values))


def censored_median_ci(values: Sequence[float], reached: Sequence[bool]) -> Estimate:
    """The median time to an event over runs, with its interval, where runs that never reached
    the event (``reached`` false: stopped at a cap) count as infinitely late.

    Dropping those runs would make a scheme that often misses look fast; counting them at the cap
    would put a number on what was not measured. As infinities they order correctly: the median
    is ``inf`` ("not reached") once half the runs missed, and an interval bound is ``inf`` when
    that order statistic is a miss."""
    arr = np.where(np.asarray(reached, dtype=bool), np.asarray(values, dtype=float), np.inf)
    return _order(arr[~np.isnan(arr)])


def per_seed(a: pd.Series, b: pd.Series, op: str) -> pd.Series:
    """``a / b`` or ``a - b`` seed by seed, over the seeds both have, indexed by seed (a miss,
    inf, against a miss counts as a tie; a ratio that is undefined is dropped)."""
    joined = pd.concat([a.groupby(level=0).median().rename("a"),
                        b.groupby(level=0).median().rename("b")], axis=1, join="inner").dropna()
    x, y = joined.a.to_numpy(dtype=float), joined.b.to_numpy(dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = x / y if op == "ratio" else x - y
    both_inf = np.isinf(x) & np.isinf(y)
    out[both_inf] = 1.0 if op == "ratio" else 0.0
    series = pd.Series(out, index=joined.index)
    return series[~np.isnan(out)]


def paired(a: pd.Series, b: pd.Series, op: str = "ratio") -> Estimate:
    """The median of the per-seed ratio (``op="ratio"``) or difference (``"diff"``) of two
    cells, each a Series of runs indexed by seed, with its distribution-free interval."""
    return _order(per_seed(a, b, op).to_numpy())


def _by_block(values: pd.Series, block_of: Mapping[int, int]) -> np.ndarray:
    """The median of each block's runs (``values`` indexed by seed)."""
    frame = pd.DataFrame({"v": values.to_numpy(dtype=float),
                          "b": [block_of.get(int(s), -1) for s in values.index]}).dropna()
    return frame.groupby("b").v.median().to_numpy()


def blocked(values: pd.Series, block_of: Mapping[int, int]) -> Estimate:
    """A cell of a blocked sweep (the runs of a block share a testbed and an hour, those of
    different blocks do not): the median of its blocks' medians, with the order-statistic
    interval over them. The unit of observation is the block, so ``n`` counts blocks."""
    return dataclasses.replace(_order(_by_block(values, block_of)), over="blocks")


def blocked_pairs(a: pd.Series, b: pd.Series, block_of: Mapping[int, int],
                  op: str = "ratio") -> Estimate:
    """Two cells of a blocked sweep compared: per seed ``a / b`` (or ``a - b``), the median of
    each block's, and the order-statistic interval over the blocks."""
    return blocked(per_seed(a, b, op), block_of)


def common_seeds(a: pd.Series, b: pd.Series) -> int:
    """How many seeds the two cells share (runs with a value in both)."""
    return len(set(a.dropna().index) & set(b.dropna().index))


def ratio_ci(num: Sequence[float], den: Sequence[float]) -> Estimate:
    """median(num) / median(den), unpaired: the interval from the two intervals' bounds, whose
    coverage is at least the product of theirs."""
    a, b = median_ci(num), median_ci(den)
    if a.n == 0 or b.n == 0 or b.value == 0 or b.lo <= 0:
        return NO_ESTIMATE
    return Estimate(a.value / b.value, a.lo / b.hi, a.hi / b.lo, min(a.n, b.n),
                    a.coverage * b.coverage, at_least=True)


def diff_ci(x: Sequence[float], y: Sequence[float]) -> Estimate:
    """median(x) - median(y), unpaired: the interval from the two intervals' bounds (coverage at
    least the product of theirs)."""
    a, b = median_ci(x), median_ci(y)
    if a.n == 0 or b.n == 0:
        return NO_ESTIMATE
    return Estimate(a.value - b.value, a.lo - b.hi, a.hi - b.lo, min(a.n, b.n),
                    a.coverage * b.coverage, at_least=True)


@functools.lru_cache(maxsize=None)
def separation_rate(n_a: int, n_b: int) -> float:
    """Probability that the intervals of two cells of ``n_a`` and ``n_b`` runs drawn from one
    continuous distribution do not overlap (either way round): the false-alarm rate of an
    unpaired verdict. Monte Carlo over random rankings with a fixed seed."""
    if min(n_a, n_b) < 2:
        return float("nan")
    rng = np.random.default_rng(SEED)
    ranks = np.argsort(rng.random((N_PERMUTATIONS, n_a + n_b)), axis=1)
    a, b = np.sort(ranks[:, :n_a], axis=1), np.sort(ranks[:, n_a:], axis=1)
    ka, kb = rank(n_a), rank(n_b)
    above = a[:, ka - 1] > b[:, n_b - kb]
    below = a[:, n_a - ka] < b[:, kb - 1]
    return float(np.mean(above | below))


@dataclasses.dataclass(frozen=True)
class Verdict:
    """One comparison: which side is better (+1 the first, -1 the second, 0 within noise, None
    too few runs), the sentence that says so, and the probability of a verdict other than
    "within noise" were there no difference."""

    sign: int | None
    sentence: str
    false_rate: float
    paired: bool
    estimate: Estimate


class Tally:
    """The comparisons a report made (:func:`tally` collects them)."""

    def __init__(self) -> None:
        self.verdicts: list[Verdict] = []

    def add(self, verdict: Verdict) -> None:
        """Count ``verdict`` (one that stated nothing does not count)."""
        if verdict.sign is not None:
            self.verdicts.append(verdict)

    @property
    def beyond_noise(self) -> int:
        """How many verdicts named a better side."""
        return sum(1 for v in self.verdicts if v.sign)

    @property
    def expected_by_chance(self) -> float:
        """How many such verdicts chance alone would give were nothing different."""
        return sum(v.false_rate for v in self.verdicts)

    def sentence(self, what: str = "report") -> str:
        """One paragraph: how many comparisons this ``what`` made, how, and what chance alone
        would give among them."""
        n = len(self.verdicts)
        if not n:
            return f"This {what} compares no two cells."
        paired_n = sum(1 for v in self.verdicts if v.paired)
        rates = sorted({round(100 * v.false_rate, 1) for v in self.verdicts})
        rate_text = (f"{rates[0]:g} %" if len(rates) == 1
                     else f"{rates[0]:g}-{rates[-1]:g} %")
        return (f"This {what} makes {n} comparisons ({paired_n} paired by seed, "
                f"{n - paired_n} unpaired); {self.beyond_noise} of them name a better side. "
                f"Were there no difference anywhere, each would name one with probability "
                f"{rate_text}, so chance alone would give about {self.expected_by_chance:.1f} "
                "such verdicts among them.")


_TALLIES: list[Tally] = []


@contextlib.contextmanager
def tally() -> Iterator[Tally]:
    """Count every :func:`compare` made inside the block (blocks may nest: each counts)."""
    t = Tally()
    _TALLIES.append(t)
    try:
        yield t
    finally:
        _TALLIES.remove(t)


def _counted(verdict: Verdict) -> Verdict:
    for t in _TALLIES:
        t.add(verdict)
    return verdict


RULE = ("a verdict names a better side only where the interval of the per-seed ratio (paired "
        "runs; in a blocked sweep, of the blocks' medians of it) excludes 1, or, for cells "
        "without common seeds, where the two cells' intervals separate; otherwise it says "
        "\"within noise\"")


def compare(a_name: str, a: pd.Series, b_name: str, b: pd.Series,
            higher_is_better: bool = True, spec: str = ".2f", unit: str = "",
            op: str = "ratio", block_of: Mapping[int, int] | None = None) -> Verdict:
    """Compare two cells, each a Series of runs indexed by seed: paired when they share at least
    :data:`MIN_RUNS` seeds (the per-seed ``op``, ``ratio`` or ``diff``), unpaired otherwise; in
    a blocked sweep (``block_of``: seed -> block) paired by block, each block's median of the
    per-seed ratios. The verdict is counted in every open :func:`tally`."""
    if block_of:
        ea, eb = blocked(a, block_of), blocked(b, block_of)
    else:
        ea, eb = median_ci(a), median_ci(b)
    head = f"{a_name} {ea.fmt(spec, unit)} and {b_name} {eb.fmt(spec, unit)}"
    nan = float("nan")
    pairs = blocked_pairs(a, b, block_of, op) if block_of else None
    if (pairs.n if pairs is not None else common_seeds(a, b)) >= MIN_RUNS:
        est = pairs if pairs is not None else paired(a, b, op)
        null = 1.0 if op == "ratio" else 0.0
        unit_name = "per-block" if pairs is not None else "per-seed"
        what = f"{unit_name} ratio" if op == "ratio" else f"{unit_name} difference"
        shown = est.fmt(".2f", "x") if op == "ratio" else est.fmt("+" + spec.lstrip("+"))
        rate = 1 - est.coverage
        if not est.excludes(null):
            return _counted(Verdict(0, f"{head}: within noise ({what} {shown}, "
                                       f"{est.label}, includes {null:g}).", rate, True, est))
        first = (est.value > null) == higher_is_better
    elif min(ea.n, eb.n) >= MIN_RUNS:
        est = ratio_ci(a, b) if op == "ratio" else diff_ci(a, b)
        rate = separation_rate(ea.n, eb.n)
        if ea.overlaps(eb):
            return _counted(Verdict(0, f"{head}: within noise (the intervals overlap; no common "
                                       "seeds to pair).", rate, False, est))
        first = (ea.value > eb.value) == higher_is_better
        shown, what = "", "intervals separate, unpaired"
    else:
        return Verdict(None, f"{head}: fewer than {MIN_RUNS} runs in a cell, so no comparison "
                             "is stated.", nan, False, NO_ESTIMATE)
    win, lose = (a_name, b_name) if first else (b_name, a_name)
    detail = f"{what} {shown}, {est.label}" if shown else what
    return _counted(Verdict(1 if first else -1, f"{head}: {win} is better ({detail}).", rate,
                            bool(shown), est))


def judge(est: Estimate, null: float = 1.0) -> int | None:
    """The verdict on an estimate of a ratio (``null`` 1) or a difference (``null`` 0): +1 above
    ``null`` beyond noise, -1 below, 0 within noise, None with fewer than :data:`MIN_RUNS` runs;
    counted in every open :func:`tally`, with false-alarm rate ``1 - coverage``."""
    if est.n < MIN_RUNS or np.isnan(est.value):
        return None
    sign = 0 if not est.excludes(null) else (1 if est.lo > null else -1)
    _counted(Verdict(sign, "", 1 - est.coverage, not est.at_least, est))
    return sign


def pair_or_not(a: pd.Series, b: pd.Series, op: str = "ratio") -> Estimate:
    """Paired (:func:`paired`) where the two cells share at least :data:`MIN_RUNS` seeds, else
    the unpaired :func:`ratio_ci` or :func:`diff_ci`."""
    if common_seeds(a, b) >= MIN_RUNS:
        return paired(a, b, op)
    return ratio_ci(a, b) if op == "ratio" else diff_ci(a, b)


def best(cells: Mapping[str, pd.Series], higher_is_better: bool = True,
         block_of: Mapping[int, int] | None = None) -> tuple[list[str], str]:
    """(names that cannot be told apart from the best by median, one sentence saying so); each
    cell a Series of runs indexed by seed. The best by median is compared with every other
    cell (:func:`compare`, each comparison counted)."""
    valid = {k: v.dropna() for k, v in cells.items() if len(v.dropna())}
    if not valid:
        return [], "no runs."
    if len(valid) == 1:
        only = next(iter(valid))
        return [only], f"only {only} ran here: nothing to compare it with."
    meds = {k: (blocked(v, block_of) if block_of else median_ci(v)).value
            for k, v in valid.items()}
    top = (max if higher_is_better else min)(valid, key=lambda k: meds[k])
    if min(len(v) for v in valid.values()) < MIN_RUNS:
        return [top], (f"highest median: {top}, but with fewer than {MIN_RUNS} runs in a cell "
                       "no winner is named.")
    tied = [k for k in valid if k != top and
            compare(top, valid[top], k, valid[k], higher_is_better,
                    block_of=block_of).sign == 0]
    if not tied:
        return [top], f"best: {top} (better than every other, {RULE.split(';')[0]})."
    return [top] + tied, (f"best by median: {top}, but within noise of "
                          f"{', '.join(tied)}.")


def cells(df: pd.DataFrame, keys: list[str], column: str) -> pd.DataFrame:
    """One row per cell (``keys``): ``n``, ``median``, ``lo``, ``hi``, ``coverage`` of
    ``column`` over its runs."""
    rows = []
    for key, group in df.groupby(keys, dropna=False, sort=True):
        est = median_ci(group[column])
        key = key if isinstance(key, tuple) else (key,)
        rows.append({**dict(zip(keys, key)), "n": est.n, "median": est.value, "lo": est.lo,
                     "hi": est.hi, "coverage": est.coverage})
    return pd.DataFrame(rows, columns=keys + ["n", "median", "lo", "hi", "coverage"])


def by_seed(frame: pd.DataFrame, column: str) -> pd.Series:
    """``frame[column]`` indexed by the runs' seeds (what :func:`compare` takes)."""
    return pd.Series(frame[column].to_numpy(dtype=float), index=frame["seed"].to_numpy())


def intervals_legend(estimates: Sequence[Estimate]) -> str:
    """One sentence: what the brackets of a block are and the coverage they have."""
    labels = sorted({(e.n, e.label, e.over) for e in estimates if e.n}, reverse=True)
    if not labels:
        return ""
    parts = ", ".join(f"{lab} with {n} {over if n != 1 else over[:-1]}"
                      for n, lab, over in labels)
    if any(over == "blocks" for _, _, over in labels):
        return ("Brackets: a distribution-free interval of the median (order statistics) over "
                "the cell's blocks, each block's value the median of its runs (a block is a run "
                "of the sweep on a testbed of its own, in an hour of its own), covering the "
                f"median a block draws from with probability {parts}.")
    return ("Brackets: a distribution-free interval of the median over the cell's runs (order "
            f"statistics), covering it with probability {parts}. The runs of one sweep share its "
            "testbed and its hour; a sweep run at another time can differ by more than their "
            "spread (docs/findings.md: \"Does a fresh default sweep agree with the reference?\").")


def one_more_block(n_blocks: int, cells: int) -> tuple[float, int, int]:
    """A fresh sweep that is one more block of a blocked reference (the same number of seeds,
    its own testbed and hour): its cell value is exchangeable with the reference's block values,
    so it falls within their [min, max] with probability ``(B - 1) / (B + 1)``, exactly. Returns
    that probability times ``cells`` and the 2.5th and 97.5th percentiles of the count were the
    cells independent (cells of one sweep share its testbed, which widens the range)."""
    import math

    p = (n_blocks - 1) / (n_blocks + 1)
    pmf = [math.comb(cells, k) * p ** k * (1 - p) ** (cells - k) for k in range(cells + 1)]
    cdf = np.cumsum(pmf)
    return p * cells, int(np.searchsorted(cdf, 0.025)), int(np.searchsorted(cdf, 0.975))


def fresh_share(cells: Sequence[Sequence[float]], intervals: Sequence[Estimate], n_fresh: int,
                draws: int = 20_000) -> tuple[float, int, int, list[float]]:
    """How many of a fresh sweep's cell medians (``n_fresh`` runs a cell) should fall inside a
    reference's intervals: per cell, the probability that the median of ``n_fresh`` runs drawn
    from the reference cell's own runs (with replacement; every draw enumerated when there are at
    most ``draws`` of them, else that many at random with a fixed seed) lies in its interval;
    then the number of such cells, a sum of independent yes/no, exactly (Poisson-binomial).
    Returns (expected count, 2.5th and 97.5th percentile of the count, per-cell probabilities).
    It treats runs as exchangeable draws and so leaves out drift between the days two sweeps
    run, which a real fresh sweep includes."""
    import itertools

    probs = []
    rng = np.random.default_rng(SEED)
    for runs, est in zip(cells, intervals):
        x = np.sort(_clean(runs))
        if x.size == 0 or np.isnan(est.lo):
            probs.append(float("nan"))
            continue
        if x.size ** n_fresh <= draws:
            picks = np.array(list(itertools.product(range(x.size), repeat=n_fresh)))
        else:
            picks = rng.integers(0, x.size, size=(draws, n_fresh))
        med = np.median(x[picks], axis=1)
        probs.append(float(np.mean((med >= est.lo) & (med <= est.hi))))
    dist = np.array([1.0])
    for p in (q for q in probs if q == q):
        dist = np.convolve(dist, [1 - p, p])
    cdf = np.cumsum(dist)
    lo = int(np.searchsorted(cdf, 0.025))
    hi = int(np.searchsorted(cdf, 0.975))
    return float(np.nansum(probs)), lo, hi, probs
