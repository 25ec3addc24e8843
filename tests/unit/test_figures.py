"""Figures and report from tables alone: intervals, honest comparisons, every figure written."""

import numpy as np
import pandas as pd
import pytest

from harness.reporting import figures, report, stats
from harness.reporting.tables import load
from harness.running import results


def _run_row(scheme, loss, seed, iters_per_s, acc, n_workers=8, **extra):
    row = {c: "" for c in results.names(results.RUNS_COLUMNS)}
    iter_s = 1 / iters_per_s
    row.update(
        run_id=f"{scheme}_{loss}_{n_workers}_{seed}", sweep="t", status="ok", scheme=scheme,
        transport=scheme, n_workers=n_workers, bottleneck_mbps=200.0, queue_pkts=64,
        loss_pct=loss, delay_ms=0.0, seed=seed, iterations=50, iterations_done=50,
        iters_per_s=iters_per_s, iter_p50_s=iter_s, iter_p99_s=1.5 * iter_s,
        final_accuracy=acc, target_accuracy=0.8, target_reached=acc >= 0.8,
        time_to_target_s=50 * iter_s if acc >= 0.8 else None, measured_loss_pct=loss,
        filled_frac_mean=0.01 if scheme == "ltp" and loss else 0.0, filled_frac_max=0.02,
        early_closes=8 if scheme == "ltp" and loss else 0, max_wait_closes=0,
        retx_avoided=30 if scheme == "ltp" and loss else 0, retransmits=100 * loss,
        queue_drops=10, bottleneck_util_frac=0.8, fd_bound_s=0.165, compute_p50_s=0.002,
        update_p50_s=0.001, iter_bound_s=0.168, iter_over_bound=iter_s / 0.168,
        push_bound_s=0.14, broadcast_p50_s=0.8 * iter_s,
        cpu_busy_frac=0.7, started_at="2026-11-23T10:00:00+00:00", wall_s=20.0,
        git_commit="abc", git_dirty=False)
    row.update(extra)
    return row


@pytest.fixture
def sweep(tmp_path):
    rng = np.random.default_rng(1)
    rows, iters, curves = [], [], []
    speeds = {"tcp-cubic": {0: 3.2, 5: 0.9}, "ltp": {0: 4.1, 5: 4.0},
              "ltp-reliable": {0: 4.15, 5: 3.9}}
    for scheme, by_loss in speeds.items():
        for loss, speed in by_loss.items():
            for n in (8, 16):
                for seed in range(3):
                    r = _run_row(scheme, loss, seed, speed * (8 / n) * (1 + 0.02 * rng.standard_normal()),
                                 0.86 if scheme != "ltp" else 0.85, n_workers=n)
                    rows.append(r)
                    for t in range(5):
                        iters.append({c.name: "" for c in results.ITERATIONS_COLUMNS} | {
                            "run_id": r["run_id"], "scheme": scheme, "transport": scheme,
                            "loss_pct": loss, "delay_ms": 0.0, "bottleneck_mbps": 200.0,
                            "n_workers": n, "seed": seed, "iteration": t, "iter_s": 0.25,
                            "broadcast_s": 0.2, "gather_s": 0.05})
                    curves.append({"run_id": r["run_id"], "scheme": scheme, "transport": scheme,
                                   "loss_pct": loss, "delay_ms": 0.0, "seed": seed,
                                   "iteration": 50, "time_s": 12.0, "accuracy": r["final_accuracy"],
                                   "test_loss": 0.4, "sync": "bsp", "fault": "none",
                                   "byzantine": "0", "aggregator": "mean"})
    results.append_rows(tmp_path / "runs.csv", results.RUNS_COLUMNS, rows)
    results.append_rows(tmp_path / "iterations.csv", results.ITERATIONS_COLUMNS, iters)
    results.append_rows(tmp_path / "curves.csv", results.CURVES_COLUMNS, curves)
    return tmp_path


def test_every_figure_and_the_report_are_written(sweep):
    written = figures.make(sweep)
    names = {p.name for p in written}
    for name in ("throughput", "accuracy", "converge", "sync_cdf", "loss_tolerance",
                 "bottleneck", "bounds", "regime_n_workers"):
        assert f"{name}.png" in names and f"{name}.pdf" in names
    assert "report.md" in names


def test_the_report_names_a_winner_only_where_intervals_separate(sweep):
    text = report.report_text(load(sweep))
    # ltp and ltp-reliable differ by ~1-3 %, with 2 % noise: within noise at 0 % loss.
    line = next(ln for ln in text.splitlines()
                if ln.startswith("- 8 workers, 0 % loss: ltp ") and "ltp-reliable" in ln)
    assert "within noise" in line
    # TCP CUBIC at 5 % loss is 4x slower: the best is named with separated intervals.
    fastest = next(ln for ln in text.splitlines()
                   if ln.startswith("- 8 workers, 5 % loss, iterations/s"))
    assert "TCP CUBIC" not in fastest.split("best")[1].split("(")[0]
    assert "3 runs per cell (seeds 0-2)" in text
    # the brackets are labelled with what three runs give, and the comparisons are counted
    assert "75.0 % with 3 runs" in text and "This report makes" in text


def test_accuracy_verdicts_use_the_one_point_margin(sweep):
    text = report.report_text(load(sweep))
    ltp = [ln for ln in text.splitlines() if ln.startswith("- 8 workers, 5 % loss, LTP:")]
    assert ltp and "within 1 point" in ltp[0]


def test_accuracy_of_runs_stopped_by_the_time_cap_is_called_not_converged(tmp_path):
    rows = [_run_row("tcp-cubic", 0, seed, 3.3, 0.86, stopped_by="iterations")
            for seed in range(3)]
    rows += [_run_row("tcp-cubic", 10, seed, 0.2, 0.76, stopped_by="time_cap",
                      iterations_done=12 + seed) for seed in range(3)]
    rows += [_run_row("ltp", 10, seed, 4.0, 0.86, stopped_by="iterations") for seed in range(3)]
    results.append_rows(tmp_path / "runs.csv", results.RUNS_COLUMNS, rows)
    text = report.report_text(load(tmp_path)).splitlines()
    tcp = next(ln for ln in text if ln.startswith("- 10 % loss, TCP CUBIC:"))
    assert "more than 1 point below" in tcp
    assert "3 of 3 runs stopped at the training-time cap after a median of 13 of 50" in tcp
    ltp = next(ln for ln in text if ln.startswith("- 10 % loss, LTP:"))
    assert "cap" not in ltp
    assert tmp_path / "figures" / "converge.png" in figures.make(tmp_path)   # marked there too


def test_the_rest_is_split_into_the_broadcast_and_what_follows(sweep):
    text = report.report_text(load(sweep)).splitlines()
    head = text.index(next(ln for ln in text if ln.startswith("Where the rest goes")))
    row = next(ln for ln in text[head:] if ln.startswith("| 8 workers | 0 | LTP |"))
    cells = [c.strip() for c in row.strip("|").split("|")][3:]
    bcast, bound, over, after, floor, over_after = map(float, cells)
    assert bound == 0.148   # fd bound 0.165 less one 0.0175 s push: 8 parameter messages
    assert over == pytest.approx(bcast - bound, abs=0.0015)
    assert floor == pytest.approx(0.0175 + 0.002 + 0.001, abs=0.0005)
    assert over_after == pytest.approx(after - floor, abs=0.0015)


def test_readme_table_carries_intervals(sweep):
    table = report.readme_table(load(sweep))
    assert table.splitlines()[0] == "| random loss | 0 % | 5 % |"
    assert "[" in table and "x [" in table


def test_the_interval_of_a_median_is_reproducible_and_labelled():
    values = [3.0, 3.3, 2.9, 3.1]
    a, b = stats.median_ci(values), stats.median_ci(values)
    assert a == b and a.lo <= a.value <= a.hi and a.label == "87.5 %"
    assert stats.median_ci([]).n == 0
    ratio = stats.ratio_ci([6.0, 6.2, 6.1], [3.0, 3.1, 2.9])
    assert ratio.lo <= 2.0 <= ratio.hi and ratio.at_least and ratio.label == ">= 56.2 %"


def test_a_missed_target_counts_as_infinitely_late():
    # Dropping the two misses would make this scheme look like the fastest (10 s).
    est = stats.censored_median_ci([10.0, None, None], [True, False, False])
    assert np.isinf(est.value) and est.n == 3 and est.fmt(".1f").startswith("not reached")
    est = stats.censored_median_ci([10.0, 12.0, None], [True, True, False])
    assert est.value == 12.0 and est.lo == 10.0 and np.isinf(est.hi)
    fast = stats.censored_median_ci([20.0, 21.0, 22.0], [True] * 3)
    assert fast.value == 21.0 and not fast.overlaps(stats.censored_median_ci(
        [30.0, None, None], [True, False, False]))


def test_time_to_accuracy_section(tmp_path):
    rows = []
    for seed in range(3):
        for scheme, tta in (("ltp", 20.0 + seed), ("ltp-reliable", 30.0 + seed),
                            ("tcp-cubic", None if seed else 140.0)):
            rows.append(_run_row(scheme, 10, seed, 2.0, 0.80 if tta else 0.7, stop_at_target=True,
                                 max_train_s=150.0, target_reached=tta is not None,
                                 time_to_target_s=tta))
    results.append_rows(tmp_path / "runs.csv", results.RUNS_COLUMNS, rows)
    results.append_rows(tmp_path / "iterations.csv", results.ITERATIONS_COLUMNS, [])
    results.append_rows(tmp_path / "curves.csv", results.CURVES_COLUMNS, [])
    text = report.report_text(load(tmp_path))
    section = text.split("## Time to accuracy")[1].split("\n## ")[0]
    assert "| 10 % loss | TCP CUBIC | 3 | 1 | not reached [" in section
    assert "fastest to 80%: best: LTP (better than every other" in section
    assert "ltp 21.0 s [20.0, 22.0] and ltp-reliable 31.0 s [30.0, 32.0]: ltp is better" in section
    assert "no comparison is stated" in text.split("## Accuracy against lossless TCP")[1]
    assert "accuracy.png" in [p.name for p in figures.make(tmp_path)]


def test_a_malformed_table_is_one_sentence(tmp_path):
    (tmp_path / "runs.csv").write_text("run_id,status\n\"unterminated,ok\n")
    with pytest.raises(results.ResultsError):
        load(tmp_path)


def test_faults_figures_and_report_section(tmp_path):
    """A sweep over sync modes and faults gets its two figures and its report section, and the
    detection sentence names TCP sooner only where the intervals separate."""
    rows, iters = [], []
    for scheme, detect in (("tcp-cubic", 0.01), ("ltp", 0.9)):
        for sync in ("bsp", "async"):
            for fault in ("none", "kill@20"):
                for seed in range(3):
                    faulted = fault != "none"
                    r = _run_row(scheme, 0.0, seed, 4.0, 0.75, sync=sync, fault=fault,
                                 run_id=f"{scheme}_{sync}_{fault}_{seed}",
                                 detection_s=detect + 0.01 * seed if faulted else None,
                                 detected_as=("gone" if scheme == "tcp-cubic" else "missing")
                                 if faulted else "",
                                 iterations_lost=20 if faulted else None, false_alarms=0,
                                 staleness_mean=0.0 if sync == "bsp" else 6.5,
                                 staleness_max=0 if sync == "bsp" else 12)
                    rows.append(r)
                    for t in range(40):
                        iters.append({c.name: "" for c in results.ITERATIONS_COLUMNS} | {
                            "run_id": r["run_id"], "scheme": scheme, "transport": scheme,
                            "loss_pct": 0.0, "delay_ms": 0.0, "bottleneck_mbps": 200.0,
                            "n_workers": 8, "seed": seed, "iteration": t, "sync": sync,
                            "fault": fault,
                            "iter_s": 1.2 if faulted and t == 20 else 0.25})
    curves = [{"run_id": r["run_id"], "scheme": r["scheme"], "transport": r["scheme"],
               "loss_pct": 0.0, "delay_ms": 0.0, "seed": r["seed"], "sync": r["sync"],
               "fault": r["fault"], "iteration": it, "time_s": it * 0.25, "accuracy": acc,
               "test_loss": 0.5, "byzantine": "0", "aggregator": "mean"} for r in rows for it, acc in ((0, 0.1), (20, 0.72), (40, 0.75))]
    results.append_rows(tmp_path / "runs.csv", results.RUNS_COLUMNS, rows)
    results.append_rows(tmp_path / "iterations.csv", results.ITERATIONS_COLUMNS, iters)
    results.append_rows(tmp_path / "curves.csv", results.CURVES_COLUMNS, curves)
    names = {p.name for p in figures.make(tmp_path)}
    assert {"faults_tta.png", "faults_cdf.png", "report.md"} <= names
    text = (tmp_path / "report.md").read_text()
    assert "## Training through failure and staleness" in text
    assert "| async | kill@20 | LTP | 3 | 0.750 [0.750, 0.750] | 5.0 [5.0, 5.0] |" in text
    line = next(ln for ln in text.splitlines() if ln.startswith("- bsp, kill@20:"))
    assert "TCP CUBIC is better" in line


def _byzantine_curve(row, scheme, sync, acc):
    """A run's two evaluations: chance at 0, ``acc`` at 50 iterations."""
    return [{"run_id": row["run_id"], "scheme": scheme, "transport": scheme, "loss_pct": 0.0,
             "delay_ms": 0.0, "seed": row["seed"], "sync": sync, "fault": "none",
             "byzantine": row["byzantine"], "aggregator": row["aggregator"], "iteration": it,
             "time_s": it * 0.25, "accuracy": a, "test_loss": 0.5}
            for it, a in ((0, 0.1), (50, acc))]


def _byzantine_report(tmp_path, rows, curves) -> str:
    """Tables written, figures drawn (the Byzantine one among them); the report's text."""
    results.append_rows(tmp_path / "runs.csv", results.RUNS_COLUMNS, rows)
    results.append_rows(tmp_path / "curves.csv", results.CURVES_COLUMNS, curves)
    assert "byzantine_accuracy.png" in {p.name for p in figures.make(tmp_path)}
    return (tmp_path / "report.md").read_text()


def test_byzantine_figure_and_report_section(tmp_path):
    """A sweep over attacks and rules gets its figure and its section: averaging collapses under
    the attack, score holds, and the verdicts come from intervals."""
    rows, curves = [], []
    for attack in ("0", "2:sign-flip"):
        for rule in ("mean", "score"):
            for seed in range(3):
                acc = 0.1 if (attack != "0" and rule == "mean") else 0.75 + 0.002 * seed
                r = _run_row("tcp-cubic", 0.0, seed, 4.0, acc, byzantine=attack, aggregator=rule,
                             run_id=f"{attack}_{rule}_{seed}", byzantine_updates=200 if attack
                             != "0" else 0, byzantine_kept=0 if rule == "score" else 200,
                             honest_updates=600, honest_rejected=0, honest_filled=0,
                             honest_filled_rejected=0, agg_p50_s=0.004)
                rows.append(r)
                curves += _byzantine_curve(r, "tcp-cubic", "bsp", acc)
    text = _byzantine_report(tmp_path, rows, curves)
    assert "## Byzantine workers and aggregation rules" in text
    assert "byzantine 2:sign-flip, mean:" in text and "collapses" in text
    assert "byzantine 2:sign-flip, score:" in text and ": holds." in text


def test_byzantine_section_keeps_sync_modes_and_holdouts_apart(tmp_path):
    """validation-async and privacy vary the sync mode and the holdout: each is a cell of its
    own, and a rule is compared with the attack-free mean run of its own sync mode."""
    rows, curves = [], []
    cells = [(sync, attack, rule, 0) for sync in ("ssp:2", "async") for attack in
             ("0", "2:sign-flip") for rule in ("mean", "zeno++")]
    cells += [("async", attack, "zeno++", 6000) for attack in ("0", "2:sign-flip")]
    for sync, attack, rule, holdout in cells:
        for seed in range(3):
            acc = 0.75 + 0.002 * seed
            if attack != "0":
                acc = 0.1 if rule == "mean" else (0.6 if sync == "ssp:2" else acc)
            r = _run_row("ltp", 0.0, seed, 4.0, acc, byzantine=attack, aggregator=rule,
                         sync=sync, holdout=holdout,
                         run_id=f"{sync}_{attack}_{rule}_{holdout}_{seed}",
                         byzantine_updates=200 if attack != "0" else 0, byzantine_kept=0,
                         honest_updates=600, honest_rejected=0, honest_filled=0,
                         honest_filled_rejected=0, agg_p50_s=0.004)
            rows.append(r)
            curves += _byzantine_curve(r, "ltp", sync, acc)
    text = _byzantine_report(tmp_path, rows, curves)
    text = text.split("## Byzantine workers and aggregation rules")[1].split("\n## ")[0]
    verdicts = [ln for ln in text.splitlines() if ln.startswith("- ") and "zeno++:" in ln]
    assert any("sync async, holdout 0," in ln and ": holds." in ln for ln in verdicts)
    assert any("sync ssp:2, holdout 0," in ln and "beyond the margin" in ln for ln in verdicts)
    # With its own validation set zeno++ is compared with the mean run that has none.
    assert any("sync async, holdout 6000," in ln and ": holds." in ln for ln in verdicts)
    table = [ln for ln in text.splitlines() if ln.startswith("| ") and "zeno++ |" in ln]
    assert len(table) == 2 * 2 + 2   # every (sync, attack) at holdout 0, and async at 6000


def test_compression_figures_and_report_section(tmp_path):
    """A sweep over compression settings gets its two figures and its section: bytes per round
    as a ratio to the uncompressed run with an interval, and the accuracy cost in points, or
    "within noise" where the interval of the difference holds zero."""
    rows, curves = [], []
    settings = {("none", 1, 1): (900_000, 0.76), ("topk:0.01", 1, 0): (20_000, 0.70),
                ("sign", 1, 0): (30_000, 0.759)}
    for (comp, steps, reset), (wire, acc) in settings.items():
        for seed in range(3):
            r = _run_row("ltp", 0.0, seed, 4.0, acc + 0.001 * seed, compress=comp,
                         local_steps=steps, error_reset=reset, run_id=f"{comp}_{seed}",
                         wire_bytes_per_iter=wire * (1 + 0.01 * seed), compress_dropped=0)
            rows.append(r)
            curves += [{"run_id": r["run_id"], "scheme": "ltp", "transport": "ltp",
                        "loss_pct": 0.0, "delay_ms": 0.0, "seed": seed, "sync": "bsp",
                        "fault": "none", "byzantine": "0", "aggregator": "mean",
                        "iteration": it, "time_s": it * 0.25, "accuracy": a,
                        "test_loss": 0.5} for it, a in ((0, 0.1), (50, acc))]
    results.append_rows(tmp_path / "runs.csv", results.RUNS_COLUMNS, rows)
    results.append_rows(tmp_path / "curves.csv", results.CURVES_COLUMNS, curves)
    names = {p.name for p in figures.make(tmp_path)}
    assert {"compression_tradeoff.png", "compression_accuracy.png"} <= names
    text = (tmp_path / "report.md").read_text()
    assert "## Compressed pushes, local steps and error reset" in text
    top = next(line for line in text.splitlines() if line.startswith("- LTP, 0 % loss, topk"))
    assert "x0.022 [" in top and "at a cost of 6.0 points of accuracy" in top
    # seed by seed, sign costs exactly 0.1 points here: paired, that is beyond noise
    sign = next(line for line in text.splitlines() if line.startswith("- LTP, 0 % loss, sign"))
    assert "at a cost of 0.1 points of accuracy [0.1, 0.1]" in sign


def test_reset_modes_and_sync_modes_are_settings_of_their_own(tmp_path):
    """The cser presets: drop and cser runs of one compressor, under two sync modes, are four
    settings, never pooled; each is compared with the uncompressed run of its own sync mode."""
    rows = []
    for sync in ("bsp", "async"):
        for comp, mode, acc in (("none", "drop", 0.76), ("topk:0.01", "drop", 0.70),
                                ("topk:0.01", "cser", 0.74)):
            for seed in range(3):
                rows.append(_run_row("ltp", 0.0, seed, 4.0, acc, compress=comp, local_steps=1,
                                     error_reset=4 if comp != "none" else 1, reset_mode=mode,
                                     sync=sync, run_id=f"{sync}_{comp}_{mode}_{seed}",
                                     wire_bytes_per_iter=20_000 if comp != "none" else 900_000,
                                     compress_dropped=0))
    results.append_rows(tmp_path / "runs.csv", results.RUNS_COLUMNS, rows)
    figures.make(tmp_path, figures=False)
    lines = (tmp_path / "report.md").read_text().splitlines()
    table = [line for line in lines if line.startswith("| LTP")]
    assert len(table) == 6 and all("| 3 |" in line for line in table)   # 3 seeds a setting
    assert sum("| 4 cser |" in line for line in table) == 2
    cser = next(line for line in lines if line.startswith("- LTP, 0 % loss, topk:0.01, H=1, "
                                                          "reset 4 cser, async"))
    assert "at a cost of 2.0 points of accuracy" in cser


def test_best_of_one_scheme_names_no_winner():
    one = pd.Series([1.0, 1.1, 1.2], index=[0, 1, 2])
    names, sentence = stats.best({"LTP": one})
    assert names == ["LTP"] and "nothing to compare" in sentence
