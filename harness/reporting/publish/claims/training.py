"""Findings on training itself: time to a target accuracy with and without loss, and whether
tolerating loss costs final accuracy once training has converged.

``results/tta/`` stops every run at the target accuracy (or a training-time cap);
``results/converge/`` runs 1,000 iterations (or to a cap) and compares final accuracy with
lossless TCP CUBIC seed by seed.
"""

from __future__ import annotations

import pandas as pd

from harness.reporting import stats
from harness.reporting.tables import BASELINE, reached
from harness.reporting.publish.claims import Section
from harness.reporting.publish.claims.common import (DIFF_RULE, FAMILY, RELIABLE, STRONGEST_TCP,
                                                     TOLERANT, cap_text, capped, cell, legend,
                                                     listing, name, per_iteration, phrase,
                                                     reached_text, runs_of, setting, time_fmt,
                                                     tta_est, tta_of, verdict_text)
from harness.reporting.publish.context import Context, Folder
from harness.reporting.report import ACCURACY_MARGIN_PTS, accuracy_gap

TTA = "results/tta"
CONVERGE = "results/converge"
# Transports that deliver every gradient whole: their model cannot depend on the loss rate.
WHOLE = ("ltp-reliable", "tcp-cubic", "tcp-cubic-lowrto")


# ---------------------------------------------------------------- time to accuracy

def _tta_setup(f: Folder) -> str:
    ok = f.ok
    return (f"Every run ({setting(ok)}) stops at the first evaluation (every "
            f"{ok.eval_every.median():g} iterations) at or above "
            f"{ok.target_accuracy.median():.0%} test accuracy, or when the cap ends it. Time is "
            "training time at the PS, evaluations excluded. A run the cap stopped first counts "
            "as infinitely late (*not reached*), so a scheme that often misses cannot look fast "
            "by dropping its misses, and a median is *not reached* once half a cell's runs "
            "missed.")


def tta_body(ctx: Context) -> list[str]:
    """How long to the target accuracy, with and without loss."""
    f = ctx.folder(TTA)
    sw, ok = f.sweep, f.ok
    target = ok.target_accuracy.median()
    losses = sorted(ok.loss_pct.unique())
    shown = []
    lines = [_tta_setup(f), "",
             f"| loss % | scheme | reached {target:.0%} | time to it, s | iterations to it "
             "| iterations/s |", "|---|---|---|---|---|---|"]
    for loss in losses:
        for scheme in sw.order:
            mine = cell(ok, scheme=scheme, loss_pct=loss)
            if mine.empty:
                continue
            t, its, speed = (tta_est(mine), stats.median_ci(mine.iterations_to_target),
                             stats.median_ci(mine.iters_per_s))
            shown += [t, speed]
            lines.append(f"| {loss:g} | {name(scheme)} | {reached_text(mine)} | {time_fmt(t)} "
                         f"| {its.fmt('.0f') if its.n else '-'} | {speed.fmt()} |")
    lines += ["", legend(shown), "",
              f"Verdicts on the time to {target:.0%} ({stats.RULE}):", ""]
    family = [s for s in FAMILY if s in sw.order]
    tcps = [s for s in (BASELINE, STRONGEST_TCP) if s in sw.order]
    for loss in losses:
        for tcp in tcps:
            other = cell(ok, scheme=tcp, loss_pct=loss)
            parts = []
            for s in family:
                v = stats.compare(s, tta_of(cell(ok, scheme=s, loss_pct=loss)), tcp,
                                  tta_of(other), higher_is_better=False)
                parts.append(f"{name(s)} {verdict_text(v, 'sooner', 'later')}")
            lines.append(f"- {loss:g} % loss, against {name(tcp)} ({reached_text(other)}, "
                         f"{time_fmt(tta_est(other), ' s')}): " + "; ".join(parts) + ".")
    lo, hi = losses[0], losses[-1]
    parts = []
    for s in family:
        v = stats.compare(f"{s} at {hi:g} %", tta_of(cell(ok, scheme=s, loss_pct=hi)),
                          f"{s} at {lo:g} %", tta_of(cell(ok, scheme=s, loss_pct=lo)),
                          higher_is_better=False)
        parts.append(f"{name(s)} {verdict_text(v, 'sooner', 'later')}")
    lines.append(f"- Each scheme at {hi:g} % loss against itself at {lo:g} %: "
                 + "; ".join(parts) + ".")
    for loss in losses:
        rel = tta_of(cell(ok, scheme=RELIABLE, loss_pct=loss))
        parts = []
        for s in TOLERANT:
            if s in sw.order:
                v = stats.compare(s, tta_of(cell(ok, scheme=s, loss_pct=loss)), RELIABLE, rel,
                                  higher_is_better=False)
                parts.append(f"{name(s)} {verdict_text(v, 'sooner', 'later')}")
        lines.append(f"- Tolerating loss itself, {loss:g} % loss, against {name(RELIABLE)} "
                     "(the same transport repairing every packet): " + "; ".join(parts) + ".")
    lines += ["", "Per-seed ratios are time over the other side's time with the same seed; "
              "where one side never reached the target in a pair the ratio is left out and "
              "the reached counts say it.", "",
              f"![time to {target:.0%} accuracy](../{TTA}/figures/accuracy.png)"]
    return lines


# ---------------------------------------------------------------- converged accuracy

def _gap(ok: pd.DataFrame, mine: pd.DataFrame) -> stats.Estimate:
    """Final accuracy minus lossless TCP CUBIC's, in points, seed by seed."""
    ref = runs_of(cell(ok, scheme=BASELINE, loss_pct=0), "final_accuracy", 100)
    return accuracy_gap(runs_of(mine, "final_accuracy", 100), ref)


def _accuracy_word(sign: int | None) -> str:
    return phrase(sign, "above lossless TCP beyond noise", "below lossless TCP beyond noise",
                  "within noise of lossless TCP")


def _converge_table(f: Folder, shown: list) -> list[str]:
    ok, order = f.ok, f.sweep.order
    target = ok.target_accuracy.median()
    lines = [f"| loss % | scheme | iterations/s | final accuracy | points vs lossless "
             f"`{BASELINE}`, per seed | time to {target:.0%}, s | how the runs ended |",
             "|---|---|---|---|---|---|---|"]
    for loss in sorted(ok.loss_pct.unique()):
        for scheme in order:
            mine = cell(ok, scheme=scheme, loss_pct=loss)
            if mine.empty:
                continue
            speed, acc, t = (stats.median_ci(mine.iters_per_s),
                             stats.median_ci(mine.final_accuracy), tta_est(mine))
            gap = (_gap(ok, mine) if not (scheme == BASELINE and loss == 0)
                   else stats.NO_ESTIMATE)
            shown += [speed, acc, t, gap]
            lines.append(f"| {loss:g} | {name(scheme)} | {speed.fmt()} | {acc.fmt('.3f')} "
                         f"| {gap.fmt('+.2f')} | {t.fmt('.0f')} ({reached_text(mine)}) "
                         f"| {cap_text(mine)} |")
    return lines


def _whole(ok: pd.DataFrame, scheme: str) -> str:
    """Seed for seed, does a scheme that delivers every gradient whole end at the same
    accuracy at every loss rate it ran to the end at?"""
    done = ok[(ok.scheme == scheme) & (ok.stopped_by != "time_cap")]
    losses = sorted(done.loss_pct.unique())
    if len(losses) < 2:
        return ""
    table = done.pivot_table(index="seed", columns="loss_pct", values="final_accuracy")
    spread = 100 * float((table.max(axis=1) - table.min(axis=1)).max())
    ref = cell(ok, scheme=BASELINE, loss_pct=0).set_index("seed").final_accuracy
    off = 100 * float((table.sub(ref, axis=0)).abs().max().max())
    per_seed = ", ".join(f"{a:.4f}" for a in table[losses[0]])
    return (f"{name(scheme)}, run to the end at {listing(losses)} % loss: seed for seed its "
            f"final accuracy differs across those loss rates by at most {spread:.2f} points "
            f"({per_seed} at {losses[0]:g} % for seeds {listing(table.index)}), each at most "
            f"{off:.2f} points from lossless `{BASELINE}`'s same seed.")


def converge_body(ctx: Context) -> list[str]:
    """Does tolerating loss cost final accuracy once training has converged?"""
    f = ctx.folder(CONVERGE)
    ok, order = f.ok, f.sweep.order
    losses = sorted(ok.loss_pct.unique())
    lossy = [x for x in losses if x > 0]
    target = ok.target_accuracy.median()
    shown: list = []
    lines = [f"Every run: {setting(ok)}; test accuracy every {ok.eval_every.median():g} "
             "iterations. A run the cap stopped has *not converged*: its final accuracy is "
             "where the cap stopped it. Accuracy gaps are in points, against lossless "
             f"`{BASELINE}` with the same seed (same initialisation and data order).", "",
             *_converge_table(f, shown), "", legend(shown), ""]
    lossless = cell(ok, scheme=BASELINE, loss_pct=0)
    lines.append(f"**Final accuracy.** Lossless `{BASELINE}` ends at "
                 f"{stats.median_ci(lossless.final_accuracy).fmt('.3f')} ({cap_text(lossless)}). "
                 f"The LTP family against it, gaps per seed; {DIFF_RULE}:")
    lines.append("")
    within = total = tolerant_n = 0
    outside: list[str] = []
    tolerant_below: list[str] = []
    for scheme in [s for s in FAMILY if s in order]:
        parts = []
        for loss in losses:
            mine = cell(ok, scheme=scheme, loss_pct=loss)
            gap = _gap(ok, mine)
            sign = stats.judge(gap, 0.0)
            total += sign is not None
            within += sign == 0
            extra = ""
            if scheme in TOLERANT and loss > 0:
                extra = (f"; closed {per_iteration(mine, 'early_closes'):.1f} of "
                         f"{mine.n_workers.median():g} gradients an iteration early and filled "
                         f"{mine.filled_frac_mean.median():.2%} of each")
            stop = "" if capped(mine).empty else f"; {cap_text(mine)}"
            if abs(gap.value) > ACCURACY_MARGIN_PTS:
                outside.append(f"{name(scheme)} at {loss:g} %")
            if scheme in TOLERANT and loss > 0:
                tolerant_below += [f"{name(scheme)} at {loss:g} %"] if sign == -1 else []
                tolerant_n += sign is not None
            parts.append(f"{loss:g} %: {gap.fmt('+.2f')} points, {_accuracy_word(sign)}"
                         f"{extra}{stop}")
        lines.append(f"- {name(scheme)}: " + "; ".join(parts) + ".")
    lines += ["", f"{within} of {total} LTP-family cells are within noise of lossless TCP's "
              "final accuracy; " + (f"every median gap is within {ACCURACY_MARGIN_PTS:g} point"
                                    if not outside else
                                    f"median gaps beyond {ACCURACY_MARGIN_PTS:g} point: "
                                    + ", ".join(outside)) + ". Tolerating loss ends below "
              "lossless TCP beyond noise in "
              + (f"{len(tolerant_below)} of {tolerant_n} lossy cells: "
                 + ", ".join(tolerant_below) if tolerant_below else
                 f"none of the {tolerant_n} lossy cells of `ltp` and `plot`") + ".", ""]
    whole = [w for w in (_whole(ok, s) for s in WHOLE if s in order) if w]
    if whole:
        lines += ["A transport that delivers every gradient whole trains the same model "
                  "whatever the loss rate, as long as the cap does not stop it: "
                  + " ".join(whole), ""]
    lines += [f"**Time.** Iterations/s and time to {target:.0%} within the LTP family, "
              f"`ltp` and `plot` against `{RELIABLE}` with the same seed:", ""]
    for loss in losses:
        rel = cell(ok, scheme=RELIABLE, loss_pct=loss)
        parts = []
        for s in TOLERANT:
            mine = cell(ok, scheme=s, loss_pct=loss)
            v = stats.compare(s, runs_of(mine, "iters_per_s"), RELIABLE,
                              runs_of(rel, "iters_per_s"))
            w = stats.compare(s, tta_of(mine), RELIABLE, tta_of(rel), higher_is_better=False)
            parts.append(f"{name(s)} iterations/s {verdict_text(v, 'faster', 'slower')}, "
                         f"time to {target:.0%} {verdict_text(w, 'sooner', 'later')}")
        at = ok[ok.loss_pct == loss]
        speeds = ", ".join(f"{name(s)} {stats.median_ci(cell(at, scheme=s).iters_per_s).fmt()}"
                           for s in FAMILY)
        times = ", ".join(f"{name(s)} {tta_est(cell(at, scheme=s)).fmt('.0f')}"
                          for s in FAMILY)
        lines.append(f"- {loss:g} % loss: iterations/s {speeds}; seconds to {target:.0%} "
                     f"{times}. " + "; ".join(parts) + ".")
    parts = []
    for s in FAMILY:
        mine = cell(ok, scheme=s, loss_pct=0)
        v = stats.compare(s, runs_of(mine, "iters_per_s"), BASELINE,
                          runs_of(lossless, "iters_per_s"))
        w = stats.compare(s, tta_of(mine), BASELINE, tta_of(lossless), higher_is_better=False)
        parts.append(f"{name(s)} iterations/s {verdict_text(v, 'faster', 'slower')}, time to "
                     f"{target:.0%} {verdict_text(w, 'sooner', 'later')}")
    lines += [f"- Without loss, against `{BASELINE}` "
              f"({stats.median_ci(lossless.iters_per_s).fmt()} it/s, "
              f"{tta_est(lossless).fmt('.0f')} s to {target:.0%}): " + "; ".join(parts) + ".",
              ""]
    lines += [f"**TCP under loss**, against `ltp` at the same loss rate:", ""]
    for tcp in [t for t in (BASELINE, STRONGEST_TCP) if t in order]:
        for loss in lossy:
            mine = cell(ok, scheme=tcp, loss_pct=loss)
            ltp = cell(ok, scheme="ltp", loss_pct=loss)
            if mine.empty:
                continue
            v = stats.compare("ltp", runs_of(ltp, "iters_per_s"), tcp,
                              runs_of(mine, "iters_per_s"))
            w = stats.compare("ltp", tta_of(ltp), tcp, tta_of(mine), higher_is_better=False)
            gap = _gap(ok, mine)
            sign = stats.judge(gap, 0.0)
            lines.append(
                f"- {name(tcp)}, {loss:g} % loss: {stats.median_ci(mine.iters_per_s).fmt()} "
                f"it/s, `ltp` {verdict_text(v, 'faster', 'slower')}; "
                f"{time_fmt(tta_est(mine), '', '.0f')} s to {target:.0%}, {reached_text(mine)}, "
                f"`ltp` ({tta_est(ltp).fmt('.0f')} s) {verdict_text(w, 'sooner', 'later')}; "
                f"{cap_text(mine)}; final accuracy "
                f"{stats.median_ci(mine.final_accuracy).fmt('.3f')}, {gap.fmt('+.2f')} points "
                f"against lossless, {_accuracy_word(sign)}.")
    lines += ["", "The report and the figure mark cells the cap stopped *not converged*.", "",
              f"![converged accuracy against lossless TCP](../{CONVERGE}/figures/converge.png)"]
    return lines


SECTIONS = [
    Section("tta", "How long to a target accuracy, with and without loss?", (TTA,), tta_body),
    Section("converge", "Does tolerating loss cost final accuracy after convergence?",
            (CONVERGE,), converge_body),
]
