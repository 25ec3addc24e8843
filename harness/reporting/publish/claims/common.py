"""What the findings share: the LTP family's names, how a folder's runs were set up, a verdict as
a phrase, a per-seed ratio as text, time to accuracy with misses counted as infinitely late."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from harness.reporting import stats
from harness.reporting.tables import reached, tta_est, tta_of  # noqa: F401  (the claims' names)

DATASETS = {"fashion-mnist": "Fashion-MNIST"}   # how a data set's name is written in prose


def dataset(name: str) -> str:
    """A data set's name as prose writes it."""
    return DATASETS.get(str(name), str(name))


FAMILY = ("ltp", "ltp-reliable", "plot")    # the LTP family: one machinery, three policies
TOLERANT = ("ltp", "plot")
RELIABLE = "ltp-reliable"
STRONGEST_TCP = "tcp-cubic-lowrto"
DIFF_RULE = ("a verdict names a side only where the interval of the per-seed difference "
             "excludes 0, otherwise it says \"within noise\"")


def name(scheme: str) -> str:
    """A scheme as code: ```ltp```."""
    return f"`{scheme}`"


def listing(values: Iterable, spec: str = "g") -> str:
    """``0, 5 and 10`` from numbers (or text), in the order given."""
    items = [f"{v:{spec}}" if isinstance(v, (int, float, np.number)) else str(v)
             for v in values]
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def span(values: Iterable[float], spec: str = ".2f") -> str:
    """``0.41-0.87``: the least and the greatest of ``values``."""
    values = list(values)
    return f"{min(values):{spec}}-{max(values):{spec}}"


def phrase(sign: int | None, better: str, worse: str,
           noise: str = "within noise") -> str:
    """The words of a verdict's sign: ``better`` (+1), ``worse`` (-1), ``noise`` (0), or that
    no comparison was stated (fewer than :data:`stats.MIN_RUNS` runs)."""
    if sign is None:
        return f"not compared (fewer than {stats.MIN_RUNS} runs a cell)"
    return {1: better, -1: worse, 0: noise}[sign]


def listed(runs: pd.DataFrame, col: str, fmt: str = "g") -> str:
    """The distinct values of ``col`` in ``runs``, in order, listed."""
    return listing(sorted(runs[col].dropna().unique()), fmt)


def part(title: str, runs: pd.DataFrame, what: str) -> str:
    """A part of a section opens with its title in bold and what its runs were."""
    return f"**{title}** ({len(runs)} runs: {what})"


def setting(runs: pd.DataFrame) -> str:
    """What the runs of a folder shared, read from their rows: workers, model, data, link,
    queue, added delay, iterations and training-time cap."""
    def one(col: str, fmt: str = "g") -> str:
        return listed(runs, col, fmt)

    delay = sorted(runs.delay_ms.unique())
    delay_text = "" if delay == [0] else f", {listing(delay)} ms added one way"
    return (f"{one('n_workers')} workers and a PS training the "
            f"{str(runs.model.iloc[0]).upper()} on {dataset(runs.dataset.iloc[0])} through a "
            f"{one('bottleneck_mbps')} Mbit/s bottleneck with a queue of {one('queue_pkts')} "
            f"packets{delay_text}, each run {one('iterations')} iterations"
            + (f" or {one('max_train_s')} s of training" if runs.max_train_s.notna().any()
               else ""))


def cell(frame: pd.DataFrame, **eq) -> pd.DataFrame:
    """The rows of ``frame`` whose columns equal the given values."""
    mask = pd.Series(True, index=frame.index)
    for col, value in eq.items():
        mask &= frame[col] == value
    return frame[mask]


def runs_of(frame: pd.DataFrame, column: str, scale: float = 1.0) -> pd.Series:
    """``column`` of the runs, indexed by seed (what :func:`stats.compare` pairs)."""
    return stats.by_seed(frame, column) * scale


def time_fmt(est: stats.Estimate, unit: str = "", spec: str = ".1f") -> str:
    """A censored time: as :meth:`stats.Estimate.fmt`, but ``not reached`` alone when no
    run of the interval's lower end reached the target either."""
    if est.n and np.isinf(est.lo):
        return "not reached"
    return est.fmt(spec, unit)


def reached_text(frame: pd.DataFrame) -> str:
    """``2 of 3 reached``."""
    return f"{int(reached(frame).sum())} of {len(frame)} reached"


def ratio_text(est: stats.Estimate, sign: int | None = None) -> str:
    """A per-seed ratio as ``per-seed ratio 1.17x [1.01, 1.32]`` (three decimals when two would
    print a bound as 1.00, hiding which side of 1 it lies); nothing when one side never reached the
    target in a pair (a ratio of 0 or infinity says no more than the reached counts)."""
    if est.n == 0 or not np.isfinite(est.value) or est.value == 0 or est.lo == 0 \
            or not np.isfinite(est.hi):
        return ""
    spec = ".2f"
    if sign is not None and "1.00" in (f"{est.lo:.2f}", f"{est.hi:.2f}"):
        spec = ".3f"
    return f"per-seed ratio {est.fmt(spec, 'x')}"


def verdict_text(v: stats.Verdict, better: str, worse: str) -> str:
    """``faster (per-seed ratio 1.17x [1.01, 1.32])`` from a :class:`stats.Verdict`."""
    detail = ratio_text(v.estimate, v.sign) if v.paired else "unpaired"
    word = phrase(v.sign, better, worse)
    return f"{word} ({detail})" if detail and v.sign is not None else word


def capped(frame: pd.DataFrame) -> pd.DataFrame:
    """The runs the training-time cap stopped."""
    return frame[frame.stopped_by == "time_cap"]


def cap_text(frame: pd.DataFrame) -> str:
    """How the runs ended: ``1000 iterations`` or ``cap after 482 of 1000: not converged``."""
    stop = capped(frame)
    total = int(frame.iterations.max())
    if stop.empty:
        return f"all {total} iterations"
    return (f"{len(stop)} of {len(frame)} stopped by the cap after a median of "
            f"{stop.iterations_done.median():.0f} of {total} iterations: not converged")


def legend(estimates: Sequence[stats.Estimate]) -> str:
    """The intervals' coverage, once per block (:func:`stats.intervals_legend`)."""
    return stats.intervals_legend([e for e in estimates if e.n])


def per_iteration(frame: pd.DataFrame, column: str) -> float:
    """Median over runs of ``column`` per completed iteration."""
    return float((frame[column] / frame.iterations_done.where(frame.iterations_done > 0))
                 .median())


def withheld(folders, question: str) -> str | None:
    """The README's sentence in place of a finding that rests on a folder that is not fresh (run
    with other code than today's, or missing runs it records), or None when all are fresh. The
    findings page keeps such numbers, marked; the README gives only today's code's."""
    late = [f for f in folders if not f.fresh]
    if not late:
        return None
    which, one = ", ".join(f"`{f.rel}/`" for f in late), len(late) == 1
    return (f"Withheld until {which} {'is' if one else 'are'} refreshed: "
            f"{'it holds' if one else 'they hold'} runs of other code than today's, or "
            f"{'lacks' if one else 'lack'} runs recorded in the manifest. The findings page "
            "keeps the numbers with "
            f"their state ([docs/findings.md](docs/findings.md#{anchor(question)})); "
            f"`.venv/bin/invoke refresh --folders {','.join(f.rel for f in late)}` runs what "
            "is stale or missing.")


def anchor(title: str) -> str:
    """The GitHub anchor of a heading (as the findings page's contents link it)."""
    keep = "".join(ch for ch in title.lower() if ch.isalnum() or ch in " -")
    return keep.replace(" ", "-")


def scheme_order(frame: pd.DataFrame) -> list[str]:
    """The schemes present, the TCP baseline first, then the LTP family."""
    known = ["tcp-cubic", STRONGEST_TCP, *FAMILY]
    present = set(frame.scheme)
    return [s for s in known if s in present] + sorted(present - set(known))


def against(frame: pd.DataFrame, scheme: str, other: str, column: str = "iters_per_s",
             higher_is_better: bool = True) -> stats.Verdict:
    """``scheme`` against ``other`` in ``frame`` (one cell), paired by seed."""
    return stats.compare(scheme, runs_of(cell(frame, scheme=scheme), column), other,
                         runs_of(cell(frame, scheme=other), column), higher_is_better)


def speed_ratio(frame: pd.DataFrame, scheme: str, other: str) -> stats.Estimate:
    """Iterations/s of ``scheme`` over ``other``'s, per seed (no verdict)."""
    return stats.pair_or_not(runs_of(cell(frame, scheme=scheme), "iters_per_s"),
                             runs_of(cell(frame, scheme=other), "iters_per_s"))


def tolerance_summary(found: list[tuple[str, str, stats.Verdict]]) -> list[str]:
    """One line per outcome of ``ltp``/``plot`` against ``ltp-reliable`` (where, scheme,
    verdict), with what chance alone would give."""
    stated = [x for x in found if x[2].sign is not None]
    lines = []
    for sign, head in ((1, "Tolerating loss is faster than repairing every packet"),
                       (0, "Within noise of repairing every packet"),
                       (-1, "Slower than repairing every packet")):
        hits = [f"{name(s)} at {where} ({v.estimate.fmt('.2f', 'x')})"
                for where, s, v in stated if v.sign == sign]
        if hits:
            lines.append(f"- {head}, {len(hits)} of {len(stated)}: " + "; ".join(hits) + ".")
    chance = sum(v.false_rate for _, _, v in stated)
    if stated:
        lines.append(f"- Were tolerating loss no different anywhere, chance alone would name a "
                     f"side in about {chance:.1f} of these {len(stated)} comparisons.")
    return lines
