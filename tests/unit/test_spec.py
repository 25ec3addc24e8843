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
    assert os.environ[registry.PLUGINS_ENV].endswith("docs/labs/code/udp_blast.py")


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
