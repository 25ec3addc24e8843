"""Findings on validation without a round and on the PS's own validation set: Zeno++ under ssp:2
and async over LTP with and without loss (``results/validation-async/``), with CSER's local
models (``results/cser-validation/``), and score and Zeno++ validating on a held-out set the
workers never train on (``results/privacy/``; docs/byzantine.md).

Shares are pooled over a cell's runs (updates counted, not runs averaged); accuracy differences
are per seed, each against the same cell with the other rule or holdout.
"""

from __future__ import annotations

import pandas as pd

from harness.reporting import stats
from harness.reporting.publish.claims import Section
from harness.reporting.publish.claims.common import (DIFF_RULE, legend, listed, part, phrase,
                                                     runs_of)
from harness.reporting.publish.claims.trust import FREE, _count
from harness.reporting.publish.context import Context

ASYNC = "results/validation-async"
WITH_CSER = "results/cser-validation"
PRIVACY = "results/privacy"
JUDGE = "zeno++"
QUESTION = ("Does Zeno++ keep asynchronous training on course, does it take filled updates for "
            "attacks, and what does a validation set of the PS's own cost?")


def _runs(ctx: Context, rel: str) -> pd.DataFrame:
    ok = ctx.folder(rel).ok.copy()
    ok["sync"] = ok.sync.fillna("bsp").astype(str)
    ok["byzantine"] = ok.byzantine.fillna(FREE).astype(str)
    ok["holdout"] = ok.holdout.fillna(0).astype(int)
    return ok


def _pick(d: pd.DataFrame, **eq) -> pd.DataFrame:
    for col, value in eq.items():
        d = d[d[col] == value]
    return d


def _points(mine: pd.DataFrame, other: pd.DataFrame) -> tuple[stats.Estimate, int | None]:
    est = stats.pair_or_not(runs_of(mine, "final_accuracy", 100),
                            runs_of(other, "final_accuracy", 100), "diff")
    return est, stats.judge(est, 0.0)


def _async_rows(d: pd.DataFrame) -> tuple[list[str], list[stats.Estimate]]:
    lines = ["| loss % | sync | attackers | rule | runs | final accuracy | attackers' updates kept "
             "| honest rejected | honest with filled holes rejected |",
             "|---|---|---|---|---|---|---|---|---|"]
    shown = []
    for loss in sorted(d.loss_pct.unique()):
        for sync in sorted(d.sync.unique()):
            for attack in sorted(d.byzantine.unique(), key=lambda b: (b != FREE, b)):
                for rule in sorted(d.aggregator.unique(), key=lambda r: r == JUDGE):
                    c = _pick(d, loss_pct=loss, sync=sync, byzantine=attack, aggregator=rule)
                    if c.empty:
                        continue
                    acc = stats.median_ci(c.final_accuracy)
                    shown.append(acc)
                    kept = _count(c.byzantine_kept.sum(), c.byzantine_updates.sum())
                    lines.append(
                        f"| {loss:g} | {sync} | {attack} | `{rule}` | {len(c)} | "
                        f"{acc.fmt('.3f')} | {kept} | "
                        f"{_count(c.honest_rejected.sum(), c.honest_updates.sum())} | "
                        f"{_count(c.honest_filled_rejected.sum(), c.honest_filled.sum())} |")
    return lines, shown


def _judge_lines(d: pd.DataFrame, against: str) -> list[str]:
    """Zeno++ against ``mean`` per (loss, sync), attacked; and the honest rejection rate of
    Zeno++ with loss against without, attack-free, per seed."""
    out = []
    for loss in sorted(d.loss_pct.unique()):
        for sync in sorted(d.sync.unique()):
            for attack in sorted(set(d.byzantine) - {FREE}):
                mine = _pick(d, loss_pct=loss, sync=sync, byzantine=attack, aggregator=JUDGE)
                base = _pick(d, loss_pct=loss, sync=sync, byzantine=attack, aggregator=against)
                if mine.empty or base.empty:
                    continue
                est, sign = _points(mine, base)
                out.append(f"- {loss:g} % loss, {sync}, {attack}: `{JUDGE}` against "
                           f"`{against}`: {est.fmt('+.1f')} points, "
                           + phrase(sign, "more accurate beyond noise",
                                    "less accurate beyond noise") + ".")
    free = _pick(d, byzantine=FREE, aggregator=JUDGE)
    losses = sorted(free.loss_pct.unique())
    for sync in sorted(free.sync.unique()):
        if len(losses) < 2:
            break
        rate = free.honest_rejected / free.honest_updates.where(free.honest_updates > 0)
        cells = [free.assign(rate=rate)[(free.sync == sync) & (free.loss_pct == x)]
                 for x in (losses[0], losses[-1])]
        v = stats.compare(f"{losses[-1]:g} %", stats.by_seed(cells[1], "rate") * 100,
                          f"{losses[0]:g} %", stats.by_seed(cells[0], "rate") * 100,
                          higher_is_better=False, op="diff")
        out.append(f"- {sync}, no attackers: the share of honest updates `{JUDGE}` rejects at "
                   f"{losses[-1]:g} % loss against {losses[0]:g} %: "
                   f"{v.estimate.fmt('+.1f')} points per seed, "
                   + phrase(v.sign, "fewer beyond noise", "more beyond noise") + ".")
    return out


def _privacy_lines(d: pd.DataFrame) -> tuple[list[str], list[stats.Estimate]]:
    held = sorted(set(d.holdout) - {0})
    out, shown = [], []
    for rule in sorted(d.aggregator.unique()):
        for attack in sorted(d.byzantine.unique(), key=lambda b: (b != FREE, b)):
            base = _pick(d, aggregator=rule, byzantine=attack, holdout=0)
            for n in held:
                mine = _pick(d, aggregator=rule, byzantine=attack, holdout=n)
                if mine.empty or base.empty:
                    continue
                est, sign = _points(mine, base)
                shown.append(est)
                out.append(f"- `{rule}`, attackers {attack}: validating on {n:,} samples of its "
                           f"own costs {est.fmt('+.1f')} points against sampling the training "
                           "set, " + phrase(sign, "more accurate beyond noise",
                                            "less accurate beyond noise") + ".")
    return out, shown


def validation_body(ctx: Context) -> list[str]:
    """Zeno++ asynchronously, with CSER, and on a held-out set."""
    d = _runs(ctx, ASYNC)
    lines = [part("Zeno++ without a round", d, f"LTP at {listed(d, 'loss_pct')} % loss, "
                  f"{listed(d, 'sync')}, attackers {listed(d, 'byzantine')}, seeds "
                  f"{listed(d, 'seed')}") + f". `{JUDGE}` tests each arriving update alone "
             "against a fresh validation gradient, rescaled to its size; `mean` accepts "
             f"everything. Shares count updates over a cell's runs; {DIFF_RULE}.", ""]
    table, shown = _async_rows(d)
    lines += table + ["", legend(shown), ""] + _judge_lines(d, "mean") + [""]
    c = _runs(ctx, WITH_CSER)
    table, more = _async_rows(c)
    lines += [part("With CSER's local models", c, f"async workers pushing "
                   f"{listed(c, 'compress')} with the residual synchronised every "
                   f"{listed(c, 'error_reset')} gradient rounds") + ".", ""]
    lines += table + ["", legend(more), ""] + _judge_lines(c, "mean") + [""]
    p = _runs(ctx, PRIVACY)
    body, est = _privacy_lines(p)
    lines += [f"**A validation set of the PS's own** ({len(p)} runs over TCP without loss, bsp, "
              f"rules {listed(p, 'aggregator')}): with `--holdout N` no worker "
              "trains on the N samples the validator draws from, and the validator needs no "
              "worker's data; it is not differential privacy (docs/byzantine.md).", ""]
    lines += body + ["", legend(est)]
    return lines


SECTIONS = [Section("validation", QUESTION, (ASYNC, WITH_CSER, PRIVACY), validation_body)]
