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
from harness.reporting.publish.claims import Readme, Section
from harness.reporting.publish.claims.common import (STRONGEST_TCP, anchor, cap_text, legend,
                                                     listed, name, runs_of, setting, time_fmt,
                                                     tta_est)
from harness.reporting.publish.context import Context
from harness.reporting.sections.field import (CONTEXT, WINNER_RULE, cell_labels, cells,
                                              designs, order, verdict_text, winner)
from harness.running.results import read_table
from transports.base import parse_scheme

FIELD = "results/field"
QUESTION = "Which design of the field wins where, on identical replayed loss?"
# The same core in the simulator under the field's bursty loss, its probe backoff varied.
BACKOFF = "results/simulate-backoff"
STALL_QUESTION = "Why do broadcasts through the PS stall under bursty loss?"
STALL_S = 1.0   # a broadcast longer than this is a stall (the lossless ones take a fraction of it)


def runs(ctx: Context, rel: str = FIELD) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The folder's ok runs with the given-up share, their cell and design; and the runs that
    did not finish (a timeout is a measured outcome: TCP in timeout under per-packet bursts)."""
    every = ctx.folder(rel).runs.copy()
    every["cell"] = cell_labels(every)
    every["design"] = designs(every)
    ok = every[every.status == "ok"].copy()
    ok["given_up"] = 1.0 - ok.mean_recv_frac.astype(float)
    return ok, every[every.status != "ok"]


def so_far(ok: pd.DataFrame) -> str:
    """`` (2 of the preset's 6 seeds so far)`` while the folder holds fewer seeds than the
    preset plans (the preset may run a seed at a time: ``--seeds K`` adds seed K to it)."""
    from harness.running.presets import PRESETS

    planned = len(PRESETS["field"].seeds)
    have = ok.seed.nunique()
    return f" ({have} of the preset's {planned} seeds so far)" if have < planned else ""


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
    lines = [f"{setting(ok)} ({cap_text(ok)}), seeds {listed(ok, 'seed')}{so_far(ok)}. "
             "Every seed drops the same packet positions for every scheme (`replay:` and `ge:` "
             "loss are functions of the seed, the host and the packet's position; "
             f"docs/running.md). {WINNER_RULE[0].upper() + WINNER_RULE[1:]}.", ""]
    summary, shown = [], []
    for label in cells(ok):
        c = ok[ok.cell == label]
        rows, est = table(ok, c, target)
        shown += est
        lines += [f"**{label}**", ""] + rows + [""]
        gone = failed[failed.cell == label]
        if len(gone):
            lines += ["- Runs that did not finish: " + "; ".join(
                f"{name(d)} {len(g)} ({listed(g, 'status')})"
                for d, g in gone.groupby("design")) + "."]
        said = verdict_text(*winner(c), quote=name)
        lines += [f"- {said}.", ""]
        summary.append(f"{label}: {said}")
    lines += [legend(shown), "", "In short: " + "; ".join(summary) + "."]
    return lines


def stall_runs(iters: pd.DataFrame, runs: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per run: the share of its iterations whose broadcast took more than :data:`STALL_S` and
    its slowest broadcasts (the 99th percentile of its iterations'), with the run's ``keys``."""
    got = iters.groupby("run_id").broadcast_s.agg(
        stalled=lambda b: float((b > STALL_S).mean()), p99=lambda b: float(b.quantile(0.99)))
    return runs[["run_id", *keys]].merge(got, left_on="run_id", right_index=True)


def _backoff(transport: str, default: int) -> str:
    _, given = parse_scheme(transport)
    n = given.get("pto_max_backoff", default)
    return f"`pto_max_backoff={n}`" + (" (the default)" if n == default else "")


def stall_body(ctx: Context) -> list[str]:
    """The field's stalled broadcasts by design and loss; the simulator's, by probe backoff."""
    from transports import native

    f, sim = ctx.folder(FIELD), ctx.folder(BACKOFF)
    ok, _ = runs(ctx)
    ps = ok[~ok.design.str.contains("(", regex=False)]   # the designs that broadcast from the PS
    field = stall_runs(f.sweep.iters, ps, ["design", "cell", "seed"])
    labels = cells(field)
    lines = [f"In `{FIELD}/`, the share of each run's iterations whose broadcast from the PS took "
             f"more than {STALL_S:g} s, per design and cell (median over runs):", "",
             "| design | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
    by_pair = {k: g.stalled for k, g in field.groupby(["design", "cell"])}
    none = field.stalled.iloc[:0]
    shown = []
    for d in order(field):
        row = []
        for label in labels:
            e = stats.median_ci(by_pair.get((d, label), none))
            shown.append(e)
            row.append(e.fmt(".1%") if e.n else "-")
        lines.append(f"| {name(d)} | " + " | ".join(row) + " |")
    default = int(native.core_options()["pto_max_backoff"].default)
    its = read_table(sim.path / "iterations.csv")
    sims = stall_runs(its, sim.runs, ["transport", "loss", "seed"])
    base = next(t for t in sims.transport.unique() if parse_scheme(t)[0] == t)
    lines += ["", "Every scheme but TCP runs the same core, whose lost tail is found by a probe "
              "timeout that doubles after each unanswered probe (at most `pto_max_backoff` "
              "times). Gilbert-Elliott loss counts its bursts in packets, and a link that carries "
              "nothing but probes carries them one timeout apart, so a burst of a few packets "
              "lasts several ever longer timeouts. The same core in the simulator "
              f"(`{BACKOFF}/`: {setting_sim(sim.runs)}), with the probe backoff varied, per run "
              f"the share of broadcasts over {STALL_S:g} s and its 99th-percentile broadcast:",
              "", "| loss | probe backoff | runs | broadcasts over "
              f"{STALL_S:g} s | broadcast p99, s | p99 against the default's |",
              "|---|---|---|---|---|---|"]
    said = []
    for loss, g in sims.groupby("loss", sort=False):
        ref = g[g.transport == base]
        for t in sorted(g.transport.unique(), key=lambda t: (t != base, t)):
            m = g[g.transport == t]
            stalled, p99 = stats.median_ci(m.stalled), stats.median_ci(m.p99)
            shown += [stalled, p99]
            versus = "-"
            if t != base:
                v = stats.compare(_backoff(t, default), runs_of(m, "p99"), _backoff(base, default),
                                  runs_of(ref, "p99"), higher_is_better=False, unit=" s")
                versus = v.estimate.fmt(".2f", "x") if v.estimate.n else "-"
                said.append(f"under `{loss}`: {v.sentence}")
            lines.append(f"| `{loss}` | {_backoff(t, default)} | {len(m)} | {stalled.fmt('.1%')} "
                         f"| {p99.fmt('.2f')} | {versus} |")
    lines += ["", legend(shown), ""] + [f"- {x}" for x in said]
    return lines


def setting_sim(runs_: pd.DataFrame) -> str:
    """The simulated setting in words: workers, link, queue, host model, iterations, seeds."""
    r = runs_.iloc[0]
    return (f"{int(r.n_workers)} workers, {r.bottleneck_mbps:g} Mbit/s, a {int(r.queue_pkts)}-"
            f"packet queue, host model `{r.host}`, {r.scenario} scenario, {int(r.iterations)} "
            f"iterations a run, seeds {listed(runs_, 'seed')}")


def readme(ctx: Context) -> str:
    """The README's paragraph: per cell, the winner by the rule, or that none separates (given
    only from a fresh, complete folder: :class:`Readme`)."""
    f = ctx.folder(FIELD)
    ok, _ = runs(ctx)
    with stats.tally() as tally:
        said = [f"{label}: {verdict_text(*winner(ok[ok.cell == label]), quote=name)}"
                for label in cells(ok)]
    return "\n".join([
        f"Time to the target accuracy of {len(order(ok))} designs on identical replayed loss, "
        f"from {f.cite()}, fresh{so_far(ok)}; "
        f"{WINNER_RULE} (tables per cell: [docs/findings.md](docs/findings.md#"
        f"{anchor(QUESTION)})):", "", *[f"- {line}." for line in said], "",
        tally.sentence("paragraph")])


README = {"field": Readme(readme, (FIELD,), QUESTION)}
SECTIONS = [Section("field", QUESTION, (FIELD,), field_body),
            Section("stalls", STALL_QUESTION, (FIELD, BACKOFF), stall_body)]
