"""The headline: the loss-tolerant transports against TCP under random loss, whether tolerating
loss itself pays, and whether a fresh default sweep agrees with the reference.

``results/reference/`` is the default sweep with ten seeds; ``results/tolerance/`` asks where
tolerating loss pays (edge round trips at 10 % loss); ``results/default-check/`` is a fresh
default sweep (three seeds) run at the reference's code, which tests the reference's intervals.
"""

from __future__ import annotations

import pandas as pd

from harness.reporting import stats
from harness.reporting.publish.claims import Readme, Section
from harness.reporting.publish.claims.common import (RELIABLE, STRONGEST_TCP, TOLERANT, name,
                                                     setting)
from harness.reporting.publish.context import Context, Folder
from harness.reporting.report import readme_table, seed_text
from harness.reporting.tables import BASELINE

REFERENCE = "results/reference"
TOLERANCE = "results/tolerance"
CHECK = "results/default-check"
# A second fresh default sweep, run hours after the first, right after the reference.
CHECK_2 = "results/default-check-2"
ONE_SWEEP = "results/reference-unblocked"


def _setting(f: Folder) -> str:
    """What every run of the folder shared (:func:`common.setting`)."""
    return setting(f.ok)


def _machine(f: Folder) -> str:
    runs = f.runs
    if "cpu_model" not in runs or runs.cpu_model.isna().all():
        return "machine not recorded"
    load = runs.other_load_frac.dropna()
    return (f"{runs.cpu_model.iloc[0]}, {int(runs.cpu_cores.iloc[0])} cores; other processes "
            f"used a median of {load.median():.1%} of the machine during a run "
            f"(at most {load.max():.1%})")


def _cell(f: Folder, scheme: str, loss: float, column: str = "iters_per_s") -> pd.Series:
    d = f.ok[(f.ok.scheme == scheme) & (f.ok.loss_pct == loss)]
    return stats.by_seed(d, column)


def against(f: Folder, scheme: str, other: str, loss: float) -> stats.Verdict:
    """``scheme``'s iterations/s against ``other``'s at ``loss``, paired by seed (by block in a
    blocked sweep)."""
    return f.sweep.compare(scheme, _cell(f, scheme, loss), other, _cell(f, other, loss))


def verdicts(f: Folder) -> dict[tuple[str, str, float], stats.Verdict]:
    """The headline's verdicts: every scheme against TCP CUBIC, LTP against the strongest TCP
    baseline, and LTP and PLOT against LTP reliable, at every loss rate."""
    out = {}
    losses = sorted(f.ok.loss_pct.unique())
    schemes = [s for s in f.sweep.order if s != BASELINE]
    for loss in losses:
        for s in schemes:
            out[(s, BASELINE, loss)] = against(f, s, BASELINE, loss)
        if STRONGEST_TCP in schemes:
            out[("ltp", STRONGEST_TCP, loss)] = against(f, "ltp", STRONGEST_TCP, loss)
        for s in TOLERANT:
            if s in schemes and RELIABLE in schemes:
                out[(s, RELIABLE, loss)] = against(f, s, RELIABLE, loss)
    return out


def _word(sign: int | None) -> str:
    return {1: "faster", -1: "slower", 0: "within noise", None: "not compared"}[sign]


def _group(f: Folder, found: dict, other: str, loss: float) -> str:
    """``faster: `ltp` 5.24x [4.93, 6.06], ...; within noise: ...`` at one loss rate."""
    parts = []
    for sign in (1, 0, -1):
        names = [f"{name(s)} {v.estimate.fmt('.2f', 'x')}" for (s, o, x), v in found.items()
                 if o == other and x == loss and v.sign == sign]
        if names:
            parts.append(f"{_word(sign)}: {', '.join(names)}")
    return "; ".join(parts) or f"no cell has {stats.MIN_RUNS} runs of both schemes to compare"


def headline(ctx: Context) -> str:
    """The README's results: the reference table, its provenance, and its verdicts."""
    f = ctx.folder(REFERENCE)
    with stats.tally() as tally:
        found = verdicts(f)
    losses = sorted(f.ok.loss_pct.unique())
    status = ("fresh at today's code" if f.fresh else f.freshness.text())
    block_of = f.sweep.block_of
    if block_of:
        n_blocks = len(set(block_of.values()))
        design = (f" It ran as {n_blocks} blocks of {len(block_of) // n_blocks} seeds, each "
                  "block the default sweep on a testbed of its own, one block after another: "
                  "runs of one testbed and hour resemble each other more than runs of another, "
                  "so the unit of every interval and verdict is the block.")
        per = "the median of each block's, then over the blocks"
    else:
        design, per = "", "the median over seeds"
    lines = [f"The reference sweep {f.cite()}, {status}: {len(f.sweep.order)} schemes at "
             f"{', '.join(f'{x:g}' for x in losses)} % random loss, {_setting(f)}; "
             f"{_machine(f)}.{design} The `{BASELINE}` row is its iterations/s; every other row "
             f"is the scheme's iterations/s over `{BASELINE}`'s with the same seed (a seed sets "
             f"the model's initialisation, the data order and the transports' randomness), {per}.",
             "", readme_table(f.sweep), "", f"Verdicts ({stats.RULE}):", ""]
    for loss in losses:
        lines.append(f"- {loss:g} % loss, against `{BASELINE}`: "
                     f"{_group(f, found, BASELINE, loss)}.")
    for loss in losses:
        key = ("ltp", STRONGEST_TCP, loss)
        if key in found:
            v = found[key]
            lines.append(f"- {loss:g} % loss, `ltp` against `{STRONGEST_TCP}` (the strongest TCP "
                         f"here): {_word(v.sign)}, {v.estimate.fmt('.2f', 'x')}.")
    lines += ["", tally.sentence("table")]
    return "\n".join(lines)


def tolerance_text(ctx: Context) -> list[str]:
    """Where tolerating loss pays: `ltp` and `plot` against `ltp-reliable` (the same transport
    repairing every packet), in the reference (no added delay) and at edge round trips."""
    ref, tol = ctx.folder(REFERENCE), ctx.folder(TOLERANCE)
    rows = []   # (where, scheme, verdict, filled fraction)
    for loss in sorted(ref.ok.loss_pct.unique()):
        for s in TOLERANT:
            filled = ref.ok[(ref.ok.scheme == s) & (ref.ok.loss_pct == loss)].filled_frac_mean
            rows.append((f"{loss:g} % loss, no added delay", s, against(ref, s, RELIABLE, loss),
                         filled.median()))
    for delay in sorted(tol.ok.delay_ms.unique()):
        d = tol.ok[tol.ok.delay_ms == delay]
        for loss in sorted(d.loss_pct.unique()):
            cell = d[d.loss_pct == loss]
            rel = stats.by_seed(cell[cell.scheme == RELIABLE], "iters_per_s")
            for s in TOLERANT:
                mine = cell[cell.scheme == s]
                v = tol.sweep.compare(s, stats.by_seed(mine, "iters_per_s"), RELIABLE, rel)
                rows.append((f"{loss:g} % loss, {delay:g} ms one way "
                             f"({2 * delay:g} ms added to the round trip)", s, v,
                             mine.filled_frac_mean.median()))
    lines = []
    for sign, head in ((1, "Tolerating loss is faster than repairing every packet"),
                       (0, "Within noise of repairing every packet"),
                       (-1, "Slower than repairing every packet")):
        hits = [f"{name(s)} at {where} ({v.estimate.fmt('.2f', 'x')}, filling "
                f"{filled:.2%} of a gradient)" for where, s, v, filled in rows if v.sign == sign]
        if hits:
            lines.append(f"- {head} ({len(hits)} of {len(rows)} cells): " + "; ".join(hits) + ".")
    return lines


def tolerance(ctx: Context) -> str:
    """The README's paragraph on where tolerating loss pays."""
    ref, tol = ctx.folder(REFERENCE), ctx.folder(TOLERANCE)
    with stats.tally() as tally:
        body = tolerance_text(ctx)
    status = [f"{f.cite()}, {'fresh' if f.fresh else f.freshness.text()}" for f in (ref, tol)]
    return "\n".join([
        f"`ltp` and `plot` against `{RELIABLE}`, the same transport repairing every packet, "
        f"iterations/s over `{RELIABLE}`'s with the same seed; from {status[0]} and "
        f"{status[1]} ({_setting(tol)}):", "", *body, "", tally.sentence("paragraph")])


def agreement(ctx: Context) -> list[str]:
    """Does a fresh default sweep (three seeds) agree with the reference (six blocks of three)?
    And with one sweep of ten seeds, whose runs all share one testbed and one hour?"""
    ref, chk, one = ctx.folder(REFERENCE), ctx.folder(CHECK), ctx.folder(ONE_SWEEP)
    lines = [f"The reference's blocks ran {_span(ref)}. Two fresh default sweeps were run at the "
             "same code on the idle machine, one before the reference and one after it.", ""]
    for rel in (CHECK, CHECK_2):
        f = ctx.folder(rel)
        lines += [f"**`{rel}/` against the reference** (it ran {_span(f)}).", ""]
        lines += against_reference(f, ref) + [""]
    return (lines
            + [f"**Against one sweep of many seeds** (`{ONE_SWEEP}/`: the default sweep "
                   f"with seeds {seed_text(one.seeds())} in one sweep, the reference's first "
                   "design). Its intervals describe the runs of that one sweep, on one testbed "
                   "in one hour, and that is all they cover:", ""]
            + against_reference(chk, one)[:1])


def _span(f: Folder) -> str:
    """When a folder's runs ran: ``13:32-13:48 UTC on 2026-11-26``."""
    t = pd.to_datetime(f.runs.started_at, utc=True)
    day = t.min().strftime("%Y-%m-%d")
    end = t.max().strftime("%H:%M") + ("" if t.max().strftime("%Y-%m-%d") == day
                                       else t.max().strftime(" on %Y-%m-%d"))
    return f"{t.min():%H:%M}-{end} UTC on {day}"


def against_reference(chk: Folder, ref: Folder) -> list[str]:
    """How a sweep's cell medians and verdicts compare with the reference's (used by the report
    of any default sweep and by the findings page)."""
    keys = sorted(set(zip(ref.ok.scheme, ref.ok.loss_pct)) & set(zip(chk.ok.scheme,
                                                                    chk.ok.loss_pct)))
    order = {s: i for i, s in enumerate(ref.sweep.order)}
    keys.sort(key=lambda k: (k[1], order.get(k[0], 99)))
    ref_est = [ref.sweep.ci(_frame(ref, s, x), "iters_per_s") for s, x in keys]
    own = [stats.median_ci(_cell(chk, s, x)) for s, x in keys]
    inside = sum(1 for o, e in zip(own, ref_est) if e.lo <= o.value <= e.hi)
    n_fresh = int(pd.Series([o.n for o in own]).median())
    lines = [f"Of this sweep's {len(keys)} cell medians (iterations/s, {n_fresh} runs a cell), "
             f"{inside} lie inside the reference's intervals ({ref.cite()})."]
    if ref.sweep.block_of:
        lines[0] += " " + _one_more_block(ref, keys, ref_est, inside)
    else:
        lines[0] += " " + _resampled(ref, keys, ref_est, n_fresh, inside)
    widths = pd.Series([(o.hi - o.lo) / (e.hi - e.lo) for o, e in zip(own, ref_est)
                        if e.hi > e.lo])
    lines += ["", f"This sweep's own intervals ({n_fresh} runs: the range, "
                  f"{stats.level_text(stats.coverage(n_fresh, stats.rank(n_fresh)))}, over the "
                  f"runs of one sweep) are a median of {widths.median():.1f}x as wide as the "
                  f"reference's ({ref_est[0].n} {ref_est[0].over}, {ref_est[0].label})."]
    mine, theirs = verdicts(chk), verdicts(ref)
    same = [k for k in theirs if k in mine and mine[k].sign == theirs[k].sign]
    differ = [k for k in theirs if k in mine and mine[k].sign != theirs[k].sign]
    lines += ["", f"Its verdicts agree with the reference's in {len(same)} of "
                  f"{len(same) + len(differ)} comparisons (every scheme against `{BASELINE}`, "
                  f"`ltp` against `{STRONGEST_TCP}`, `ltp` and `plot` against `{RELIABLE}`, at "
                  "every loss rate; this sweep's verdicts rest on its own runs, the reference's "
                  "on its blocks)" + (":" if differ else ".")]
    for s, o, x in differ:
        lines.append(f"- {name(s)} against {name(o)} at {x:g} % loss: here "
                     f"{_word(mine[(s, o, x)].sign)} ({mine[(s, o, x)].estimate.fmt('.2f', 'x')}), "
                     f"the reference {_word(theirs[(s, o, x)].sign)} "
                     f"({theirs[(s, o, x)].estimate.fmt('.2f', 'x')}).")
    return lines


def _frame(f: Folder, scheme: str, loss: float) -> pd.DataFrame:
    return f.ok[(f.ok.scheme == scheme) & (f.ok.loss_pct == loss)]


def _verdict_on(inside: int, lo: int, hi: int) -> str:
    return ("The observed count is inside the predicted range." if lo <= inside <= hi else
            "**The observed count is outside the predicted range.**")


def _one_more_block(ref: Folder, keys: list, ref_est: list, inside: int) -> str:
    """The prediction for a fresh sweep that is one more block of a blocked reference, exact
    under exchangeability, and the reference's own leave-one-block-out counts."""
    n_blocks = ref_est[0].n
    expected, lo, hi = stats.one_more_block(n_blocks, len(keys))
    block_of = ref.sweep.block_of
    out_counts = []
    present = sorted({block_of[int(seed)] for seed in ref.ok.seed})
    for held in present:
        count = 0
        for s, x in keys:
            runs = _cell(ref, s, x)
            by_block = pd.Series(runs.to_numpy(), index=[block_of[int(i)] for i in runs.index])
            meds = by_block.groupby(level=0).median()
            rest = meds.drop(held, errors="ignore")
            count += bool(held in meds.index and len(rest)
                          and rest.min() <= meds[held] <= rest.max())
        out_counts.append(count)
    held_expected = len(keys) * (n_blocks - 2) / n_blocks
    return (f"A fresh default sweep is one more block of the reference (its seeds on a testbed "
            f"and in an hour of its own), so its value of a cell is exchangeable with the "
            f"reference's {n_blocks} block medians and falls within their range with probability "
            f"({n_blocks} - 1) / ({n_blocks} + 1): {expected:.1f} of {len(keys)} cells on "
            f"average, {lo}-{hi} in 95 % of such sweeps were the cells independent (a sweep's "
            "cells share its testbed, which widens that range). The interval holds the median "
            f"a block draws from with probability {ref_est[0].label}; a fresh sweep is one more "
            "draw, which lands in it less often. "
            "Holding out each of the reference's blocks in turn and counting its cells inside "
            f"the other {n_blocks - 1} blocks' range gave {', '.join(map(str, out_counts))} of "
            f"{len(keys)} (expected {held_expected:.1f} with {n_blocks - 1} blocks). "
            + _verdict_on(inside, lo, hi))


def _resampled(ref: Folder, keys: list, ref_est: list, n_fresh: int, inside: int) -> str:
    """The prediction for a fresh sweep from an unblocked reference: runs drawn from the
    reference's own, as if runs of different sweeps were exchangeable."""
    ref_runs = [_cell(ref, s, x).to_numpy() for s, x in keys]
    expected, lo, hi, _ = stats.fresh_share(ref_runs, ref_est, n_fresh)
    return (f"Were runs of different sweeps exchangeable, a fresh sweep of {n_fresh} runs a "
            f"cell would put {expected:.1f} of {len(keys)} there on average, and {lo}-{hi} in "
            f"95 % of such sweeps: drawing {n_fresh} runs at a time from each reference cell's "
            "own runs (every draw, with replacement), counting how often their median falls "
            "inside that cell's interval, and adding up the cells (harness/reporting/stats.py, "
            "fresh_share). A sweep at another time, on a testbed brought up anew, adds its own "
            "offset to every run, which this leaves out and the observed count includes. "
            + _verdict_on(inside, lo, hi))


PAUSE_S = 60.0   # between two runs' starts, more than a run and this: the sweep was resumed later


def span_minutes(f: Folder) -> float:
    """How long the sweep ran, in minutes: from each run's start to the next one's (networks
    coming up and down included), and the last run's own time. Where the next run started more
    than :data:`PAUSE_S` after a run ended, the sweep was stopped and resumed later (runs dropped
    and rerun on an idle machine): only the run's own time counts there."""
    runs = f.runs.assign(start=pd.to_datetime(f.runs.started_at, utc=True)).sort_values("start")
    gaps = runs.start.diff().shift(-1).dt.total_seconds()
    walls = runs.wall_s.astype(float)
    return float(gaps.where(gaps <= walls + PAUSE_S, walls).fillna(walls).sum()) / 60


def quickstart(ctx: Context) -> str:
    """What the README's first command runs, from the default preset, and how long it took."""
    from harness.running import presets

    plan = presets.get(presets.DEFAULT_PRESET)
    f = ctx.folder(CHECK)
    n = len(plan.specs())
    return (f"The first command installs everything the machine lacks and runs the default "
            f"sweep: {len(plan.transports)} transports "
            f"({', '.join(f'`{t}`' for t in plan.transports)}) "
            f"at {', '.join(f'{x:g}' for x in plan.loss_pcts)} % random loss, {len(plan.seeds)} "
            f"seeds each, {plan.workers[0]} workers, a {plan.bottleneck_mbps[0]:g} Mbit/s "
            f"bottleneck: {n} runs, which took {span_minutes(f):.0f} minutes on this 2-core "
            f"machine (`{CHECK}/`{'' if f.fresh else ', measured at earlier code'}). It prints "
            "its progress and, at the end, the folder it wrote: `results/default/` with "
            "`runs.csv`, `curves.csv`, `iterations.csv`, "
            "`figures/`, the raw per-run files and `report.md`, which also says how its medians "
            f"compare with the reference's intervals (`{REFERENCE}/`). Run it again and it "
            "resumes (or, if finished, does nothing). The second command runs the tests: unit, "
            "conformance (every transport on loopback, the native C tests, a short fuzz run) "
            "and emulation (real network, real training).")


SPEED = "How much faster than TCP are the loss-tolerant transports under random loss?"
TOLERANCE_QUESTION = "Does tolerating loss itself pay, or the repair?"


def _speed_body(ctx: Context) -> list[str]:
    return headline(ctx).splitlines()


def _tolerance_body(ctx: Context) -> list[str]:
    tol = ctx.folder(TOLERANCE)
    return [f"Same machinery, one difference: `{RELIABLE}` repairs every packet. In "
            f"`{TOLERANCE}/`: {_setting(tol)}. Iterations/s over `{RELIABLE}`'s with the same "
            "seed:", "", *tolerance_text(ctx)]


# The README's blocks (withheld while a folder is not fresh; the quickstart's minutes say
# instead when they were measured at other code).
README = {"headline": Readme(headline, (REFERENCE,), SPEED),
          "tolerance": Readme(tolerance, (REFERENCE, TOLERANCE), TOLERANCE_QUESTION),
          "quickstart": Readme(quickstart, (CHECK,))}
SECTIONS = [
    Section("speed", SPEED, (REFERENCE,), _speed_body),
    Section("tolerance", TOLERANCE_QUESTION, (REFERENCE, TOLERANCE), _tolerance_body),
    Section("agreement", "Does a fresh default sweep agree with the reference?",
            (REFERENCE, CHECK, CHECK_2, ONE_SWEEP), agreement),
]
