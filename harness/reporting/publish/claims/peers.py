"""Findings: peer-to-peer training. Which receivers each peer should send its parameters to, how
the copies should be made (by the switches or by the sender), over which transport, and under
which synchronisation.

``results/p2p/`` is the ``p2p`` preset: peers on a leaf-spine fabric, some on slow access links,
each sending its parameters every round to at least ``p`` others chosen by a policy (at random,
or by the SDN controller from its view of the links), the copies made by the switches' groups or
as unicast copies, over the UDP multicast transport or TCP, under BSP or SSP. Every comparison is
:func:`harness.reporting.stats.compare`, paired by seed.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness.p2p import report as p2p_report
from harness.reporting import stats
from harness.reporting.publish.claims import Section
from harness.reporting.publish.context import Context, Folder

P2P = "results/p2p"
RANDOM = "random-p"
VIEW = "selmcast-p"      # exactly p receivers, chosen from the controller's view
PUBLISHED = "selmcast"   # the highest rate serving p, then every receiver it serves
GROWN = "most-per-second"   # at least p, the most receivers per second (the earlier rule)
ALL = "broadcast"
POLICIES = (RANDOM, VIEW, PUBLISHED, GROWN, ALL)
WHAT = {RANDOM: "exactly p, at random", VIEW: "exactly p, from the controller's view",
        PUBLISHED: "the highest rate that serves p, then everyone it serves (as published)",
        GROWN: "at least p, the most per second (the project's earlier rule)",
        ALL: "every other peer"}
BSP, SSP = "bsp", "ssp:2"


def _runs(f: Folder) -> pd.DataFrame:
    """The ok runs, trunk bytes in MB (as the peer-to-peer report shows them)."""
    ok, _ = p2p_report.load(f.path)
    return ok


def _cell(d: pd.DataFrame, policy: str, copy: str = "switch", scheme: str = "mcast",
          sync: str = BSP) -> pd.DataFrame:
    return d[(d.policy == policy) & (d["copy"] == copy) & (d.scheme == scheme) & (d.sync == sync)]


def _series(cell: pd.DataFrame, column: str) -> pd.Series:
    """``column`` by seed; a run that never reached the target is infinitely late."""
    values = cell[column].astype(float)
    if column == "tta_s":
        values = values.fillna(np.inf)
    return pd.Series(values.to_numpy(), index=cell.seed.to_numpy())


def _est(cell: pd.DataFrame, column: str) -> stats.Estimate:
    if column == "tta_s":
        return stats.censored_median_ci(cell.tta_s.fillna(0.0), cell.tta_s.notna())
    return stats.median_ci(cell[column])


def _vs(d: pd.DataFrame, column: str, a: tuple[str, dict], b: tuple[str, dict],
        spec: str = ".3f", unit: str = "") -> stats.Verdict:
    """Cell ``a`` against cell ``b`` on ``column`` (lower is better but for the achieved p and
    the accuracy), each given as (name, selection of :func:`_cell`)."""
    higher = column in ("avg_p", "final_accuracy")
    return stats.compare(a[0], _series(_cell(d, **a[1]), column), b[0],
                         _series(_cell(d, **b[1]), column), higher, spec, unit)


def _sel(name: str, policy: str, copy: str = "switch", scheme: str = "mcast",
         sync: str = BSP) -> tuple[str, dict]:
    """(name, selection): a cell as :func:`_vs` takes it."""
    return name, {"policy": policy, "copy": copy, "scheme": scheme, "sync": sync}


def _lead(v: stats.Verdict, better: str, noise: str, worse: str) -> str:
    """The phrase the verdict's sign picks."""
    return {1: better, 0: noise, -1: worse, None: "not compared (too few runs)"}[v.sign]


def _setting(d: pd.DataFrame) -> str:
    first = d.iloc[0]
    return (f"{int(first.n_workers)} peers on a leaf-spine fabric, {int(first.n_slow)} of them "
            f"on access links at {first.slow_frac:g} of {first.access_mbps:g} Mbit/s, uplinks "
            f"at {first.uplink_mbps:g} Mbit/s, no background traffic, "
            f"{', '.join(f'{x:g}' for x in sorted(d.loss_pct.unique()))} % random loss; every "
            f"peer sends its parameters each round to at least p = {int(first.p)} others and "
            f"averages what it receives, {int(first.rounds)} rounds a run; time to "
            f"{d.target_accuracy.median():g} accuracy of the mean peer")


def _policy_table(d: pd.DataFrame) -> tuple[list[str], list[stats.Estimate]]:
    """The policies with switch copies under BSP."""
    target = f"{d.target_accuracy.median():g}"
    lines = ["| policy (switch copies, BSP) | receivers | sync time per round, s | achieved p "
             f"| leaf-spine MB per round | time to {target}, s |", "|---|---|---|---|---|---|"]
    shown = []
    for policy in POLICIES:
        cell = _cell(d, policy)
        if cell.empty:
            continue
        ests = [_est(cell, c) for c in ("sync_s", "avg_p", "trunk_bytes_per_round", "tta_s")]
        shown += ests
        fmts = (".3f", ".2f", ".2f", ".1f")
        lines.append(f"| `{policy}` | {WHAT[policy]} | "
                     + " | ".join(e.fmt(s) for e, s in zip(ests, fmts)) + " |")
    return lines, shown


def p2p_text(ctx: Context) -> list[str]:
    """The policies, the copies, the transports and the synchronisation, from ``results/p2p``."""
    f = ctx.folder(P2P)
    d = _runs(f)
    table, shown = _policy_table(d)
    lines = [f"{_setting(d)}.", "", *table, "", stats.intervals_legend(shown)]
    delivered = bool(np.isclose(d.delivered_p, d.avg_p).all())
    lines += ["", ("Every receiver closed every message in every run (`delivered_p` equals "
                   "`avg_p`)." if delivered else
                   "Some receivers did not close every message (`delivered_p` below `avg_p` in "
                   f"{int((~np.isclose(d.delivered_p, d.avg_p)).sum())} runs)."), ""]
    rnd, view, published, grown = (_sel(f"`{p}`", p) for p in (RANDOM, VIEW, PUBLISHED, GROWN))
    target = f"{d.target_accuracy.median():g}"

    sync_view = _vs(d, "sync_s", view, rnd, unit=" s")
    tta_view = _vs(d, "tta_s", view, rnd, ".1f", " s")
    lines.append("- **Choosing by the view**, with the same p and switch copies under BSP: "
                 + _lead(tta_view, "the controller's choice reaches the target sooner",
                         "the time to the target is within noise of a random choice",
                         "the controller's choice reaches the target later")
                 + f". Synchronisation per round: {sync_view.sentence} Time to {target}: "
                 f"{tta_view.sentence} The view lets the slow peers sit out until they have "
                 "received from nobody for `max_wait_rounds` rounds "
                 "(`topologies/controller/selmcast.py`).")

    for rule, (policy, how) in ((published, (PUBLISHED, "the published rule: the highest rate "
                                 "that serves p, then every peer that rate serves; the senders "
                                 "of a round planned jointly")),
                                (grown, (GROWN, "the project's earlier rule: the most "
                                 "receivers per second within random-p's expected time"))):
        if _cell(d, policy).empty:
            continue
        p_grown = _vs(d, "avg_p", rule, rnd, ".2f")
        sync_grown = _vs(d, "sync_s", rule, rnd, unit=" s")
        tta_grown = _vs(d, "tta_s", rule, rnd, ".1f", " s")
        lines.append(f"- **Growing p by `{policy}`** ({how}). Achieved p: "
                     f"{p_grown.sentence} Synchronisation per round: {sync_grown.sentence} Time "
                     f"to {target}: {tta_grown.sentence} So, of the paper's \"larger p, "
                     "sooner\": " + _sooner(tta_view, tta_grown) + ".")

    for policy in (PUBLISHED, RANDOM):
        switch = _sel("switch copying", policy)
        unicast = _sel("sender copying", policy, copy="unicast")
        mb = _vs(d, "trunk_bytes_per_round", switch, unicast, ".2f", " MB")
        sync = _vs(d, "sync_s", switch, unicast, unit=" s")
        lines.append(f"- **Switch copies against unicast copies**, `{policy}`'s choices, UDP, "
                     f"BSP: leaf-spine MB per round: {mb.sentence} Synchronisation per round: "
                     f"{sync.sentence}")
    for policy in (PUBLISHED, RANDOM):
        udp = _sel("UDP", policy, copy="unicast")
        tcp = _sel("TCP", policy, copy="unicast", scheme="tcp")
        sync = _vs(d, "sync_s", udp, tcp, unit=" s")
        lines.append(f"- **UDP copies against TCP copies**, `{policy}`, unicast copies, BSP: "
                     f"synchronisation per round: {sync.sentence}")
    for policy in (RANDOM, PUBLISHED):
        bsp, ssp = _sel("BSP", policy), _sel(SSP.upper(), policy, sync=SSP)
        sync = _vs(d, "sync_s", ssp, bsp, unit=" s")
        lines.append(f"- **SSP against BSP**, `{policy}`, switch copies, UDP: synchronisation "
                     f"per round: {sync.sentence}")
    lines.append("  Under SSP each sender is planned alone, when it asks, with its own group "
                 "install, instead of every sender on one view per round; `selmcast` counts the "
                 "transfers still in flight as load.")

    cells = {f"`{m}` {s.upper()}": stats.by_seed(g, "final_accuracy")
             for (m, s), g in d.groupby(["method", "sync"], sort=True)}
    meds = [stats.median_ci(v).value for v in cells.values()]
    _, sentence = stats.best(cells)
    lines += ["", f"Final accuracy of the averaged model after {int(d.rounds.median())} rounds, "
                  f"medians across the {len(cells)} cells {min(meds):.3f}-{max(meds):.3f}; the "
                  f"highest compared with every other cell: {sentence}"]
    return lines


def _sooner(choice: stats.Verdict, growth: stats.Verdict) -> str:
    """Where the paper's "larger p, sooner" comes from here, by the two verdicts."""
    said = {1: "sooner", 0: "within noise", -1: "later", None: "not compared"}
    return (f"choosing by the view at the same p: {said[choice.sign]}; growing p on the view, "
            f"against random-p: {said[growth.sign]}")


def p2p_block(ctx: Context) -> str:
    """docs/p2p.md: the measured section, with where its numbers come from."""
    f = ctx.folder(P2P)
    with stats.tally() as tally:
        body = p2p_text(ctx)
    return "\n".join([f"From {f.cite()}: {f.status()}", "", *body, "", tally.sentence("passage")])


def p2p_command(ctx: Context) -> str:
    """docs/p2p.md: what the ``p2p`` preset ran, from its table (runs, cells, seeds, rounds)."""
    f = ctx.folder(P2P)
    d = f.ok
    cells = d.groupby(["method", "sync"]).ngroups
    return (f"The `p2p` preset's last full run filled {f.cite()}: {cells} cells, "
            f"{int(d.rounds.median())} rounds a run; the runs' own times add up to "
            f"{f.runs.wall_s.sum() / 60:.0f} min, {d.wall_s.median() / 60:.1f} min a run "
            f"(median; {d.wall_s.min() / 60:.1f}-{d.wall_s.max() / 60:.1f} min).")


BLOCKS = {"p2p": p2p_block, "p2p-preset": p2p_command}
SECTIONS = [Section("p2p", "Peer-to-peer training: which receivers, which copies, which "
                           "synchronisation?", (P2P,), p2p_text)]
