"""Findings on two regimes beyond uniform random loss at a short round trip: edge round-trip
times and incast through a shallow queue (cross traffic and bursty loss:
:mod:`harness.reporting.publish.claims.traffic`).

Each section asks whether tolerating loss pays there (``ltp`` and ``plot`` against
``ltp-reliable``, the same transport repairing every packet) and what the regime does to TCP.
Several folders answer one question where a regime was run in parts: ``results/regimes/edge-*``
one delay each, ``results/regimes/incast*`` the worker counts, PLOT, time to accuracy and the
reruns of the 32-worker stall.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from harness.reporting import stats
from harness.reporting.publish.claims import Section
from harness.reporting.publish.claims.common import (DIFF_RULE, FAMILY, RELIABLE, STRONGEST_TCP,
                                                     TOLERANT, against, cap_text, cell, legend,
                                                     listed, listing, name, phrase, reached_text,
                                                     runs_of, scheme_order, setting, span,
                                                     speed_ratio, time_fmt, tolerance_summary,
                                                     tta_est, tta_of, verdict_text)
from harness.reporting.publish.context import Context, Folder
from harness.reporting.report import counted

EDGE = ("results/regimes/edge-10ms", "results/regimes/edge-25ms", "results/regimes/edge")
INCAST = "results/regimes/incast"
INCAST_PLOT = "results/regimes/incast-plot"
INCAST_TTA = "results/regimes/incast-tta"
INCAST_32 = "results/regimes/incast-32"
RERUNS = ("results/regimes/incast-32-rerun", "results/regimes/incast-32-rerun-30it")
# A first broadcast this many times the median first broadcast of its cell is a stall: the
# stalls seen were over ten times the typical one, the rest within a factor of two.
STALL_FACTOR = 5.0
# What the stalls' analysis cannot say, whatever the numbers (the reruns carry the per-send timing
# the stalled runs lacked).
STALL_CAUSE_UNKNOWN = (
    "What it waited for is not known: the per-send timing that could show it was added after "
    "the stalls, and the reruns that have it did not stall. The probe-timeout suspicion "
    "(`docs/ltp-protocol.md` §4) is neither confirmed nor ruled out, and nothing was changed "
    "for it.")


def _merged(ctx: Context, rels) -> pd.DataFrame:
    """The ok runs of several folders in one frame, each row naming its folder."""
    frames = []
    for rel in rels:
        ok = ctx.folder(rel).ok.copy()
        ok["folder"] = rel
        frames.append(ok)
    return pd.concat(frames, ignore_index=True)


# ---------------------------------------------------------------- edge round trips

def edge_body(ctx: Context) -> list[str]:
    """Where does tolerating loss pay at edge round-trip times?"""
    ok = _merged(ctx, EDGE)
    order = scheme_order(ok)
    shown: list = []
    lines = ["Added one-way delay with random loss: "
             f"{setting(ok.assign(delay_ms=0, max_train_s=np.nan))}. The folders, by delay:",
             ""]
    for rel in EDGE:
        d = ok[ok.folder == rel]
        lines.append(f"- `{rel}/`: {listed(d, 'delay_ms')} ms one way (median "
                     f"RTT {d.rtt_ms.median():g} ms), {listed(d, 'loss_pct')} % "
                     f"loss, {listing(name(s) for s in scheme_order(d))}; each run stopped after "
                     f"{listed(d, 'max_train_s')} s of training at the latest.")
    lines += ["", "| one way, ms | loss % | scheme | iterations/s | over `ltp-reliable`, per "
              "seed | iteration p99, s | final accuracy | filled | early closes per iteration "
              "| how the runs ended |", "|---|---|---|---|---|---|---|---|---|---|"]
    cells = sorted(set(zip(ok.delay_ms, ok.loss_pct)))
    for delay, loss in cells:
        d = cell(ok, delay_ms=delay, loss_pct=loss)
        for s in scheme_order(d):
            mine = cell(d, scheme=s)
            speed, p99, acc = (stats.median_ci(mine.iters_per_s),
                               stats.median_ci(mine.iter_p99_s),
                               stats.median_ci(mine.final_accuracy))
            ratio = (speed_ratio(d, s, RELIABLE) if s != RELIABLE and RELIABLE in set(d.scheme)
                     else stats.NO_ESTIMATE)
            shown += [speed, p99, acc, ratio]
            early = (mine.early_closes / mine.iterations_done).median()
            lines.append(f"| {delay:g} | {loss:g} | {name(s)} | {speed.fmt()} "
                         f"| {ratio.fmt('.2f', 'x')} | {p99.fmt('.2f')} | {acc.fmt('.3f')} "
                         f"| {mine.filled_frac_mean.median():.2%} | {early:.1f} "
                         f"| {cap_text(mine)} |")
    lines += ["", legend(shown), "",
              f"`ltp` and `plot` against `{RELIABLE}`, iterations/s per seed ({stats.RULE}):",
              ""]
    found = []
    for delay, loss in cells:
        d = cell(ok, delay_ms=delay, loss_pct=loss)
        for s in TOLERANT:
            if s in set(d.scheme) and RELIABLE in set(d.scheme):
                found.append((f"{delay:g} ms, {loss:g} %", s, against(d, s, RELIABLE)))
    lines += tolerance_summary(found)
    lines += ["", f"Where the loss is heaviest, at each delay, against `{RELIABLE}`: the "
              "iteration's tail (p99, lower is better) and the accuracy after the run (in "
              f"points; {DIFF_RULE}):", ""]
    for delay in sorted(ok.delay_ms.unique()):
        loss = ok[ok.delay_ms == delay].loss_pct.max()
        d = cell(ok, delay_ms=delay, loss_pct=loss)
        parts = []
        for s in TOLERANT:
            if s not in set(d.scheme):
                continue
            tail = against(d, s, RELIABLE, "iter_p99_s", higher_is_better=False)
            pts = stats.paired(runs_of(cell(d, scheme=s), "final_accuracy", 100),
                               runs_of(cell(d, scheme=RELIABLE), "final_accuracy", 100), "diff")
            sign = stats.judge(pts, 0.0)
            parts.append(f"{name(s)} p99 {verdict_text(tail, 'shorter', 'longer')}, accuracy "
                         f"{pts.fmt('+.1f')} points, "
                         + phrase(sign, "higher beyond noise", "lower beyond noise"))
        tcp = cell(d, scheme=STRONGEST_TCP)
        tcp_text = (f"; `{STRONGEST_TCP}` {stats.median_ci(tcp.iters_per_s).fmt()} it/s, "
                    f"{cap_text(tcp)}" if not tcp.empty else "")
        lines.append(f"- {delay:g} ms, {loss:g} % loss: " + "; ".join(parts) + tcp_text + ".")
    wins = [f"{name(s)} at {w} loss" for w, s, v in found if v.sign == 1]
    lines += ["", "Why a long round trip is where it could pay: a repair round costs at least "
              "one RTT, so a transport that closes a gradient instead of waiting for its lost "
              "tail saves more the longer the RTT; at a short RTT a repair costs little. "
              + (f"Here only {listing(wins)} beat `{RELIABLE}` beyond noise." if wins else
                 f"Here neither beat `{RELIABLE}` beyond noise at any delay."), "",
              "![edge regime](../results/regimes/edge-all/figures/regime_delay_ms.png)"]
    return lines


# ---------------------------------------------------------------- incast

def _first_broadcasts(f: Folder, scheme: str = "ltp", workers: int | None = None
                      ) -> pd.DataFrame:
    """Per run: seed, the first iteration's broadcast, the longest broadcast of any
    iteration, the share of the machine busy (runs.csv), and the folder."""
    it = f.sweep.iters
    it = it[it.scheme == scheme]
    if workers is not None:
        it = it[it.n_workers == workers]
    first = it[it.iteration == 0].groupby("run_id").broadcast_s.max().rename("first_s")
    longest = it.groupby("run_id").broadcast_s.max().rename("longest_s")
    runs = f.ok.set_index("run_id")[["seed", "cpu_busy_frac", "iterations"]]
    out = pd.concat([first, longest], axis=1).join(runs, how="inner").reset_index()
    out["folder"] = f.rel
    return out


def _tail_probability(stalls_early: int, n_early: int, stalls_late: int, n_late: int) -> float:
    """Probability that at least ``stalls_early`` of all the stalls fall among the first
    ``n_early`` runs, were every run equally likely to stall (hypergeometric, one-sided,
    conditional on the total: Fisher's exact test)."""
    total, k = n_early + n_late, stalls_early + stalls_late
    denom = math.comb(total, k)
    return sum(math.comb(n_early, i) * math.comb(n_late, k - i)
               for i in range(stalls_early, min(k, n_early) + 1)) / denom


def _stall_text(ctx: Context) -> list[str]:
    earlier = [ctx.folder(INCAST), ctx.folder(INCAST_32)]
    later = [ctx.folder(r) for r in RERUNS]
    workers = int(ctx.folder(INCAST_32).ok.n_workers.max())
    runs = pd.concat([_first_broadcasts(f, "ltp", workers) for f in earlier + later],
                     ignore_index=True)
    typical = runs.first_s.median()
    runs["stall"] = runs.first_s > STALL_FACTOR * typical
    early = runs[runs.folder.isin([f.rel for f in earlier])]
    late = runs[runs.folder.isin([f.rel for f in later])]
    lines = [f"**The first-broadcast stall at {workers} workers.** Per `ltp` run, the first "
             "iteration's broadcast (iterations.csv); a *stall* here is one longer than "
             f"{STALL_FACTOR:g}x the median first broadcast of all {len(runs)} runs "
             f"({typical:.2f} s).", ""]
    for f in earlier + later:
        mine = runs[runs.folder == f.rel]
        rest = mine[~mine.stall]
        stalled = mine[mine.stall]
        what = "; ".join(
            f"seed {int(r.seed)}: {r.first_s:.1f} s, the machine {r.cpu_busy_frac:.2f} busy "
            f"over the run against {span(rest.cpu_busy_frac)} in the others"
            for r in stalled.itertuples())
        lines.append(f"- `{f.rel}/` ({len(mine)} runs of {int(mine.iterations.max())} "
                     f"iterations): {counted(len(stalled), 'stall')}"
                     + (f" ({what})" if what else "")
                     + f"; the other runs' first broadcasts {span(rest.first_s)} s, their "
                     "longest broadcast of any iteration "
                     f"{rest.longest_s.max():.2f} s.")
    k_early, k_late = int(early.stall.sum()), int(late.stall.sum())
    idle = all(r.cpu_busy_frac < runs[(runs.folder == r.folder) & ~runs.stall].cpu_busy_frac.min()
               for r in runs[runs.stall].itertuples())
    lines.append("")
    if k_early + k_late:
        p = _tail_probability(k_early, len(early), k_late, len(late))
        lines.append(
            f"{k_early} stalls in the {len(early)} earlier runs against {k_late} in the "
            f"{len(late)} reruns: were every run equally likely to stall, "
            + (f"all {k_early}" if not k_late else f"at least {k_early} of the {k_early + k_late}")
            + f" would fall among the earlier runs with probability {p:.1%} (Fisher's exact "
            "test, one-sided). " + (
                "Every stalled run had the machine less busy than any other run of its folder, "
                "so the PS was waiting, not computing. " if idle else "")
            + STALL_CAUSE_UNKNOWN)
    return lines


def _incast_tta(ctx: Context) -> list[str]:
    ok = ctx.folder(INCAST_TTA).ok
    target = ok.target_accuracy.median()
    lines = [f"**Does the filling cost accuracy?** Time to {target:.0%} through the same "
             f"queue (`{INCAST_TTA}/`, {listing(name(s) for s in scheme_order(ok))}; runs stop "
             "at the target):", ""]
    shown = []
    for n in sorted(ok.n_workers.unique()):
        d = cell(ok, n_workers=n)
        rel = cell(d, scheme=RELIABLE)
        parts = []
        for s in [x for x in TOLERANT if x in set(d.scheme)]:
            mine = cell(d, scheme=s)
            v = stats.compare(s, tta_of(mine), RELIABLE, tta_of(rel), higher_is_better=False)
            steps = (mine.set_index("seed").iterations_to_target
                     - rel.set_index("seed").iterations_to_target).dropna()
            est = tta_est(mine)
            shown.append(est)
            parts.append(f"{name(s)} {time_fmt(est, ' s')} ({reached_text(mine)}, filling "
                         f"{mine.filled_frac_mean.median():.1%} of each gradient), "
                         f"{verdict_text(v, 'sooner', 'later')}; seed by seed it needed "
                         f"{steps.min():+.0f} to {steps.max():+.0f} iterations against "
                         f"`{RELIABLE}` (evaluations every {ok.eval_every.median():g})")
        est = tta_est(rel)
        shown.append(est)
        lines.append(f"- {n:g} workers, `{RELIABLE}` {time_fmt(est, ' s')} "
                     f"({reached_text(rel)}): " + "; ".join(parts) + ".")
    return lines + ["", legend(shown)]


def incast_body(ctx: Context) -> list[str]:
    """Does tolerating loss pay under incast without random loss, and how many workers does the
    machine carry?"""
    ok = _merged(ctx, (INCAST, INCAST_PLOT))
    order = scheme_order(ok)
    shown: list = []
    losses = sorted(ok.loss_pct.unique())
    lead = ("No random loss: the loss is the shallow queue's." if losses == [0] else
            f"{listing(losses)} % random loss on top of the shallow queue's.")
    lines = [f"{lead} {setting(ok)}; "
             f"{listing(name(s) for s in order)} (`plot` from `{INCAST_PLOT}/`, run at "
             f"{listing(ctx.folder(INCAST_PLOT).commits())}, after the others at "
             f"{listing(ctx.folder(INCAST).commits())}, so its comparisons cross days on one "
             "small machine: take them as hints).", "",
             "| workers | scheme | iterations/s | over `ltp-reliable`, per seed | iteration p50 "
             "over its floor | filled, mean (worst) | gradients closed early | CPU busy "
             "| how the runs ended |", "|---|---|---|---|---|---|---|---|---|"]
    for n in sorted(ok.n_workers.unique()):
        d = cell(ok, n_workers=n)
        for s in scheme_order(d):
            mine = cell(d, scheme=s)
            speed, over = (stats.median_ci(mine.iters_per_s),
                           stats.median_ci(mine.iter_over_bound))
            ratio = speed_ratio(d, s, RELIABLE) if s != RELIABLE else stats.NO_ESTIMATE
            shown += [speed, over, ratio]
            closed = int(mine.early_closes.sum()), int(mine.gradient_msgs.sum())
            lines.append(f"| {n:g} | {name(s)} | {speed.fmt()} | {ratio.fmt('.2f', 'x')} "
                         f"| {over.fmt('.2f', 'x')} | {mine.filled_frac_mean.median():.1%} "
                         f"({mine.filled_frac_max.max():.1%}) | {closed[0]} of {closed[1]} "
                         f"| {mine.cpu_busy_frac.median():.0%} | {cap_text(mine)} |")
    lines += ["", legend(shown) + " The floor is the full-duplex bound plus the slowest "
              "worker's compute and the PS's update.", "",
              f"Verdicts on iterations/s per seed ({stats.RULE}):", ""]
    found = []
    for n in sorted(ok.n_workers.unique()):
        d = cell(ok, n_workers=n)
        for s in TOLERANT:
            if s in set(d.scheme):
                found.append((f"{n:g} workers", s, against(d, s, RELIABLE)))
    lines += tolerance_summary(found)
    parts = []
    for n in sorted(ok.n_workers.unique()):
        d = cell(ok, n_workers=n)
        if STRONGEST_TCP not in set(d.scheme):
            continue
        each = []
        for s in ("ltp", RELIABLE):
            v = against(d, s, STRONGEST_TCP)
            each.append(f"{name(s)} {verdict_text(v, 'faster', 'slower')}")
        parts.append(f"{n:g} workers: " + ", ".join(each))
    if parts:
        lines.append(f"- Against `{STRONGEST_TCP}`, the best TCP here: " + "; ".join(parts)
                     + ".")
    fam = ok[ok.scheme.isin(FAMILY)]
    per_count = []
    for n, g in fam.groupby("n_workers"):
        over = g.groupby("scheme").iter_over_bound.median()
        per_count.append(f"{n:g} workers " + listing(f"{name(s)} {v:.2f}x"
                                                     for s, v in over.items()))
    lines += ["", "**How many workers the machine carries.** The median iteration over its "
              "floor, per worker count, for the LTP family: " + "; ".join(per_count)
              + f"; the machine was {fam.cpu_busy_frac.quantile(0.1):.0%}-"
              f"{fam.cpu_busy_frac.quantile(0.9):.0%} busy (10th to 90th percentile of runs). "
              "Where the ratio stays flat as workers are added the network, not the CPU, sets "
              f"the iteration; {int(ok.n_workers.max())} workers is the most that was run.", ""]
    lines += _stall_text(ctx) + [""] + _incast_tta(ctx)
    lines += ["", "![incast regime](../results/regimes/incast-all/figures/"
              "regime_n_workers.png)"]
    return lines


SECTIONS = [
    Section("edge", "Where does tolerating loss pay at edge round-trip times?", EDGE,
            edge_body),
    Section("incast", "Does tolerating loss pay under incast without random loss?",
            (INCAST, INCAST_PLOT, INCAST_TTA, INCAST_32, *RERUNS), incast_body),
]
