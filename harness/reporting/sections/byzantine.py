"""Figures and the report section of training with Byzantine workers, from the tables alone.

Drawn when a sweep varies the Byzantine workers or the aggregation rule (the ``byzantine``
preset; ``invoke run-sweep --byzantine 0,2:sign-flip --aggregator mean,score,...``):

- ``byzantine_accuracy``: test accuracy over training time, one panel per attack (and scheme
  and loss rate where those vary, and sync mode and holdout where a sweep varies them: the
  ``validation-async`` and ``privacy`` presets), one line per aggregation rule: the median over
  seeds at each evaluation, with the range of the seeds shaded.

:func:`section` writes the report's "Byzantine workers" section: per cell, the final accuracy
(median and its interval over seeds), how many of the attackers' updates the rule kept,
how many honest ones (and honest ones the transport delivered in part) it rejected, and its
compute time per round; then, per attack, one sentence per rule comparing its final accuracy with
the attack-free run under plain averaging, as a ratio with its interval: a rule *holds* when the
interval's lower end is at least ``1 - HOLD_MARGIN``, and averaging *collapses* when the
interval's upper end is below ``COLLAPSE_RATIO``.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt

from harness.reporting import stats
from harness.reporting.sections.faults import TTA_LEVEL, with_tta
from harness.reporting.tables import Sweep
from harness.training.aggregators import AGGREGATORS

HOLD_MARGIN = 0.03     # a rule holds if its accuracy is within 3 % of the attack-free run's
COLLAPSE_RATIO = 0.5   # and averaging collapses below half of it
FIGURES = (("byzantine_accuracy", "test accuracy over time per attack and aggregation rule"),)


def applies(sw: Sweep) -> bool:
    """The sweep varies the attack or the rule, or runs one that is not the default."""
    return bool({"byzantine", "aggregator"} & set(sw.varying)) or bool(
        (sw.ok.byzantine != "0").any() or (sw.ok.aggregator != "mean").any())


def _attacks(sw: Sweep) -> list[str]:
    return sorted(sw.ok.byzantine.unique(), key=lambda b: (b != "0", b))


def _rules(sw: Sweep) -> list[str]:
    return [a for a in AGGREGATORS if a in set(sw.ok.aggregator)]


EXTRA = ("sync", "holdout")   # settings a panel keeps apart when the sweep varies them


def _keys(sw: Sweep) -> list[str]:
    """The columns one panel (and one cell of the table) holds fixed."""
    return ["scheme", "loss_pct", "byzantine"] + [
        c for c in EXTRA if c in sw.ok and sw.ok[c].nunique() > 1]


def _panels(sw: Sweep) -> list[tuple]:
    keys = sw.ok[_keys(sw)].drop_duplicates()
    return sorted(keys.itertuples(index=False, name=None),
                  key=lambda k: (sw.order.index(k[0]), k[1], k[2] != "0", k[2], *map(str, k[3:])))


def _in(df, keys: list[str], panel: tuple, **instead):
    """The rows of ``df`` in ``panel`` (values by ``keys``), some values replaced by
    ``instead``."""
    mask = df.index == df.index
    for key, value in zip(keys, panel):
        mask &= (df[key] == instead.get(key, value)).to_numpy()
    return df[mask]


def _setting(sw: Sweep, keys: list[str], panel: tuple) -> str:
    """The panel's scheme, with the extra settings it holds fixed."""
    extra = [f"{k} {v}" for k, v in zip(keys[3:], panel[3:])]
    return ", ".join([sw.names.get(panel[0], panel[0])] + extra)


def draw(sw: Sweep, folder: Path, save) -> list[Path]:
    """Write ``byzantine_accuracy`` with ``save(fig, folder, name)`` (nothing without curves)."""
    if sw.curves.empty or "byzantine" not in sw.curves:
        return []
    keys = _keys(sw)
    curves = sw.curves.merge(sw.ok[["run_id", "aggregator", *keys[2:]]], on="run_id",
                             suffixes=("_c", ""))
    panels = _panels(sw)
    fig, axes = plt.subplots(1, len(panels), squeeze=False, sharey=True, layout="constrained",
                             figsize=(0.6 + 3.0 * len(panels), 3.2))
    colours = dict(zip(AGGREGATORS, plt.get_cmap("tab10").colors))
    for ax, panel in zip(axes[0], panels):
        loss, attack = panel[1:3]
        d = _in(curves, keys, panel)
        for rule in _rules(sw):
            g = d[d.aggregator == rule].groupby("iteration")
            if not len(g):
                continue
            t, acc = g.time_s.median(), g.accuracy.median()
            ax.plot(t, acc, marker="o", ms=3, label=rule, color=colours[rule])
            ax.fill_between(t, g.accuracy.min(), g.accuracy.max(), alpha=0.15,
                            color=colours[rule], lw=0)
        title = "no attacker" if attack == "0" else f"byzantine {attack}"
        ax.set_title(f"{title}\n{_setting(sw, keys, panel)}, {loss:g} % loss", fontsize=8)
        ax.set_xlabel("training time at the PS (s)")
    axes[0][0].set_ylabel("test accuracy (median over seeds, range shaded)")
    axes[0][-1].legend(fontsize=7, title="aggregator", title_fontsize=7)
    return save(fig, folder, "byzantine_accuracy")


def _pct(num: float, den: float) -> str:
    return f"{num:.0f}/{den:.0f} ({100 * num / den:.0f} %)" if den else "-"


def _whole_rejected(d) -> str:
    """Honest updates delivered whole that the rule rejected, as a share."""
    den = d.honest_updates.sum() - d.honest_filled.sum()
    return f"{100 * (d.honest_rejected.sum() - d.honest_filled_rejected.sum()) / den:.0f} %" \
        if den else "-"


def section(sw: Sweep) -> list[str]:
    """The report's "Byzantine workers" section."""
    ok = with_tta(sw)
    lines = ["## Byzantine workers and aggregation rules", "",
             f"Final test accuracy and training time to {TTA_LEVEL:.0%} accuracy (runs that "
             "never reach it are left out of the time and counted), median [interval] over "
             "seeds. Attackers' updates kept, honest updates rejected, honest "
             "updates the transport delivered in part (filled) that were rejected, against the "
             "share of whole honest updates rejected, summed over the cell's runs; the rule's "
             "compute time per round (median of the runs' medians). The attackers are the "
             "highest ranks (docs/byzantine.md).", "",
             f"| scheme | loss | byzantine | aggregator | runs | final accuracy | s to "
             f"{TTA_LEVEL:.0%} (reached) | attackers kept | honest rejected | filled honest "
             "rejected | whole honest rejected | rule ms/round |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    keys = _keys(sw)
    for panel in _panels(sw):
        loss, attack = panel[1:3]
        for rule in _rules(sw):
            d = _in(ok, keys, panel)
            d = d[d.aggregator == rule]
            if d.empty:
                continue
            est = stats.median_ci(d.final_accuracy)
            tta = stats.median_ci(d.tta_s)
            lines.append(
                f"| {_setting(sw, keys, panel)} | {loss:g} % | {attack} | {rule} | {len(d)} "
                f"| {est.fmt('.3f')} | {tta.fmt('.1f')} ({d.tta_s.notna().sum()}/{len(d)}) "
                f"| {_pct(d.byzantine_kept.sum(), d.byzantine_updates.sum())} "
                f"| {_pct(d.honest_rejected.sum(), d.honest_updates.sum())} "
                f"| {_pct(d.honest_filled_rejected.sum(), d.honest_filled.sum())} "
                f"| {_whole_rejected(d)} | {1000 * d.agg_p50_s.median():.2f} |")
    lines += ["", f"Against the attack-free run under plain averaging (ratio of final "
              f"accuracies seed by seed, median [interval]): a rule *holds* when the interval's lower end "
              f"is at least {1 - HOLD_MARGIN:.2f} (within {HOLD_MARGIN:.0%}), averaging "
              f"*collapses* when its upper end is below {COLLAPSE_RATIO:g}.", ""]
    for panel in _panels(sw):
        loss, attack = panel[1:3]
        # The attack-free mean run of the same setting (mean validates nothing: holdout 0).
        bb = _in(ok, keys, panel, byzantine="0", holdout=0)
        bb = bb[bb.aggregator == "mean"]
        base = bb.final_accuracy
        if attack == "0" or base.empty:
            continue
        for rule in _rules(sw):
            dd = _in(ok, keys, panel)
            dd = dd[dd.aggregator == rule]
            d = dd.final_accuracy
            if d.empty:
                continue
            r = stats.pair_or_not(stats.by_seed(dd, "final_accuracy"),
                                  stats.by_seed(bb, "final_accuracy"))
            stats.judge(r)
            if min(len(d), len(base)) < stats.MIN_RUNS:
                verdict = f"fewer than {stats.MIN_RUNS} runs a cell, no verdict"
            elif r.hi < COLLAPSE_RATIO:
                verdict = "collapses"
            elif r.lo >= 1 - HOLD_MARGIN:
                verdict = "holds"
            elif r.hi < 1 - HOLD_MARGIN:
                verdict = "loses accuracy beyond the margin"
            else:
                verdict = "undecided: the interval straddles the margin"
            lines.append(f"- {_setting(sw, keys, panel)}, {loss:g} % loss, byzantine "
                         f"{attack}, {rule}: {r.fmt('.3f', 'x')} of the attack-free mean run: "
                         f"{verdict}.")
    return lines + [""]

