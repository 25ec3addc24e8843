"""Findings on CSER's error reset as published against dropping the residual
(``results/cser/`` under bsp, ``results/cser-async/`` under ssp:2 and async; docs/compression.md).

Each run trains for the same time (60 s) because a residual synchronisation round is a round
without a gradient step: settings compare by accuracy at that time and by time to the target,
each per seed against the same compressor with the residual dropped.
"""

from __future__ import annotations

import pandas as pd

from harness.reporting import stats
from harness.reporting.publish.claims import Section
from harness.reporting.publish.claims.common import (DIFF_RULE, legend, listing, phrase,
                                                     reached_text, runs_of, setting, tta_est,
                                                     tta_of, verdict_text)
from harness.reporting.publish.context import Context

CSER = "results/cser"
CSER_ASYNC = "results/cser-async"
QUESTION = "Does CSER's error reset, as published, beat dropping the residual?"


def _runs(ctx: Context, rel: str) -> pd.DataFrame:
    ok = ctx.folder(rel).ok.copy()
    ok["compress"] = ok.compress.fillna("none").astype(str)
    ok["reset_mode"] = ok.reset_mode.fillna("drop").astype(str)
    ok["sync"] = ok.sync.fillna("bsp").astype(str)
    return ok


def _label(compress: str, mode: str) -> str:
    if compress == "none":
        return "dense pushes"
    return f"`{compress}`, residual " + ("synchronised (CSER)" if mode == "cser" else "dropped")


def _settings(d: pd.DataFrame) -> list[tuple[str, str]]:
    keys = {(c, m) for c, m in d[["compress", "reset_mode"]].itertuples(index=False)}
    return sorted(keys, key=lambda k: (k[0] != "none", k[0], k[1] == "cser"))


def _cell(d: pd.DataFrame, compress: str, mode: str) -> pd.DataFrame:
    return d[(d.compress == compress) & (d.reset_mode == mode)]


def _table(d: pd.DataFrame, target: float) -> tuple[list[str], list[stats.Estimate]]:
    lines = [f"| sync | setting | runs | rounds | residual rounds | bytes per round "
             f"| final accuracy | points vs dropped | time to {target:.0%}, s |",
             "|---|---|---|---|---|---|---|---|---|"]
    shown = []
    for sync in sorted(d.sync.unique()):
        ds = d[d.sync == sync]
        for c, m in _settings(ds):
            mine = _cell(ds, c, m)
            rounds = stats.median_ci(mine.iterations_done)
            syncs = stats.median_ci(mine.residual_syncs.fillna(0))
            wire = stats.median_ci(mine.wire_bytes_per_iter)
            acc = stats.median_ci(mine.final_accuracy)
            pts = (stats.pair_or_not(runs_of(mine, "final_accuracy", 100),
                                     runs_of(_cell(ds, c, "drop"), "final_accuracy", 100),
                                     "diff") if m == "cser" else stats.NO_ESTIMATE)
            t = tta_est(mine)
            shown += [rounds, syncs, wire, acc, pts, t]
            lines.append(f"| {sync} | {_label(c, m)} | {len(mine)} | {rounds.fmt('.0f')} "
                         f"| {syncs.fmt('.0f')} | {wire.value / 1e3:.1f} KB | {acc.fmt('.3f')} "
                         f"| {pts.fmt('+.1f')} | {t.fmt('.1f')} ({reached_text(mine)}) |")
    return lines, shown


def _verdicts(d: pd.DataFrame, target: float) -> list[str]:
    """Per sync mode and compressor: CSER against the dropped residual, by accuracy at the time
    budget and by time to the target; and CSER against dense pushes by accuracy."""
    out = []
    for sync in sorted(d.sync.unique()):
        ds = d[d.sync == sync]
        dense = _cell(ds, "none", "drop")
        for c in sorted(set(ds.compress) - {"none"}):
            cser, drop = _cell(ds, c, "cser"), _cell(ds, c, "drop")
            if cser.empty or drop.empty:
                continue
            pts = stats.pair_or_not(runs_of(cser, "final_accuracy", 100),
                                    runs_of(drop, "final_accuracy", 100), "diff")
            sign = stats.judge(pts, 0.0)
            tta = stats.compare("cser", tta_of(cser), "drop", tta_of(drop),
                                higher_is_better=False)
            parts = [f"{pts.fmt('+.1f')} points of accuracy at the time budget, "
                     + phrase(sign, "more accurate beyond noise", "less accurate beyond noise"),
                     f"reaches {target:.0%} " + verdict_text(tta, "sooner", "later")]
            if not dense.empty:
                gap = stats.pair_or_not(runs_of(cser, "final_accuracy", 100),
                                        runs_of(dense, "final_accuracy", 100), "diff")
                parts.append(f"{gap.fmt('+.1f')} points against dense pushes, "
                             + phrase(stats.judge(gap, 0.0), "above them beyond noise",
                                      "below them beyond noise"))
            out.append(f"- {sync}, `{c}`: CSER against the dropped residual: "
                       + "; ".join(parts) + ".")
    return out


def cser_body(ctx: Context) -> list[str]:
    """CSER against the dropped residual, under bsp, ssp:2 and async."""
    d = pd.concat([_runs(ctx, CSER), _runs(ctx, CSER_ASYNC)], ignore_index=True)
    target = d.target_accuracy.median()
    periods = listing(sorted(d[d.compress != "none"].error_reset.dropna().unique()))
    lines = [f"{setting(d)}; compressors {listing(sorted(set(d.compress) - {'none'}))}, the "
             f"residual reset every {periods} gradient rounds, dropped (`drop`, the variant this "
             "project had) or synchronised first as CSER describes (`cser`: each worker keeps "
             "its local model, and a residual round pushes the compressed residual; "
             "docs/compression.md). A residual round is a round without a gradient step, so "
             "every run has the same training time and settings compare by accuracy at that "
             "time and by time to the target; bytes per round are what all workers' pushes of "
             "a round cost on the wire (medians). Points are per seed against the same "
             f"compressor with the residual dropped; {DIFF_RULE}.", ""]
    table, shown = _table(d, target)
    lines += table + ["", legend(shown), ""] + _verdicts(d, target)
    return lines


SECTIONS = [Section("cser", QUESTION, (CSER, CSER_ASYNC), cser_body)]
