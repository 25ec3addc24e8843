"""The graders of the first labs, on the incast star through a PS: 1 (incast and TCP),
2 (tolerating loss), 3 (your own transport) and 4 (killing a worker). Each statement a grader
tests is one of its page's "What you should observe", numbered as the page lists them."""

from __future__ import annotations

import pandas as pd

from harness.reporting.labs.grading import (Sheet, against_bound, common, lab, per_seed,
                                            push_bounds, table, threshold_min)

# A statement about how often something happens needs enough iterations per cell to be tested:
# below this the grader notes it instead (the tests run every lab with 3 iterations).
MIN_ITERATIONS = 20
RTO_MIN_S = 0.2       # Linux's minimum retransmission timeout
STALL_S = 0.15        # lab 1, question 1: "longer than the bound plus 150 ms"


def _enough(sheet: Sheet, item: str, its: pd.DataFrame, what: str) -> bool:
    per_cell = its.groupby("run_id").size().min() if len(its) else 0
    if per_cell < MIN_ITERATIONS:
        sheet.note(item, f"{what}: not tested, a run has {per_cell} iterations "
                         f"(the page's sweep has more; at least {MIN_ITERATIONS} are needed)")
        return False
    return True


@lab(1, "lab1-incast-and-tcp.md")
def lab1(sheet: Sheet) -> None:
    runs, its = common(sheet, "lab1"), table(sheet.folder, "iterations.csv")
    against_bound(sheet, runs, its)
    stalled = its.push_s > push_bounds(runs, its) + STALL_S
    cubic = its[(its.scheme == "tcp-cubic") & (its.loss_pct == 0)]
    if _enough(sheet, "statement 2", its, "a few tcp-cubic pushes stall by a minimum RTO"):
        n = int(stalled[cubic.index].sum())
        sheet.check("statement 2", 0 < n < len(cubic),
                    f"{n} of {len(cubic)} tcp-cubic pushes at 0 % loss took more than the bound "
                    f"+ {STALL_S * 1e3:.0f} ms: a few, not none and not all")
    lossy = its[its.loss_pct > 0]
    if len(lossy) and _enough(sheet, "statement 3", its, "the 5 ms minimum RTO shrinks stalls"):
        p90 = lossy.groupby("scheme").push_s.quantile(0.9)
        if {"tcp-cubic", "tcp-cubic-lowrto"} <= set(p90.index):
            sheet.check("statement 3", p90["tcp-cubic-lowrto"] < p90["tcp-cubic"],
                        f"90th percentile push with loss: tcp-cubic-lowrto "
                        f"{p90['tcp-cubic-lowrto']:.3f} s, tcp-cubic {p90['tcp-cubic']:.3f} s")
    if len(cubic):
        sheet.answer("q1", float(stalled[cubic.index].mean()), 0.5 / len(cubic) + 0.01,
                     "fraction of tcp-cubic's iterations at 0 % loss slower than the bound "
                     "+ 150 ms")


def _early_closing(sheet: Sheet, preset: str) -> pd.DataFrame:
    """The runs of a lab whose transports close early, each push held to its bound over the
    bytes that arrived."""
    runs = common(sheet, preset)
    against_bound(sheet, runs, table(sheet.folder, "iterations.csv"), by_received=True)
    return runs


@lab(2, "lab2-tolerating-loss.md")
def lab2(sheet: Sheet) -> None:
    runs = _early_closing(sheet, "lab2")
    for row in runs.itertuples():
        where = f"{row.scheme} at {row.loss_pct:g} % loss"
        lossy = row.loss_pct >= 5
        if row.transport == "ltp-reliable":
            sheet.check("statement 1", row.early_closes == 0 and row.filled_frac_max == 0
                        and row.min_recv_frac == 1.0 and (not lossy or row.retransmits > 0),
                        f"{where}: early_closes {row.early_closes:g}, filled_frac_max "
                        f"{row.filled_frac_max:g}, min_recv_frac {row.min_recv_frac:g}, "
                        f"retransmits {row.retransmits:g}")
            continue
        if row.transport != "ltp":
            continue
        floor = threshold_min(row)
        sheet.check("statement 2", row.min_recv_frac >= floor - 1e-9
                    and row.filled_frac_max <= 1 - floor + 1e-9,
                    f"{where}: min_recv_frac {row.min_recv_frac:.4f} against threshold_min "
                    f"{floor:g}; filled_frac_max {row.filled_frac_max:.4f}")
        if lossy:
            sheet.check("statement 3", row.retransmits > 0
                        and row.filled_frac_mean < row.loss_pct / 100,
                        f"{where}: retransmits {row.retransmits:g}, filled_frac_mean "
                        f"{row.filled_frac_mean:.4f} against the loss {row.loss_pct / 100:g}")
    quiet = runs[runs.early_closes == 0]
    sheet.check("statement 4", (quiet.filled_frac_max == 0).all(),
                f"{len(quiet)} runs closed nothing early; the most any of them filled: "
                f"{quiet.filled_frac_max.max() if len(quiet) else 0:g}")
    at10 = runs[runs.loss_pct == 10].groupby("scheme").iters_per_s.median()
    if {"ltp", "ltp-reliable"} <= set(at10.index):
        gap = float(at10["ltp"] - at10["ltp-reliable"])
        sheet.answer("q1", gap, max(0.05, 0.05 * abs(gap)),
                     "ltp's iterations per second minus ltp-reliable's at 10 % loss "
                     "(medians over your seeds)")


@lab(3, "lab3-your-own-transport.md")
def lab3(sheet: Sheet) -> None:
    runs = _early_closing(sheet, "lab3")
    for tag, part in per_seed(runs):
        cell = {(r.scheme, r.loss_pct): r for r in part.itertuples()}
        blast, paced = cell.get(("udp-blast", 0.0)), cell.get(("udp-blast+rate_mbps=11", 0.0))
        if blast is not None and blast.n_workers >= 8:
            sheet.check("statement 1", blast.mean_recv_frac < 0.9 and blast.queue_drops > 0,
                        f"unpaced udp-blast at 0 % loss{tag}: mean_recv_frac "
                        f"{blast.mean_recv_frac:.3f}, queue_drops {blast.queue_drops:g}")
        elif blast is not None:
            sheet.note("statement 1", f"{blast.n_workers:g} workers: the queue overflows with "
                                      "the page's eight, not tested with fewer")
        if paced is not None:
            sheet.check("statement 2", paced.mean_recv_frac >= 0.98,
                        f"udp-blast paced at 11 Mbit/s, 0 % loss{tag}: mean_recv_frac "
                        f"{paced.mean_recv_frac:.3f}, queue_drops {paced.queue_drops:g}")
    for row in runs[runs.scheme == "ltp"].itertuples():
        floor = threshold_min(row)
        sheet.check("statement 3", row.min_recv_frac >= floor - 1e-9
                    and (row.loss_pct == 0 or row.retransmits > 0),
                    f"ltp at {row.loss_pct:g} % loss: min_recv_frac {row.min_recv_frac:.4f} "
                    f"(threshold_min {floor:g}), retransmits {row.retransmits:g}")


@lab(4, "lab4-killing-a-worker.md")
def lab4(sheet: Sheet) -> None:
    runs = common(sheet, "lab4")
    kills = runs[runs.fault.astype(str).str.startswith("kill")]
    expect = {"tcp-cubic": "gone", "ltp": "missing"}
    for scheme, how in expect.items():
        rows = kills[kills.scheme == scheme]
        if rows.empty:
            sheet.check("statement 2", False, f"no {scheme} run with a kill in the folder")
        for tag, part in per_seed(rows):
            for row in part.itertuples():
                sheet.check("statement 2", row.detected_as == how and row.detection_s < 2.0,
                            f"{scheme}{tag}: the killed worker was {row.detected_as} after "
                            f"{row.detection_s:.3f} s (expected: {how}, within 2 s)")
    for row in runs.itertuples():
        if str(row.fault).startswith("link"):
            sheet.check("statement 4", pd.notna(row.rejoin_s),
                        f"{row.scheme}, {row.fault}: the worker came back after "
                        f"{row.rejoin_s:.3f} s" if pd.notna(row.rejoin_s)
                        else f"{row.scheme}, {row.fault}: the worker never came back")
    ltp = kills[kills.scheme == "ltp"]
    if not ltp.empty:
        sheet.answer("q1", float(ltp.detection_s.median()), 0.05,
                     "the LTP kill run's detection time in seconds (the median over your seeds)")
