"""Findings: collectives. Does the incast vanish when the gradients travel through a
Hoplite-style tree or a ring all-reduce instead of into the PS; does the PS's serial broadcast stop
being the iteration's excess; does tolerating loss pay more or less once the incast is gone; what
a tree does with a killed or a stalled worker; and how the patterns scale.

``results/patterns/`` is the ``patterns`` preset (8 workers, 0, 5 and 10 % loss, four schemes,
the three patterns), ``results/patterns-faults/`` the ``patterns-faults`` preset (a tree and the
PS through a killed and a stalled worker), ``results/patterns-scale/`` the ``patterns-scale``
preset (16 and 32 workers). Every comparison is :func:`harness.reporting.stats.compare`, paired by
seed, on iterations/s unless said otherwise (docs/collectives.md).
"""

from __future__ import annotations

import pandas as pd

from harness.reporting import stats
from harness.reporting.publish.claims import Section
from harness.reporting.publish.claims.common import cell as rows_where
from harness.reporting.publish.claims.common import (RELIABLE, STRONGEST_TCP, anchor, listed,
                                                     listing, name, phrase, scheme_order, setting,
                                                     span, time_fmt)
from harness.reporting.publish.context import Context, Folder
from harness.reporting.sections import faults
from harness.reporting.sections import patterns as section

PATTERNS = "results/patterns"
FAULTS = "results/patterns-faults"
SCALE = "results/patterns-scale"
ORDER = ("ps", "tree", "ring")
QUESTION = ("Does the incast vanish under a tree or a ring, and does tolerating loss pay once it "
            "is gone?")
# Under each pattern: does tolerating loss pay? ``ltp`` against these.
TOLERANCE = (RELIABLE, STRONGEST_TCP)


# Time to accuracy is to this accuracy, from the runs' evaluations (``curves.csv``): the presets'
# runs (30-40 iterations) end short of the MLP's own target (``target_accuracy``, 0.8).
TARGET = 0.65


def _frame(f: Folder) -> pd.DataFrame:
    """The ok runs (:func:`section.frame`) with ``tta_s``: the training time of the first
    evaluation at or above :data:`TARGET` (empty: never)."""
    sw = f.sweep
    return section.frame(sw).join(faults.time_to(sw.curves, TARGET), on="run_id")


def _tta(cell: pd.DataFrame) -> str:
    """``12.3 [10.1, 15.0] (3 of 3 reached)``: the censored median time to :data:`TARGET`."""
    est = stats.censored_median_ci(cell.tta_s.fillna(0.0), cell.tta_s.notna())
    return f"{time_fmt(est)} ({int(cell.tta_s.notna().sum())} of {len(cell)} reached)"


def _vs(d: pd.DataFrame, a: dict, b: dict, column: str = "iters_per_s",
        higher: bool = True, names: tuple[str, str] = ("", "")) -> stats.Verdict:
    """Cell ``a`` against cell ``b`` (each a selection of ``d``), paired by seed."""
    return stats.compare(names[0] or a.get("pattern_kind", ""),
                         stats.by_seed(rows_where(d, **a), column),
                         names[1] or b.get("pattern_kind", ""),
                         stats.by_seed(rows_where(d, **b), column), higher, ".2f")


def _ratio(v: stats.Verdict) -> str:
    """``faster, 1.8x [1.5, 2.0]`` from a verdict on iterations/s."""
    word = phrase(v.sign, "faster", "slower")
    return f"{word}, {v.estimate.fmt('.2f', 'x')}" if v.estimate.n else word


def _against_ps(here: pd.DataFrame) -> list[stats.Verdict | None]:
    """Each collective (tree, ring) against the PS in one cell on iterations/s; ``None`` where
    the cell lacks either."""
    return [_vs(here, {"pattern_kind": p}, {"pattern_kind": "ps"})
            if {p, "ps"} <= set(here.pattern_kind) else None for p in ORDER[1:]]


def _incast(d: pd.DataFrame) -> str:
    """What crossed the PS's link per iteration under each pattern, at 0 % loss."""
    quiet = d[d.loss_pct == d.loss_pct.min()]
    parts = []
    for pattern in [p for p in ORDER if p in set(quiet.pattern_kind)]:
        per = quiet[quiet.pattern_kind == pattern].groupby("scheme").ps_link_gradients.median()
        parts.append(f"through the {pattern if pattern != 'ps' else 'PS'}, "
                     f"{span(per, '.2f')} gradients")
    n = listed(quiet, "n_workers")
    return (f"**The incast.** What the switch sent toward the PS per iteration at "
            f"{quiet.loss_pct.min():g} % loss (medians per scheme, {n} workers): "
            + "; ".join(parts) + ". Under the ring that is the evaluations' models alone.")


def _speed_table(d: pd.DataFrame) -> tuple[list[str], list[stats.Estimate]]:
    """Per loss and scheme: each pattern's iterations/s and time to the target, and each
    collective against the PS."""
    target = f"{TARGET:g}"
    head = ["| loss | scheme | " + " | ".join(f"{p} iterations/s" for p in ORDER)
            + " | tree against ps | ring against ps | "
            + " | ".join(f"{p}: time to {target}, s" for p in ORDER) + " |",
            "|" + "---|" * (2 + 3 * len(ORDER) - 1)]
    shown: list[stats.Estimate] = []
    rows = []
    for loss in sorted(d.loss_pct.unique()):
        for scheme in scheme_order(d):
            here = rows_where(d, loss_pct=loss, scheme=scheme)
            speeds, times = [], []
            for p in ORDER:
                cell = here[here.pattern_kind == p]
                e = stats.median_ci(cell.iters_per_s) if len(cell) else None
                speeds.append(e.fmt(".2f") if e else "-")
                shown += [e] if e else []
                times.append(_tta(cell) if len(cell) else "-")
            verdicts = [_ratio(v) if v else "-" for v in _against_ps(here)]
            rows.append(f"| {loss:g} % | {name(scheme)} | " + " | ".join(speeds + verdicts + times)
                        + " |")
    return head + rows, shown


def _excess(d: pd.DataFrame) -> list[str]:
    """At the lowest loss: the PS's time sending against its iteration and floor, and the tree's
    iteration against its floor."""
    quiet = d[d.loss_pct == d.loss_pct.min()].copy()
    quiet["excess_s"] = quiet.iter_p50_s - quiet.iter_bound_s
    lines = [f"**The broadcast as the excess**, at {quiet.loss_pct.min():g} % loss: each "
             "pattern's median iteration, its floor (`iter_bound_s`: the data bound, the slowest "
             "worker's compute and the update), the excess over the floor, and the PS's time "
             "sending the parameters (the PS's serial broadcast; a tree's answers and feeding "
             "its children).", "",
             "| scheme | pattern | iteration s | floor s | excess s | sending s |",
             "|---|---|---|---|---|---|"]
    verdicts, signs = [], {}
    for scheme in scheme_order(quiet):
        here = quiet[quiet.scheme == scheme]
        for p in [p for p in ORDER if p in set(here.pattern_kind)]:
            cell = here[here.pattern_kind == p]
            lines.append(f"| {name(scheme)} | {p} | {stats.median_ci(cell.iter_p50_s).fmt('.3f')}"
                         f" | {cell.iter_bound_s.median():.3f} "
                         f"| {stats.median_ci(cell.excess_s).fmt('.3f')} "
                         f"| {stats.median_ci(cell.broadcast_p50_s).fmt('.3f')} |")
        if {"tree", "ps"} <= set(here.pattern_kind):
            v = _vs(here, {"pattern_kind": "tree"}, {"pattern_kind": "ps"}, "excess_s",
                    higher=False, names=("tree", "PS"))
            verdicts.append(f"- {name(scheme)}, the excess over the floor (lower is better): "
                            f"{v.sentence}")
            signs[name(scheme)] = v.sign
    return lines + ["", *verdicts, "", "So, against the PS, the tree's excess over its floor is "
                    + _by_sign(signs, "smaller", "larger") + ". Over TCP a send returns once the "
                    "kernel has buffered it, so TCP's sending time says little about its "
                    "broadcast."]


def _by_sign(signs: dict[str, int | None], better: str, worse: str) -> str:
    """``smaller for a and b, within noise for c``: the keys grouped by their verdict's sign."""
    parts = [f"{word} for {listing(k for k, v in signs.items() if v == sign)}"
             for sign, word in ((1, better), (0, "within noise"), (-1, worse), (None,
                                "not compared"))
             if any(v == sign for v in signs.values())]
    return "; ".join(parts) or "not compared"


def _tolerance(d: pd.DataFrame) -> list[str]:
    """``ltp`` against ``ltp-reliable`` and against TCP with the short timeout, under each
    pattern; then whether the gain under a collective is larger than under the PS."""
    lines = ["**Does tolerating loss pay once the incast is gone?** `ltp` against "
             + " and ".join(name(s) for s in TOLERANCE) + " under each pattern, iterations/s:",
             ""]
    gains: dict[tuple[float, str, str], pd.Series] = {}
    for loss in sorted(x for x in d.loss_pct.unique() if x > 0):
        for p in [p for p in ORDER if p in set(d.pattern_kind)]:
            here = rows_where(d, loss_pct=loss, pattern_kind=p)
            for other in TOLERANCE:
                if not {"ltp", other} <= set(here.scheme):
                    continue
                v = _vs(here, {"scheme": "ltp"}, {"scheme": other}, names=("`ltp`", name(other)))
                lines.append(f"- {loss:g} % loss, {p}: {v.sentence}")
                gains[(loss, p, other)] = stats.per_seed(
                    stats.by_seed(here[here.scheme == "ltp"], "iters_per_s"),
                    stats.by_seed(here[here.scheme == other], "iters_per_s"), "ratio")
    more, signs = [], {}
    for (loss, p, other), gain in gains.items():
        base = gains.get((loss, "ps", other))
        if p == "ps" or base is None:
            continue
        v = stats.compare(f"`ltp`'s gain under the {p}", gain, "under the PS", base, True)
        more.append(f"- {loss:g} % loss, against {name(other)}: {v.sentence}")
        signs[f"the {p} against {name(other)} at {loss:g} %"] = v.sign
    if more:
        lines += ["", "`ltp`'s gain (its per-seed ratio of iterations/s over the other's) under "
                      "a collective against its gain under the PS, the same seeds (a gain larger "
                      "under the collective is better):", "", *more, "",
                  "So, once the incast is gone, `ltp`'s gain, set against its gain under the "
                  "PS, is " + _by_sign(signs, "larger", "smaller") + "."]
    return lines


def patterns_text(ctx: Context) -> list[str]:
    """The three patterns at 8 workers, 0-10 % loss, from ``results/patterns``."""
    d = _frame(ctx.folder(PATTERNS))
    table, shown = _speed_table(d)
    return [f"{setting(d)}; every link, the workers' too, at the bottleneck's rate.", "",
            _incast(d), "", "**Speed and time to accuracy**, median [interval] over seeds; "
            "\"against ps\" is the per-seed ratio of iterations/s, its verdict by the rule below; "
            f"time to {TARGET:g} accuracy is the training time of the first evaluation (every "
            f"{int(d.eval_every.median())} iterations) at or above it, a run that never got there "
            "counted as infinitely late:",
            "", *table, "", stats.intervals_legend(shown), "", *_excess(d), "", *_tolerance(d),
            "", f"Verdicts: {stats.RULE}."]


def faults_text(ctx: Context) -> list[str]:
    """A tree and the PS through a killed and a stalled worker, from ``results/patterns-faults``."""
    folder = ctx.folder(FAULTS)
    d = _frame(folder)
    lines = [f"{setting(d)}; the fault strikes one worker (docs/faults.md).", "",
             "| scheme | fault | pattern | iterations/s | detection s | rounds without it "
             "| recovered s | false alarms | final accuracy |", "|" + "---|" * 9]
    shown, verdicts = [], []
    for scheme in scheme_order(d):
        for fault in sorted(d.fault.unique()):
            here = rows_where(d, scheme=scheme, fault=fault)
            for p in [p for p in ORDER if p in set(here.pattern_kind)]:
                cell = here[here.pattern_kind == p]
                ests = [stats.median_ci(cell[c]) for c in
                        ("iters_per_s", "detection_s", "iterations_lost", "recovered_s",
                         "final_accuracy")]
                shown += ests
                cols = [e.fmt(s) for e, s in zip(ests, (".2f", ".2f", ".0f", ".2f", ".3f"))]
                lines.append(f"| {name(scheme)} | {fault} | {p} | {cols[0]} | {cols[1]} "
                             f"| {cols[2]} | {cols[3]} | {int(cell.false_alarms.sum())} "
                             f"| {cols[4]} |")
            if {"tree", "ps"} <= set(here.pattern_kind):
                v = _vs(here, {"pattern_kind": "tree"}, {"pattern_kind": "ps"})
                verdicts.append(f"- {name(scheme)}, {fault}: {v.sentence}")
    runs = folder.runs
    trees = runs[runs.pattern.map(section.kind) == "tree"]
    ok = d[d.pattern_kind == "tree"]
    ended = int((ok.iterations_done == ok.iterations).sum())
    capped = int((ok.stopped_by == "time_cap").sum())
    return lines + ["", stats.intervals_legend(shown), "",
                    f"Of {len(trees)} tree runs with a fault, {len(ok)} ended with status ok: "
                    f"{ended} ran all their iterations, {capped} were stopped by the time cap. "
                    "`recovered s` is the re-forming time: from the fault (its end, for a stall) "
                    "until the first round that held every worker still running.", "",
                    "Each tree against the PS with the same fault, iterations/s:", "", *verdicts,
                    "", f"Verdicts: {stats.RULE}."]


def scale_text(ctx: Context) -> list[str]:
    """The patterns at 16 and 32 workers, from ``results/patterns-scale``."""
    d = _frame(ctx.folder(SCALE))
    lines = [f"{setting(d)}.", "", _incast(d), "",
             "| workers | loss | scheme | ps iterations/s | tree iterations/s | ring iterations/s "
             "| tree against ps | ring against ps |", "|" + "---|" * 8]
    shown = []
    for n in sorted(d.n_workers.unique()):
        for loss in sorted(d.loss_pct.unique()):
            for scheme in scheme_order(d):
                here = rows_where(d, n_workers=n, loss_pct=loss, scheme=scheme)
                if here.empty:
                    continue
                ests = [stats.median_ci(here[here.pattern_kind == p].iters_per_s)
                        for p in ORDER]
                shown += [e for e in ests if e.n]
                vs = [_ratio(v) if v else "-" for v in _against_ps(here)]
                lines.append(f"| {n} | {loss:g} % | {name(scheme)} | "
                             + " | ".join(e.fmt(".2f") if e.n else "-" for e in ests)
                             + " | " + " | ".join(vs) + " |")
    return lines + ["", stats.intervals_legend(shown), "", f"Verdicts: {stats.RULE}."]


def _counts(verdicts: list[stats.Verdict]) -> str:
    """``faster in 3, within noise in 8, slower in 1 of 12 cells``."""
    said = [v for v in verdicts if v.sign is not None]
    parts = [f"{word} in {sum(1 for v in said if v.sign == sign)}"
             for sign, word in ((1, "faster"), (0, "within noise"), (-1, "slower"))]
    return ", ".join(parts) + f" of {len(said)} cells"


def summary(ctx: Context) -> str:
    """docs/collectives.md: each collective against the PS across the cells of
    ``results/patterns``, counted, with where the details are."""
    f = ctx.folder(PATTERNS)
    d = _frame(f)
    lines = [f"From {f.cite()}: {f.status()}", ""]
    with stats.tally() as tally:
        per_cell = [_against_ps(here) for _, here in d.groupby(["loss_pct", "scheme"])]
        for i, p in enumerate(ORDER[1:]):
            found = [vs[i] for vs in per_cell if vs[i]]
            lines.append(f"- The {p} against the PS, iterations/s per loss and scheme: "
                         f"{_counts(found)} (paired by seed, seeds {listing(f.seeds())}).")
    lines += ["", "The tables, the excess over each floor, loss tolerance under each pattern, "
                  "the faults and the scale are on the findings page: "
                  f"[{QUESTION}](findings.md#{anchor(QUESTION)}).", "", tally.sentence("passage")]
    return "\n".join(lines)


BLOCKS = {"collectives": summary}
SECTIONS = [
    Section("patterns", QUESTION, (PATTERNS,), patterns_text),
    Section("patterns-faults", "Does a tree train through a killed or a stalled worker?",
            (FAULTS,), faults_text),
    Section("patterns-scale", "How do the PS, the tree and the ring scale to 16 and 32 workers?",
            (SCALE,), scale_text),
]
