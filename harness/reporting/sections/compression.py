"""Figures and the report section of compressed pushes and local steps, from the tables alone.

Drawn when a sweep varies ``compress``, ``local_steps``, ``error_reset`` or ``reset_mode`` (the
``compression``, ``cser`` and ``cser-async`` presets; ``invoke run-sweep --compress
none,topk:0.01,sign --local-steps 1,4 --error-reset 0,1``; :mod:`harness.training.compress`). A
setting is those four and the sync mode, each compared with the uncompressed single-step run of
its own sync mode:

- ``compression_tradeoff``: final test accuracy against the bytes all workers' pushes of one
  round cost on the wire (``wire_bytes_per_iter``, log scale), one point per setting with its
  intervals on both axes, one panel per scheme and loss rate;
- ``compression_accuracy``: test accuracy over training time, one line per setting (median over
  seeds at each evaluation, the seeds' range shaded).

:func:`section` writes the report's "Compressed pushes" section: per setting the wire bytes per
round, their ratio to the uncompressed single-step run of the same scheme and loss, the final
accuracy and its difference from that run in points, time to the target accuracy (runs that
miss it count as infinitely late) and the pairs or words the PS dropped; then one sentence per
setting: bytes saved, and the accuracy cost, or "within noise" when the interval of the
difference holds zero.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from harness.reporting import stats
from harness.reporting.tables import CONDITION_DEFAULTS, Sweep, reached

KEYS = ("compress", "local_steps", "error_reset", "reset_mode")
CELL = (*KEYS, "sync")   # what one setting's runs share
FIGURES = (("compression_tradeoff", "final accuracy against push bytes on the wire per round"),
           ("compression_accuracy", "test accuracy over time per compression setting"))


def applies(sw: Sweep) -> bool:
    """The sweep varies a compression setting, or runs one that is not the default, and its
    table has the wire bytes the section compares."""
    if "wire_bytes_per_iter" not in sw.ok:
        return False
    if set(KEYS) & set(sw.varying):
        return True
    return any((sw.ok[k].astype(str) != str(CONDITION_DEFAULTS[k])).any() for k in KEYS)


def setting_label(compress: str, steps: int, reset: int, mode: str = "drop",
                  sync: str = "bsp") -> str:
    """``topk:0.01, H=4, reset 1``, ``sign, H=1, reset 4 cser, async``; the reset only where it
    means something, the mode and sync mode where they are not the defaults."""
    out = f"{compress}, H={steps:g}"
    out += f", reset {reset:g}" if compress != "none" else ""
    out += " cser" if mode == "cser" else ""
    return out + (f", {sync}" if sync != "bsp" else "")


def _settings(frame: pd.DataFrame) -> list[tuple[str, int, int, str, str]]:
    keys = frame[list(CELL)].drop_duplicates().itertuples(index=False, name=None)
    return sorted(keys, key=lambda k: (k[4], k[0] != "none", k[0], k[1], k[2], k[3]))


def _panels(sw: Sweep) -> list[tuple[str, float]]:
    keys = sw.ok[["scheme", "loss_pct"]].drop_duplicates().itertuples(index=False, name=None)
    return sorted(keys, key=lambda k: (sw.order.index(k[0]), k[1]))


def _cell(frame: pd.DataFrame, setting) -> pd.DataFrame:
    mask = pd.Series(True, index=frame.index)
    for col, value in zip(CELL, setting):
        mask &= frame[col] == value
    return frame[mask]


def _baseline(frame: pd.DataFrame, sync: str) -> pd.DataFrame:
    return frame[(frame.compress == "none") & (frame.local_steps == 1) & (frame.sync == sync)]


def draw(sw: Sweep, folder: Path, save) -> list[Path]:
    """Write ``compression_tradeoff`` and ``compression_accuracy``."""
    panels = _panels(sw)
    settings = _settings(sw.ok)
    colours = dict(zip(settings, plt.get_cmap("tab10").colors))
    fig, axes = plt.subplots(1, len(panels), squeeze=False, sharey=True, layout="constrained",
                             figsize=(1.2 + 3.6 * len(panels), 3.4))
    for ax, (scheme, loss) in zip(axes[0], panels):
        d = sw.ok[(sw.ok.scheme == scheme) & (sw.ok.loss_pct == loss)]
        for setting in settings:
            cell = _cell(d, setting)
            if cell.empty:
                continue
            x = stats.median_ci(cell.wire_bytes_per_iter)
            y = stats.median_ci(cell.final_accuracy)
            ax.errorbar([x.value], [y.value], xerr=[[x.value - x.lo], [x.hi - x.value]],
                        yerr=[[y.value - y.lo], [y.hi - y.value]], marker="o", ms=5, capsize=2,
                        color=colours[setting], label=setting_label(*setting), lw=1.2)
        ax.set_xscale("log")
        ax.set_xlabel("push bytes on the wire per round, all workers")
        ax.set_title(f"{sw.names.get(scheme, scheme)}, {loss:g} % loss", fontsize=8)
    axes[0][0].set_ylabel("final test accuracy (median, interval)")
    axes[0][-1].legend(fontsize=6, title="compress, local steps, reset", title_fontsize=6,
                       loc="upper left", bbox_to_anchor=(1.02, 1.0))
    written = save(fig, folder, "compression_tradeoff")
    if sw.curves.empty:
        return written
    curves = sw.curves.merge(sw.ok[["run_id", *CELL]], on="run_id", suffixes=("_c", ""))
    fig, axes = plt.subplots(1, len(panels), squeeze=False, sharey=True, layout="constrained",
                             figsize=(1.2 + 3.6 * len(panels), 3.4))
    for ax, (scheme, loss) in zip(axes[0], panels):
        d = curves[(curves.scheme == scheme) & (curves.loss_pct == loss)]
        for setting in settings:
            g = _cell(d, setting).groupby("iteration")
            if not len(g):
                continue
            t = g.time_s.median()
            ax.plot(t, g.accuracy.median(), marker="o", ms=2, color=colours[setting],
                    label=setting_label(*setting))
            ax.fill_between(t, g.accuracy.min(), g.accuracy.max(), alpha=0.12,
                            color=colours[setting], lw=0)
        ax.set_xlabel("training time at the PS (s)")
        ax.set_title(f"{sw.names.get(scheme, scheme)}, {loss:g} % loss", fontsize=8)
    axes[0][0].set_ylabel("test accuracy (median over seeds, range shaded)")
    axes[0][-1].legend(fontsize=6, title="compress, local steps, reset", title_fontsize=6)
    return written + save(fig, folder, "compression_accuracy")


def _verdict(label: str, saved: stats.Estimate, cost: stats.Estimate) -> str:
    if min(saved.n, cost.n) < stats.MIN_RUNS:
        return (f"- {label}: bytes per round x{saved.value:.3f}, accuracy "
                f"{100 * cost.value:+.1f} points; fewer than {stats.MIN_RUNS} runs a cell, no "
                "verdict.")
    sign = stats.judge(cost, 0.0)
    if sign == 0:
        acc = (f"accuracy {100 * cost.value:+.1f} points [{100 * cost.lo:+.1f}, "
               f"{100 * cost.hi:+.1f}]: within noise of the uncompressed run")
    elif sign == -1:
        acc = (f"at a cost of {-100 * cost.value:.1f} points of accuracy "
               f"[{-100 * cost.hi:.1f}, {-100 * cost.lo:.1f}]")
    else:
        acc = (f"with {100 * cost.value:.1f} points more accuracy "
               f"[{100 * cost.lo:.1f}, {100 * cost.hi:.1f}]")
    return f"- {label}: bytes per round x{saved.fmt('.3f')} of the uncompressed run's, {acc}."


def section(sw: Sweep) -> list[str]:
    """The report's "Compressed pushes" section."""
    lines = ["## Compressed pushes, local steps and error reset", "",
             "Per setting (docs/compression.md): push bytes all workers put on the wire per round "
             "(headers and retransmissions included, as the transports count them), their ratio "
             "to the uncompressed "
             "single-step run of the same scheme and loss, the bytes the switch sent toward the "
             "PS per round (its port counters: the pushes and the acknowledgements of the "
             "broadcast), final test accuracy and its "
             "difference from that run in points, training time to the target accuracy "
             "(runs that miss it count as infinitely late) and the index-value pairs or sign "
             "words the PS dropped; median [interval] over seeds; ratios and differences seed "
             "by seed where the runs share seeds. A round of "
             "H local steps uses H batches per worker.", "",
             "| scheme | loss | compress | H | reset | runs | wire bytes/round | x uncompressed "
             "| switch bytes/round toward the PS | final accuracy | points vs uncompressed "
             "| s to target (reached) | dropped |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    verdicts = []
    for scheme, loss in _panels(sw):
        d = sw.ok[(sw.ok.scheme == scheme) & (sw.ok.loss_pct == loss)]
        for setting in _settings(d):
            cell = _cell(d, setting)
            c, h, r, m, y = setting
            base = _baseline(d, y)
            saved = stats.pair_or_not(stats.by_seed(cell, "wire_bytes_per_iter"),
                                      stats.by_seed(base, "wire_bytes_per_iter"))
            cost = stats.pair_or_not(stats.by_seed(cell, "final_accuracy"),
                                     stats.by_seed(base, "final_accuracy"), "diff")
            tta = sw.time_to_target(cell, scheme)
            hits = int(reached(cell).sum())
            lines.append(
                f"| {sw.names.get(scheme, scheme)}{'' if y == 'bsp' else f', {y}'} "
                f"| {loss:g} % | {c} | {h:g} | {r:g}{' cser' if m == 'cser' else ''} | {len(cell)} "
                f"| {stats.median_ci(cell.wire_bytes_per_iter).fmt(',.0f')} "
                f"| {saved.fmt('.3f') if not base.empty else '-'} "
                f"| {_switch(cell).fmt(',.0f')} "
                f"| {stats.median_ci(cell.final_accuracy).fmt('.3f')} "
                f"| {_points(cost) if not base.empty else '-'} "
                f"| {tta.fmt('.1f')} ({hits}/{len(cell)}) "
                f"| {int(cell.compress_dropped.sum())} |")
            if not base.empty and not (c == "none" and h == 1):
                verdicts.append(_verdict(f"{sw.names.get(scheme, scheme)}, {loss:g} % loss, "
                                         f"{setting_label(*setting)}", saved, cost))
    if verdicts:
        lines += ["", "Against the uncompressed single-step run (accuracy difference in points, "
                      "with its interval; within noise when it holds zero):", "", *verdicts]
    return lines + [""]


def _switch(cell: pd.DataFrame) -> stats.Estimate:
    """Bytes the switch sent toward the PS per round (pushes, and the acknowledgements of the
    broadcast), from its port counters."""
    return stats.median_ci(cell.bottleneck_tx_bytes / cell.iterations_done.where(
        cell.iterations_done > 0))


def _points(e: stats.Estimate) -> str:
    if np.isnan(e.value):
        return "-"
    return f"{100 * e.value:+.1f} [{100 * e.lo:+.1f}, {100 * e.hi:+.1f}]"
