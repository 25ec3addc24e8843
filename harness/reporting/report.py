"""The report of a sweep (``report.md``) and the README's results table, from the tables alone.

Every number is a median over a cell's runs with a distribution-free interval in brackets whose
coverage the report states (:mod:`harness.reporting.stats`). A statement that one scheme beats
another follows the rule of :func:`harness.reporting.stats.compare` (paired by seed where the cells
share seeds), and the report counts its comparisons and says how many "beyond noise" verdicts chance
alone would give among them. The header names the machine, the other load during the runs and
whether the code that produced the numbers is still today's (:mod:`harness.running.provenance`).
:func:`readme_table` renders the headline table the README shows for ``results/reference``.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from harness.reporting import sections, stats
from harness.reporting.tables import BASELINE, OWN_SECTIONS, Sweep, best_tcp, reached

ACCURACY_MARGIN_PTS = 1.0   # "no loss of final accuracy": within this many points of lossless TCP
FIGURES = (("throughput", "training throughput and ratio to tcp-cubic vs loss"),
           ("accuracy", "time to target accuracy and final accuracy vs loss"),
           ("converge", "final accuracy against lossless tcp-cubic, with the +-1 point band"),
           ("sync_cdf", "CDF of per-iteration synchronization time (p50 o, p99 v)"),
           ("loss_tolerance", "filled fraction, early closes, avoided and actual retransmissions"),
           ("bottleneck", "bottleneck utilisation and queue drops vs loss"),
           ("bounds", "where the median iteration goes, and the iteration over its floor"),
           ) + sections.FIGURES


def _fmt(value) -> str:
    """A condition value as text: numbers without trailing zeros, text as it is."""
    return f"{value:g}" if isinstance(value, (int, float)) else str(value)


def _cells(sw: Sweep):
    """(condition, loss, frame of that cell's runs across schemes), in order."""
    for cond in sw.conditions():
        d = sw.at(sw.ok, cond)
        for loss in sorted(d.loss_pct.unique()):
            yield cond, loss, d[d.loss_pct == loss]


def _where(sw: Sweep, cond: tuple, loss: float) -> str:
    label = sw.label(cond)
    return f"{label + ', ' if label != 'all runs' else ''}{loss:g} % loss"


def _machine(runs: pd.DataFrame, folder) -> str:
    """Where the runs ran, and how busy the rest of the machine was meanwhile."""
    from harness.running import provenance

    if "cpu_model" in runs and runs.cpu_model.notna().any():
        cpus = sorted({f"{m} x {int(c)}" for m, c in zip(runs.cpu_model.astype(str), runs.cpu_cores)
                       if m != "nan"})
        kernels = sorted(set(runs.kernel.dropna().astype(str)))
    else:
        man = provenance.read_manifest(folder).get("provenance", {})
        cpus = [f"{man['cpu_model']} x {man['cpu_cores']}"] if "cpu_model" in man else []
        kernels = [man["kernel"]] if man.get("kernel") else []
    text = (f"Machine: {'; '.join(cpus) or 'CPU not recorded'}, kernel "
            f"{', '.join(kernels) or 'not recorded'}.")
    if "other_load_frac" in runs and runs.other_load_frac.notna().any():
        load = runs.other_load_frac.dropna()
        text += (f" Other processes used a median of {load.median():.1%} of the machine during "
                 f"a run (the most: {load.max():.1%}).")
    else:
        text += " The load of other processes was not recorded."
    return text


def _shown(folder: Path) -> str:
    """A folder as the regenerate command should name it: relative to the project when inside it
    (so a report reads the same in every clone), else as given."""
    from harness.running import provenance

    try:
        return str(Path(folder).resolve().relative_to(provenance.PROJECT.resolve()))
    except ValueError:
        return str(folder)


def _header(sw: Sweep, tally: stats.Tally, estimates: list[stats.Estimate]) -> list[str]:
    from harness.running import provenance

    runs = sw.runs
    lo, hi = sw.seeds_per_cell()
    statuses = "".join(f", {n} {s}" for s, n in runs.status.value_counts().items() if s != "ok")
    commits = sorted(set(runs.git_commit.astype(str)))
    dirty = bool(runs.git_dirty.astype(str).str.lower().eq("true").any())
    started = pd.to_datetime(runs.started_at, utc=True)
    span_h = ((started.max() - started.min()).total_seconds()
              + float(runs.loc[started.idxmax(), "wall_s"])) / 3600
    seeds = sorted(int(x) for x in sw.ok.seed.unique())
    cmd = f".venv/bin/invoke figures --sweep {_shown(sw.folder)}"
    fresh = provenance.freshness(sw.folder)
    if dirty:
        dirty_text = (" (the work tree had uncommitted changes; the code that produces these "
                      "numbers is today's, by its fingerprint)" if fresh.fresh else
                      " (work tree dirty)")
    return [f"# Report: {sw.folder.name}", "",
            fresh.text(), "",
            f"{len(runs)} runs, {len(sw.ok)} ok{statuses}; {lo if lo == hi else f'{lo}-{hi}'} "
            f"runs per cell (seeds "
            f"{seed_text(seeds)}); commit {', '.join(c[:12] for c in commits)}"
            f"{dirty_text if dirty else ''}; the sweep ran for {span_h:.1f} h from "
            f"{started.min():%Y-%m-%d %H:%M} UTC. {_machine(runs, sw.folder)}", "",
            "Every number is the median over a cell's runs. "
            + stats.intervals_legend(estimates) + " Verdicts: " + stats.RULE + ". "
            + tally.sentence(), "",
            "Regenerate the figures and this report from the tables with:", "", f"    {cmd}", ""]


def counted(n: int, noun: str) -> str:
    """``1 run``, ``3 runs``: a count and its noun, plural unless the count is one."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def seed_text(seeds: list[int]) -> str:
    """``0-9``, ``0-2, 5``: a list of seeds, runs of consecutive ones as ranges."""
    out, start = [], None
    for i, s in enumerate(seeds):
        if start is None:
            start = s
        if i + 1 == len(seeds) or seeds[i + 1] != s + 1:
            out.append(f"{start}" if start == s else f"{start}-{s}")
            start = None
    return ", ".join(out)


# The estimates a report showed, for the legend of its intervals (reset per report).
_seen: list[stats.Estimate] = []


def _headline(sw: Sweep) -> list[str]:
    target = sw.ok.target_accuracy.median()
    cols = [c for c in sw.varying]
    lines = ["## Headline numbers", "",
             f"`vs {BASELINE}`: the scheme's iterations/s over {BASELINE}'s with the same seed, "
             "the median over seeds (over blocks, each block's median of its seeds, in a "
             "blocked sweep), with its interval.", "",
             "| " + " | ".join(cols + ["loss %", "transport", "runs", "it/s", f"vs {BASELINE}",
                                      "iteration p50 s", "p99 s", "final acc.",
                                      f"time to {target:.0%} (s)", "measured loss %",
                                      "filled frac."]) + " |",
             "|" + "---|" * (len(cols) + 11)]
    for cond, loss, d in _cells(sw):
        base = sw.series(d, BASELINE, "iters_per_s")
        for scheme in sw.order:
            mine = d[d.scheme == scheme]
            if mine.empty:
                continue
            tta = sw.time_to_target(d, scheme)
            missed = int((~reached(mine)).sum())
            tta_text = ("-" if missed == len(mine) else tta.fmt(".0f")) + (
                f" ({missed} of {len(mine)} not reached)" if missed else "")
            speed = sw.ratio(sw.series(d, scheme, "iters_per_s"), base)
            _seen.append(sw.estimate(d, scheme, "iters_per_s"))
            lines.append("| " + " | ".join(
                [_fmt(v) for v in cond] + [f"{loss:g}", sw.names[scheme], str(len(mine)),
                 sw.estimate(d, scheme, "iters_per_s").fmt(),
                 speed.fmt(".2f", "x") if speed.n else "-",
                 f"{mine.iter_p50_s.median():.3f}", f"{mine.iter_p99_s.median():.3f}",
                 sw.estimate(d, scheme, "final_accuracy").fmt(".3f"), tta_text,
                 f"{mine.measured_loss_pct.median():.2f}",
                 f"{mine.filled_frac_mean.median():.4f}"]) + " |")
    return lines + [""]


def _fastest(sw: Sweep) -> list[str]:
    lines = ["## Which scheme is fastest where", ""]
    for cond, loss, d in _cells(sw):
        ests = {sw.names[s]: sw.series(d, s, "iters_per_s") for s in sw.order}
        _, sentence = sw.best(ests)
        lines.append(f"- {_where(sw, cond, loss)}, iterations/s: {sentence}")
    return lines + [""]


def _tolerance_pays(sw: Sweep) -> list[str]:
    """ltp and plot against ltp-reliable: does tolerating loss itself pay, cell by cell?"""
    if "ltp-reliable" not in sw.order:
        return []
    lines = ["## Does tolerating loss pay? `ltp` and `plot` against `ltp-reliable`", "",
             "Same machinery, one difference: `ltp-reliable` repairs every packet. Throughput "
             "(iterations/s) and the fraction of each gradient the filler supplied:", ""]
    wins, tried = [], 0
    for cond, loss, d in _cells(sw):
        rel = sw.series(d, "ltp-reliable", "iters_per_s")
        for scheme in ("ltp", "plot"):
            if scheme not in set(d.scheme):
                continue
            mine = sw.series(d, scheme, "iters_per_s")
            filled = d.loc[d.scheme == scheme, "filled_frac_mean"].median()
            early = d.loc[d.scheme == scheme, "early_closes_per_iter"].median()
            verdict = sw.compare(scheme, mine, "ltp-reliable", rel)
            tried += verdict.sign is not None
            lines.append(f"- {_where(sw, cond, loss)}: {verdict.sentence} `{scheme}` filled "
                         f"{filled:.2%} of a gradient on average, {early:.2f} early closes per "
                         "iteration.")
            if verdict.sign == 1:
                wins.append(f"{scheme} at {_where(sw, cond, loss)} "
                            f"({verdict.estimate.value:.2f}x)")
    lines += ["", (f"Tolerating loss beat reliable delivery, beyond noise, in {len(wins)} of "
                   f"{tried} comparisons: " + "; ".join(wins) + ".") if wins else
              f"In none of its {tried} comparisons did tolerating loss beat reliable delivery "
              "beyond noise.", ""]
    return lines


def _stops_at_target(sw: Sweep) -> bool:
    return bool(sw.ok.stop_at_target.astype(str).str.lower().eq("true").any())


def _time_to_accuracy(sw: Sweep) -> list[str]:
    """Time to the target accuracy, cell by cell, in sweeps whose runs stop at the target."""
    if not _stops_at_target(sw):
        return []
    target = sw.ok.target_accuracy.median()
    cap = sw.ok.max_train_s.max()
    lines = ["## Time to accuracy", "",
             "Training time at the PS (evaluations excluded) until the first evaluation at or "
             f"above {target:.0%} test accuracy. A run that had not reached it when its "
             "training-time cap "
             f"({cap:g} s) ended it is *not reached*: it counts as infinitely late, so a scheme "
             "that often misses cannot look fast by dropping its misses, and a median is \"not "
             "reached\" once half its runs missed.", "",
             "| " + " | ".join(["cell", "transport", "runs", "reached", "time to target s",
                                "iterations to target", "iterations/s"]) + " |",
             "|---|---|---|---|---|---|---|"]
    sentences = []
    for cond, loss, d in _cells(sw):
        where = _where(sw, cond, loss)
        ests = {}
        for scheme in sw.order:
            mine = d[d.scheme == scheme]
            if mine.empty:
                continue
            ests[scheme] = sw.time_to_target(d, scheme)
            _seen.append(ests[scheme])
            lines.append("| " + " | ".join([
                where, sw.names[scheme], str(len(mine)), str(int(reached(mine).sum())),
                ests[scheme].fmt(".1f"),
                sw.estimate(d, scheme, "iterations_to_target").fmt(".0f"),
                sw.estimate(d, scheme, "iters_per_s").fmt()]) + " |")
        times = {k: sw.tta_series(d, k) for k in ests}
        _, sentence = sw.best({sw.names[k]: t for k, t in times.items()},
                              higher_is_better=False)
        sentences.append(f"- {where}, fastest to {target:.0%}: {sentence}")
        for scheme in ("ltp", "plot"):
            if scheme in ests and "ltp-reliable" in ests:
                verdict = sw.compare(scheme, times[scheme], "ltp-reliable",
                                     times["ltp-reliable"], higher_is_better=False,
                                     spec=".1f", unit=" s")
                sentences.append(f"  - tolerating loss: {verdict.sentence}")
    return lines + [""] + sentences + [""]


def _accuracy(sw: Sweep) -> list[str]:
    lines = ["## Accuracy against lossless TCP", "",
             f"Final accuracy minus lossless `{BASELINE}`'s under the same conditions and the "
             f"same seed, in points (median over seeds, with its interval); \"no loss of "
             f"accuracy\" means a median within {ACCURACY_MARGIN_PTS:g} point.", ""]
    if _stops_at_target(sw):
        return lines[:2] + ["These runs stop once they reach the target accuracy, so their final "
                            "accuracy is where they stopped, not where training converges: no "
                            "comparison is stated (the `converge` preset runs to convergence).",
                            ""]
    for cond in sw.conditions():
        d = sw.at(sw.ok, cond)
        lossless = d[(d.scheme == BASELINE) & (d.loss_pct == 0)]
        if lossless.final_accuracy.dropna().empty:
            lines.append(f"- {sw.label(cond)}: no lossless {BASELINE} run to compare with.")
            continue
        ref = stats.by_seed(lossless, "final_accuracy") * 100
        for loss in sorted(d.loss_pct.unique()):
            for scheme in sw.order:
                cell = d[(d.scheme == scheme) & (d.loss_pct == loss)]
                if cell.final_accuracy.dropna().empty or (scheme == BASELINE and loss == 0):
                    continue
                gap = accuracy_gap(stats.by_seed(cell, "final_accuracy") * 100, ref, sw.block_of)
                _seen.append(gap)
                if gap.hi < -ACCURACY_MARGIN_PTS:
                    verdict = f"more than {ACCURACY_MARGIN_PTS:g} point below"
                elif gap.value >= -ACCURACY_MARGIN_PTS:
                    verdict = f"within {ACCURACY_MARGIN_PTS:g} point"
                else:
                    verdict = "below by a median of more than a point, but within noise of it"
                lines.append(f"- {_where(sw, cond, loss)}, {sw.names[scheme]}: "
                             f"{gap.fmt('+.2f')} points: {verdict}{_capped(cell)}.")
    return lines + [""]


def accuracy_gap(points: pd.Series, lossless: pd.Series,
                 block_of: dict | None = None) -> stats.Estimate:
    """Final accuracy minus lossless TCP's in points: seed by seed where the cells share seeds
    (the same initialisation and data order; by block in a blocked sweep), else against
    lossless TCP's median."""
    if block_of:
        return stats.blocked_pairs(points.round(6), lossless.round(6), block_of, "diff")
    if stats.common_seeds(points, lossless) >= 2:
        return stats.paired(points.round(6), lossless.round(6), "diff")
    return stats.median_ci((points - lossless.median()).round(6))


def _capped(cell: pd.DataFrame) -> str:
    """Say so when runs of the cell were stopped by the training-time cap: their final accuracy
    is where the cap stopped them, not where training converges."""
    capped = cell[cell.stopped_by == "time_cap"]
    if capped.empty:
        return ""
    done = capped.iterations_done.median()
    return (f" ({len(capped)} of {len(cell)} runs stopped at the training-time cap after a "
            f"median of {done:.0f} of {cell.iterations.max():.0f} iterations: not converged)")


def _scheme_rows(sw: Sweep, head: list[str], row) -> list[str]:
    """A Markdown table with one row per cell and scheme; ``row(frame, scheme, mine)`` gives the
    cells after the conditions, the loss and the scheme's name."""
    lines = ["| conditions | loss % | transport | " + " | ".join(head) + " |",
             "|---|---|---|" + "---|" * len(head)]
    for cond, loss, d in _cells(sw):
        for scheme in sw.order:
            mine = d[d.scheme == scheme]
            if not mine.empty:
                lines.append(f"| {sw.label(cond)} | {loss:g} | {sw.names[scheme]} | "
                             + " | ".join(row(d, scheme, mine)) + " |")
    return lines + [""]


def _accounting(sw: Sweep) -> list[str]:
    cols = ["early_closes_per_iter", "max_wait_closes", "filled_frac_mean", "filled_frac_max",
            "retx_avoided_per_iter", "retransmits_per_iter"]

    def row(d, scheme, mine):
        m = mine[cols].median()
        return [f"{m.early_closes_per_iter:.2f}", f"{m.max_wait_closes:.0f}",
                f"{m.filled_frac_mean:.4f}", f"{m.filled_frac_max:.3f}",
                f"{m.retx_avoided_per_iter:.1f}", f"{m.retransmits_per_iter:.1f}"]

    return ["## Tolerance accounting (medians over runs)", ""] + _scheme_rows(
        sw, ["early closes / it", "max-wait closes", "filled mean", "filled worst",
             "retx avoided / it", "retransmits / it"], row)


def _bounds(sw: Sweep) -> list[str]:
    cols = ["iter_p50_s", "fd_bound_s", "compute_p50_s", "update_p50_s", "iter_bound_s"]

    def row(d, scheme, mine):
        m = mine[cols].median()
        return [f"{m.iter_p50_s:.3f}", f"{m.fd_bound_s:.3f}", f"{m.compute_p50_s:.4f}",
                f"{m.update_p50_s:.4f}", f"{m.iter_p50_s - m.iter_bound_s:.3f}",
                sw.estimate(d, scheme, "iter_over_bound").fmt(".2f", "x")]

    return ["## The iteration against its bounds", "",
            "`fd bound` = (workers + 1) x message / bottleneck rate (parameters down and "
            "gradients up overlap on the full-duplex PS link); the floor adds the slowest "
            "worker's compute and the PS's update; `rest` = iteration p50 - floor is what "
            "the transport and the harness add.", ""] + _scheme_rows(
        sw, ["iteration p50 s", "fd bound s", "compute s", "update s", "rest s", "p50 / floor"],
        row) + _rest(sw)


def _rest(sw: Sweep) -> list[str]:
    """Where the rest goes: the serial broadcast against its own bound, and what follows it."""
    cols = ["iter_p50_s", "broadcast_p50_s", "fd_bound_s", "push_bound_s", "n_workers",
            "compute_p50_s", "update_p50_s"]

    def row(d, scheme, mine):
        m = mine[cols].median()
        one_push = m.push_bound_s / m.n_workers
        down, after = m.fd_bound_s - one_push, m.iter_p50_s - m.broadcast_p50_s
        after_floor = one_push + m.compute_p50_s + m.update_p50_s
        return [f"{m.broadcast_p50_s:.3f}", f"{down:.3f}", f"{m.broadcast_p50_s - down:+.3f}",
                f"{after:.3f}", f"{after_floor:.3f}", f"{after - after_floor:+.3f}"]

    return ["Where the rest goes: the PS's serial broadcast against its bound (every worker's "
            "parameters at the bottleneck rate), and what follows it (the last worker's compute "
            "and push, the update) against its floor. A TCP broadcast ends once the kernel has "
            "the bytes, so for TCP the split says little.", ""] + _scheme_rows(
        sw, ["broadcast p50 s", "its bound s", "over s", "after it s", "its floor s", "over s"],
        row)


def _regimes(sw: Sweep) -> list[str]:
    lines = []
    for setting in (s for s in sw.varying if s not in OWN_SECTIONS):
        lines += [f"## Regime: {setting}", "", f"![regime_{setting}](figures/regime_{setting}.png)",
                  ""]
        for value in sorted(sw.ok[setting].unique()):
            frame = sw.ok[sw.ok[setting] == value]
            tcp = best_tcp(frame)
            for loss in sorted(frame.loss_pct.unique()):
                d = frame[frame.loss_pct == loss]
                ests = {sw.names[s]: sw.series(d, s, "iters_per_s")
                        for s in ("ltp", "ltp-reliable", "plot", tcp) if s in set(d.scheme)}
                _, sentence = sw.best(ests)
                cpu = d.cpu_busy_frac.median()
                lines.append(f"- {setting} {_fmt(value)}, {loss:g} % loss: {sentence} "
                             f"(CPU busy {cpu:.0%})")
        lines.append("")
    return lines


def _against_reference(sw: Sweep) -> list[str]:
    """A default sweep against the committed reference (the default sweep with more seeds): how
    many of its cell medians fall inside the reference's intervals, against the prediction,
    and whether its verdicts agree."""
    from harness.reporting.publish.claims import headline
    from harness.reporting.publish.context import Folder
    from harness.running import provenance

    project = provenance.PROJECT
    ref = project / headline.REFERENCE
    name = provenance.read_manifest(sw.folder).get("plan", {}).get("name")
    if name != "default" or not (ref / "runs.csv").exists() \
            or sw.folder.resolve() == ref.resolve():
        return []
    return (["## Against the reference sweep", ""]
            + headline.against_reference(Folder(sw.folder, project), Folder(ref, project))
            + [""])


def report_text(sw: Sweep) -> str:
    """The whole report as Markdown."""
    _seen.clear()
    with stats.tally() as tally:
        body = (_headline(sw) + _against_reference(sw) + _fastest(sw) + _tolerance_pays(sw)
                + _time_to_accuracy(sw) + _accuracy(sw)
                + _accounting(sw) + _bounds(sw) + _regimes(sw) + sections.text(sw)
                + ["## Figures", ""])
    lines = _header(sw, tally, list(_seen)) + body
    for name, what in FIGURES:
        if (sw.folder / "figures" / f"{name}.png").exists():
            lines += [f"### {what}", "", f"![{name}](figures/{name}.png)", ""]
    return "\n".join(lines)


def write(sw: Sweep) -> object:
    """Write ``report.md`` into the sweep folder; return its path."""
    path = sw.folder / "report.md"
    path.write_text(report_text(sw))
    return path


def readme_table(sw: Sweep) -> str:
    """The README's table: tcp-cubic's iterations/s, every other scheme as its median per-seed
    ratio to it, each with its interval; a legend line says what the intervals cover."""
    losses = sorted(sw.ok.loss_pct.unique())
    lines = ["| random loss | " + " | ".join(f"{x:g} %" for x in losses) + " |",
             "|---|" + "---|" * len(losses)]
    shown = []
    for scheme in sw.order:
        cells = []
        for x in losses:
            d = sw.ok[sw.ok.loss_pct == x]
            est = (sw.estimate(d, scheme, "iters_per_s") if scheme == BASELINE
                   else sw.ratio(sw.series(d, scheme, "iters_per_s"),
                                 sw.series(d, BASELINE, "iters_per_s")))
            shown.append(est)
            cells.append(est.fmt(".2f", "" if scheme == BASELINE else "x"))
        name = f"`{scheme}`" + (", iterations/s" if scheme == BASELINE else "")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines + ["", stats.intervals_legend(shown)])
