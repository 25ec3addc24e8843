"""Findings on PLOT's bounds that follow the network: the adaptive rule (each layer's range,
chosen within by the core's loss-driven threshold) against the frozen snr rule and LTP, on two
deeper models (``results/plot-adaptive/``), and both PLOT rules at edge round trips, where
PLOT's first iterations used to stall (``results/plot-edge/``; docs/plot-protocol.md).
"""

from __future__ import annotations

import pandas as pd

from harness.reporting import stats
from harness.reporting.publish.claims import Section
from harness.reporting.publish.claims.common import (DIFF_RULE, against, cap_text, legend, listed,
                                                     listing, name, part, phrase, runs_of,
                                                     verdict_text)
from harness.reporting.publish.context import Context

ADAPTIVE = "results/plot-adaptive"
EDGE = "results/plot-edge"
RULE = "plot+bound_rule=adaptive"
FROZEN = "plot"
QUESTION = "Do PLOT's bounds pay when they follow the network?"


def _runs(ctx: Context, rel: str) -> pd.DataFrame:
    ok = ctx.folder(rel).ok.copy()
    ok["early_frac"] = ok.early_closes / ok.gradient_msgs.where(ok.gradient_msgs > 0)
    ok["slowest_ratio"] = ok.iter_p99_s / ok.iter_p50_s.where(ok.iter_p50_s > 0)
    return ok


def _order(d: pd.DataFrame) -> list[str]:
    return [s for s in (FROZEN, RULE, "ltp") if s in set(d.scheme)]


def _table(d: pd.DataFrame, keys: tuple[str, ...]) -> tuple[list[str], list[stats.Estimate]]:
    heads = {"model": "model", "loss_pct": "loss %", "delay_ms": "one-way delay, ms"}
    lines = ["| " + " | ".join(heads[k] for k in keys) + " | scheme | runs | iterations/s "
             "| closed early | filled | slowest iteration / median | final accuracy |",
             "|" + "---|" * (len(keys) + 7)]
    shown = []
    for values, c in d.groupby(list(keys), sort=True):
        values = values if isinstance(values, tuple) else (values,)
        for scheme in _order(c):
            m = c[c.scheme == scheme]
            est = [stats.median_ci(m[col]) for col in ("iters_per_s", "early_frac",
                   "filled_frac_mean", "slowest_ratio", "final_accuracy")]
            shown += est
            cells = " | ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in values)
            lines.append(f"| {cells} | {name(scheme)} | {len(m)} | {est[0].fmt()} "
                         f"| {est[1].fmt('.1%')} | {est[2].fmt('.2%')} | {est[3].fmt('.1f', 'x')} "
                         f"| {est[4].fmt('.3f')} |")
    return lines, shown


def _verdicts(d: pd.DataFrame, keys: tuple[str, ...], others: tuple[str, ...]) -> list[str]:
    out = []
    for values, c in d.groupby(list(keys), sort=True):
        values = values if isinstance(values, tuple) else (values,)
        where = ", ".join(f"{k.replace('_pct', '').replace('_ms', '')} {v:g}"
                          if isinstance(v, float) else f"{v}" for k, v in zip(keys, values))
        for other in others:
            if other not in set(c.scheme) or RULE not in set(c.scheme):
                continue
            speed = against(c, RULE, other)
            pts = stats.pair_or_not(runs_of(c[c.scheme == RULE], "final_accuracy", 100),
                                    runs_of(c[c.scheme == other], "final_accuracy", 100), "diff")
            out.append(f"- {where}: the adaptive rule against {name(other)}: iterations "
                       + verdict_text(speed, "faster", "slower") + f"; {pts.fmt('+.1f')} points "
                       "of accuracy, " + phrase(stats.judge(pts, 0.0), "more accurate beyond "
                                                "noise", "less accurate beyond noise") + ".")
    return out


def plotbounds_body(ctx: Context) -> list[str]:
    """The adaptive rule against the frozen one and LTP; both PLOT rules at edge delays."""
    d = _runs(ctx, ADAPTIVE)
    lines = [part("Deeper models", d, f"{listed(d, 'model')}, {listed(d, 'loss_pct')} % loss, "
                  f"{d.bottleneck_mbps.iloc[0]:g} Mbit/s, seeds {listed(d, 'seed')}; "
                  f"{cap_text(d)}")
             + f". {name(FROZEN)} closes each layer at the bound its SNR profile froze; "
             f"{name(RULE)} gives each layer the range from that bound to the top and lets the "
             "core's threshold, which follows each layer's own recent losses, choose within it. "
             "*Closed early*: gradient messages closed before every packet arrived; *filled*: "
             f"the mean share of a gradient the filler supplied; {DIFF_RULE}.", ""]
    table, shown = _table(d, ("model", "loss_pct"))
    lines += table + ["", legend(shown), ""]
    lines += _verdicts(d, ("model", "loss_pct"), (FROZEN, "ltp")) + [""]
    e = _runs(ctx, EDGE)
    stalled = e[e.slowest_ratio > 10]
    lines += [part("Edge round trips", e, f"{listed(e, 'delay_ms')} ms one way, "
                   f"{listed(e, 'loss_pct')} % loss, {e.bottleneck_mbps.iloc[0]:g} Mbit/s; "
                   f"{cap_text(e)}")
              + ". A stall shows as a slowest iteration many times the median: "
              f"{len(stalled)} of {len(e)} runs had one over 10 times it"
              + (f" ({listing(sorted(name(s) for s in stalled.scheme.unique()))})"
                 if len(stalled) else "") + ".", ""]
    table, shown = _table(e, ("delay_ms",))
    lines += table + ["", legend(shown), ""] + _verdicts(e, ("delay_ms",), (FROZEN,))
    return lines


SECTIONS = [Section("plot-bounds", QUESTION, (ADAPTIVE, EDGE), plotbounds_body)]
