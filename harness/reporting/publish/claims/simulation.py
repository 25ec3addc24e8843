"""Findings: the LTP/PLOT core at scales two cores cannot emulate, in the discrete-event simulator
(``invoke simulate``): synchronized push time against the number of workers N and the link rate,
for ``ltp``, ``ltp-reliable``, ``plot`` and the TCP reference model ``tcp-ref``.

``results/simulate-scaling/n/`` varies N without loss, ``loss2/`` with uniform loss at every host,
``rate/`` varies the link rate at one N. Each cell has several runs (seeds) of a few pushes. The
pushes of one run are not independent, its runs are: a cell's median is over its runs (each run's
median push) and its bracket is the distribution-free interval of those runs, with the coverage
:mod:`harness.reporting.stats` computes for them; the text compares cells' medians (ratios and
orderings) and draws no verdict. Crossovers are recomputed from ``iterations.csv`` by
:func:`harness.simulation.figures.crossovers`, the function that writes each folder's
``crossovers.csv`` (over the cells' pooled pushes: no coverage stated).
"""

from __future__ import annotations

import re

import pandas as pd

from harness.reporting import stats
from harness.reporting.publish.claims import Section
from harness.reporting.publish.claims.common import span
from harness.reporting.publish.claims.simvalidation import withdrawn
from harness.reporting.publish.context import PROJECT, Context, Folder
from harness.running.results import read_table
from harness.simulation.driver import SCHEMES
from harness.simulation.figures import bound_s, crossovers, medians
from topologies.impair.loss import Uniform, parse_loss

BY_N = "results/simulate-scaling/n"
BY_N_LOSS = "results/simulate-scaling/loss2"
BY_RATE = "results/simulate-scaling/rate"
FOLDERS = (BY_N, BY_N_LOSS, BY_RATE)
LTP, RELIABLE, PLOT, TCP = SCHEMES
LTP_FAMILY = (LTP, RELIABLE, PLOT)
KEYS = ["transport", "n_workers", "bottleneck_mbps", "seed", "loss", "delay_ms", "queue_pkts"]
CELL = ["bottleneck_mbps", "transport", "n_workers"]
NO_COVERAGE = "over the pooled pushes of the cell's runs; no coverage stated"
SIM_ARGS = PROJECT / "transports" / "native" / "sim" / "sim_args.c"


def pushes(f: Folder) -> pd.DataFrame:
    """One row per push (iteration) of the folder's ok runs, as the figures use them."""
    its = read_table(f.path / "iterations.csv")
    return its.merge(f.ok[KEYS], on=KEYS)


def cell_medians(f: Folder) -> pd.DataFrame:
    """Per cell (rate, scheme, N): the median over its runs of each run's median push (and
    iteration) time, the interval of those runs with its coverage
    (:func:`harness.reporting.stats.median_ci`: the runs are independent, their pushes are not),
    how many runs, and the bound."""
    runs = pushes(f).groupby(CELL + ["seed"], as_index=False)[["push_s", "iteration_s"]].median()
    med = medians(runs, CELL, "push_s")
    it = medians(runs, CELL, "iteration_s").rename(columns={"median": "iteration"})
    med = med.merge(it[CELL + ["iteration"]], on=CELL)
    med["bound"] = bound_s(med.n_workers, med.bottleneck_mbps)
    return med


def _sim_default_s(name: str) -> float | None:
    """A default of the simulator's command line in seconds, ``rto_min_us`` (the TCP model's
    least retransmission timeout) or ``skew_us`` (how late a worker may start after the
    release), read from ``sim_args.c``; None if it cannot be read."""
    try:
        m = re.search(rf"\b{name}\s*=\s*(\d+)\s*;", SIM_ARGS.read_text())
    except OSError:
        return None
    return int(m.group(1)) / 1e6 if m else None


def loss_text(runs: pd.DataFrame) -> str:
    texts = []
    for text in sorted(runs.loss.unique()):
        model = parse_loss(text)
        texts.append("no random loss" if isinstance(model, Uniform) and model.loss_pct == 0
                     else (f"{model.loss_pct:g} % uniform loss at every host"
                           if isinstance(model, Uniform) else f"loss `{text}`"))
    return ", ".join(texts)


def _loss_flag(text: str) -> str:
    model = parse_loss(text)
    if isinstance(model, Uniform):
        return "" if model.loss_pct == 0 else f" --loss {model.loss_pct:g}"
    return f" --loss {text}"


def _join(values) -> str:
    """``8,32,128`` (as a command line takes them)."""
    return ",".join(f"{v:g}" for v in sorted(values))


def _list(values) -> str:
    """``10,000`` or ``1, 2`` (as a sentence reads them)."""
    return ", ".join(f"{v:,g}" for v in sorted(values))


def command(f: Folder) -> str:
    """The ``invoke simulate`` command that fills the folder, from its runs' settings."""
    r = f.ok
    losses = sorted(r.loss.unique())
    loss = (_loss_flag(losses[0]) if len(losses) == 1 else
            " --loss " + ",".join(_loss_flag(t).removeprefix(" --loss ") or "0" for t in losses))
    seeds = sorted(r.seed.unique())
    return (f".venv/bin/invoke simulate --workers {_join(r.n_workers.unique())} --transports "
            f"{','.join(s for s in SCHEMES if s in set(r.transport))} --bandwidth "
            f"{_join(r.bottleneck_mbps.unique())} --queue {_join(r.queue_pkts.unique())} "
            f"--iterations {int(r.iterations.max())}{loss}"
            + (f" --seeds {_join(seeds)}" if seeds != [1] else "") + f" --out {f.rel}")


def _cell_runs(r: pd.DataFrame) -> str:
    """``3 runs a cell (seeds 1, 2, 3)``: the most runs a cell of ``r`` has, and their seeds."""
    n = int(r.groupby(["transport", "n_workers", "bottleneck_mbps"]).size().max())
    return (("one run a cell" if n == 1 else f"{n} runs a cell")
            + f" (seed{'s' if r.seed.nunique() > 1 else ''} {_list(r.seed.unique())})")


def _setting(f: Folder) -> str:
    r = f.ok
    return (f"{', '.join(sorted(r.scenario.unique()))} scenario (synchronized pushes), host "
            f"`{', '.join(sorted(r.host.unique()))}`, {_list(r.queue_pkts.unique())}-packet "
            f"queue, {loss_text(r)}, {int(r.iterations.max())} pushes a run, {_cell_runs(r)}")


def _fmt(row) -> str:
    return f"{row['median']:.4f} [{row['lo']:.4f}, {row['hi']:.4f}]"


def _bracket_text(med: pd.DataFrame) -> str:
    """What the cells and brackets are, by the number of runs a cell has."""
    ns = sorted(int(n) for n in med.n.unique())
    covs = sorted({stats.level_text(c) for c, n in zip(med.coverage, med.n) if n > 1})
    return (f"Each cell: the median over its {'-'.join(map(str, ns))} runs (seeds) of each "
            "run's median push time, in seconds; brackets: the interval of those runs"
            + (f", coverage {', '.join(covs)} (distribution-free, over independent runs)"
               if covs else ", none stated (one run)") + ".")


def table(f: Folder, axis: str) -> list[str]:
    """Push time per cell against ``axis`` (``n_workers`` or ``bottleneck_mbps``)."""
    med = cell_medians(f)
    schemes = [s for s in SCHEMES if s in set(med.transport)]
    head = "N" if axis == "n_workers" else "Mbit/s"
    lines = [f"| {head} | bound (s) | " + " | ".join(f"`{s}`" for s in schemes) + " |",
             "|---|---|" + "---|" * len(schemes)]
    for x, g in med.groupby(axis):
        g = g.set_index("transport")
        lines.append(f"| {x:,g} | {g.bound.iloc[0]:.4f} | "
                     + " | ".join(_fmt(g.loc[s]) if s in g.index else "-" for s in schemes)
                     + " |")
    return lines + ["", _bracket_text(med)]


def _ratios(med: pd.DataFrame, num: str, den: str | None, axis: str, spec: str = ".2f") -> str:
    """``0.96x at 8, 12.2x at 32, ...``: the median of ``num`` over that of ``den`` (or over the
    bound when ``den`` is None) at each value of ``axis``."""
    parts = []
    for x, g in med.groupby(axis):
        g = g.set_index("transport")
        if num not in g.index or (den is not None and den not in g.index):
            continue
        bottom = g.bound.iloc[0] if den is None else g.loc[den, "median"]
        parts.append(f"{g.loc[num, 'median'] / bottom:{spec}}x at {x:,g}")
    return ", ".join(parts)


def _order(med: pd.DataFrame, a: str, b: str, axis: str, unit: str, what: str) -> str:
    """Which of the two has the lower median at each value of ``axis`` (``what`` names it, ``unit``
    follows its values), and where that changes (single-run medians: an ordering, not a
    verdict)."""
    seq = []
    for x, g in med.groupby(axis):
        g = g.set_index("transport")
        if a in g.index and b in g.index:
            seq.append((x, a if g.loc[a, "median"] < g.loc[b, "median"] else b))
    if not seq:
        return "not both run"
    changes = [f"between {seq[k - 1][0]:,g} and {seq[k][0]:,g} {unit}"
               for k in range(1, len(seq)) if seq[k][1] != seq[k - 1][1]]
    if not changes:
        return f"`{seq[0][1]}`'s median is the lower at every {what} here"
    return ("the lower median changes side " + " and ".join(changes)
            + f" (`{seq[0][1]}` lower at {seq[0][0]:,g}, `{seq[-1][1]}` at {seq[-1][0]:,g})")


def _separated(f: Folder, a: str, b: str) -> str:
    """Where :func:`harness.simulation.figures.crossovers` finds the two schemes' push intervals
    apart (recomputed from iterations.csv: what crossovers.csv holds)."""
    cross = crossovers(pushes(f))
    row = cross[((cross.a == a) & (cross.b == b)) | ((cross.a == b) & (cross.b == a))]
    apart, together = [], []
    for rate, r in row.groupby("bottleneck_mbps"):
        for item in str(r.faster_by_n.iloc[0]).split(";"):
            n, who = item.split(":")
            where = f"N = {n}" if row.bottleneck_mbps.nunique() == 1 else f"{rate:,g} Mbit/s"
            (together if who == "noise" else apart).append(
                where if who == "noise" else f"{where} (`{who}` lower)")
    return (f"the pushes' intervals lie apart at {', '.join(apart) or 'no point'} and overlap at "
            f"{', '.join(together) or 'no point'} ({NO_COVERAGE})")


def _timeouts(folders: list[tuple[str, Folder]]) -> str:
    """How many of the TCP model's pushes, per N, took longer than its least RTO."""
    rto = _sim_default_s("rto_min_us")
    if rto is None:
        return ""
    said = []
    for label, f in folders:
        its = pushes(f)
        tcp = its[its.transport == TCP]
        parts = [f"{int((g.push_s > rto).sum())} of {len(g)} at {n:,}"
                 for n, g in tcp.groupby("n_workers")]
        if parts:
            said.append(f"{label}, {', '.join(parts)} workers")
    return (f"`{TCP}` pushes longer than the model's least RTO ({1000 * rto:g} ms, the "
            "simulator's `--rto-min-us` default), which at these sub-millisecond round trips "
            f"only a retransmission timeout takes: {'; '.join(said)}. ")


def _runs_at(f: Folder, scheme: str) -> pd.DataFrame:
    return f.ok[f.ok.transport == scheme]


def by_n_text(ctx: Context) -> list[str]:
    """Push time against N, without and with loss."""
    lines = []
    for rel in (BY_N, BY_N_LOSS):
        f = ctx.folder(rel)
        lines += [f"**Against N**, {_list(f.ok.bottleneck_mbps.unique())} Mbit/s links, "
                  f"{_setting(f)} (`{rel}/`):", "", *table(f, "n_workers"), ""]
    f, fl = ctx.folder(BY_N), ctx.folder(BY_N_LOSS)
    med, medl = cell_medians(f), cell_medians(fl)
    frac = pd.concat([_runs_at(x, LTP) for x in (f, fl)]).mean_recv_frac
    plot_frac = pd.concat([_runs_at(x, PLOT) for x in (f, fl)]).mean_recv_frac
    lines += ["Cells' medians compared (ratios of medians, no verdict):", "",
              f"- **`{LTP}`'s push over its bound** (every worker's frames through the link): "
              f"{_ratios(med, LTP, None, 'n_workers')} workers without loss; "
              f"{_ratios(medl, LTP, None, 'n_workers')} with it.",
              f"- **`{LTP}` against `{RELIABLE}`** (median over median): "
              f"{_ratios(med, LTP, RELIABLE, 'n_workers', '.3f')} without loss; "
              f"{_ratios(medl, LTP, RELIABLE, 'n_workers', '.3f')} with it. Without loss "
              f"{_separated(f, LTP, RELIABLE)}; with it {_separated(fl, LTP, RELIABLE)}. "
              f"`{LTP}`'s early closes leave out the last part of a gradient (a run's mean "
              f"received fraction {span(frac, '.3f')}) but do not shorten the "
              "incast, whose time is the queue's.",
              f"- **`{PLOT}` against `{LTP}`**: {_ratios(med, PLOT, LTP, 'n_workers', '.3f')} "
              f"without loss; {_ratios(medl, PLOT, LTP, 'n_workers', '.3f')} with it; `{PLOT}` "
              f"closes its layers at their bounds (a run's mean received fraction "
              f"{span(plot_frac, '.3f')}).",
              f"- **`{TCP}` against `{LTP}` in N** ({_list(f.ok.bottleneck_mbps.unique())} "
              f"Mbit/s): {withdrawn()}{_ratios(med, TCP, LTP, 'n_workers')} without loss, "
              f"{_order(med, LTP, TCP, 'n_workers', 'workers', 'N')}; with loss "
              f"{_ratios(medl, TCP, LTP, 'n_workers')}, "
              f"{_order(medl, LTP, TCP, 'n_workers', 'workers', 'N')}. "
              + _timeouts([("without loss", f), ("with loss", fl)])
              + "This is the incast collapse of a least RTO far above the round trip, in the "
              "model: how close the model comes to Linux on the testbed is measured in "
              "docs/simulation.md (\"The TCP reference\"), and the change of side is a "
              "finding only once the model meets its targets there.",
              f"- **Iteration time** (broadcast and push) over push time, median over median: "
              + "; ".join(f"`{s}` {span(g.iteration / g['median'])}x"
                          for s, g in med.groupby("transport") if s in LTP_FAMILY)
              + " without loss (2x would mean the serial broadcast takes as long as the "
              "incast)."]
    return lines


def by_rate_text(ctx: Context) -> list[str]:
    """Push time against the link rate at one N."""
    f = ctx.folder(BY_RATE)
    med = cell_medians(f)
    n = _list(f.ok.n_workers.unique())
    lines = [f"**Against the link rate**, {n} workers, {_setting(f)} (`{BY_RATE}/`):", "",
             *table(f, "bottleneck_mbps"), "", "Cells' medians compared (no verdict):", ""]
    ltp, plot = (_runs_at(f, x).groupby("bottleneck_mbps").agg(
        max_wait_closes=("max_wait_closes", "sum"), pushes=("pushes", "sum"),
        mean_recv_frac=("mean_recv_frac", "mean")) for x in (LTP, PLOT))
    waited = [r for r in ltp.index if ltp.loc[r, "max_wait_closes"] >= ltp.loc[r, "pushes"]]
    for rate in waited:
        g = med[med.bottleneck_mbps == rate].set_index("transport")
        lines.append(
            f"- **At {rate:,g} Mbit/s** the incast outlasts LTP's `max_wait_ms`: every `{LTP}` "
            f"gradient closed by max-wait ({int(ltp.loc[rate, 'max_wait_closes'])} of "
            f"{int(ltp.loc[rate, 'pushes'])}), at a mean received fraction of "
            f"{ltp.loc[rate, 'mean_recv_frac']:.3f}"
            + (f" (`{PLOT}`: {int(plot.loc[rate, 'max_wait_closes'])} of "
               f"{int(plot.loc[rate, 'pushes'])}, {plot.loc[rate, 'mean_recv_frac']:.3f})"
               if rate in plot.index else "")
            + f", so its push is {g.loc[LTP, 'median'] / g.bound.iloc[0]:.2f}x the bound; "
            f"`{RELIABLE}` is at {g.loc[RELIABLE, 'median'] / g.bound.iloc[0]:.2f}x and "
            f"`{TCP}` at {g.loc[TCP, 'median'] / g.bound.iloc[0]:.2f}x (model output: "
            f"{'validated' if not withdrawn() else 'not validated'}).")
    lines += [f"- **`{TCP}` against `{LTP}`** in the rate: {withdrawn()}"
              f"{_ratios(med, TCP, LTP, 'bottleneck_mbps', '.2f')} Mbit/s; "
              f"{_order(med, LTP, TCP, 'bottleneck_mbps', 'Mbit/s', 'rate')}. "
              f"Against `{RELIABLE}`: "
              f"{_ratios(med, TCP, RELIABLE, 'bottleneck_mbps', '.2f')}; "
              f"{_order(med, RELIABLE, TCP, 'bottleneck_mbps', 'Mbit/s', 'rate')}; "
              f"{_separated(f, RELIABLE, TCP)}.",
              f"- **`{LTP}`'s push over its bound** in the rate: "
              f"{_ratios(med, LTP, None, 'bottleneck_mbps')} Mbit/s. {_skew(med)}Runs made before "
              "the simulator's links kept fractions of a microsecond carried one frame per whole "
              "microsecond at most, which alone held a push above its bound at 1 Gbit/s and more "
              "(docs/simulation.md, \"The model\"); such a folder is stale and must be rerun.",
              f"- **`{PLOT}` against `{LTP}`** in the rate: "
              f"{_ratios(med, PLOT, LTP, 'bottleneck_mbps', '.3f')} Mbit/s."]
    return lines


def _skew(med: pd.DataFrame) -> str:
    """The release skew against ``ltp``'s gap to the bound at the highest rate."""
    skew = _sim_default_s("skew_us")
    top = med[(med.bottleneck_mbps == med.bottleneck_mbps.max()) & (med.transport == LTP)]
    if skew is None or top.empty:
        return ""
    gap = float(top["median"].iloc[0] - top.bound.iloc[0])
    return (f"At {top.bottleneck_mbps.iloc[0]:,g} Mbit/s the push is {1000 * gap:.1f} ms above "
            f"its bound; the release skew (a worker starts up to the simulator's `skew_us`, "
            f"{1000 * skew:g} ms, after the release) can account for at most {1000 * skew:g} ms "
            "of it. ")


def cite_lines(ctx: Context, rels) -> list[str]:
    """Where the numbers come from, whether stale, and the commands (the manifests of these
    folders record none, so they are rebuilt from the runs' settings)."""
    out = []
    for rel in rels:
        f = ctx.folder(rel)
        out.append(f"- {f.cite()}: {f.status()}\n  - `{command(f)}`")
    return out


def scaling_text(ctx: Context) -> list[str]:
    """The findings section's body: the commands, the caveat, then against N and the rate."""
    return ["Commands that fill these folders (rebuilt from their runs' settings; the "
            "simulator's manifests record none):", "",
            *[f"- `{command(ctx.folder(rel))}`" for rel in FOLDERS], "",
            f"**Statistical caveat.** {_runs_text(ctx)} of a few pushes each. A cell's median "
            "is over its runs (each run's median push) and its bracket is the interval of those "
            "runs with the coverage it states; no comparison here is a verdict, and none is "
            "counted: the text gives ratios and orderings of the cells' medians.", "",
            *by_n_text(ctx), "", *by_rate_text(ctx)]


def _runs_text(ctx: Context) -> str:
    """``These folders hold 3 runs a cell (seeds 1, 2, 3)``, per folder when they differ."""
    said = {}
    for rel in FOLDERS:
        said.setdefault(_cell_runs(ctx.folder(rel).ok), []).append(f"`{rel}/`")
    if len(said) == 1:
        return f"These folders hold {next(iter(said))}"
    return "These folders hold " + "; ".join(f"{k} in {', '.join(v)}" for k, v in said.items())


def _block(ctx: Context, rels, body) -> str:
    return "\n".join([*cite_lines(ctx, rels), "", *body(ctx)])


def n_block(ctx: Context) -> str:
    """docs/simulation.md: push time against N, without and with loss."""
    return _block(ctx, (BY_N, BY_N_LOSS), by_n_text)


def rate_block(ctx: Context) -> str:
    """docs/simulation.md: push time against the link rate."""
    return _block(ctx, (BY_RATE,), by_rate_text)


def cost_block(ctx: Context) -> str:
    """docs/simulation.md: the simulator's own cost in the scaling runs (``runs.csv``)."""
    f = ctx.folder(BY_N)
    r = (_runs_at(f, LTP).assign(per=lambda d: d.wall_s / d.iterations)
         .groupby("n_workers", as_index=False)
         .agg(per=("per", "median"), events_per_s=("events_per_s", "median"),
              peak_rss_mb=("peak_rss_mb", "max"),
              ps_core_us_per_datagram=("ps_core_us_per_datagram", "median")))
    lines = [f"From {f.cite()}: {f.status()}", "",
             f"`{LTP}`, {_setting(f)}, {_list(f.ok.bottleneck_mbps.unique())} Mbit/s links, on "
             "this machine shared with other work (so wall times are upper bounds). The PS's "
             "core time per datagram caps what one PS thread can take:", "",
             "| N | wall time per iteration | events/s | peak memory | PS core time per "
             "datagram | one PS thread's ceiling |", "|---|---|---|---|---|---|"]
    for _, row in r.iterrows():
        us = row.ps_core_us_per_datagram
        lines.append(f"| {int(row.n_workers):,} | {row.per:.2f} s | "
                     f"{row.events_per_s:,.0f} | {row.peak_rss_mb:.0f} MB | {us:.2f} µs | "
                     f"{1e6 / us:,.0f} datagrams/s |")
    return "\n".join(lines + ["", _largest(f)])


def _largest(f: Folder) -> str:
    """The wall time of an iteration at the folder's largest N, cheapest and dearest scheme."""
    per = f.ok.assign(per=f.ok.wall_s / f.ok.iterations)
    top = per[per.n_workers == per.n_workers.max()].sort_values("per")
    low, high = top.iloc[0], top.iloc[-1]
    return (f"At {int(low.n_workers):,} workers, the largest N of these runs, an iteration took "
            f"{low.per:.0f} s of wall time (`{low.transport}`) to {high.per:.0f} s "
            f"(`{high.transport}`).")


def readme_block(ctx: Context) -> str:
    """README: the simulator's wall time at the largest N of the scaling runs (``runs.csv``)."""
    f = ctx.folder(BY_N)
    return (f"{_largest(f)} The PS core's time per datagram against N: docs/simulation.md. From "
            f"{f.cite()}: {f.status()}")


BLOCKS = {"simulate-n": n_block, "simulate-rate": rate_block, "simulate-cost": cost_block,
          "simulate-readme": readme_block}
SECTIONS = [Section("simulation", "At hundreds of workers (simulated): how do push times grow "
                                  "with N and the link rate, and where does TCP fall behind?",
                    FOLDERS, scaling_text)]
