"""Findings of the head-to-head (``results/field/``, preset ``field``; docs/field.md): LTP, PLOT,
the MLT-style and phase-aware designs, LTP reliable and the strongest TCP baseline through the
PS, and OptiReduce beside LTP in a ring all-reduce, on identical replayed loss (``replay:`` and
``ge:``: each seed drops the same packet positions for every scheme), in the main incast and
beside it at an edge round trip and through a shallow queue.

Per cell (a loss model and a regime): time to the target accuracy (runs that miss it count as
infinitely late), the final accuracy against lossless TCP with the same seed, the slowest
iterations and the share of the gradients given up. A cell names a winner only by the rule of
:data:`WINNER_RULE`; every comparison made is counted.
"""

from __future__ import annotations

import pandas as pd

from harness.reporting import stats
from harness.reporting.publish.claims import Section
from harness.reporting.publish.claims.common import (STRONGEST_TCP, cap_text, legend, listed, name,
                                                     runs_of, setting, time_fmt, tta_est)
from harness.reporting.publish.context import Context
from harness.reporting.sections.field import (CONTEXT, WINNER_RULE, cell_labels, cells,
                                              designs, order, winner)

FIELD = "results/field"
QUESTION = "Which design of the field wins where, on identical replayed loss?"


def runs(ctx: Context, rel: str = FIELD) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The folder's ok runs with the given-up share, their cell and design; and the runs that
    did not finish (a timeout is a measured outcome: TCP in timeout under per-packet bursts)."""
    every = ctx.folder(rel).runs.copy()
    every["cell"] = cell_labels(every)
    every["design"] = designs(every)
    ok = every[every.status == "ok"].copy()
    ok["given_up"] = 1.0 - ok.mean_recv_frac.astype(float)
    return ok, every[every.status != "ok"]


def lossless_tcp(ok: pd.DataFrame, c: pd.DataFrame) -> pd.DataFrame:
    """The strongest TCP without loss in the regime of cell ``c`` (its context), else in the
    folder's usual one."""
    tcp = ok[(ok.design == STRONGEST_TCP) & (ok.loss_pct == 0)]
    same = tcp
    for col in CONTEXT:
        same = same[same[col] == c[col].iloc[0]]
    return same if len(same) else tcp[tcp.cell == "no loss"]


def table(ok: pd.DataFrame, c: pd.DataFrame, target: float) -> tuple[list[str], list]:
    """The cell's rows: one per scheme."""
    lines = [f"| design | runs | time to {target:.0%}, s | final accuracy | points vs lossless "
             f"{name(STRONGEST_TCP)} | slowest iteration (p99), s | given up |",
             "|---|---|---|---|---|---|---|"]
    shown = []
    ref = lossless_tcp(ok, c)
    for s in order(c):
        m = c[c.design == s]
        tta = tta_est(m)
        acc = stats.median_ci(m.final_accuracy)
        pts = stats.pair_or_not(runs_of(m, "final_accuracy", 100),
                                runs_of(ref, "final_accuracy", 100), "diff")
        p99 = stats.median_ci(m.iter_p99_s)
        gave = stats.median_ci(m.given_up)
        shown += [tta, acc, pts, p99, gave]
        lines.append(f"| {name(s)} | {len(m)} | {time_fmt(tta)} | {acc.fmt('.3f')} "
                     f"| {pts.fmt('+.1f')} | {p99.fmt('.2f')} | {gave.fmt('.2%')} |")
    return lines, shown


def field_body(ctx: Context) -> list[str]:
    """Per cell: the table, then the winner or that none separates; a summary line last."""
    ok, failed = runs(ctx)
    target = float(ok.target_accuracy.dropna().iloc[0])
    lines = [f"{setting(ok)} ({cap_text(ok)}), seeds {listed(ok, 'seed')}. "
             "Every seed drops the same packet positions for every scheme (`replay:` and `ge:` "
             "loss are functions of the seed, the host and the packet's position; "
             f"docs/running.md). {WINNER_RULE[0].upper() + WINNER_RULE[1:]}.", ""]
    summary, shown = [], []
    for label in cells(ok):
        c = ok[ok.cell == label]
        rows, est = table(ok, c, target)
        shown += est
        fastest, best, verdicts = winner(c)
        lines += [f"**{label}**", ""] + rows + [""]
        gone = failed[failed.cell == label]
        if len(gone):
            lines += ["- Runs that did not finish: " + "; ".join(
                f"{name(d)} {len(g)} ({listed(g, 'status')})"
                for d, g in gone.groupby("design")) + "."]
        if best:
            said = f"{name(best)} wins (faster than each of the {len(verdicts)} others)"
        else:
            beaten = sum(1 for v in verdicts if v.sign == 1)
            said = "none separates" + (
                f" (the fastest median, {name(fastest)}'s, is faster beyond noise than "
                f"{beaten} of the {len(verdicts)} others)" if verdicts else "")
        lines += [f"- {said}.", ""]
        summary.append(f"{label}: {said}")
    lines += [legend(shown), "", "In short: " + "; ".join(summary) + "."]
    return lines


SECTIONS = [Section("field", QUESTION, (FIELD,), field_body)]
