"""phase-bound's phase rule on synthetic norm sequences, the thresholds its PS puts in force, and
its options (transports/phase.py)."""

import math

import numpy as np
import pytest

from transports import registry
from transports.base import Delivery, Layout, OptionError
from transports.phase import PhaseRule, relative_change, round_gradient, round_norm

LAYOUT = Layout.single(1000)


def _run(rule: PhaseRule, samples) -> list[bool]:
    """The phase of every round: round 0's (before any sample), then each next round's."""
    return [rule.strict] + [rule.observe(s) for s in samples]


def test_the_first_rounds_are_strict_whatever_the_norm_does():
    rule = PhaseRule(warmup_rounds=6, window_rounds=2, norm_change=0.5, norm_of="mean")
    phases = _run(rule, [1.0] * 10)
    assert phases[:6] == [True] * 6            # warm-up
    assert phases[6:] == [False] * 5           # a flat norm after it: loose
    assert rule.last_change == 0.0 and rule.windows == 5


def test_without_two_windows_measured_the_rule_stays_strict():
    rule = PhaseRule(warmup_rounds=0, window_rounds=3, norm_change=0.5, norm_of="mean")
    phases = _run(rule, [1.0] * 6)
    assert phases[:6] == [True] * 6   # no evidence before the second window ends
    assert phases[6] is False         # windows [0, 3) and [3, 6) agree


def test_a_sudden_change_of_the_norm_makes_the_next_window_strict():
    rule = PhaseRule(warmup_rounds=4, window_rounds=2, norm_change=0.5, norm_of="mean")
    # Windows: [1, 1] [1, 1] [1, 1] [3, 3] [3, 3] [3.2, 3.2]
    phases = _run(rule, [1.0] * 6 + [3.0] * 4 + [3.2] * 2)
    assert phases[4:6] == [False, False]       # after warm-up, flat: loose
    assert phases[6:8] == [False, False]       # the jump's own window is still loose ...
    assert phases[8:10] == [True, True]        # ... the one after it is strict (change 2.0)
    assert phases[10:] == [False, False, False]   # flat again, then a small change: loose
    assert rule.last_change == pytest.approx(0.2 / 3.0)


def test_a_change_exactly_at_norm_change_counts_as_sensitive():
    rule = PhaseRule(warmup_rounds=0, window_rounds=1, norm_change=0.5, norm_of="mean")
    assert _run(rule, [2.0, 1.0, 1.0]) == [True, True, True, False]   # 2 -> 1 is 0.5


def test_the_sum_norm_is_the_norm_of_the_accumulated_gradient():
    # Two rounds pointing the same way, then two that cancel, then two the same way again: the
    # accumulated gradient's norm (Accordion's measure) goes 2, 0, 2, while each round's stays 1.
    v = np.zeros(4)
    v[0] = 1.0
    samples = [v, v, v, -v, v, v]
    summed = PhaseRule(warmup_rounds=0, window_rounds=2, norm_change=0.5, norm_of="sum")
    assert _run(summed, samples)[4:] == [True, True, True]
    assert summed.last_change == math.inf   # from 0 to 2: Accordion counts it as large
    mean = PhaseRule(warmup_rounds=0, window_rounds=2, norm_change=0.5, norm_of="mean")
    assert _run(mean, [1.0] * 6)[4:] == [False, False, False]


def test_rounds_without_a_measurement_leave_the_last_decision_standing():
    rule = PhaseRule(warmup_rounds=0, window_rounds=2, norm_change=0.5, norm_of="mean")
    phases = _run(rule, [1.0] * 4 + [None, float("nan")] + [1.0, 1.0])
    assert phases[4:] == [False, False, False, False, False]
    assert rule.windows == 3   # the unmeasured window was not counted, nor compared
    # A window measured in part counts its measured rounds only.
    rule = PhaseRule(warmup_rounds=0, window_rounds=2, norm_change=0.5, norm_of="sum")
    _run(rule, [np.ones(1), np.ones(1), None, np.ones(1)])
    assert rule.last_change == 0.0


def test_relative_change():
    assert relative_change(2.0, 3.0) == 0.5 and relative_change(2.0, 1.0) == 0.5
    assert relative_change(0.0, 1.0) == math.inf


def test_the_round_norm_is_estimated_from_what_arrived():
    values = np.ones(LAYOUT.n_floats, np.float32)
    half = np.arange(LAYOUT.n_floats) % 2 == 0
    partial = Delivery(values.copy(), half, 0.5, (0.5,))
    partial.values[~half] = 0.0   # a hole, as the filler leaves it
    whole = Delivery.whole(3 * values, LAYOUT)
    assert round_norm([partial]) == pytest.approx(math.sqrt(LAYOUT.n_floats))
    assert round_norm([partial, whole]) == pytest.approx(2 * math.sqrt(LAYOUT.n_floats))
    assert round_norm([]) is None and round_gradient([]) is None
    # The mean gradient averages each coordinate over the workers that delivered it.
    np.testing.assert_allclose(round_gradient([partial, whole]), np.where(half, 2.0, 3.0))


# ---------------------------------------------------------------------------- the PS end
@pytest.fixture
def served(monkeypatch):
    """A phase-bound PS end on loopback (no traffic), recording every policy it sets."""
    from tests.conformance.loopback import policy_recording_ends

    with policy_recording_ends(monkeypatch, "phase-bound", LAYOUT, n_workers=2) as serve:
        yield serve


def _round(scale: float, n_workers: int = 2) -> list[Delivery]:
    return [Delivery.whole(np.full(LAYOUT.n_floats, scale, np.float32), LAYOUT)
            for _ in range(n_workers)]


@pytest.mark.parametrize("norm_of", ["sum", "mean"])
def test_the_thresholds_in_force_follow_the_rule(served, norm_of):
    ps, calls = served({"warmup_rounds": 4, "window_rounds": 2, "norm_change": 0.5,
                        "norm_of": norm_of, "strict_threshold": 0.98,
                        "loose_threshold": 0.7})
    expected = PhaseRule(4, 2, 0.5, norm_of)
    scales = [1.0] * 6 + [3.0] * 4 + [3.0] * 4
    in_force = []
    for t, scale in enumerate(scales):
        in_force.append(ps.end.threshold(0))
        assert ps.end.threshold(1) == in_force[-1]
        stats = ps._decorate(_round(scale)[0]).stats
        assert stats["phase_threshold"] == pytest.approx(in_force[-1])   # the core's: float
        assert stats["phase_strict"] == float(in_force[-1] == pytest.approx(0.98))
        ps.observe(t, _round(scale))
    phases = _run(expected, [np.full(LAYOUT.n_floats, s) if norm_of == "sum" else
                             s * math.sqrt(LAYOUT.n_floats) for s in scales])[:-1]
    assert in_force == pytest.approx([0.98 if p else 0.7 for p in phases])
    assert phases == [True] * 4 + [False] * 4 + [True] * 2 + [False] * 4
    # One call into C per change of phase, none per round.
    assert calls == [(0, pytest.approx(0.7), pytest.approx(0.7)),
                     (0, pytest.approx(0.98), pytest.approx(0.98)),
                     (0, pytest.approx(0.7), pytest.approx(0.7))]
    summary = ps.stats()
    assert (summary["strict_rounds"], summary["loose_rounds"]) == (6, 8)
    assert summary["phase_switches"] == 3 and summary["norm_windows"] == 7


def test_a_rule_that_never_leaves_warm_up_never_calls_into_c(served):
    ps, calls = served({"warmup_rounds": 100})
    assert ps.end.threshold(0) == pytest.approx(0.99)   # the core starts strict
    for t in range(12):
        ps.observe(t, _round(1.0 + t))
    assert calls == [] and ps.stats()["strict_rounds"] == 12 and ps.stats()["loose_rounds"] == 0


# ---------------------------------------------------------------------------- options
def test_phase_bound_records_its_options_and_closes_at_fixed_thresholds():
    t = registry.create("phase-bound")
    opts = t.options()
    assert (opts["strict_threshold"], opts["loose_threshold"]) == (0.99, 0.6)
    assert (opts["warmup_rounds"], opts["window_rounds"], opts["norm_change"],
            opts["norm_of"]) == (20, 10, 0.5, "sum")
    assert "threshold_min" not in opts and "loss_weight" not in opts
    core = t.core_settings(t.receive_thresholds())
    assert core["threshold_min"] == core["threshold_max"] == 0.99
    assert core["loss_weight"] == core["rtt_weight"] == 0.0


@pytest.mark.parametrize("options, message", [
    ({"strict_threshold": 0.5}, r"strict_threshold \(0.5\) must not be below loose_threshold"),
    ({"loose_threshold": 1.5}, "loose_threshold must be a number from 0 to 1"),
    ({"window_rounds": 0}, "window_rounds must be an integer from 1"),
    ({"warmup_rounds": -1}, "warmup_rounds must be an integer from 0"),
    ({"norm_change": -0.1}, "norm_change must be a number from 0"),
    ({"norm_of": "max"}, "norm_of must be one of sum, mean"),
    ({"threshold_min": 0.9}, "has no option 'threshold_min'"),
])
def test_bad_options_are_refused_with_one_sentence(options, message):
    with pytest.raises(OptionError, match=message) as caught:
        registry.create("phase-bound", options)
    text = str(caught.value)
    assert text.endswith(".") and "\n" not in text


def test_phase_bound_has_no_end_for_collectives():
    with pytest.raises(OptionError, match="no end for collectives"):
        registry.create("phase-bound").mesh(0, [], [])
