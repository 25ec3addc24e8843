"""Findings: the simulator against the testbed (``python -m harness.simulation.validate``), and
whether the TCP reference model the scaling findings compare with has passed that check.

``results/simulate-validation/validation.csv`` holds one row per scheme, N and loss: the same
synchronized pushes emulated (20 a cell) and simulated (every seed pooled), their medians and 99th
percentiles and whether the simulated ones fall within the targets (median within 15 %, p99 within
25 %). A row is fresh while both halves' code fingerprints are today's. The scaling findings
(:mod:`.simulation`) print their ``tcp-ref`` comparisons as withdrawn while any fresh TCP row misses
the targets, or while no fresh TCP row exists.
"""

from __future__ import annotations

import functools

import pandas as pd

from harness.reporting.publish.claims.common import listed, listing
from harness.reporting.publish.context import PROJECT, Context
from harness.running.results import read_table

REL = "results/simulate-validation/validation.csv"
COMMAND = ("sudo .venv/bin/python -m harness.simulation.validate --transports ltp,tcp-cubic "
           "--workers 8,16,32 --iterations 20 --loss L")


@functools.cache
def _today() -> tuple[str, str]:
    from harness.running.fingerprint import fingerprint

    return fingerprint("simulate").digest, fingerprint("ps").digest


def table() -> pd.DataFrame:
    """The validation rows, with ``fresh`` (both halves measured with today's code); empty if the
    table was never written."""
    path = PROJECT / REL
    if not path.exists():
        return pd.DataFrame()
    t = read_table(path)
    sim, testbed = _today()
    t["fresh"] = (t.code_fingerprint == sim) & (t.testbed_fingerprint == testbed)
    return t


def tcp_passed() -> bool:
    """Whether the TCP model has fresh validation rows and meets the targets in every one."""
    t = table()
    tcp = t[(t.transport == "tcp-cubic") & t.fresh] if not t.empty else t
    return not tcp.empty and bool(tcp.within_targets.all())


def withdrawn() -> str:
    """The label the scaling findings put before a ``tcp-ref`` comparison, or ''."""
    if tcp_passed():
        return ""
    return ("*Withdrawn as a finding* (the TCP model has not passed its validation against the "
            "testbed, docs/simulation.md, \"The TCP reference\"; model output only): ")


def _cells(t: pd.DataFrame, scheme: str) -> str:
    rows = t[t.transport == scheme]
    ok = int(rows.within_targets.sum())
    return f"`{scheme}` within them in {ok} of {len(rows)} cells"


def block(ctx: Context) -> str:
    """docs/simulation.md: the validation table and what it means for the TCP comparisons."""
    t = table()
    if t.empty:
        return (f"Not measured yet (`{REL}`): the TCP comparisons at scale are withdrawn as "
                f"findings until it is. Fill it with `{COMMAND}` for L = 0 and 5.")
    commits = listing(sorted({c[:12] for c in t.git_commit}))
    state = ("fresh: measured with today's code" if t.fresh.all() else
             "**Stale: code changed since** (some rows ran with another code fingerprint)")
    lines = [f"From `{REL}` ({len(t)} cells, commit {commits}; on the testbed "
             f"{listed(t, 'emulated_pushes')} pushes a cell, simulated seeds "
             f"{listed(t, 'seeds')} with all their pushes pooled; host model "
             f"{listed(t, 'host')}): {state}. Filled by `{COMMAND}` (L = "
             f"{listed(t, 'loss_pct')}).", "",
             "| scheme | loss | N | testbed median | simulated | ratio | testbed p99 | "
             "simulated | ratio | within the targets |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for _, r in t.sort_values(["transport", "loss_pct", "n_workers"]).iterrows():
        lines.append(f"| `{r.transport}` | {r.loss_pct:g} % | {r.n_workers} | "
                     f"{r.emulated_median_s:.3f} s | {r.simulated_median_s:.3f} s | "
                     f"{r.median_ratio:.2f} | {r.emulated_p99_s:.3f} s | "
                     f"{r.simulated_p99_s:.3f} s | {r.p99_ratio:.2f} | "
                     f"{'yes' if r.within_targets else 'no'} |")
    verdict = ("The TCP model meets the targets in every cell, so the TCP comparisons at "
               "scale stand as model findings." if tcp_passed() else
               "The TCP model misses the targets, so every comparison with `tcp-ref` at scale "
               "below is withdrawn as a finding and printed as model output only.")
    lines += ["", f"The targets: median within 15 %, p99 within 25 % of the testbed's. "
              f"{_cells(t, 'ltp')}; {_cells(t, 'tcp-cubic')} (`tcp-ref` in the simulator). "
              + verdict + " One run per cell on each side: a row is a measurement, not a "
              "verdict with stated coverage."]
    return "\n".join(lines)


BLOCKS = {"simulate-validation": block}
