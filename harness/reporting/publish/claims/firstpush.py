"""The first push of a run at data-centre rates, in the simulator (docs/simulation.md, "The first
push"): each run's first push against its later ones, over the bound.

A worker's first push is the only one it starts without an RTT sample from its own DATA: it has
the join's (docs/ltp-protocol.md §9) or, without one, ``initial_rtt_us``. The folder runs ``ltp``
at 64 workers at 10 and 100 Gbit/s, with and without loss, several seeds of three pushes. Per cell
the block gives the first push over its bound and the later pushes over it (each run's median),
as the median over the runs and the lowest and highest run (a range over seeds, not an interval),
and how many runs went above the scaling target (1.15x the bound, issue 28). It compares nothing
and names no winner.
"""

from __future__ import annotations

import pandas as pd

from harness.reporting.publish.claims.simulation import KEYS, cite_lines, loss_text, pushes
from harness.reporting.publish.context import Context, Folder
from harness.simulation.figures import bound_s

FOLDER = "results/simulate-scaling/first-push"
FOLDERS = (FOLDER,)
TARGET = 1.15          # issue 28: a push within 1.15x of its bound
CELL = ["bottleneck_mbps", "loss"]


def over_bound(f: Folder) -> pd.DataFrame:
    """Per run: its first push and the median of its later pushes, each over the bound."""
    its = pushes(f)
    its = its.assign(over=its.push_s / bound_s(its.n_workers, its.bottleneck_mbps))
    first = its[its.iteration == 0].groupby(KEYS, as_index=False).over.first()
    later = its[its.iteration > 0].groupby(KEYS, as_index=False).over.median()
    return first.merge(later, on=KEYS, suffixes=("_first", "_later"))


def _cell(values: pd.Series) -> str:
    return f"{values.median():.2f}x [{values.min():.2f}, {values.max():.2f}]"


def rows(runs: pd.DataFrame) -> list[str]:
    """The table: a row per rate and loss, from :func:`over_bound`'s runs."""
    lines = ["| Mbit/s | loss | runs | first push / bound | later pushes / bound | runs above "
             f"{TARGET}x: first, later |", "|---|---|---|---|---|---|"]
    for (rate, loss), g in runs.groupby(CELL):
        lines.append(f"| {rate:,g} | {loss_text(g)} | {len(g)} | {_cell(g.over_first)} | "
                     f"{_cell(g.over_later)} | {int((g.over_first > TARGET).sum())}, "
                     f"{int((g.over_later > TARGET).sum())} |")
    return lines


def block(ctx: Context) -> str:
    """docs/simulation.md: the first push against the later ones."""
    f = ctx.folder(FOLDER)
    r, runs = f.ok, over_bound(f)
    return "\n".join([
        *cite_lines(ctx, FOLDERS), "",
        f"`{', '.join(sorted(r.transport.unique()))}`, {int(r.n_workers.max())} workers, "
        f"{int(r.iterations.max())} pushes a run, host `{', '.join(sorted(r.host.unique()))}`, "
        f"{', '.join(str(q) for q in sorted(r.queue_pkts.unique()))}-packet queue; seeds "
        f"{', '.join(str(s) for s in sorted(r.seed.unique()))}:", "",
        *rows(runs), "",
        "Each cell: the median over the runs and, in brackets, the lowest and the highest run (a "
        "range over seeds, not an interval); a run's later pushes count as their median. The "
        "bound is every worker's frames through the link.", "", above(runs)])


def above(runs: pd.DataFrame) -> str:
    """Which cells have a run above the target, first push or later (:func:`over_bound`'s runs)."""
    high = runs[(runs.over_first > TARGET) | (runs.over_later > TARGET)]
    if high.empty:
        return f"Every run's pushes, first and later, are within {TARGET}x of the bound."
    cells = [f"{rate:,g} Mbit/s with {loss_text(g)}" for (rate, _), g in high.groupby(CELL)]
    return (f"Runs above {TARGET}x of the bound, first push or later: {len(high)} of "
            f"{len(runs)}, at {'; '.join(cells)}.")


BLOCKS = {"simulate-first-push": block}
