"""PLOT over the real emulated incast: it trains under loss and every layer meets its bound."""

from harness.running.runfiles import RunFiles
from harness.running.runner import execute
from harness.running.spec import RunSpec
from tests.emulation.conftest import network_fixture
from topologies.incast import IncastParams


testbed = network_fixture("plot", IncastParams(n_workers=4, bottleneck_mbps=100,
                                               queue_pkts=64))


def test_plot_trains_under_loss_and_respects_per_layer_bounds(testbed, tmp_path):
    spec = RunSpec(transport="plot", transport_options={"profile_iterations": 5, "bound_min": 0.7},
                   n_workers=4, loss_pct=5.0, iterations=40, eval_every=20, timeout_s=300)
    row, _, _ = execute(testbed, spec, tmp_path / "run", "test")
    assert row["status"] == "ok", row["reason"]
    assert row["final_accuracy"] > 0.6, "chance is 0.1"
    files = RunFiles(tmp_path / "run")
    below_one = 0
    for rec in files.ps_iterations()[5:]:   # after profiling, every layer has its own bound
        for fracs, stats in zip(rec.segment_fracs, rec.msg_stats):
            for layer, frac in enumerate(fracs):
                bound = stats[f"bound_{layer}"]
                assert frac >= bound - 1e-9, (rec.iteration, layer, frac, bound)
                below_one += frac < 1.0
    assert below_one > 0, "PLOT never tolerated any loss at 5% random loss"
    summary = files.host_summary("ps1")
    bounds = {k: v for k, v in summary.transport_stats.items() if k.startswith("bound:")}
    assert bounds["bound:0.bias"] == 1.0   # one-packet layers are always whole
    assert 0.7 <= bounds["bound:0.weight"] < 1.0
