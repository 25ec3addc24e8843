"""Loss models and cross traffic as sweep dimensions: the command line's lists, the run spec's
fields (and the ids of runs written before they existed), the plan's grid."""

import dataclasses

import pytest

from harness import cli
from harness.running import presets
from harness.running.spec import RunSpec, SpecError
from topologies.impair.cross import CrossError
from topologies.impair.loss import LossModelError


def test_items_keep_the_options_of_one_item_together():
    assert cli.items("0,ge:loss=5,burst=4,tcp:2,udp:1:rate=50,on=50ms,off=150ms") == (
        "0", "ge:loss=5,burst=4", "tcp:2", "udp:1:rate=50,on=50ms,off=150ms")
    assert cli.items("none, tcp:1+udp:1:rate=5,on=1ms") == ("none", "tcp:1+udp:1:rate=5,on=1ms")
    assert cli.items(None) is None


def test_losses_are_rates_or_canonical_model_texts():
    assert cli.losses("0,1.5,uniform:2,ge:5:4") == (0.0, 1.5, 2.0, "ge:loss=5,burst=4")
    with pytest.raises(LossModelError, match="not a loss model"):
        cli.losses("0,bursty")


def test_new_fields_leave_old_run_ids_alone():
    # Ids of specs that use neither loss models nor cross traffic (pinned when the time-to-
    # accuracy fields were added); the two new fields stay out of the JSON at their defaults.
    assert RunSpec().run_id == "tcp-cubic_loss0_bw100_s0_a5dcb6d0"
    assert RunSpec(transport="ltp", loss_pct=5, delay_ms=3).run_id == \
        "ltp_loss5_bw100_d3_s0_0274850d"
    assert "loss_model" not in RunSpec().to_json() and "cross" not in RunSpec().to_json()


def test_a_loss_model_sets_the_mean_loss_and_cross_traffic_the_network():
    spec = RunSpec(loss_model="ge:5:4", cross="tcp:2")
    assert spec.loss_pct == 5.0 and spec.loss_model == "ge:loss=5,burst=4"
    assert spec.loss_text == "ge:loss=5,burst=4"
    assert spec.cross == "tcp:2" and spec.n_cross == 2 and spec.network.n_cross == 2
    assert spec.network_key != RunSpec().network_key
    assert RunSpec.from_json(spec.to_json()) == spec
    assert "lossge5" in spec.run_id and "_cross_" in spec.run_id
    assert RunSpec(loss_model="uniform:2") == RunSpec(loss_pct=2)


@pytest.mark.parametrize("changes, words", [
    ({"loss_model": "ge:5"}, "ge:LOSS:BURST"),
    ({"cross": "tcp:0"}, "whole number"),
])
def test_bad_texts_are_spec_errors(changes, words):
    with pytest.raises(SpecError, match=words):
        RunSpec(**changes)


def test_the_plan_crosses_loss_models_and_cross_traffic():
    plan = presets.get("smoke").override(transports=("tcp-cubic",), loss_pcts=(0.0, "ge:5:4"),
                                         cross=("none", "udp:1"))
    specs = plan.specs()
    assert len(specs) == 4
    assert {(s.loss_text, s.cross) for s in specs} == {
        ("uniform:0", "none"), ("uniform:0", "udp:1:rate=50,on=50ms,off=150ms"),
        ("ge:loss=5,burst=4", "none"), ("ge:loss=5,burst=4", "udp:1:rate=50,on=50ms,off=150ms")}
    with pytest.raises(SpecError):
        presets.get("smoke").override(cross=())
    with pytest.raises((SpecError, CrossError)):
        presets.get("smoke").override(cross=("quic:1",))


def test_sync_modes_and_faults_are_dimensions_with_canonical_texts():
    assert cli.syncs("bsp, SSP:2,async") == ("bsp", "ssp:2", "async")
    assert cli.faults("none,KILL@20,stall@20:2.0s") == ("none", "kill@20", "stall@20:2s")
    plan = presets.get("smoke").override(transports=("ltp",), loss_pcts=(0.0,),
                                         syncs=("bsp", "async"), faults=("none", "kill@5"))
    assert {(s.sync, s.fault) for s in plan.specs()} == {
        ("bsp", "none"), ("bsp", "kill@5"), ("async", "none"), ("async", "kill@5")}
    spec = RunSpec(sync="async", fault="link@5:2s", iterations=30)
    assert "_async_link_" in spec.run_id and RunSpec.from_json(spec.to_json()) == spec
    # The defaults stay out of the JSON: earlier run ids are unchanged.
    assert "sync" not in RunSpec().to_json() and "fault" not in RunSpec().to_json()
    assert presets.get("faults").specs()   # the preset is valid


@pytest.mark.parametrize("changes, words", [
    ({"sync": "ssp"}, "needs its staleness bound"),
    ({"fault": "kill@100", "iterations": 50}, "never reaches"),
    ({"fault": "stall@5:2s:w9", "n_workers": 4}, "has only 4 workers"),
    ({"fault": "restart@5:1s:w5", "n_workers": 4}, "has only 4 workers"),
    ({"fault": "restart@5:1s", "transport": "ltp"}, "receive window refuses"),
])
def test_bad_sync_and_fault_are_spec_errors(changes, words):
    with pytest.raises(SpecError, match=words):
        RunSpec(**changes)


def test_a_folder_grows_to_the_union_of_chunks_of_one_preset(tmp_path):
    import json

    from harness.running import engine, ps

    zero, ten = (presets.get("tta").override(loss_pcts=(x,)) for x in (0.0, 10.0))
    ps.write_manifest(zero, zero.specs(), tmp_path)
    ps.write_manifest(ten, ten.specs(), tmp_path)
    ps.write_manifest(zero, zero.specs(), tmp_path)   # a chunk already in: nothing changes
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert len(manifest["run_ids"]) == len(manifest["specs"]) == 30
    assert manifest["plan"]["loss_pcts"] == [0.0, 10.0] and len(manifest["extended"]) == 1
    other = presets.get("tta").override(iterations=5)   # another base: another sweep
    with pytest.raises(engine.SweepError, match="holds a different sweep"):
        ps.write_manifest(other, other.specs(), tmp_path)


def test_a_blocked_plan_runs_each_block_on_a_network_of_its_own_in_turn():
    from harness.running import presets
    from harness.running import ps

    plan = presets.get("reference")
    groups = ps.order(plan.specs(), plan.order_seed, plan.block_of)
    assert len(groups) == plan.blocks
    seeds = [sorted({s.seed for s in g}) for g in groups]
    assert seeds == [list(range(3 * b, 3 * b + 3)) for b in range(plan.blocks)]
    assert len(ps.order(presets.get("default").specs(), 0)) == 1


def test_models_are_a_dimension_each_measured_to_its_own_target():
    from harness.training.models import TARGET_ACCURACY

    plan = presets.get("smoke").override(transports=("tcp-cubic",), loss_pcts=(0.0,),
                                         models=("lenet5", "mlp6"))
    assert {(s.model, s.target_accuracy) for s in plan.specs()} == {
        ("lenet5", TARGET_ACCURACY["lenet5"]), ("mlp6", TARGET_ACCURACY["mlp6"])}
    given = presets.get("smoke").override(transports=("tcp-cubic",), loss_pcts=(0.0,),
                                          models=("lenet5", "mlp6"), target_accuracy=0.8)
    assert {s.target_accuracy for s in given.specs()} == {0.8}   # a given target is everyone's
    # Without a models dimension nothing changes: every preset's run ids stay as they were.
    for plan in presets.PRESETS.values():
        if not plan.models:
            off = dataclasses.replace(plan, model_targets=False)
            assert [s.run_id for s in plan.specs()] == [s.run_id for s in off.specs()]


def test_regimes_are_sub_grids_whose_union_is_the_plan():
    plan = presets.Plan(
        name="t", transports=("tcp-cubic", "ltp"), loss_pcts=(0.0, "replay:5"),
        bottleneck_mbps=(200.0,), seeds=(0, 1), base=RunSpec(iterations=5),
        regimes=((), (("loss_pcts", ("replay:2",)), ("delays_ms", (10.0,)),
                      ("bottleneck_mbps", (100.0,))),
                 (("loss_pcts", (0.0,)), ("queues", (8,)))))
    specs = plan.specs()
    # The main grid (2 x 2 x 2), the edge regime (2 x 2) and the shallow queue (2 x 2).
    assert len(specs) == 8 + 4 + 4
    edge = [s for s in specs if s.delay_ms == 10.0]
    assert {(s.loss_text, s.bottleneck_mbps) for s in edge} == {("replay:2", 100.0)}
    assert {s.queue_pkts for s in specs if s.queue_pkts != 64} == {8}
    # A dimension from the command line replaces the plan's own values in every regime that
    # does not set it.
    assert {s.seed for s in plan.override(seeds=(3,)).specs()} == {3}
