"""LTP against TCP on loopback: goodput and CPU per byte of one worker pushing to the PS over
127.0.0.1 (``invoke bench-transport --loopback-only``, :mod:`harness.bench.kind`), the block
``ltp-loopback`` of docs/ltp-protocol.md §6 and the findings section ``loopback``.

Each run is one scheme's pushes of one size in one repetition; every scheme ran once per
repetition, in rotated order, so a scheme is compared with ``tcp-cubic`` repetition by repetition
(:func:`harness.reporting.stats.compare`, the repetition in the place of a seed). Issue 28 set two
targets at 4 MB: ``ltp``'s goodput at least TCP CUBIC's, its CPU per byte at most 1.5 times TCP's.
A target is judged by :func:`harness.reporting.stats.judge` on the paired ratio: met when the
ratio's interval lies on the target's side, missed when it lies on the other, undecided when it
holds the target.
"""

from __future__ import annotations

import pandas as pd

from harness.reporting import stats
from harness.reporting.publish.claims import Section
from harness.reporting.publish.context import Context

FOLDER = "results/loopback"
REFERENCE = "tcp-cubic"
TARGET_BYTES = 4 * 1024 * 1024
GOODPUT_TARGET = 1.0     # issue 28: ltp's goodput at least TCP's ...
CPU_TARGET = 1.5         # ... at most 1.5 times TCP's CPU per byte


def _by_repeat(runs: pd.DataFrame, column: str) -> pd.Series:
    """``runs[column]`` indexed by repetition (what :mod:`harness.reporting.stats` pairs on)."""
    return pd.Series(runs[column].to_numpy(dtype=float), index=runs["repeat"].to_numpy())


def ratio(runs: pd.DataFrame, scheme: str, size: int, column: str) -> stats.Estimate:
    """``scheme``'s ``column`` over :data:`REFERENCE`'s at ``size``, paired by repetition."""
    cell = runs[runs.bytes == size]
    return stats.paired(_by_repeat(cell[cell.transport == scheme], column),
                        _by_repeat(cell[cell.transport == REFERENCE], column))


def table(runs: pd.DataFrame) -> tuple[list[str], list[stats.Estimate]]:
    """A row per size and scheme: goodput, CPU per GB, and both over TCP's; the estimates shown."""
    lines = ["| bytes | scheme | runs | Gbit/s | CPU s/GB | goodput x `tcp-cubic` | "
             "CPU x `tcp-cubic` |", "|---|---|---|---|---|---|---|"]
    shown = []
    for size in sorted(runs.bytes.unique()):
        cell = runs[runs.bytes == size]
        for scheme in sorted(cell.transport.unique(), key=lambda s: (s == REFERENCE, s)):
            mine = cell[cell.transport == scheme]
            good, cpu = stats.median_ci(mine.goodput_gbps), stats.median_ci(mine.cpu_s_per_gb)
            ratios = ("-", "-")
            if scheme != REFERENCE and REFERENCE in set(cell.transport):
                g, c = (ratio(runs, scheme, size, col) for col in ("goodput_gbps", "cpu_s_per_gb"))
                ratios = (g.fmt(".2f", "x"), c.fmt(".2f", "x"))
                shown += [g, c]
            shown += [good, cpu]
            lines.append(f"| {size:,} | `{scheme}` | {len(mine)} | {good.fmt('.2f')} | "
                         f"{cpu.fmt('.3f')} | {ratios[0]} | {ratios[1]} |")
    return lines, shown


def targets(runs: pd.DataFrame) -> list[str]:
    """Issue 28's two targets for ``ltp`` at 4 MB, each judged on its paired ratio."""
    if not {"ltp", REFERENCE} <= set(runs[runs.bytes == TARGET_BYTES].transport):
        return [f"`ltp` and `{REFERENCE}` were not both measured at {TARGET_BYTES:,} bytes: the "
                "targets are not judged."]
    out = []
    for column, target, want, what in (
            ("goodput_gbps", GOODPUT_TARGET, 1, f"goodput at least {GOODPUT_TARGET:g}x TCP's"),
            ("cpu_s_per_gb", CPU_TARGET, -1, f"CPU per byte at most {CPU_TARGET:g}x TCP's")):
        est = ratio(runs, "ltp", TARGET_BYTES, column)
        sign = stats.judge(est, target)
        verdict = ("not judged (too few repetitions)" if sign is None else
                   "met" if sign == want else "missed" if sign == -want else
                   "undecided (the interval holds the target)")
        out.append(f"- `ltp` at {TARGET_BYTES:,} bytes, {what}: {est.fmt('.2f', 'x')} "
                   f"({est.label}, paired by repetition): **{verdict}**.")
    return out


def body(ctx: Context) -> list[str]:
    """The table, the legend and the targets."""
    runs = ctx.folder(FOLDER).ok
    lines, shown = table(runs)
    return [f"One worker pushes to the PS over 127.0.0.1 in one process, "
            f"{int(runs.pushes.max())} pushes a run; a run's goodput is the message over its "
            "median push, its CPU the process's (both ends, user + system) per 10^9 bytes pushed; "
            "every scheme ran once per repetition, in rotated order, and the ratios are to "
            f"`{REFERENCE}`'s in the same repetition:", "", *lines, "",
            stats.intervals_legend(shown)
            + " Here a run is a repetition, and the machine's load moves both figures from "
            "minute to minute.", "", "Issue 28's targets (a target is met when the paired "
            "ratio's interval lies on its side, missed when it lies on the other):", "",
            *targets(runs)]


def block(ctx: Context) -> str:
    """docs/ltp-protocol.md §6: the loopback benchmark's committed folder."""
    f = ctx.folder(FOLDER)
    return "\n".join([f"- {f.cite()}: {f.status()}",
                      *(f"  - `{cmd}`" for cmd in f.commands()), "", *body(ctx)])


BLOCKS = {"ltp-loopback": block}
SECTIONS = [Section("loopback", "Is LTP as fast as TCP on loopback, at no more CPU per byte?",
                    (FOLDER,), body)]
