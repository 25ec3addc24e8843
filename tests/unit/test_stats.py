"""Intervals whose coverage is what they say, paired verdicts, and the count of comparisons."""

import math

import numpy as np
import pandas as pd
import pytest

from harness.reporting import stats


def test_coverage_of_order_statistics_is_the_binomial_formula():
    # [min, max] of n runs holds the median unless all n fall on one side: 1 - 2^(1-n)
    for n in range(2, 12):
        assert stats.coverage(n, 1) == pytest.approx(1 - 2 ** (1 - n))
    assert stats.coverage(10, 2) == pytest.approx(1 - 2 * (1 + 10) / 1024)
    assert stats.coverage(1, 1) == 0.0


def test_rank_is_the_narrowest_interval_reaching_the_level():
    assert [stats.rank(n) for n in (3, 5, 6, 8, 9, 10, 12)] == [1, 1, 1, 1, 2, 2, 3]
    for n in range(6, 30):
        k = stats.rank(n)
        assert stats.coverage(n, k) >= stats.LEVEL
        assert k == n // 2 or stats.coverage(n, k + 1) < stats.LEVEL


def test_the_stated_coverage_is_the_coverage_a_simulation_finds():
    rng = np.random.default_rng(7)
    for n in (3, 6, 10):
        hits = 0
        for _ in range(4000):
            est = stats.median_ci(rng.exponential(size=n))   # true median: ln 2
            hits += est.lo <= math.log(2) <= est.hi
        expected = stats.coverage(n, stats.rank(n))
        assert abs(hits / 4000 - expected) < 0.03, (n, hits / 4000, expected)


def test_three_runs_are_labelled_seventy_five_percent_and_one_run_has_no_interval():
    assert stats.median_ci([1.0, 2.0, 3.0]).label == "75.0 %"
    one = stats.median_ci([2.0])
    assert one.label == "no interval" and one.fmt() == "2.00 (one run)"


def _cell(values, seeds=None):
    return pd.Series(values, index=seeds if seeds is not None else range(len(values)))


def test_a_paired_verdict_needs_the_per_seed_ratio_to_exclude_one():
    with stats.tally() as t:
        faster = stats.compare("a", _cell([2.0, 2.1, 2.2, 2.3, 2.4, 2.5]), "b",
                               _cell([1.0, 1.0, 1.1, 1.1, 1.2, 1.2]))
        mixed = stats.compare("a", _cell([1.0, 1.2, 0.9, 1.1, 1.0, 1.3]), "b",
                              _cell([1.1, 1.1, 1.0, 1.0, 1.05, 1.2]))
    assert faster.sign == 1 and faster.paired and "a is better" in faster.sentence
    assert mixed.sign == 0 and "within noise" in mixed.sentence
    assert faster.false_rate == pytest.approx(2 ** -5)
    assert len(t.verdicts) == 2 and t.beyond_noise == 1
    assert t.expected_by_chance == pytest.approx(2 * 2 ** -5)
    assert "makes 2 comparisons (2 paired by seed" in t.sentence()


def test_lower_is_better_and_differences():
    v = stats.compare("fast", _cell([10.0, 11.0, 12.0]), "slow", _cell([20.0, 21.0, 22.0]),
                      higher_is_better=False, op="diff")
    assert v.sign == 1 and v.estimate.value == -10.0 and v.false_rate == 0.25


def test_cells_without_common_seeds_are_compared_unpaired():
    v = stats.compare("a", _cell([5.0, 5.1, 5.2], [0, 1, 2]), "b",
                      _cell([1.0, 1.1, 1.2], [3, 4, 5]))
    assert v.sign == 1 and not v.paired
    assert v.false_rate == pytest.approx(0.1, abs=0.005)   # 2 / C(6, 3)
    too_few = stats.compare("a", _cell([1.0, 2.0]), "b", _cell([1.0, 2.0]))
    assert too_few.sign is None


def test_a_missed_target_against_a_missed_target_is_a_tie():
    inf = float("inf")
    est = stats.paired(_cell([inf, 10.0, 12.0]), _cell([inf, 20.0, 24.0]))
    assert sorted([est.lo, est.value, est.hi]) == [0.5, 0.5, 1.0]


def test_judge_counts_a_verdict_on_an_estimate():
    with stats.tally() as t:
        assert stats.judge(stats.median_ci([1.1, 1.2, 1.3]), 1.0) == 1
        assert stats.judge(stats.median_ci([-1.0, 0.5, 1.0]), 0.0) == 0
        assert stats.judge(stats.median_ci([1.0, 2.0]), 0.0) is None
    assert len(t.verdicts) == 2


def test_fresh_share_enumerates_the_draws_and_sums_the_cells():
    runs = [[float(i) for i in range(10)]] * 4
    ints = [stats.median_ci(r) for r in runs]
    expected, lo, hi, probs = stats.fresh_share(runs, ints, 3)
    # the median of 3 draws falls below the 2nd smallest only when two or three draws are the
    # smallest run: 3 * 0.1^2 * 0.9 + 0.1^3 = 0.028, the same above
    assert probs[0] == pytest.approx(1 - 2 * 0.028)
    assert expected == pytest.approx(4 * (1 - 2 * 0.028))
    assert 0 <= lo <= hi <= 4


def test_a_blocked_cell_is_summarised_over_its_blocks():
    # six blocks of three seeds; block b's runs sit around 1 + b / 100
    values = pd.Series([1 + b / 100 + r / 1000 for b in range(6) for r in range(3)],
                       index=range(18))
    block_of = {s: s // 3 for s in range(18)}
    est = stats.blocked(values, block_of)
    assert est.n == 6 and est.over == "blocks" and est.label == "96.9 %"
    assert (est.lo, est.hi) == pytest.approx((1.001, 1.051))
    assert "with 6 blocks" in stats.intervals_legend([est])


def test_blocked_pairs_compare_block_by_block():
    block_of = {s: s // 3 for s in range(18)}
    a = pd.Series([2.0 + 0.01 * s for s in range(18)], index=range(18))
    b = pd.Series([1.0 + 0.01 * s for s in range(18)], index=range(18))
    v = stats.compare("a", a, "b", b, block_of=block_of)
    assert v.sign == 1 and "per-block ratio" in v.sentence
    assert v.false_rate == pytest.approx(1 / 32)


def test_one_more_block_falls_in_the_range_of_the_others_with_b_minus_1_over_b_plus_1():
    expected, lo, hi = stats.one_more_block(6, 20)
    assert expected == pytest.approx(20 * 5 / 7) and lo <= expected <= hi
    # and a simulation agrees: a new draw against the range of six exchangeable ones
    rng = np.random.default_rng(3)
    draws = rng.normal(size=(20000, 7))
    inside = (draws[:, 6] >= draws[:, :6].min(1)) & (draws[:, 6] <= draws[:, :6].max(1))
    assert inside.mean() == pytest.approx(5 / 7, abs=0.01)
