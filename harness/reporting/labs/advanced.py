"""The graders of the later labs: 5 (untrusted workers), 6 (peer to peer), 7 (the incast vanishes),
8 (ranking the field on one trace) and 9 (reading the wire). Each statement a grader tests is one
of its page's "What you should observe", numbered as the page lists them."""

from __future__ import annotations

import math

from harness.reporting.labs.grading import Sheet, common, lab, per_seed
from harness.running.provenance import PROJECT
from harness.training import models
from topologies.incast import PS_IP

LAB8_TRACE = PROJECT / "docs" / "labs" / "traces" / "lab8" / "ps1.trace"
CHANCE = 0.1            # one class in ten


@lab(5, "lab5-byzantine-workers.md")
def lab5(sheet: Sheet) -> None:
    runs = common(sheet, "lab5")
    attacked = runs[runs.byzantine.astype(str) != "0"]
    sheet.check("data", len(attacked) > 0, f"{len(attacked)} runs with attackers")
    for name, rows in attacked.groupby(attacked.byzantine.astype(str)):
        for tag, part in per_seed(rows):
            _lab5_cell(sheet, f"{name}{tag}", {r.aggregator: r for r in part.itertuples()})


def _lab5_cell(sheet: Sheet, attack: str, cell: dict) -> None:
    """Lab 5's statements on one attack and seed, its runs by aggregator."""
    mean, score = cell.get("mean"), cell.get("score")
    if mean is not None:
        sheet.check("statement 2", mean.byzantine_updates > 0
                    and mean.byzantine_kept == mean.byzantine_updates,
                    f"{attack}, mean: kept {mean.byzantine_kept:g} of the attackers' "
                    f"{mean.byzantine_updates:g} updates")
    if score is not None:
        sheet.check("statement 3", score.byzantine_kept <= 0.2 * score.byzantine_updates
                    and score.honest_rejected <= 0.1 * score.honest_updates,
                    f"{attack}, score: kept {score.byzantine_kept:g} of "
                    f"{score.byzantine_updates:g} attackers' updates, rejected "
                    f"{score.honest_rejected:g} of {score.honest_updates:g} honest ones")
    if mean is not None and score is not None:
        sheet.check("statement 4", score.agg_p50_s > mean.agg_p50_s,
                    f"{attack}: a round's aggregation took {score.agg_p50_s * 1e3:.2f} ms "
                    f"with score, {mean.agg_p50_s * 1e3:.2f} ms with mean")
        if mean.iterations_done >= 20:
            sheet.check("statement 2", score.final_accuracy > mean.final_accuracy,
                        f"{attack}: final accuracy {score.final_accuracy:.3f} with score, "
                        f"{mean.final_accuracy:.3f} with mean (chance: {CHANCE:g})")


@lab(6, "lab6-peer-to-peer.md")
def lab6(sheet: Sheet) -> None:
    runs = common(sheet, "lab6")
    p, n = int(runs.p.iloc[0]), int(runs.n_workers.iloc[0])
    expect = {("random-p", "switch"): (p, p), ("selmcast", "switch"): (p, n - 1),
              ("broadcast", "switch"): (n - 1, n - 1)}
    for tag, part in per_seed(runs):
        cell = {(r.policy, r.copy): r for r in part.itertuples()}
        for key, (low, high) in expect.items():
            if key in cell:
                avg = float(cell[key].avg_p)
                sheet.check("statement 1", low <= avg <= high,
                            f"{key[0]}{tag}: {avg:.2f} receivers per round (expected {low}"
                            + (f" to {high})" if high != low else ")"))
        for r in part.itertuples():
            sheet.check("statement 2", float(r.delivered_p) == float(r.avg_p),
                        f"{r.method}{tag}: delivered {float(r.delivered_p):.2f} of "
                        f"{float(r.avg_p):.2f} receivers per round")
        pair = (("selmcast", "switch"), ("selmcast", "unicast"))
        if all(k in cell for k in pair):
            per = {k[1]: float(cell[k].trunk_bytes_per_round) / float(cell[k].avg_p)
                   for k in pair}
            sheet.check("statement 3", per["unicast"] > per["switch"],
                        f"selmcast{tag}, leaf-spine bytes per receiver and round: unicast "
                        f"copies {per['unicast']:.0f}, the switches' copies {per['switch']:.0f}")


@lab(7, "lab7-the-incast-vanishes.md")
def lab7(sheet: Sheet) -> None:
    runs = common(sheet, "lab7")
    gradient = 4 * models.n_params(str(runs.model.iloc[0]))
    for name, rows in runs.groupby("scheme"):
        for tag, part in per_seed(rows):
            _lab7_cell(sheet, f"{name}{tag}", {r.pattern: r for r in part.itertuples()},
                       gradient)


def _lab7_cell(sheet: Sheet, scheme: str, cell: dict, gradient: int) -> None:
    """Lab 7's statements on one scheme and seed, its runs by pattern."""
    per = {p: r.bottleneck_tx_bytes / r.iterations_done / gradient for p, r in cell.items()}
    n = int(next(iter(cell.values())).n_workers)
    if "ps" in per:
        sheet.check("statement 2", n - 0.5 < per["ps"] < 1.2 * n + 0.5,
                    f"{scheme} through the PS: {per['ps']:.2f} gradients per iteration "
                    f"crossed the PS's link ({n} workers)")
    if "tree" in per:
        sheet.check("statement 2", 0.9 < per["tree"] < 1.5,
                    f"{scheme} through the tree: {per['tree']:.2f} gradients per iteration")
    if "ring" in per:   # worker 0's model for each evaluation, spread over the iterations
        done = float(cell["ring"].iterations_done)
        evals = math.ceil(done / float(cell["ring"].eval_every))
        sheet.check("statement 2", per["ring"] < 1.2 * evals / done + 0.05,
                    f"{scheme} through the ring: {per['ring']:.3f} gradients per iteration "
                    f"({evals} evaluations in {done:.0f} iterations)")
    accuracy = {p: round(float(r.final_accuracy), 4) for p, r in cell.items()}
    spread = max(accuracy.values()) - min(accuracy.values())
    early = {p: r.early_closes for p, r in cell.items() if r.early_closes > 0}
    if early:   # the patterns averaged different gradients: the statement does not apply
        sheet.note("statement 3", f"{scheme}: closed early ({early} messages), so its patterns "
                                  f"averaged different gradients; final accuracies {accuracy} "
                                  f"differ by {spread:.4f}, not tested")
    else:
        sheet.check("statement 3", spread < 2e-3,
                    f"{scheme}: final accuracies {accuracy} differ by {spread:.4f}")


@lab(8, "lab8-ranking-on-one-trace.md")
def lab8(sheet: Sheet) -> None:
    from topologies.impair.trace import read_trace, same_positions

    runs = common(sheet, "lab8")
    if not sheet.needs_runs("statements 1-2"):
        return
    trace = read_trace(LAB8_TRACE)
    for row in runs.itertuples():
        path = sheet.folder / "runs" / str(row.run_id) / "loss" / "ps1.trace"
        if not str(row.loss_model).startswith("trace:") or not path.is_file():
            sheet.check("statement 1", False, f"{row.scheme}: loss model {row.loss_model}, "
                        f"its record {'is' if path.is_file() else 'is not'} in the folder")
            continue
        met = read_trace(path)
        sheet.check("statement 2", met.packets > 0 and same_positions(trace, met)
                    and row.random_drops > 0,
                    f"{row.scheme}: {met.packets} packets at the PS, {row.random_drops:g} "
                    "dropped, every drop on a position the trace holds"
                    if same_positions(trace, met) else
                    f"{row.scheme}: its drops are not the trace's positions")


@lab(9, "lab9-reading-the-wire.md")
def lab9(sheet: Sheet) -> None:
    from harness.reporting import wire
    from harness.running.runfiles import RunFiles

    runs = common(sheet, "lab9")
    if not sheet.needs_runs("statements 1-3"):
        return
    for row in runs.itertuples():
        files = RunFiles(sheet.folder / "runs" / str(row.run_id))
        pcap, summary = files.pcap("ps1"), files.host_summary("ps1")
        if not sheet.check("data", pcap.is_file() and summary is not None,
                           f"{row.run_id}: capture/ps1.pcap "
                           f"{'found' if pcap.is_file() else 'missing (run with --capture ps1)'}"):
            continue
        problems, foreign = wire.problems(pcap), wire.count(pcap, "udp && !ltpt")
        sheet.check("statement 1", problems == 0 and foreign == 0,
                    f"{problems} datagrams malformed or invalid, {foreign} UDP datagrams not LTP")
        frames = wire.dissect(pcap)
        closes = wire.distinct_closes(frames, PS_IP)
        early = closes[closes["ltpt.close.reason"] == 2]
        bubbles = early["ltpt.close.count"] - early["ltpt.received"]
        sheet.check("statement 2", (bubbles > 0).all(),
                    f"{len(early)} early closes by the PS, each with fewer packets than its "
                    f"message's: {int(bubbles.sum())} packets missing in all")
        stats = summary.transport_stats
        counted = {2: stats["close_early"], 1: stats["close_complete"]}
        seen = {r: int((closes["ltpt.close.reason"] == r).sum()) for r in counted}
        sheet.check("statement 3", seen == {r: int(v) for r, v in counted.items()},
                    f"the PS's closes in the capture, once per message: {seen[2]} early and "
                    f"{seen[1]} complete; its counters: {int(counted[2])} and {int(counted[1])} "
                    f"(from {int((frames['ltpt.type'] == 3).sum())} CLOSE datagrams in all)")
        data = frames[(frames["ltpt.type"] == 1) & (frames["ip.dst"] == PS_IP)]
        sheet.answer("q1", len(early), 0, "messages the PS closed early")
        sheet.answer("q2", float(bubbles.sum()), 0, "packets missing at those early closes")
        sheet.answer("q3", int((data["ltpt.flags"] & 0x02 > 0).sum()), 0,
                     "retransmitted DATA toward the PS in the capture")
