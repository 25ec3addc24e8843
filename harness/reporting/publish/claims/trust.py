"""Findings: untrusted workers. What each aggregation rule does against workers that push a
sign-flipped gradient, and whether score-based validation takes an honest update that a
loss-tolerant transport delivered in part (holes filled) for an attack.

``results/byzantine/`` is the ``byzantine`` preset (every rule, with and without attackers, TCP, no
loss); ``results/byzantine-5seeds/`` adds seeds to its ``mean`` and ``score`` cells;
``results/byzantine-loss/`` and ``results/byzantine-loss-plot/`` run ``mean`` and ``score`` over LTP
and PLOT under random loss. Every rule is judged by the per-seed ratio of its final accuracy to the
attack-free run under plain averaging (:func:`harness.reporting.stats.judge`): against 1 ("within
noise" of that run or not) and against ``1 - HOLD_MARGIN`` (does it hold within the margin
:mod:`harness.reporting.sections.byzantine` states before any run).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness.reporting import stats
from harness.reporting.publish.claims import Section
from harness.reporting.publish.claims.common import dataset, span
from harness.reporting.publish.context import Context, Folder
from harness.reporting.sections.byzantine import COLLAPSE_RATIO, HOLD_MARGIN
from harness.reporting.sections.faults import TTA_LEVEL, with_tta
from harness.training.aggregators import AGGREGATORS
from harness.training.byzantine import parse_byzantine

BYZANTINE = "results/byzantine"
FIVE_SEEDS = "results/byzantine-5seeds"
LOSSY = ("results/byzantine-loss", "results/byzantine-loss-plot")
FREE = "0"          # the attack-free setting's text in runs.csv
BASE_RULE = "mean"  # the rule every other is measured against, without attackers
VALIDATOR = "score"


def _runs(f: Folder) -> pd.DataFrame:
    """The folder's ok runs with ``tta_s``, the training time to ``TTA_LEVEL`` (NaN if never)."""
    return with_tta(f.sweep)


def _cell(d: pd.DataFrame, attack: str, rule: str) -> pd.DataFrame:
    return d[(d.byzantine == attack) & (d.aggregator == rule)]


def _rules(d: pd.DataFrame) -> list[str]:
    return [a for a in AGGREGATORS if a in set(d.aggregator)]


def _attacks(d: pd.DataFrame) -> list[str]:
    return sorted(d.byzantine.unique(), key=lambda b: (b != FREE, b))


def _acc(cell: pd.DataFrame) -> pd.Series:
    return stats.by_seed(cell, "final_accuracy")


def _tta(cell: pd.DataFrame) -> pd.Series:
    """Time to ``TTA_LEVEL`` by seed, a run that never reached it infinitely late."""
    return pd.Series(cell.tta_s.astype(float).fillna(np.inf).to_numpy(),
                     index=cell.seed.to_numpy())


def _tta_est(cell: pd.DataFrame) -> stats.Estimate:
    return stats.censored_median_ci(cell.tta_s.astype(float).fillna(0.0), cell.tta_s.notna())


def _pct(share: float) -> str:
    """``23 %``; a share under one percent but not zero keeps a decimal (``0.5 %``)."""
    pct = 100 * share
    return f"{pct:.1f} %" if 0 < pct < 1 else f"{pct:.0f} %"


def _count(num: float, den: float) -> str:
    """``351 of 1,542 (23 %)``; ``-`` when there was nothing to count."""
    return f"{num:,.0f} of {den:,.0f} ({_pct(num / den)})" if den else "-"


def _margin_text() -> str:
    return _pct(HOLD_MARGIN)


def _attack_text(d: pd.DataFrame) -> str:
    """``2 of 8 workers (the highest ranks) push -4 g instead of their gradient g``."""
    n = int(d.n_workers.median())
    parts = []
    for text in _attacks(d):
        if text == FREE:
            continue
        attack = parse_byzantine(text)
        what = {"sign-flip": f"push -{attack.value(n):g} g instead of their gradient g"}.get(
            attack.behaviour, f"behave as `{attack.behaviour}`")
        parts.append(f"in the `{text}` cells {attack.count} of the {n} workers (the highest "
                     f"ranks) {what}")
    return "; ".join(parts)


def _setting(f: Folder, d: pd.DataFrame) -> str:
    """What every run of the folder shared, from its table."""
    schemes = ", ".join(f.sweep.names.get(s, s) for s in f.sweep.order)
    losses = ", ".join(f"{x:g}" for x in sorted(d.loss_pct.unique()))
    tolerate = ", ".join(f"{t:g}" for t in sorted(d.tolerate.unique()))
    return (f"{int(d.n_workers.median())} workers and a PS train the "
            f"{str(d.model.iloc[0]).upper()} on {dataset(d.dataset.iloc[0])} over {schemes} at "
            f"{losses} % "
            f"random loss through a {d.bottleneck_mbps.median():g} Mbit/s bottleneck, "
            f"{int(d.iterations.median())} iterations a run; {_attack_text(d)}. Every rule "
            f"tolerates f = {tolerate} attackers in every run, attacked or not (a real PS "
            "cannot know)")


def _against_free(d: pd.DataFrame, attack: str, rule: str) -> tuple[stats.Estimate, int | None,
                                                                    int | None]:
    """Final accuracy of ``rule`` under ``attack`` over the attack-free ``mean`` run's, per seed
    (paired where they share seeds), and its two verdicts: against 1 and against the margin."""
    est = stats.pair_or_not(_acc(_cell(d, attack, rule)), _acc(_cell(d, FREE, BASE_RULE)))
    return est, stats.judge(est, 1.0), stats.judge(est, 1.0 - HOLD_MARGIN)


_NOISE = {1: "above the attack-free run beyond noise", 0: "within noise of the attack-free run",
          -1: "below the attack-free run beyond noise", None: "not compared (too few seeds)"}


def _margin_word(sign: int | None, est: stats.Estimate) -> str:
    floor = 1.0 - HOLD_MARGIN
    if sign is None:
        return "no verdict on the margin"
    if sign == 1:
        return (f"holds within the {_margin_text()} margin (the interval's lower end clears "
                f"{floor:.2f})")
    if sign == 0:
        return (f"not shown to hold within {_margin_text()}: the interval reaches "
                f"{est.lo:.3f}x, so these seeds bound the loss only at {100 * (1 - est.lo):.1f} %")
    return f"loses more than {_margin_text()} beyond noise"


def _ratio_sentence(d: pd.DataFrame, attack: str, rule: str) -> tuple[str, stats.Estimate]:
    est, noise, margin = _against_free(d, attack, rule)
    how = "per-seed ratio" if not est.at_least else "ratio of medians, unpaired"
    text = (f"{est.fmt('.3f', 'x')} of the attack-free `{BASE_RULE}` run ({how}, "
            f"{est.label}): {_NOISE[noise]}; {_margin_word(margin, est)}")
    if margin == -1:   # below the margin: is it the collapse robustness.py names?
        if stats.judge(est, COLLAPSE_RATIO) == -1:
            text += f"; it collapses (below {COLLAPSE_RATIO:g}x beyond noise)"
    return text, est


def _accuracy_table(d: pd.DataFrame) -> tuple[list[str], list[stats.Estimate]]:
    rules = _rules(d)
    lines = ["| attackers | " + " | ".join(f"`{r}`" for r in rules) + " |",
             "|---|" + "---|" * len(rules)]
    shown = []
    for attack in _attacks(d):
        row = []
        for rule in rules:
            est = stats.median_ci(_cell(d, attack, rule).final_accuracy)
            shown.append(est)
            row.append(est.fmt(".3f"))
        lines.append(f"| `{attack}` | " + " | ".join(row) + " |")
    return lines, shown


def _kept(cell: pd.DataFrame) -> str:
    return _count(cell.byzantine_kept.sum(), cell.byzantine_updates.sum())


def _honest_rejected(cell: pd.DataFrame) -> str:
    return _count(cell.honest_rejected.sum(), cell.honest_updates.sum())


def _all_present(frames: list[pd.DataFrame]) -> str:
    """Whether every round of every run had every worker's update (``contributors``)."""
    rounds = full = 0
    for iters, runs in frames:
        n = iters.merge(runs[["run_id", "n_workers"]], on="run_id", suffixes=("", "_run"))
        col = "n_workers_run" if "n_workers_run" in n else "n_workers"
        rounds += len(n)
        full += int((n.contributors >= n[col]).sum())
    if rounds and full == rounds:
        return (f"In every one of the {rounds:,} rounds of these runs every worker's update "
                "reached the PS (`contributors`), so no rule ran short of updates.")
    return (f"{rounds - full:,} of {rounds:,} rounds lacked a worker's update "
            "(`contributors`); the rules then ran with a smaller f (`agg_f`).")


def byzantine_text(ctx: Context) -> list[str]:
    """Every rule against sign-flipping workers: final accuracy, what it kept and rejected, its
    cost per round; ``score`` again with more seeds."""
    f = ctx.folder(BYZANTINE)
    d = _runs(f)
    attacks = [a for a in _attacks(d) if a != FREE]
    table, shown = _accuracy_table(d)
    lines = [f"{_setting(f, d)}. Final test accuracy, median over seeds:", "", *table, "",
             stats.intervals_legend(shown), "",
             f"Each rule under attack against the attack-free run under `{BASE_RULE}`, as the "
             "ratio of final accuracies with the same seed; the verdicts apply the rule to that "
             f"ratio twice, against 1 and against {1 - HOLD_MARGIN:.2f} (holding within "
             f"{_margin_text()}, the margin `harness/reporting/sections/byzantine.py` states before any run; each "
             "ratio's bracket is the interval of the median over the seeds' ratios, with the "
             "coverage it names):", ""]
    ratios = []
    for attack in attacks:
        for rule in _rules(d):
            cell = _cell(d, attack, rule)
            text, est = _ratio_sentence(d, attack, rule)
            ratios.append(est)
            kept = f"it kept {_kept(cell)} of the attackers' updates"
            if rule == VALIDATOR:
                kept += f" and rejected {_honest_rejected(cell)} honest ones"
            lines.append(f"- `{rule}` against `{attack}`: {text}; {kept}.")
    lines.append("")
    mean_hit = pd.concat([_cell(d, a, BASE_RULE) for a in attacks])
    if len(mean_hit) and mean_hit.final_accuracy.nunique() == 1:
        lines.append(f"Under attack `{BASE_RULE}` ends at "
                     f"{mean_hit.final_accuracy.iloc[0]:.3f} in every seed, the accuracy of one "
                     "class predicted for every input of the balanced test set: averaging "
                     "steps along the attackers' flipped gradients, which outweigh the honest "
                     "ones.")
        lines.append("")
    free_score = _cell(d, FREE, VALIDATOR)
    if len(free_score):
        v = stats.compare(f"`{VALIDATOR}`", _acc(free_score), f"`{BASE_RULE}`",
                          _acc(_cell(d, FREE, BASE_RULE)), spec=".3f")
        lines.append(f"Without attackers `{VALIDATOR}` still rejects f updates a round (it keeps "
                     f"the n - f best by construction: {_honest_rejected(free_score)} honest "
                     f"updates rejected); final accuracy: {v.sentence}")
    lines += ["", *_selective(d, attacks), "", *_cost(d), ""]
    lines += _more_seeds(ctx, f)
    lines += ["", _all_present([(f.sweep.iters, f.ok), (ctx.folder(FIVE_SEEDS).sweep.iters,
                                                         ctx.folder(FIVE_SEEDS).ok)])]
    return lines


def _selective(d: pd.DataFrame, attacks: list[str]) -> list[str]:
    """What the coordinate-wise rules let through, and what ``krum`` gives up for its safety."""
    lines = []
    for rule in ("median", "trimmed-mean"):
        cells = [_cell(d, a, rule) for a in attacks]
        if any(len(c) for c in cells):
            cell = pd.concat(cells)
            lines.append(f"- `{rule}` uses each update in some coordinates only; counted as kept "
                         "when it entered at least half its fair share of coordinates, it kept "
                         f"{_kept(cell)} of the attackers' updates.")
    krum = _cell(d, FREE, "krum")
    if len(krum):
        share = krum.honest_rejected / krum.honest_updates
        dropped = (_pct(share.min()) if _pct(share.min()) == _pct(share.max())
                   else f"{_pct(share.min())}-{_pct(share.max())}")
        v = stats.compare("`krum`", _tta(krum), f"`{BASE_RULE}`", _tta(_cell(d, FREE, BASE_RULE)),
                          higher_is_better=False, spec=".1f", unit=" s")
        lines.append(f"- `krum` keeps one update a round, so without attackers it drops "
                     f"{dropped} of the honest updates in every run; "
                     f"training time to {_pct(TTA_LEVEL)} accuracy without attackers: "
                     f"{v.sentence}")
    return lines


def _cost(d: pd.DataFrame) -> list[str]:
    """The rules' compute time per round at the PS, against the iteration."""
    parts, shown = [], []
    for rule in _rules(d):
        est = stats.median_ci(1000 * d[d.aggregator == rule].agg_p50_s)
        shown.append(est)
        parts.append(f"`{rule}` {est.fmt('.1f', ' ms')}")
    it = stats.median_ci(d.iter_p50_s)
    n = int(d.n_workers.median())
    return [f"The rule's compute time per round at the PS (each run's median, then the median "
            f"over every run of the rule, attacked or not): {'; '.join(parts)}; the iteration "
            f"itself took {it.fmt('.3f', ' s')} (median over all runs). `{VALIDATOR}` runs "
            f"{n + 1} forward passes of its validation batch a round, `median` and "
            "`trimmed-mean` sort every coordinate. " + stats.intervals_legend(shown + [it])]


def _more_seeds(ctx: Context, first: Folder) -> list[str]:
    """``score`` against the attack-free run with the seeds of the second folder added."""
    f = ctx.folder(FIVE_SEEDS)
    d = _runs(f)
    extra = sorted(set(f.seeds()) - set(first.seeds()))
    lines = [f"More seeds for `{VALIDATOR}` and `{BASE_RULE}`, from {f.cite()}: it holds the "
             f"first folder's runs of those cells and adds seeds {', '.join(map(str, extra))}.",
             ""]
    shown = []
    for attack in [a for a in _attacks(d) if a != FREE]:
        text, _ = _ratio_sentence(d, attack, VALIDATOR)
        cell = _cell(d, attack, VALIDATOR)
        new = cell[cell.seed.isin(extra)]
        mine = stats.median_ci(cell.final_accuracy)
        free = stats.median_ci(_cell(d, FREE, BASE_RULE).final_accuracy)
        shown += [mine, free]
        lines.append(f"- `{VALIDATOR}` against `{attack}`: final accuracy {mine.fmt('.3f')}, the "
                     f"attack-free `{BASE_RULE}` run {free.fmt('.3f')}; "
                     f"{text}. In the added seeds it kept {_kept(new)} of the attackers' "
                     f"updates and rejected {_honest_rejected(new)} honest ones.")
    return lines + ["", stats.intervals_legend(shown)]


def _lossy_rows(ctx: Context) -> tuple[list[str], list[stats.Estimate], list[tuple]]:
    """The table of the lossy folders and, per folder, (name, runs, folder)."""
    head = ["transport", "attackers", "rule", "runs", "final accuracy",
            f"s to {_pct(TTA_LEVEL)} (runs reaching it)", "attackers' updates kept",
            "filled honest updates rejected", "whole honest updates rejected"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    shown, folders = [], []
    for rel in LOSSY:
        f = ctx.folder(rel)
        d = _runs(f)
        folders.append((", ".join(f.sweep.names.get(s, s) for s in f.sweep.order), d, f))
        for attack in _attacks(d):
            for rule in _rules(d):
                cell = _cell(d, attack, rule)
                acc, tta = stats.median_ci(cell.final_accuracy), _tta_est(cell)
                shown += [acc, tta]
                whole = cell.honest_updates.sum() - cell.honest_filled.sum()
                whole_rejected = cell.honest_rejected.sum() - cell.honest_filled_rejected.sum()
                lines.append(
                    f"| {folders[-1][0]} | `{attack}` | `{rule}` | {len(cell)} | {acc.fmt('.3f')} "
                    f"| {tta.fmt('.1f')} ({int(cell.tta_s.notna().sum())} of {len(cell)}) "
                    f"| {_kept(cell)} "
                    f"| {_count(cell.honest_filled_rejected.sum(), cell.honest_filled.sum())} "
                    f"| {_count(whole_rejected, whole)} |")
    return lines, shown, folders


def _share(cell: pd.DataFrame, filled: bool) -> pd.Series:
    """Per run (by seed): the share, in percent, of its filled (or whole) honest updates the rule
    rejected."""
    if filled:
        num, den = cell.honest_filled_rejected, cell.honest_filled
    else:
        num = cell.honest_rejected - cell.honest_filled_rejected
        den = cell.honest_updates - cell.honest_filled
    share = 100 * num / den.where(den > 0)
    return pd.Series(share.to_numpy(dtype=float), index=cell.seed.to_numpy())


def lossy_text(ctx: Context) -> list[str]:
    """Score-based validation over loss-tolerant transports: does it reject honest updates whose
    holes the transport filled?"""
    table, shown, folders = _lossy_rows(ctx)
    d0 = folders[0][1]
    loss = pd.concat([d for _, d, _ in folders]).measured_loss_pct
    fills = "; ".join(f"{name} {100 * d.filled_frac_mean.median():.1f} % of a gradient (median "
                      "over runs of the per-run mean), at most "
                      f"{100 * d.filled_frac_max.max():.1f} %"
                      for name, d, _ in folders)
    lines = [f"The same setting over loss-tolerant transports: "
             f"{', '.join(name for name, _, _ in folders)} at "
             f"{', '.join(f'{x:g}' for x in sorted(d0.loss_pct.unique()))} % uniform random loss "
             f"(measured {span(loss)} % across the runs), rules "
             f"{', '.join(f'`{r}`' for r in _rules(d0))}, the rest as above. A gradient closed "
             "early has holes, zero-filled for the rules; filled per gradient: "
             f"{fills}. Does `{VALIDATOR}` take such an honest update for an attack? Counts are "
             "summed over the cell's runs; a \"filled\" honest update is one the transport "
             "delivered in part.", "", *table, "", stats.intervals_legend(shown), ""]
    for name, d, _ in folders:
        for attack in [a for a in _attacks(d) if a != FREE]:
            cell = _cell(d, attack, VALIDATOR)
            text, _ = _ratio_sentence(d, attack, VALIDATOR)
            free_mean = _tta(_cell(d, FREE, BASE_RULE))
            v = stats.compare(f"`{VALIDATOR}` under `{attack}`", _tta(cell),
                              f"the attack-free `{BASE_RULE}` run", free_mean,
                              higher_is_better=False, spec=".1f", unit=" s")
            lines.append(f"- {name}, `{attack}`: `{VALIDATOR}` kept {_kept(cell)} of the "
                         f"attackers' updates and rejected "
                         f"{_count(cell.honest_filled_rejected.sum(), cell.honest_filled.sum())} "
                         f"filled honest ones; final accuracy {text}. Time to "
                         f"{_pct(TTA_LEVEL)}: {v.sentence}")
        free = _cell(d, FREE, VALIDATOR)
        if len(free):
            v = stats.compare("filled", _share(free, True), "whole", _share(free, False),
                              higher_is_better=False, spec=".1f", unit=" %", op="diff")
            t = stats.compare(f"`{VALIDATOR}`", _tta(free), f"`{BASE_RULE}`",
                              _tta(_cell(d, FREE, BASE_RULE)), higher_is_better=False,
                              spec=".1f", unit=" s")
            lines.append(f"- {name}, no attackers: `{VALIDATOR}` still rejects f updates a "
                         "round. Share of a run's honest updates rejected, filled against "
                         "whole ones, in percent (the per-seed difference is in points; a "
                         "higher share for filled updates would mean the validator singles out "
                         f"lossy workers): {v.sentence} "
                         f"Time to {_pct(TTA_LEVEL)} against `{BASE_RULE}`: {t.sentence}")
    measured = sorted({f"{x:g}" for _, d, _ in folders for x in d.loss_pct.unique()})
    lines += ["", f"Not measured: loss rates other than {', '.join(measured)} %, and a "
              "threshold (`--score-threshold`) instead of keeping the best n - f, where a filled "
              "update would have to clear a bar on its own.", "",
              _all_present([(f.sweep.iters, f.ok) for _, _, f in folders])]
    return lines


def _block(ctx: Context, rels: tuple[str, ...], body) -> str:
    """A docs block: where its numbers come from, whether they are stale, the text, the count."""
    with stats.tally() as tally:
        text = body(ctx)
    head = [f"From {ctx.folder(r).cite()}: {ctx.folder(r).status()}" for r in rels]
    return "\n".join(["\n\n".join(head), "", *text, "", tally.sentence("passage")])


def byzantine_block(ctx: Context) -> str:
    """docs/byzantine.md: every rule against sign-flipping workers."""
    return _block(ctx, (BYZANTINE, FIVE_SEEDS), byzantine_text)


def lossy_block(ctx: Context) -> str:
    """docs/byzantine.md: score-based validation over loss-tolerant transports."""
    return _block(ctx, LOSSY, lossy_text)


BLOCKS = {"byzantine": byzantine_block, "byzantine-loss": lossy_block}
SECTIONS = [
    Section("byzantine", "Which aggregation rules keep training on course when some workers "
                         "push sign-flipped gradients?", (BYZANTINE, FIVE_SEEDS), byzantine_text),
    Section("byzantine-loss", "Does score-based validation reject honest updates that a "
                              "loss-tolerant transport delivered with holes?", LOSSY, lossy_text),
]
