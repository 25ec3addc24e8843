"""PLOT's bound rules: SNR profiling, layer size, explicit bounds."""

import numpy as np
import pytest

from transports import registry
from transports.base import Delivery, Layout, OptionError
from transports.plot import bounds_by_size, bounds_by_snr, layer_snr

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
