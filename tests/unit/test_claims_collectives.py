"""The findings on collectives from tables alone: verdicts by the rule, time to accuracy from the
evaluations, and no queue drops claimed for runs whose packets do not all go to the PS."""

import types

import pytest

from harness.reporting.publish.claims import collectives
from harness.reporting.tables import load
from harness.running import results
from tests.unit.test_figures import _run_row

SPEED = {"ps": 4.0, "tree": 8.0, "ring": 4.0}     # the tree twice as fast, the ring the same


@pytest.fixture
def folder(tmp_path):
    rows, curves = [], []
    for pattern, speed in SPEED.items():
        for scheme in ("ltp", "tcp-cubic-lowrto"):
            for seed in range(3):
                wobble = 1 + 0.01 * (seed - 1) * (1 if pattern != "ring" else -1)
                r = _run_row(scheme, 0.0, seed, speed * wobble, 0.7, pattern=pattern,
                             run_id=f"{scheme}_{pattern}_{seed}", iterations=40,
                             iterations_done=40, eval_every=10, model="mlp",
                             dataset="fashion-mnist", bottleneck_tx_bytes=40 * 437_544,
                             mean_recv_frac=1.0, queue_drops=5000, max_train_s=30.0)
                rows.append(r)
                for it, acc in ((10, 0.5), (20, 0.66), (30, 0.6), (40, 0.7)):
                    curves.append({"run_id": r["run_id"], "scheme": scheme, "transport": scheme,
                                   "loss_pct": 0.0, "delay_ms": 0.0, "seed": seed,
                                   "iteration": it, "time_s": it / (speed * wobble),
                                   "accuracy": acc, "test_loss": 0.4, "sync": "bsp",
                                   "fault": "none", "byzantine": "0", "aggregator": "mean"})
    results.append_rows(tmp_path / "runs.csv", results.RUNS_COLUMNS, rows)
    results.append_rows(tmp_path / "curves.csv", results.CURVES_COLUMNS, curves)
    return tmp_path


def _ctx(path):
    f = types.SimpleNamespace(sweep=load(path), seeds=lambda: [0, 1, 2],
                              cite=lambda: "`results/patterns/`", status=lambda: "fresh")
    return types.SimpleNamespace(folder=lambda rel: f)


def test_the_faster_pattern_is_named_and_the_equal_one_is_not(folder):
    text = collectives.summary(_ctx(folder))
    assert "The tree against the PS, iterations/s per loss and scheme: faster in 2, within " \
           "noise in 0, slower in 0 of 2 cells" in text
    assert "The ring against the PS, iterations/s per loss and scheme: faster in 0, within " \
           "noise in 2, slower in 0 of 2 cells" in text
    assert "makes 4 comparisons" in text


def test_time_to_accuracy_is_the_first_evaluation_at_the_target(folder):
    d = collectives._frame(_ctx(folder).folder(collectives.PATTERNS))
    tree = d[(d.pattern == "tree") & (d.seed == 1)]
    assert tree.tta_s.iloc[0] == pytest.approx(20 / 8.0)   # 0.66 at iteration 20, not 0.7 at 40
    assert "(3 of 3 reached)" in "\n".join(collectives.patterns_text(_ctx(folder)))


def test_queue_drops_are_shown_for_every_pattern(folder):
    # queue_drops counts every switch port's packets in less out, so it means the same under
    # every pattern (topologies/testbed/counters.py) and the tables keep it for trees and rings.
    ok = load(folder).ok
    assert (ok.queue_drops == 5000).all()
