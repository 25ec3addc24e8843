"""PLOT's bound rules: SNR profiling, layer size, explicit bounds."""

import numpy as np
import pytest

from transports import registry
from transports.base import Delivery, Layout, OptionError
from transports.plot import (adaptive_ranges, bounds_by_size, bounds_by_snr, layer_snr,
                             running_snr)

LAYOUT = Layout.from_sizes([("signal.weight", 4000), ("noise.weight", 4000), ("head.bias", 10)])


def _deliveries(rng, n_workers=8):
    """Layer 'signal' agrees across workers; layer 'noise' is mostly disagreement."""
    common = rng.standard_normal(LAYOUT.n_floats)
    out = []
    for _ in range(n_workers):
        g = common.copy()
        g[:4000] += 0.1 * rng.standard_normal(4000)      # high SNR
        g[4000:8000] = 0.05 * common[4000:8000] + rng.standard_normal(4000)   # low SNR
        out.append(Delivery.whole(g.astype(np.float32), LAYOUT))
    return out


def test_snr_separates_consistent_from_noisy_layers():
    snr = layer_snr(_deliveries(np.random.default_rng(0)), LAYOUT)
    assert snr[0] > 100 * snr[1]
    assert snr[1] < 1.0 < snr[0]


def test_snr_rule_gives_noisy_layers_the_lowest_bound_and_small_layers_everything():
    snr = layer_snr(_deliveries(np.random.default_rng(1)), LAYOUT)
    bounds = bounds_by_snr(snr, LAYOUT, lo=0.7, hi=1.0, reliable_below=355)
    assert bounds[2] == 1.0                      # 10 floats: always whole
    assert 0.7 <= bounds[1] < bounds[0] <= 1.0
    assert bounds[0] > 0.99 and bounds[1] < 0.9


def test_size_rule_gives_the_largest_layer_the_floor():
    layout = Layout.from_sizes([("a", 100_000), ("b", 8_000), ("c", 64)])
    bounds = bounds_by_size(layout, lo=0.8, hi=1.0, reliable_below=355)
    assert bounds[0] == pytest.approx(0.8)
    assert 0.8 < bounds[1] < 1.0
    assert bounds[2] == 1.0


def test_plot_records_every_option_and_rejects_bad_ones():
    opts = registry.create("plot").options()
    for key in ("bound_rule", "bound_min", "bound_max", "profile_iterations", "filler", "cc"):
        assert key in opts
    assert "threshold_min" not in opts  # LTP's adaptive threshold does not apply to PLOT
    with pytest.raises(OptionError, match="bound_rule"):
        registry.create("plot", {"bound_rule": "magic"})
    with pytest.raises(OptionError, match="needs bounds"):
        registry.create("plot", {"bound_rule": "explicit"})
    with pytest.raises(OptionError, match="must not exceed"):
        registry.create("plot", {"bound_min": 0.9, "bound_max": 0.8})
    with pytest.raises(OptionError, match="layer name"):
        registry.create("plot", {"bound_rule": "explicit", "bounds": [["0.weight", 1.5]]})
    explicit = registry.create("plot", {"bound_rule": "explicit", "bounds": [["0.weight", 0.8]]})
    assert explicit.options()["bounds"] == [["0.weight", 0.8]]


# ---------------------------------------------------------------- the adaptive rule
def test_adaptive_ranges_run_from_the_snr_bound_to_bound_max_and_keep_small_layers_whole():
    snr = [3.0, 0.0, 50.0]
    lows, highs = adaptive_ranges(snr, LAYOUT, lo=0.7, hi=0.98, reliable_below=355)
    assert lows == bounds_by_snr(snr, LAYOUT, lo=0.7, hi=0.98, reliable_below=355)
    assert lows[0] == pytest.approx(0.7 + 0.28 * 0.75) and lows[1] == pytest.approx(0.7)
    assert highs == [0.98, 0.98, 1.0]            # head.bias: 10 floats, always whole
    assert lows[2] == highs[2] == 1.0
    assert all(lo <= hi for lo, hi in zip(lows, highs))
    # No noise measured yet (infinite SNR): the lower end is bound_max, not NaN.
    lows, highs = adaptive_ranges([np.inf] * 3, LAYOUT, lo=0.7, hi=0.98, reliable_below=355)
    assert lows == [0.98, 0.98, 1.0] == highs


def test_running_snr_is_an_exponentially_weighted_mean_that_skips_what_was_not_measured():
    est = running_snr(np.array([10.0, 2.0, np.inf]), np.array([0.0, np.nan, 4.0]), weight=0.1)
    assert est[0] == pytest.approx(9.0)       # 0.9 x 10 + 0.1 x 0
    assert est[1] == 2.0                       # no sample this time: kept
    assert est[2] == 4.0                       # nothing profiled: the first sample
    assert running_snr(np.array([5.0]), np.array([1.0]), weight=0.0)[0] == 5.0
    # Repeated samples pull it toward them at rate snr_weight.
    est = np.array([10.0])
    for _ in range(10):
        est = running_snr(est, np.array([0.0]), weight=0.1)
    assert est[0] == pytest.approx(10.0 * 0.9 ** 10)


def test_snr_of_partial_deliveries_counts_only_what_every_worker_delivered():
    rng = np.random.default_rng(2)
    whole = _deliveries(rng, n_workers=4)
    holes = rng.random(LAYOUT.n_floats) < 0.3
    partial = []
    for k, d in enumerate(whole):
        mask = np.ones(LAYOUT.n_floats, bool)
        mask[np.flatnonzero(holes)[k::4]] = False          # each worker misses its own share
        values = np.where(mask, d.values, 0.0).astype(np.float32)   # what the filler leaves
        partial.append(Delivery(values, mask, float(mask.mean()), (), {}))
    keep = ~holes
    kept_layout = Layout.from_sizes([(s.name, int(keep[s.offset:s.offset + s.length].sum()))
                                     for s in LAYOUT.segments])
    kept = [Delivery.whole(d.values[keep], kept_layout) for d in whole]
    np.testing.assert_allclose(layer_snr(partial, LAYOUT), layer_snr(kept, kept_layout))
    # A layer no coordinate of which every worker delivered has no SNR this time.
    partial[0].mask[8000:] = False
    assert np.isnan(layer_snr(partial, LAYOUT)[2])


def test_adaptive_options_are_refused_under_the_frozen_rules_and_default_to_ltps():
    from transports.ltp import ltp_options

    ltp = {o.name: o.default for o in ltp_options()}
    for rule in ("snr", "size", "explicit"):
        for name, value in (("loss_weight", 2.0), ("rtt_weight", 0.05), ("snr_weight", 0.2)):
            options = {"bound_rule": rule, name: value}
            if rule == "explicit":
                options["bounds"] = [["0.weight", 0.8]]
            with pytest.raises(OptionError, match=f"{name} applies only to bound_rule 'adaptive'"):
                registry.create("plot", options)
    frozen = registry.create("plot")
    assert not {"snr_weight", "loss_weight", "rtt_weight"} & set(frozen.options())
    adaptive = registry.create("plot", {"bound_rule": "adaptive"}).options()
    assert adaptive["loss_weight"] == ltp["loss_weight"]
    assert adaptive["rtt_weight"] == ltp["rtt_weight"] and adaptive["snr_weight"] == 0.1
    with pytest.raises(OptionError, match="snr_weight must be"):
        registry.create("plot", {"bound_rule": "adaptive", "snr_weight": 1.5})
    with pytest.raises(OptionError, match="loss_weight must be"):
        registry.create("plot", {"bound_rule": "adaptive", "loss_weight": -1})


def test_the_core_gets_the_adaptive_weights_only_under_the_adaptive_rule():
    def core(options):
        t = registry.create("plot", options)
        return t.core_settings(t.receive_thresholds(), t._layer_settings(LAYOUT, None))

    assert core({})["loss_weight"] == core({})["rtt_weight"] == 0.0
    adaptive = core({"bound_rule": "adaptive", "loss_weight": 2.0, "rtt_weight": 0.05})
    assert adaptive["loss_weight"] == 2.0 and adaptive["rtt_weight"] == 0.05


@pytest.fixture
def served(monkeypatch):
    """A PLOT PS end on loopback (no traffic), recording every per-segment policy it sets."""
    from tests.conformance.loopback import policy_recording_ends

    with policy_recording_ends(monkeypatch, "plot", LAYOUT, n_workers=4) as serve:
        yield serve


def test_the_ps_profiles_then_moves_each_lower_end_with_the_running_snr(served):
    ps, calls = served({"bound_rule": "adaptive", "profile_iterations": 2, "bound_min": 0.7,
                        "snr_weight": 0.5})
    assert calls == [(1, 1.0, 1.0), (2, 1.0, 1.0), (3, 1.0, 1.0)]   # profiling: whole
    rng = np.random.default_rng(4)
    for t in range(2):
        ps.observe(t, _deliveries(rng, n_workers=4))
    profiled = ps.snr_sum / 2
    lows, highs = adaptive_ranges(profiled, LAYOUT, 0.7, 1.0, 355)
    assert calls[-3:] == [(1 + i, lo, hi) for i, (lo, hi) in enumerate(zip(lows, highs))]
    assert ps.bounds == lows and ps.uppers == highs == [1.0, 1.0, 1.0]
    # The noisy layer's workers now agree: its SNR, and its lower end, rise every iteration.
    before = ps.bounds[1]
    agree = [Delivery.whole(np.full(LAYOUT.n_floats, 1.0, np.float32)
                            + 0.01 * rng.standard_normal(LAYOUT.n_floats).astype(np.float32),
                            LAYOUT) for _ in range(4)]
    ps.observe(2, agree)
    sample = layer_snr(agree, LAYOUT)
    assert ps.snr_now[1] == pytest.approx(0.5 * profiled[1] + 0.5 * sample[1])
    assert ps.bounds[1] > before and len(calls) == 9
    stats = ps._decorate(Delivery.whole(agree[0].values, LAYOUT)).stats
    assert stats["bound_1"] == ps.bounds[1] and stats["bound_max_1"] == 1.0
    summary = ps.stats()
    assert summary["snr:noise.weight"] == ps.snr_now[1]
    assert summary["bound:noise.weight"] == ps.bounds[1]
    assert summary["bound_max:noise.weight"] == 1.0
    ps.observe(3, agree[:1])   # one gradient measures no noise: nothing changes
    assert len(calls) == 9


def test_the_frozen_snr_rule_sets_its_bounds_once(served):
    ps, calls = served({"profile_iterations": 2, "bound_min": 0.7})
    rng = np.random.default_rng(5)
    for t in range(5):
        ps.observe(t, _deliveries(rng, n_workers=4))
    assert len(calls) == 6   # whole, then the bounds after profiling, then never again
    assert [(lo == hi) for _, lo, hi in calls] == [True] * 6
    assert "bound_max_0" not in ps._decorate(_deliveries(rng, 2)[0]).stats


def test_adaptive_without_profiling_starts_at_bound_max_and_follows_the_first_sample(served):
    ps, calls = served({"bound_rule": "adaptive", "profile_iterations": 0, "bound_min": 0.7,
                        "bound_max": 0.95})
    assert calls == [(1, 0.95, 0.95), (2, 0.95, 0.95), (3, 1.0, 1.0)]
    ps.observe(0, _deliveries(np.random.default_rng(6), n_workers=4))
    assert ps.bounds[1] < 0.9 and ps.uppers[:2] == [0.95, 0.95]


def test_the_snr_rule_without_profiling_starts_at_bound_max(served):
    # An infinite SNR (no noise measured) gave NaN bounds, which the core refused at start.
    ps, calls = served({"profile_iterations": 0, "bound_max": 0.95})
    assert calls == [(1, 0.95, 0.95), (2, 0.95, 0.95), (3, 1.0, 1.0)]
