"""The report's section on communication patterns (``ps``, ``tree``, ``ring``), from the tables.

Drawn when a sweep runs a collective (``invoke run-sweep --pattern ps,tree,ring``; the presets
``patterns``, ``patterns-scale``, ``patterns-faults`` and ``lab7``; docs/collectives.md):

- ``patterns_bound``: per cell (workers, loss) and scheme, each pattern's median iteration with
  its interval next to its bound (the data movement alone, ``fd_bound_s``, hollow, and the floor
  with compute and the update, ``iter_bound_s``, a bar), log scale.

:func:`section` writes "Collectives against their bounds": per cell, scheme and pattern the
median iteration against its bounds, where the PS's time went (sending, gathering), what crossed
the PS's link, how much of each gradient arrived, throughput and accuracy; then the verdicts, each
by the rule of :mod:`harness.reporting.stats`: each collective against the PS for the same
scheme, and the loss-tolerant ``ltp`` against ``ltp-reliable`` and against TCP with the short
retransmission timeout under each pattern, with the number of comparisons the section made. With
faults it adds what each pattern did with them (detection, rounds without the worker, the
re-forming time ``recovered_s``).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from harness.hosts.pattern import parse_pattern
from harness.reporting import stats
from harness.reporting.tables import Sweep
from harness.training import models

FIGURES = (("patterns_bound", "each pattern's median iteration against its bound"),)
PATTERNS = ("ps", "tree", "ring")
# Pairs of schemes compared under every pattern: does tolerating loss pay once the incast is gone?
TOLERANCE = (("ltp", "ltp-reliable"), ("ltp", "tcp-cubic-lowrto"))


def applies(sw: Sweep) -> bool:
    """The sweep has runs of a collective pattern."""
    return "pattern" in sw.ok and (sw.ok.pattern.astype(str) != "ps").any()


def kind(pattern: str) -> str:
    """``tree`` from ``tree:fanout=2``."""
    return parse_pattern(str(pattern)).kind


def frame(sw: Sweep) -> pd.DataFrame:
    """The ok runs, with their pattern's kind (``pattern_kind``), the gradients the switch sent
    toward the PS per iteration (``ps_link_gradients``) and the mean part of a gradient the
    transports filled (``filled``)."""
    d = sw.ok.copy()
    d["pattern_kind"] = d.pattern.map(kind)
    gradient = {m: 4 * models.n_params(m) for m in d.model.unique()}
    per_iter = d.bottleneck_tx_bytes / d.iterations_done.where(d.iterations_done > 0)
    d["ps_link_gradients"] = per_iter / d.model.map(gradient)
    d["filled"] = 1 - d.mean_recv_frac
    return d


def _cells(d: pd.DataFrame) -> list[tuple[int, float, str]]:
    keys = d[["n_workers", "loss_pct", "fault"]].drop_duplicates()
    return sorted(keys.itertuples(index=False, name=None),
                  key=lambda k: (k[0], k[1], k[2] != "none", k[2]))


def _patterns(d: pd.DataFrame) -> list[str]:
    return sorted(d.pattern.unique(), key=lambda p: (PATTERNS.index(kind(p)), p))


def draw(sw: Sweep, folder: Path, save) -> list[Path]:
    """Write ``patterns_bound``."""
    d = frame(sw)
    cells = [c for c in _cells(d) if c[2] == "none"] or _cells(d)
    patterns = _patterns(d)
    colours = dict(zip(patterns, plt.get_cmap("tab10").colors))
    fig, axes = plt.subplots(1, len(cells), squeeze=False, sharey=True, layout="constrained",
                             figsize=(1.5 + 3.4 * len(cells), 3.4))
    for ax, (n, loss, fault) in zip(axes[0], cells):
        here = d[(d.n_workers == n) & (d.loss_pct == loss) & (d.fault == fault)]
        schemes = [s for s in sw.order if s in set(here.scheme)]
        width = 0.8 / max(1, len(patterns))
        for j, pattern in enumerate(patterns):
            for i, scheme in enumerate(schemes):
                cell = here[(here.scheme == scheme) & (here.pattern == pattern)]
                if cell.empty:
                    continue
                x = i + (j - (len(patterns) - 1) / 2) * width
                e = sw.ci(cell, "iter_p50_s")
                ax.errorbar([x], [e.value], yerr=[[e.value - e.lo], [e.hi - e.value]],
                            marker="o", ms=4, capsize=2, color=colours[pattern], lw=1,
                            label=pattern if i == 0 else None)
                ax.plot([x], [cell.fd_bound_s.median()], marker="o", ms=5, mfc="none",
                        color=colours[pattern])
                ax.plot([x - width / 2.5, x + width / 2.5], [cell.iter_bound_s.median()] * 2,
                        color=colours[pattern], lw=1.5)
        ax.set_xticks(range(len(schemes)), [sw.names.get(s, s) for s in schemes], rotation=30,
                      ha="right", fontsize=7)
        ax.set_yscale("log")
        ax.set_title(f"{n} workers, {loss:g} % loss" + ("" if fault == "none" else f", {fault}"),
                     fontsize=8)
    axes[0][0].set_ylabel("iteration at the PS (s): median, interval;\n"
                          "hollow: data bound, bar: floor")
    axes[0][-1].legend(fontsize=6, title="pattern", title_fontsize=6, loc="upper left",
                       bbox_to_anchor=(1.02, 1.0))
    return save(fig, folder, "patterns_bound")


def _row(sw: Sweep, cell: pd.DataFrame, scheme: str, pattern: str, loss: float) -> str:
    ci = lambda col, spec=".3f": sw.ci(cell, col).fmt(spec)  # noqa: E731
    return (f"| {cell.n_workers.iloc[0]} | {loss:g} % | {sw.names.get(scheme, scheme)} "
            f"| {pattern} | {len(cell)} | {ci('iter_p50_s')} | {cell.fd_bound_s.median():.3f} "
            f"| {cell.iter_bound_s.median():.3f} | {ci('iter_over_bound', '.2f')} "
            f"| {ci('broadcast_p50_s')} | {ci('gather_p50_s')} "
            f"| {ci('ps_link_gradients', '.2f')} | {ci('filled', '.4f')} "
            f"| {ci('iters_per_s', '.2f')} | {ci('final_accuracy')} |")


def _faults(sw: Sweep, d: pd.DataFrame) -> list[str]:
    hit = d[d.fault != "none"]
    if hit.empty:
        return []
    lines = ["", "What each pattern did with its fault (docs/faults.md; a tree's `recovered_s` is "
                 "its re-forming time; median [interval] over seeds):", "",
             "| workers | loss | scheme | pattern | fault | runs | detection s | seen as "
             "| rounds without it | recovered s | slowest round after s | false alarms "
             "| final accuracy |", "|" + "---|" * 13]
    for n, loss, fault in _cells(hit):
        here = hit[(hit.n_workers == n) & (hit.loss_pct == loss) & (hit.fault == fault)]
        for scheme in [s for s in sw.order if s in set(here.scheme)]:
            for pattern in _patterns(here):
                cell = here[(here.scheme == scheme) & (here.pattern == pattern)]
                if cell.empty:
                    continue
                ci = lambda col, spec=".2f": sw.ci(cell, col).fmt(spec)  # noqa: E731
                seen = ", ".join(sorted(set(cell.detected_as.dropna().astype(str)) - {""})) or "-"
                lines.append(
                    f"| {n} | {loss:g} % | {sw.names.get(scheme, scheme)} | {pattern} | {fault} "
                    f"| {len(cell)} | {ci('detection_s')} | {seen} "
                    f"| {ci('iterations_lost', '.0f')} | {ci('recovered_s')} "
                    f"| {ci('fault_iter_max_s')} | {int(cell.false_alarms.sum())} "
                    f"| {ci('final_accuracy', '.3f')} |")
    return lines


def section(sw: Sweep) -> list[str]:
    """The report's "Collectives against their bounds" section."""
    d = frame(sw)
    lines = ["## Collectives against their bounds", "",
             "Per pattern (docs/collectives.md): the median iteration at the PS; its data bound "
             "(`fd_bound_s`, payload only: `ps`, N parameter messages and one gradient through "
             "the PS's link; `tree`, one message each way through its busiest link and a chunk "
             "per level of the pipeline; `ring`, 2(N - 1)/N of a gradient each way through each "
             "worker's own link); the floor (`iter_bound_s`: the data bound plus the slowest "
             "worker's compute and the update) and the iteration over it; where the PS's time "
             "went (sending: the serial broadcast, or a tree's asks and feeding; gathering); "
             "what the switch sent toward the PS per iteration, in gradients; the mean fraction "
             "of a gradient the transports filled; iterations/s and final accuracy. Median "
             "[interval] over seeds; the bounds are the same for every run of a cell.", "",
             "| workers | loss | scheme | pattern | runs | iteration s | data bound s | floor s "
             "| x floor | sending s | gathering s | PS link gradients/iteration | filled "
             "| iterations/s | final accuracy |", "|" + "---|" * 15]
    quiet = d[d.fault == "none"]
    for n, loss, _ in _cells(quiet):
        here = quiet[(quiet.n_workers == n) & (quiet.loss_pct == loss)]
        for scheme in [s for s in sw.order if s in set(here.scheme)]:
            for pattern in _patterns(here):
                cell = here[(here.scheme == scheme) & (here.pattern == pattern)]
                if not cell.empty:
                    lines.append(_row(sw, cell, scheme, pattern, loss))
    with stats.tally() as counted:
        against_ps, tolerance = _against_ps(sw, quiet), _tolerance(sw, quiet)
    if against_ps:
        lines += ["", "Each collective against the PS, same scheme, workers and loss "
                      "(iterations/s):", "", *against_ps]
    if tolerance:
        lines += ["", "Does tolerating loss pay once the incast is gone? Under each pattern, "
                      "iterations/s:", "", *tolerance]
    if against_ps or tolerance:
        lines += ["", f"Verdicts: {stats.RULE}. {counted.sentence('section')}"]
    return lines + _faults(sw, d) + ["", "![patterns_bound](figures/patterns_bound.png)", ""]


def _against_ps(sw: Sweep, quiet: pd.DataFrame) -> list[str]:
    out = []
    for n, loss, _ in _cells(quiet):
        here = quiet[(quiet.n_workers == n) & (quiet.loss_pct == loss)]
        for scheme in [s for s in sw.order if s in set(here.scheme)]:
            mine = here[here.scheme == scheme]
            base = mine[mine.pattern_kind == "ps"]
            if base.empty:
                continue
            for pattern in [p for p in _patterns(mine) if kind(p) != "ps"]:
                other = mine[mine.pattern == pattern]
                v = sw.compare(pattern, stats.by_seed(other, "iters_per_s"), "ps",
                               stats.by_seed(base, "iters_per_s"))
                out.append(f"- {n} workers, {loss:g} % loss, {sw.names.get(scheme, scheme)}: "
                           f"{v.sentence}")
    return out


def _tolerance(sw: Sweep, quiet: pd.DataFrame) -> list[str]:
    out = []
    for n, loss, _ in _cells(quiet):
        if loss == 0:
            continue
        here = quiet[(quiet.n_workers == n) & (quiet.loss_pct == loss)]
        for pattern in _patterns(here):
            mine = here[here.pattern == pattern]
            for a, b in TOLERANCE:
                if not {a, b} <= set(mine.scheme):
                    continue
                v = sw.compare(sw.names.get(a, a), sw.series(mine, a, "iters_per_s"),
                               sw.names.get(b, b), sw.series(mine, b, "iters_per_s"))
                out.append(f"- {n} workers, {loss:g} % loss, {pattern}: {v.sentence}")
    return out
