"""Figures and the report section of training through failure and staleness, from the tables.

Drawn when a sweep varies the synchronisation mode or the fault (``invoke run-sweep --sync
bsp,ssp:2,async --fault none,kill@20,...``; the ``faults`` preset):

- ``faults_tta``: time to ``TTA_LEVEL`` test accuracy (from ``curves.csv``: the training time
  of the first evaluation at or above it) and final accuracy per fault, one line per transport,
  one column per sync mode (medians with their intervals over seeds). ``TTA_LEVEL`` (0.70) is
  lower than the model's target (0.80) on purpose: short fault runs reach it, so faults and
  modes can be told apart by it; runs that never reach it are counted in the report;
- ``faults_cdf``: the distribution of round time around a failure, rounds ``K`` to ``K + 10``
  of a fault at iteration ``K``, all seeds pooled, against the same rounds of the runs without a
  fault (dotted), one column per fault, one row per sync mode.

:func:`section` writes the report's "Training through failure" section: per sync mode, fault
and transport, the final accuracy, time to accuracy, detection time, iterations lost, time to
rejoin, the slowest round after the fault, false alarms and staleness, each with its interval,
and one sentence per fault on which transport detected it sooner.
"""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from harness.reporting import stats
from harness.reporting.tables import Sweep

WINDOW = 10   # rounds after the fault that "around the failure" covers
TTA_LEVEL = 0.70   # the accuracy whose time the fault figures and tables compare
FIGURES: tuple = ()   # its figures are shown inside its section


def time_to(curves: pd.DataFrame, level: float) -> pd.Series:
    """Per run (``run_id``), the training time of its first evaluation after the start at or
    above ``level`` (``tta_s``; runs that never got there are absent)."""
    if curves.empty or "accuracy" not in curves:
        return pd.Series(dtype=float, name="tta_s")
    hit = curves[(curves.accuracy >= level) & (curves.iteration > 0)]
    return hit.sort_values("time_s").groupby("run_id").time_s.first().rename("tta_s")


def with_tta(sw: Sweep) -> pd.DataFrame:
    """The ok runs with ``tta_s``: training time to ``TTA_LEVEL`` from their curves (NaN if never)."""
    return sw.ok.join(time_to(sw.curves, TTA_LEVEL), on="run_id")


def applies(sw: Sweep) -> bool:
    """The sweep varies the sync mode or the fault (or runs one that is not the default)."""
    return bool({"sync", "fault"} & set(sw.varying)) or bool(
        (sw.ok.fault != "none").any() or (sw.ok.sync != "bsp").any())


def _at(fault: str) -> int | None:
    m = re.search(r"@(\d+)", fault)
    return int(m.group(1)) if m else None


def _faults(sw: Sweep) -> list[str]:
    faults = sorted(sw.ok.fault.unique(), key=lambda f: (f != "none", f))
    return faults


def _syncs(sw: Sweep) -> list[str]:
    order = {"bsp": 0, "async": 2}
    return sorted(sw.ok.sync.unique(), key=lambda s: (order.get(s, 1), s))


def _tta(sw: Sweep, folder: Path, save) -> list[Path]:
    faults, syncs = _faults(sw), _syncs(sw)
    ok = with_tta(sw)
    fig, axes = plt.subplots(2, len(syncs), squeeze=False, sharey="row", layout="constrained",
                             figsize=(1.2 + 0.9 * len(faults) * len(syncs), 6.0))
    xs = np.arange(len(faults))
    for j, sync in enumerate(syncs):
        d = ok[ok.sync == sync]
        for i, (col, label) in enumerate((("tta_s", f"time to {TTA_LEVEL:.0%} accuracy (s)"),
                                          ("final_accuracy", "final test accuracy"))):
            ax = axes[i][j]
            for k, scheme in enumerate(sw.order):
                est = [stats.median_ci(d.loc[(d.scheme == scheme) & (d.fault == f), col])
                       for f in faults]
                med = np.array([e.value for e in est])
                if np.all(np.isnan(med)):
                    continue
                lo, hi = np.array([e.lo for e in est]), np.array([e.hi for e in est])
                ax.errorbar(xs + 0.08 * (k - len(sw.order) / 2), med, yerr=[med - lo, hi - med],
                            marker=sw.markers[scheme], color=sw.palette[scheme], ls="none",
                            capsize=2, label=sw.names[scheme])
            ax.set_xticks(xs, faults, rotation=30, fontsize=7)
            ax.set_ylabel(label)
        axes[0][j].set_title(sync)
    if axes[0][0].get_legend_handles_labels()[0]:
        axes[0][0].legend(fontsize=7)
    return save(fig, folder, "faults_tta")


def _around(sw: Sweep, fault: str, sync: str, scheme: str, at: int) -> np.ndarray:
    runs = sw.ok[(sw.ok.fault == fault) & (sw.ok.sync == sync) & (sw.ok.scheme == scheme)]
    it = sw.iters[sw.iters.run_id.isin(runs.run_id)]
    it = it[(it.iteration >= at) & (it.iteration < at + WINDOW)]
    return np.sort(it.iter_s.dropna().to_numpy())


def _cdf(sw: Sweep, folder: Path, save) -> list[Path]:
    faults = [f for f in _faults(sw) if _at(f) is not None]
    syncs = _syncs(sw)
    if not faults or sw.iters.empty:
        return []
    fig, axes = plt.subplots(len(syncs), len(faults), squeeze=False, sharex=True, sharey=True,
                             figsize=(3.0 * len(faults), 2.6 * len(syncs)), layout="constrained")
    for i, sync in enumerate(syncs):
        for j, fault in enumerate(faults):
            ax, at = axes[i][j], _at(fault)
            for scheme in sw.order:
                for f, style in ((fault, "-"), ("none", ":")):
                    x = _around(sw, f, sync, scheme, at)
                    if len(x):
                        ax.step(x, np.arange(1, len(x) + 1) / len(x), where="post", ls=style,
                                color=sw.palette[scheme],
                                label=sw.names[scheme] if style == "-" else None)
            ax.set_xscale("log")
            ax.set_title(f"{sync}, {fault} (rounds {at}-{at + WINDOW - 1})", fontsize=8)
            ax.set_xlabel("round time (s)")
    axes[0][0].set_ylabel("CDF, seeds pooled (dotted: no fault)")
    if axes[0][0].get_legend_handles_labels()[0]:
        axes[0][0].legend(fontsize=6)
    return save(fig, folder, "faults_cdf")


def draw(sw: Sweep, folder: Path, save) -> list[Path]:
    """Write this module's figures with ``save(fig, folder, name)``."""
    return _tta(sw, folder, save) + _cdf(sw, folder, save)


def _mode(values: pd.Series) -> str:
    values = values.dropna().astype(str)
    values = values[values != ""]
    return values.mode().iloc[0] if len(values) else "-"


def section(sw: Sweep) -> list[str]:
    """The report's section on faults and staleness."""
    ok = with_tta(sw)
    lines = ["## Training through failure and staleness", "",
             "How the PS detects a worker it lost, and what it does then, is described in "
             "`docs/faults.md`: a worker is *missing* once its gradient (or its parameters) "
             "is `max(1 s, 4 x median turnaround)` overdue, *gone* as soon as TCP sees its "
             "connection end. Detection is from the fault's injection to that event; iterations "
             "lost are rounds from the fault on without the worker's gradient; rejoin is from "
             "the end of the fault (link restored, process continued) until the PS had the "
             "worker back; false alarms are workers counted missing that no fault had hit.", "",
             f"Time to accuracy is to {TTA_LEVEL:.0%} (`harness.reporting.sections.faults.TTA_LEVEL`), from the "
             "evaluations in `curves.csv`; `(n not)` counts runs that never reached it.", "",
             "| sync | fault | transport | runs | final acc. | time to "
             f"{TTA_LEVEL:.0%} (s) | detection s | seen as | iterations lost | rejoin s | "
             "slowest round after s | false alarms | staleness mean / max |",
             "|" + "---|" * 13]
    for sync in _syncs(sw):
        for fault in _faults(sw):
            d = ok[(ok.sync == sync) & (ok.fault == fault)]
            for scheme in sw.order:
                mine = d[d.scheme == scheme]
                if mine.empty:
                    continue
                est = lambda col, spec=".2f": sw.estimate(d, scheme, col).fmt(spec)  # noqa: E731
                missed = int(mine.tta_s.isna().sum())
                lines.append("| " + " | ".join([
                    sync, fault, sw.names[scheme], str(len(mine)), est("final_accuracy", ".3f"),
                    est("tta_s", ".1f") + (f" ({missed} not)" if missed else ""),
                    est("detection_s"),
                    _mode(mine.detected_as), est("iterations_lost", ".0f"), est("rejoin_s"),
                    est("fault_iter_max_s"), f"{mine.false_alarms.sum():.0f}",
                    f"{mine.staleness_mean.median():.2f} / {mine.staleness_max.max():.0f}"])
                    + " |")
    lines += ["", "Detection, transport against transport (medians, with intervals):", ""]
    for sync in _syncs(sw):
        for fault in (f for f in _faults(sw) if f != "none" and not f.startswith("straggler")):
            d = sw.ok[(sw.ok.sync == sync) & (sw.ok.fault == fault)]
            schemes = [s for s in sw.order if s in set(d.scheme)]
            if len(schemes) < 2:
                continue
            a, b = schemes[0], schemes[1]
            lines.append(f"- {sync}, {fault}: " + stats.compare(
                sw.names[a], sw.series(d, a, "detection_s"), sw.names[b],
                sw.series(d, b, "detection_s"), higher_is_better=False, unit=" s").sentence)
    return lines + ["", "![faults_tta](figures/faults_tta.png)", "",
                    "![faults_cdf](figures/faults_cdf.png)", ""]
