"""Findings on two regimes of real networks: cross traffic through the bottleneck (bulk TCP flows
and on/off UDP sources) and bursty loss (Gilbert-Elliott bursts per packet and in time).

Each section asks whether tolerating loss pays there (``ltp`` and ``plot`` against
``ltp-reliable``, the same transport repairing every packet) and what the regime does to TCP;
``results/regimes/cross-idle/`` reruns the cross-traffic cell that the original sweep measured on
a busy machine.
"""

from __future__ import annotations

import json
import math

import pandas as pd

from harness.reporting import stats
from harness.reporting.publish.claims import Section
from harness.reporting.publish.claims.common import (FAMILY, RELIABLE, STRONGEST_TCP, TOLERANT,
                                                     against, cap_text, capped, cell, legend,
                                                     listed, listing, name, runs_of, scheme_order,
                                                     setting, span, speed_ratio, tolerance_summary,
                                                     verdict_text)
from harness.reporting.publish.context import Context, Folder

CROSS = "results/regimes/cross"
CROSS_IDLE = "results/regimes/cross-idle"
BURSTY = "results/regimes/bursty"
# Linux caps the retransmission timeout at 120 s (TCP_RTO_MAX), whatever the backoff.
LINUX_RTO_MAX_S = 120.0


# ---------------------------------------------------------------- cross traffic

def _mb(x: float) -> str:
    return f"{x / 1e6:.0f} MB"


def cross_body(ctx: Context) -> list[str]:
    """Does tolerating loss pay next to cross traffic, and what does cross traffic cost?"""
    f = ctx.folder(CROSS)
    ok = f.ok
    order = scheme_order(ok)
    kinds = [k for k in sorted(ok.cross.unique()) if k != "none"]
    shown: list = []
    lines = [f"Cross traffic from extra hosts through the PS's bottleneck port ("
             + listing(f"`{k}`" for k in kinds) + "; `tcp:N` is N bulk TCP flows, `udp:N:...` "
             f"N on/off UDP sources), {setting(ok)}, at {listed(ok, 'loss_pct')}"
             " % random loss.", "",
             f"| cross | loss % | scheme | iterations/s | over `{STRONGEST_TCP}`, per seed "
             "| cross traffic carried per run | CPU busy |", "|---|---|---|---|---|---|---|"]
    cells = sorted(set(zip(ok.cross, ok.loss_pct)), key=lambda c: (c[0] != "none", c))
    for kind, loss in cells:
        d = cell(ok, cross=kind, loss_pct=loss)
        for s in scheme_order(d):
            mine = cell(d, scheme=s)
            speed = stats.median_ci(mine.iters_per_s)
            ratio = (speed_ratio(d, s, STRONGEST_TCP) if s != STRONGEST_TCP
                     else stats.NO_ESTIMATE)
            shown += [speed, ratio]
            lines.append(f"| `{kind}` | {loss:g} | {name(s)} | {speed.fmt()} "
                         f"| {ratio.fmt('.2f', 'x')} | {_mb(mine.cross_tx_bytes.median())} "
                         f"| {mine.cpu_busy_frac.median():.0%} |")
    lines += ["", legend(shown), "", f"Verdicts on iterations/s per seed ({stats.RULE}):", ""]
    found = []
    for kind, loss in cells:
        d = cell(ok, cross=kind, loss_pct=loss)
        for s in TOLERANT:
            found.append((f"`{kind}`, {loss:g} %", s, against(d, s, RELIABLE)))
    lines += tolerance_summary(found)
    beats = []
    for kind, loss in cells:
        d = cell(ok, cross=kind, loss_pct=loss)
        for s in ("ltp", RELIABLE):
            beats.append(against(d, s, STRONGEST_TCP))
    counts = {sign: sum(1 for v in beats if v.sign == sign) for sign in (1, 0, -1)}
    ratios = [v.estimate.value for v in beats if v.estimate.n]
    lines.append(f"- `ltp` and `{RELIABLE}` against `{STRONGEST_TCP}` in every cell: faster in "
                 f"{counts[1]}, within noise in {counts[0]}, slower in {counts[-1]} of "
                 f"{len(beats)}; per-seed ratios {min(ratios):.2f}-{max(ratios):.2f}x.")
    parts = []
    for loss in sorted(ok.loss_pct.unique()):
        quiet = cell(ok, scheme="ltp", cross="none", loss_pct=loss)
        for kind in kinds:
            busy = cell(ok, scheme="ltp", cross=kind, loss_pct=loss)
            v = stats.compare(f"ltp next to {kind}", runs_of(busy, "iters_per_s"),
                              "ltp alone", runs_of(quiet, "iters_per_s"))
            parts.append(f"`{kind}` at {loss:g} %: {stats.median_ci(quiet.iters_per_s).fmt()} "
                         f"to {stats.median_ci(busy.iters_per_s).fmt()} it/s, "
                         + verdict_text(v, "faster", "slower"))
    lines.append("- What cross traffic costs `ltp` (alone against next to it): "
                 + "; ".join(parts) + ".")
    lines += [""] + _cross_outlier(ok) + [""] + _cross_idle(ctx) + [
        "", "![cross traffic regime](../results/regimes/cross/figures/regime_cross.png)"]
    return lines


def _cross_outlier(ok: pd.DataFrame) -> list[str]:
    """The slowest cell of the LTP family under cross traffic, against the rest of the sweep:
    how busy the machine was, how long the PS's update (a step that uses only the CPU) took,
    and what the cross flows carried."""
    fam = ok[ok.scheme.isin(FAMILY) & (ok.cross != "none")]
    meds = fam.groupby(["scheme", "cross", "loss_pct"]).iters_per_s.median()
    scheme, kind, loss = meds.idxmin()
    d = cell(ok, cross=kind, loss_pct=loss)
    mine = cell(d, scheme=scheme).sort_values("iters_per_s")
    peers = d[d.scheme.isin(FAMILY) & (d.scheme != scheme)]
    rest = ok.drop(index=mine.index)
    slow_update = mine[mine.update_p50_s > rest.update_p50_s.max()]
    runs = "; ".join(f"seed {int(r.seed)}: {r.iters_per_s:.2f} it/s, machine "
                     f"{r.cpu_busy_frac:.2f} busy, update {1e3 * r.update_p50_s:.1f} ms, cross "
                     f"flows {_mb(r.cross_tx_bytes)}" for r in mine.itertuples())
    lines = [f"**The slowest cell**, {name(scheme)} next to `{kind}` at {loss:g} % loss "
             f"(the rest of the LTP family there: {span(peers.iters_per_s)} it/s, cross flows "
             f"{_mb(peers.cross_tx_bytes.min())}"
             f"-{_mb(peers.cross_tx_bytes.max())}): {runs}. In every other run of the sweep the "
             f"PS's update took {span(1e3 * rest.update_p50_s, '.1f')} ms and the machine was "
             f"{span(rest.cpu_busy_frac)} busy."]
    if not slow_update.empty:
        lines[0] += (f" In {len(slow_update)} of its {len(mine)} runs the update, which uses "
                     "only the CPU, took longer than in any other run: there the machine, not "
                     "the transport, slowed training, and since the link stays full either "
                     "way, the TCP flows carried what the slower training left.")
    return lines


def _cross_idle(ctx: Context) -> list[str]:
    ok = ctx.folder(CROSS_IDLE).ok
    kind, loss = ok.cross.iloc[0], ok.loss_pct.iloc[0]
    parts = [f"{name(s)} {verdict_text(against(ok, s, RELIABLE), 'faster', 'slower')}"
             for s in TOLERANT if s in set(ok.scheme)]
    speeds = ", ".join(f"{name(s)} {stats.median_ci(cell(ok, scheme=s).iters_per_s).fmt()}"
                       for s in scheme_order(ok))
    slow_rows, rest_rows = [], []
    for s, g in ok.groupby("scheme"):
        worst = g.iters_per_s.idxmin()
        slow_rows.append(g.loc[worst])
        rest_rows.append(g.drop(index=worst))
    slow, rest = pd.DataFrame(slow_rows), pd.concat(rest_rows)
    schemes = listing(name(s) for s in scheme_order(ok))
    return [f"**Rerun on a quieter machine** (`{CROSS_IDLE}/`, {schemes}"
            f" next to `{kind}` at {loss:g} % loss): iterations/s {speeds}; against "
            f"`{RELIABLE}`: " + "; ".join(parts) + f". Each scheme's slowest run "
            f"({span(slow.iters_per_s)} it/s) had the cross "
            f"flows carry {_mb(slow.cross_tx_bytes.min())}-{_mb(slow.cross_tx_bytes.max())} "
            f"against {_mb(rest.cross_tx_bytes.min())}-{_mb(rest.cross_tx_bytes.max())} in the "
            f"others, with the machine {span(slow.cpu_busy_frac)} busy against "
            f"{span(rest.cpu_busy_frac)}"
            + (": every slowest run had the machine busier than every other run, so the same "
               "training bytes took longer while the machine was busier, and the TCP flows "
               "filled the time." if slow.cpu_busy_frac.min() > rest.cpu_busy_frac.max()
               else ".")]


# ---------------------------------------------------------------- bursty loss

def _kind(model: str) -> str:
    return str(model).split(":", 1)[0]


def _param(model: str, key: str) -> float | None:
    for part in str(model).partition(":")[2].split(","):
        k, _, v = part.partition("=")
        if k == key:
            return float(v)
    return None


def bursty_body(ctx: Context) -> list[str]:
    """Does tolerating loss pay under bursty loss, and what do bursts do to TCP?"""
    f = ctx.folder(BURSTY)
    ok = f.ok.copy()
    ok["kind"] = ok.loss_model.map(_kind)
    it = f.sweep.iters
    longest = it.groupby("run_id").gather_s.max().rename("longest_gather_s")
    ok = ok.join(longest, on="run_id")
    models = ok.drop_duplicates("kind").set_index("kind").loss_model
    kinds = list(models.index)
    shown: list = []
    mean_loss = listed(ok, "loss_pct")
    lines = [f"{mean_loss} % mean random loss in each of {listing(f'`{m}`' for m in models)} "
             f"({setting(ok)}): `ge` draws per-packet Gilbert-Elliott bursts, `get` time-based "
             "bad periods.", "",
             "| loss | scheme | iterations/s | over `ltp-reliable`, per seed | iteration p99, s "
             "| longest gather, s | iterations done | measured loss % |",
             "|---|---|---|---|---|---|---|---|"]
    measured = []
    for kind in kinds:
        d = cell(ok, kind=kind)
        burst = (f", bursts of {d.mean_burst_pkts.median():.1f} packets"
                 if d.mean_burst_pkts.notna().any() else "")
        bad = (f", bad periods of {d.mean_bad_ms.median():.1f} ms"
               if "mean_bad_ms" in d and d.mean_bad_ms.notna().any() else "")
        measured.append(f"`{kind}` {d.measured_loss_pct.median():.2f} %{burst}{bad}")
        for s in scheme_order(d):
            mine = cell(d, scheme=s)
            speed, p99 = stats.median_ci(mine.iters_per_s), stats.median_ci(mine.iter_p99_s)
            gather = stats.median_ci(mine.longest_gather_s)
            ratio = speed_ratio(d, s, RELIABLE) if s != RELIABLE else stats.NO_ESTIMATE
            shown += [speed, p99, gather, ratio]
            lines.append(f"| `{kind}` | {name(s)} | {speed.fmt()} | {ratio.fmt('.2f', 'x')} "
                         f"| {p99.fmt('.2f')} | {gather.fmt('.2f')} "
                         f"| {stats.median_ci(mine.iterations_done).fmt('.0f')} "
                         f"| {mine.measured_loss_pct.median():.2f} |")
    lines += ["", "Measured loss, medians over the runs of each model: " + "; ".join(measured)
              + "."]
    lines += ["", legend(shown), "", f"Verdicts on iterations/s per seed ({stats.RULE}):", ""]
    found = []
    for kind in kinds:
        d = cell(ok, kind=kind)
        for s in TOLERANT:
            found.append((f"`{kind}` loss", s, against(d, s, RELIABLE)))
    lines += tolerance_summary(found)
    uniform = cell(ok, kind="uniform", scheme=RELIABLE)
    for kind in [k for k in kinds if k != "uniform"]:
        mine = cell(ok, kind=kind, scheme=RELIABLE)
        v = stats.compare(f"{RELIABLE} under {kind}", runs_of(mine, "iters_per_s"),
                          f"{RELIABLE} under uniform", runs_of(uniform, "iters_per_s"))
        tail = against(cell(ok, kind=kind), "ltp", RELIABLE, "iter_p99_s",
                        higher_is_better=False)
        lines.append(f"- `{RELIABLE}` under `{kind}` against itself under uniform loss: "
                     f"{stats.median_ci(mine.iters_per_s).fmt()} against "
                     f"{stats.median_ci(uniform.iters_per_s).fmt()} it/s, "
                     f"{verdict_text(v, 'faster', 'slower')}; `ltp`'s p99 iteration against "
                     f"`{RELIABLE}`'s there: {verdict_text(tail, 'shorter', 'longer')}.")
    lines += [""] + _tcp_bursts(ok) + [
        "", "![bursty loss](../results/regimes/bursty/figures/regime_loss_kind.png)", "",
        "![synchronization time per iteration](../results/regimes/bursty/figures/sync_cdf.png)"]
    return lines


def _tcp_bursts(ok: pd.DataFrame) -> list[str]:
    """What per-packet bursts do to TCP with a small minimum RTO, and why."""
    tcp = ok[ok.scheme == STRONGEST_TCP]
    ge = tcp[tcp.kind == "ge"]
    if ge.empty:
        return []
    burst = _param(ge.loss_model.iloc[0], "burst")
    rto_ms = json.loads(ge.transport_options.iloc[0]).get("rto_min_ms")
    if not burst or not rto_ms:
        return []
    stay = 1 - 1 / burst
    rto = rto_ms / 1e3
    seeds = "; ".join(f"seed {int(r.seed)}: {int(r.iterations_done)} of {int(r.iterations)} "
                      f"iterations, longest gather {r.longest_gather_s:.0f} s"
                      for r in ge.sort_values("seed").itertuples())
    worst = float(ge.longest_gather_s.max())
    k = math.ceil(math.log2(worst / rto + 1))
    others = tcp[tcp.kind != "ge"]
    timed = tcp[tcp.kind == "get"]
    other_text = "; ".join(
        f"`{kind}` {stats.median_ci(g.iters_per_s).fmt()} it/s, {cap_text(g)}"
        for kind, g in others.groupby("kind"))
    return [f"**TCP under per-packet bursts.** `{STRONGEST_TCP}` under `ge` loss: {seeds} "
            f"(elsewhere: {other_text}). The mechanism: once one flow is left (the last "
            "worker's gradient), its retransmissions are the only packets the loss chain sees, "
            f"so with bursts of mean length {burst:g} a lost retransmission is lost again with "
            f"probability {stay:.2f}, while each loss doubles the timeout from "
            f"{rto_ms:g} ms: k losses in a row cost {rto_ms:g} ms x (2^k - 1). Each further "
            f"loss in a row multiplies its chance by {stay:.2f} and doubles its cost, so each "
            f"step adds {2 * stay:.2f} times what the step before added to the expected stall"
            + (f": it has no bound below Linux's {LINUX_RTO_MAX_S:g} s cap on the timeout. "
               if 2 * stay > 1 else ", which keeps it bounded. ")
            + f"The longest gather here, {worst:.0f} s, "
            f"is at most {k} timeouts in a row, a run with probability {stay ** (k - 1):.1%} "
            "once a burst has begun."
            + (" Under time-based bad periods, which end in time, the same TCP ran every "
               "iteration: per-packet burst models (netem's `gemodel` included) overstate "
               "what bursts cost a sender driven by timeouts." if not timed.empty
               and capped(timed).empty else "")]


SECTIONS = [
    Section("cross", "Does tolerating loss pay next to cross traffic?", (CROSS, CROSS_IDLE),
            cross_body),
    Section("bursty", "Does tolerating loss pay under bursty loss?", (BURSTY,), bursty_body),
]
