"""phase-bound over the real emulated incast: a short 4-worker run at 5 % random loss trains, and
its PS records both strict and loose rounds, each gradient closed at the threshold of its round's
phase (docs/phase-bound.md)."""

import pytest

from harness.running.runfiles import RunFiles
from harness.running.runner import execute
from harness.running.spec import RunSpec
from tests.emulation.conftest import network_fixture
from topologies.incast import IncastParams

testbed = network_fixture("phase", IncastParams(n_workers=4, bottleneck_mbps=100,
                                                queue_pkts=64))

WARMUP, WINDOW, STRICT, LOOSE = 6, 3, 0.99, 0.6
# A short warm-up and short windows, so that a 40-round run has rounds after the warm-up in
# which the detector can find the gradient norm steady (loose) and the strict warm-up before.
SPEC = RunSpec(transport="phase-bound",
               transport_options={"warmup_rounds": WARMUP, "window_rounds": WINDOW,
                                  "strict_threshold": STRICT, "loose_threshold": LOOSE},
               n_workers=4, loss_pct=5.0, iterations=40, eval_every=20, timeout_s=300)


def test_phase_bound_trains_and_records_strict_and_loose_rounds(testbed, tmp_path):
    row, _, _ = execute(testbed, SPEC, tmp_path / "run", "test")
    assert row["status"] == "ok", row["reason"]
    assert row["iterations_done"] == SPEC.iterations
    assert row["final_accuracy"] > 0.6, "chance is 0.1"
    files = RunFiles(tmp_path / "run")
    stats = files.host_summary("ps1").transport_stats
    assert stats["strict_rounds"] + stats["loose_rounds"] == SPEC.iterations
    assert stats["strict_rounds"] >= WARMUP, "the warm-up rounds are strict"
    assert stats["loose_rounds"] > 0, "the detector never found the gradient norm steady"
    assert stats["phase_switches"] >= 1
    phases, below_one = [], 0
    for rec in files.ps_iterations():
        strict = {s["phase_strict"] for s in rec.msg_stats}
        assert len(strict) == 1, (rec.iteration, strict)   # one phase per round
        phases.append(strict.pop() == 1.0)
        for frac, s in zip(rec.recv_frac, rec.msg_stats):
            bound = STRICT if phases[-1] else LOOSE
            assert s["phase_threshold"] == pytest.approx(bound, abs=1e-6)
            # The core closed the message at the threshold of its round's phase, never below it.
            assert s["threshold_frac"] == pytest.approx(bound, abs=1e-6), (rec.iteration, s)
            assert frac >= bound - 1e-6, (rec.iteration, frac, bound)
            below_one += frac < 1.0
    assert phases[:WARMUP] == [True] * WARMUP
    assert sum(phases) == stats["strict_rounds"]
    assert below_one > 0, "no gradient closed before all of it arrived at 5 % random loss"
