"""Run specs: validation before anything starts, stable ids, JSON round trip, presets."""

from pathlib import Path

import pytest

from harness.running import presets
from harness.running.spec import RunSpec, SpecError


def test_round_trip_and_stable_id():
    spec = RunSpec(transport="tcp-reno", loss_pct=1, n_workers=2, iterations=5)
    again = RunSpec.from_json(spec.to_json())
    assert again == spec
    assert again.run_id == spec.run_id
    assert spec.run_id.startswith("tcp-reno_loss1_bw100_s0_")


def test_id_changes_with_any_field():
    base = RunSpec()
    assert len({base.run_id, base.replace(seed=1).run_id, base.replace(lr=0.1).run_id,
                base.replace(queue_pkts=32).run_id}) == 4


def test_options_are_order_independent():
    a = RunSpec(transport="tcp-cubic", transport_options={"cc": "cubic"})
    b = RunSpec(transport="tcp-cubic", transport_options=(("cc", "cubic"),))
    assert a == b and a.run_id == b.run_id


@pytest.mark.parametrize("changes, words", [
    ({"transport": "udp-magic"}, "unknown transport"),
    ({"transport": "tcp-cubic", "transport_options": {"cc": "reno"}}, "defines"),
    ({"transport": "tcp-cubic", "transport_options": {"nagle": 1}}, "no option"),
    ({"model": "resnet"}, "unknown model"),
    ({"dataset": "imagenet"}, "unknown data set"),
    ({"loss_pct": 60}, "loss_pct"),
    ({"n_workers": 0}, "n_workers"),
    ({"iterations": 0}, "iterations"),
    ({"lr": 0}, "lr"),
    ({"timeout_s": -1}, "timeout_s"),
])
def test_bad_specs_are_rejected(changes, words):
    with pytest.raises(SpecError, match=words):
        RunSpec(**changes)


def test_network_key_ignores_loss():
    assert RunSpec(loss_pct=0).network_key == RunSpec(loss_pct=5).network_key
    assert RunSpec(queue_pkts=8).network_key != RunSpec().network_key


def test_smoke_preset_is_the_tcp_grid():
    specs = presets.get("smoke").specs()
    assert {(s.transport, s.loss_pct) for s in specs} == {
        (t, loss) for t in ("tcp-cubic", "tcp-reno", "tcp-bbr") for loss in (0.0, 1.0)}


def test_every_preset_is_valid():
    for name, plan in presets.PRESETS.items():
        specs = plan.specs()
        assert specs and len({s.run_id for s in specs}) == len(specs), name
    assert presets.DEFAULT_PRESET == "default"
    default = presets.get("default").specs()
    cells = {(s.scheme, s.loss_pct) for s in default}
    assert len(default) == 3 * len(cells), "the default sweep runs three seeds per cell"
    assert presets.get("lab1").specs()[0].queue_pkts == 16


def test_a_preset_loads_the_plugins_it_names_for_itself_and_its_children(monkeypatch):
    import os

    from transports import registry

    monkeypatch.delenv(registry.PLUGINS_ENV, raising=False)
    specs = presets.get("lab3").specs()   # no $LTP_TRANSPORTS needed
    assert "udp-blast" in {s.transport for s in specs}
    assert os.environ[registry.PLUGINS_ENV].endswith("docs/labs/instructor/udp_blast.py")


def test_a_value_named_twice_in_a_dimension_is_refused():
    for change, words in (({"loss_pcts": (1, 1)}, "loss_pcts lists 1"),
                          ({"seeds": (0, 0)}, "seeds lists 0"),
                          ({"transports": ("ltp", "ltp")}, "transports lists 'ltp'"),
                          ({"transports": ("ltp", "ltp+threshold_min=0.8")}, "same run")):
        with pytest.raises(SpecError, match=words):
            presets.get("smoke").override(**change)


def test_override_any_dimension_and_validate_up_front():
    plan = presets.get("smoke").override(transports=("tcp-bbr",), loss_pcts=(0, 5),
                                         iterations=7, n_workers=2)
    specs = plan.specs()
    assert {s.loss_pct for s in specs} == {0.0, 5.0}
    assert all(s.iterations == 7 and s.n_workers == 2 and s.transport == "tcp-bbr" for s in specs)
    with pytest.raises(SpecError, match="loss_pct"):
        presets.get("smoke").override(loss_pcts=(0, 75))
    with pytest.raises(SpecError, match="no run parameter"):
        presets.get("smoke").override(colour="red")
    with pytest.raises(presets.UnknownPreset, match="choose one of"):
        presets.get("huge")


def test_schemes_carry_options_into_specs_and_names():
    from transports.base import OptionError, parse_scheme, scheme_name

    assert parse_scheme("ltp+filler=zero+cc=false+max_wait_ms=50") == (
        "ltp", {"filler": "zero", "cc": False, "max_wait_ms": 50})
    plan = presets.get("smoke").override(transports=("tcp-cubic", "ltp+filler=zero"),
                                         loss_pcts=(0,))
    specs = plan.specs()
    assert [s.scheme for s in specs] == ["tcp-cubic", "ltp+filler=zero"]
    assert specs[1].transport == "ltp" and specs[1].options() == {"filler": "zero"}
    assert scheme_name("ltp", {"filler": "zero", "cc": False}) == "ltp+cc=false+filler=zero"
    with pytest.raises(OptionError, match="slug\\+name=value"):
        parse_scheme("ltp+zero")
    with pytest.raises(SpecError, match="filler"):
        presets.get("smoke").override(transports=("ltp+filler=sideways",))


def test_reset_modes_are_validated_and_name_the_run():
    cser = RunSpec(transport="ltp", compress="topk:0.01", error_reset=4, reset_mode="CSER")
    assert cser.reset_mode == "cser" and "_topk0.01_cser4_s0_" in cser.run_id
    assert RunSpec.from_json(cser.to_json()) == cser
    drop = cser.replace(reset_mode="drop")
    assert "reset_mode" not in drop.to_json() and "cser" not in drop.run_id   # ids unchanged
    # Without compression there is no residual: one run, whatever the mode and period.
    assert RunSpec(reset_mode="cser", error_reset=4) == RunSpec()
    for changes, words in (({"reset_mode": "sync"}, "--reset-mode 'sync': write drop or cser"),
                           ({"reset_mode": "cser", "error_reset": 0}, "at least 1"),
                           ({"reset_mode": "cser", "pattern": "tree"}, "reset_mode drop only")):
        with pytest.raises(SpecError, match=words):
            RunSpec(transport="ltp", compress="sign", **changes)


def test_the_cser_presets_compare_the_two_reset_modes():
    specs = presets.get("cser").specs()
    # none collapses the reset modes: 3 seeds, then 2 compressors x 2 modes x 3 seeds
    assert len(specs) == 3 + 2 * 2 * 3
    assert {(s.compress, s.reset_mode) for s in specs} == {
        ("none", "drop"), ("topk:0.01", "drop"), ("topk:0.01", "cser"), ("sign", "drop"),
        ("sign", "cser")}
    assert all(s.max_train_s == 60.0 and s.iterations == 1000 for s in specs)
    both = presets.get("cser-async").specs()
    assert len(both) == 2 * 2 * 3 and {s.sync for s in both} == {"ssp:2", "async"}
    assert {s.error_reset for s in specs + both if s.compress != "none"} == {4}


@pytest.mark.parametrize("fields, words", [
    ({"aggregator": "score", "sync": "async"}, "only bsp has"),
    ({"aggregator": "krum", "sync": "ssp:2"}, "only bsp has"),
    ({"holdout": 6000}, "only the score and zeno\\+\\+ aggregators"),
    ({"holdout": 6000, "aggregator": "median"}, "not aggregator median"),
    ({"holdout": 10, "aggregator": "score"}, "from score_batch \\(64\\) to 30000"),
    ({"holdout": 30001, "aggregator": "zeno++"}, "to 30000 samples, not 30001"),
    ({"holdout": 100, "aggregator": "zeno++", "score_batch": 128}, "score_batch \\(128\\)"),
    ({"holdout": 1.5, "aggregator": "score"}, "whole number of samples"),
])
def test_validation_rules_and_holdouts_are_checked(fields, words):
    with pytest.raises(SpecError, match=words):
        RunSpec(**fields)


def test_zenopp_runs_in_every_sync_mode_and_names_its_runs_without_a_plus():
    for sync in ("bsp", "ssp:2", "async"):
        spec = RunSpec(aggregator="zeno++", sync=sync, byzantine="2:sign-flip")
        assert "_zenopp_" in spec.run_id and "+" not in spec.run_id
    held = RunSpec(aggregator="zeno++", sync="async", holdout=6000)
    assert held.run_id.startswith("tcp-cubic_loss0_bw100_async_zenopp_holdout6000_s0_")
    assert "_holdout64_" in RunSpec(aggregator="score", holdout=64).run_id
    # The quiet default: a run without a holdout keeps its id and its JSON.
    assert "holdout" not in RunSpec(aggregator="score").run_id
    assert "holdout" not in RunSpec(aggregator="score").to_json()
    assert RunSpec.from_json(held.to_json()) == held


def test_the_validation_presets_count_their_runs():
    byz = presets.get("byzantine").specs()
    assert len(byz) == 4 * 6 * 3
    assert {s.aggregator for s in byz} >= {"zeno++", "krum"}
    assert {s.byzantine for s in byz} == {"0", "2:sign-flip", "2:alie", "2:ipm"}
    va = presets.get("validation-async").specs()
    assert len(va) == 2 * 2 * 2 * 2 * 3 and {s.sync for s in va} == {"ssp:2", "async"}
    privacy = presets.get("privacy").specs()
    assert len(privacy) == 2 * 2 * 2 * 3 and {s.holdout for s in privacy} == {0, 6000}
