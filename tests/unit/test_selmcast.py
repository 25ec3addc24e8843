"""Receiver selection, the link meter and multicast plans on synthetic views (no network)."""

import collections
import functools
import itertools
import json
import random

import pytest

from topologies.controller.linkview import LinkMeter, Wiring, WiringError
from topologies.controller.mcast_plan import group_address, plan
from harness.training import models
from topologies.controller import selmcast
from topologies.controller.selmcast import (WIRE_FACTOR, RoundPlan, SelectionError, paces,
                                            planned_bytes, random_p_expected_s, tree_links)
from topologies.fabric import FabricParams

SIZE_BYTES = 4 * models.n_params("mlp")   # one parameter message of the MLP the peers train
select = functools.partial(selmcast.select, size_bytes=SIZE_BYTES)


def fabric(**kwargs) -> Wiring:
    return Wiring(FabricParams(**kwargs).topo().wiring())


def idle(wiring: Wiring) -> dict[str, float]:
    return {name: link.capacity_mbps for name, link in wiring.links.items()}


def test_random_p_picks_exactly_p_uniformly_and_repeatably():
    wiring = fabric(n_leaves=2, workers_per_leaf=3)
    view = idle(wiring)
    counts = collections.Counter()
    for seed in range(3000):
        chosen = select("random-p", "w1", 2, wiring, view, RoundPlan(), seed=seed).receivers
        assert len(chosen) == 2 and len(set(chosen)) == 2 and "w1" not in chosen
        counts.update(chosen)
    # Each of the 5 others is chosen with probability 2/5: 1200 of 3000 (sd ~27).
    assert set(counts) == {"w2", "w3", "w4", "w5", "w6"}
    assert all(abs(n - 1200) < 120 for n in counts.values()), counts
    again = [select("random-p", "w1", 2, wiring, view, RoundPlan(), seed=7, round_=r).receivers
             for r in range(2)]
    assert again == [select("random-p", "w1", 2, wiring, view, RoundPlan(), seed=7,
                            round_=r).receivers for r in range(2)]


def test_broadcast_is_everyone_else():
    wiring = fabric(n_leaves=2, workers_per_leaf=2)
    chosen = select("broadcast", "w3", 1, wiring, idle(wiring), RoundPlan())
    assert chosen.receivers == ("w1", "w2", "w4")


def test_selmcast_takes_everyone_on_an_idle_homogeneous_fabric():
    wiring = fabric(n_leaves=3, workers_per_leaf=2)
    chosen = select("selmcast", "w1", 2, wiring, idle(wiring), RoundPlan())
    assert chosen.receivers == ("w2", "w3", "w4", "w5", "w6")
    assert chosen.estimate_s == pytest.approx(chosen.random_p_estimate_s)


def test_selmcast_leaves_out_a_quarter_rate_worker():
    wiring = fabric(n_leaves=2, workers_per_leaf=3, n_slow=1)
    chosen = select("selmcast", "w1", 2, wiring, idle(wiring), RoundPlan())
    assert chosen.receivers == ("w2", "w3", "w4", "w5")
    assert chosen.rate_mbps["w6"] == 25
    assert chosen.estimate_s < chosen.random_p_estimate_s
    # Random-p pays for w6 whenever it draws it: 4 times in 10, 4x slower.
    assert chosen.random_p_estimate_s == pytest.approx(chosen.estimate_s * (0.6 + 0.4 * 4))


def test_selmcast_avoids_a_congested_downlink():
    wiring = fabric(n_leaves=3, workers_per_leaf=2, n_slow=1)
    view = idle(wiring)
    view["sp1>l2"] = 20.0  # background traffic fills the spine's link to leaf 2
    chosen = select("selmcast", "w1", 2, wiring, view, RoundPlan())
    assert chosen.receivers == ("w2", "w5")
    assert chosen.rate_mbps == {"w2": 100, "w3": 20, "w4": 20, "w5": 100, "w6": 25}


def test_selmcast_never_serves_fewer_than_p_nor_expects_to_be_slower_than_random_p():
    wiring = fabric(n_leaves=3, workers_per_leaf=3)
    rng = random.Random(1)
    for trial in range(300):
        view = {name: link.capacity_mbps * rng.uniform(0.05, 1) for name, link in
                wiring.links.items()}
        p = rng.randint(1, 8)
        sender = f"w{rng.randint(1, 9)}"
        chosen = select("selmcast", sender, p, wiring, view, RoundPlan(), seed=trial)
        assert len(chosen.receivers) >= p
        # (rates within RATE_TIE of the chosen one count as served at it)
        assert chosen.estimate_s <= chosen.random_p_estimate_s / (1 - selmcast.RATE_TIE)
        # The slowest chosen receiver is never slower than the best one left out.
        left = [r for r in chosen.rate_mbps if r not in chosen.receivers]
        if left:
            assert min(chosen.rate_mbps[r] for r in chosen.receivers) >= \
                max(chosen.rate_mbps[r] for r in left)


def test_load_planned_earlier_in_the_round_steers_later_senders():
    wiring = fabric(n_leaves=3, workers_per_leaf=2)
    view = idle(wiring)
    round_plan = RoundPlan()
    select("broadcast", "w3", 1, wiring, view, round_plan, round_=0)
    # w3's multicast shares every link into leaves 1 and 3 and to w4; only w3 itself is free.
    chosen = select("selmcast", "w5", 1, wiring, view, round_plan, round_=0)
    assert chosen.rate_mbps == {"w1": 50, "w2": 50, "w3": 100, "w4": 50, "w6": 50}
    assert chosen.receivers == ("w3",)
    # A new round starts from an empty plan: everyone again.
    assert len(select("selmcast", "w5", 1, wiring, view, round_plan, round_=1).receivers) == 5
    # The same sender choosing again in a round replaces its own plan, not adds to it.
    again = select("selmcast", "w5", 1, wiring, view, round_plan, round_=1)
    assert len(again.receivers) == 5


def test_a_worker_left_out_too_long_is_added():
    wiring = fabric(n_leaves=2, workers_per_leaf=3, n_slow=1)
    view, round_plan = idle(wiring), RoundPlan()
    picks = [select("selmcast", "w1", 2, wiring, view, round_plan, round_=r,
                    max_wait_rounds=3) for r in range(6)]
    assert [("w6" in s.receivers) for s in picks] == [False, False, True, False, False, True]
    assert picks[2].forced == ("w6",)
    assert picks[2].estimate_s > picks[1].estimate_s  # fairness costs this round time


def test_random_p_expectation_is_exact():
    times = [1.0, 2.0, 2.0, 5.0, 7.0]
    for p in range(1, 6):
        subsets = list(itertools.combinations(times, p))
        brute = sum(max(s) for s in subsets) / len(subsets)
        assert random_p_expected_s(times, p) == pytest.approx(brute)


@pytest.mark.parametrize("policy, sender, p, words", [
    ("fastest", "w1", 1, "unknown policy"),
    ("selmcast", "x1", 1, "not a worker"),
    ("random-p", "w1", 0, "p must be"),
    ("random-p", "w1", 4, "p must be"),
    ("selmcast", "w1", True, "p must be"),
])
def test_bad_requests_are_one_sentence(policy, sender, p, words):
    wiring = fabric(n_leaves=2, workers_per_leaf=2, cross_per_leaf=1)
    with pytest.raises(SelectionError, match=words) as info:
        select(policy, sender, p, wiring, idle(wiring), RoundPlan())
    assert str(info.value).endswith(".")


def test_selection_is_json_ready():
    wiring = fabric(n_leaves=2, workers_per_leaf=2)
    chosen = select("selmcast", "w1", 1, wiring, idle(wiring), RoundPlan()).as_dict()
    assert json.loads(json.dumps(chosen))["receivers"] == ["w2", "w3", "w4"]


# ---- the link meter ----------------------------------------------------------------------------

def test_meter_rates_from_port_counters_over_its_window():
    wiring = fabric(n_leaves=2, workers_per_leaf=1)
    meter = LinkMeter(wiring, window_s=1.0, floor_frac=0.05)
    up = wiring.links["l1>sp1"]      # tx of l1 port 1
    into = wiring.links["w1>l1"]     # rx of l1 port 2
    assert meter.rate_mbps(up) == 0.0  # nothing seen yet: idle
    for i in range(5):  # 10 Mbit/s out of the uplink, 40 Mbit/s in from w1, polled every 0.5 s
        meter.observe(up.dpid, up.port, i * 0.5, rx_bytes=0, tx_bytes=i * 625_000)
        meter.observe(into.dpid, into.port, i * 0.5, rx_bytes=i * 2_500_000, tx_bytes=0)
    assert meter.rate_mbps(up) == pytest.approx(10.0)
    assert meter.rate_mbps(into) == pytest.approx(40.0)
    meter.observe(up.dpid, up.port, 1.0, 0, 10**12)  # a reply older than the last: ignored
    assert meter.rate_mbps(up) == pytest.approx(10.0)
    state = meter.state("l1>sp1")
    assert (state.capacity_mbps, state.available_mbps) == (100.0, pytest.approx(90.0))
    # A full link is not closed to a new flow: the floor.
    meter.observe(up.dpid, up.port, 2.5, 0, 4 * 625_000 + 62_500_000)
    assert meter.state("l1>sp1").available_mbps == pytest.approx(5.0)
    assert meter.state("l1>sp1").utilisation_frac > 1


def test_meter_does_not_count_the_controllers_own_transfers_as_load():
    wiring = fabric(n_leaves=2, workers_per_leaf=1)
    meter = LinkMeter(wiring, window_s=1.0)
    up = wiring.links["l1>sp1"]
    for i in range(3):  # 40 Mbit/s out of the uplink over [0, 1]
        meter.observe(up.dpid, up.port, i * 0.5, rx_bytes=0, tx_bytes=i * 2_500_000)
    # Ours: 7.5 MB from 0.5 to 2.5 s, so 30 Mbit/s, of which [0.5, 1] falls in the window.
    handle = meter.start_transfer(0.5, {"l1>sp1": 7_500_000})
    meter.end_transfer(handle, 2.5)
    state = meter.state("l1>sp1")
    assert state.own_mbps == pytest.approx(15.0)
    assert state.available_mbps == pytest.approx(100 - (40 - 15))
    assert state.measured_mbps == pytest.approx(40.0)
    # A transfer still running counts its bytes so far over the time so far; the own rate never
    # exceeds the measured one.
    meter.start_transfer(0.9, {"l1>sp1": 10_000_000})
    assert meter.state("l1>sp1").own_mbps == pytest.approx(40.0)
    meter.end_transfer(999, 3.0)   # an unknown handle: nothing


def test_planned_bytes_once_per_tree_link_or_per_copy():
    wiring = fabric(n_leaves=2, workers_per_leaf=2)
    tree = planned_bytes(wiring, {"w1": ("w3", "w4")}, 1000)
    assert tree["l1>sp1"] == pytest.approx(1000 * WIRE_FACTOR)
    copies = planned_bytes(wiring, {"w1": ("w3", "w4")}, 1000, copies=True)
    assert copies["l1>sp1"] == pytest.approx(2000 * WIRE_FACTOR)


# ---- multicast plans ---------------------------------------------------------------------------

def test_plan_copies_once_per_link_and_rewrites_at_the_last_hop():
    wiring = fabric(n_leaves=3, workers_per_leaf=2)
    p = plan(wiring, "w1", ["w2", "w3", "w4", "w6"])
    assert p.group == group_address("10.0.0.1") == "239.1.0.1"
    by_switch = {sp.switch: sp for sp in p.switches}
    assert list(by_switch) == ["l1", "sp1", "l2", "l3"]
    l1 = by_switch["l1"].buckets
    assert [(b.port, b.toward) for b in l1] == [(3, "w2"), (1, "sp1")]  # one copy up for three
    assert l1[0].rewrite == ("00:00:00:00:00:02", "10.0.0.2")
    assert l1[1].rewrite is None
    assert [(b.port, b.toward, b.rewrite) for b in by_switch["sp1"].buckets] == [
        (2, "l2", None), (3, "l3", None)]
    assert [b.toward for b in by_switch["l2"].buckets] == ["w3", "w4"]
    assert by_switch["l3"].buckets[0].rewrite == ("00:00:00:00:00:06", "10.0.0.6")
    assert by_switch["sp1"].dpid == 0x100
    assert tree_links(wiring, "w1", ["w3", "w4"]) == {"w1>l1", "l1>sp1", "sp1>l2", "l2>w3",
                                                       "l2>w4"}


def test_plan_without_receivers_is_empty_and_bad_ones_are_refused():
    wiring = fabric(n_leaves=2, workers_per_leaf=2)
    assert plan(wiring, "w1", []).switches == ()
    with pytest.raises(WiringError, match="its own receiver"):
        plan(wiring, "w1", ["w1"])
    with pytest.raises(WiringError, match="named twice"):
        plan(wiring, "w1", ["w2", "w2"])
    with pytest.raises(WiringError, match="no host named 'w9'"):
        plan(wiring, "w1", ["w9"])


def test_paces_share_each_link_among_the_transfers_that_cross_it():
    # Two leaves of two; w1 and w2 both multicast to w3 and w4 across the one uplink of l1.
    wiring = fabric(n_leaves=2, workers_per_leaf=2, n_slow=1)
    view = idle(wiring)
    chosen = {"w1": ("w3", "w4"), "w2": ("w3", "w4")}
    both = paces(wiring, view, chosen)
    assert both == {"w1": pytest.approx(12.5), "w2": pytest.approx(12.5)}  # w4: 25 Mbit/s, 2 trees
    alone = paces(wiring, view, {"w1": ("w2",)})
    assert alone == {"w1": pytest.approx(100.0)}
    # Unicast copies: w1's own link carries both copies, l1's uplink both, w4's link one.
    copies = paces(wiring, view, {"w1": ("w3", "w4")}, copies=True)
    assert copies == {"w1": pytest.approx(2 * 25.0)}
    copies = paces(wiring, view, {"w1": ("w2", "w3")}, copies=True)
    assert copies == {"w1": pytest.approx(2 * 50.0)}


def test_selmcast_p_takes_exactly_p_of_the_fastest():
    wiring = fabric(n_leaves=2, workers_per_leaf=3, n_slow=2)
    for seed in range(20):
        chosen = select("selmcast-p", "w1", 2, wiring, idle(wiring), RoundPlan(), seed=seed)
        assert len(chosen.receivers) == 2
        assert not {"w5", "w6"} & set(chosen.receivers)   # the quarter-rate ones


def test_selmcast_puts_the_rate_first_and_most_per_second_the_count():
    wiring = fabric(n_leaves=3, workers_per_leaf=2)
    view = idle(wiring)
    view["sp1>l2"] = 95.0   # w3 and w4 a little slower than w2
    view["l3>w5"] = 95.0    # w5 too
    view["l3>w6"] = 10.0    # w6 far slower
    published = select("selmcast", "w1", 1, wiring, view, RoundPlan())
    assert published.receivers == ("w2",)   # the highest rate that serves p = 1, and only it
    earlier = select("most-per-second", "w1", 1, wiring, view, RoundPlan())
    assert earlier.receivers == ("w2", "w3", "w4", "w5")   # 4 at 95 beat 1 at 100
    # p = 2: the second fastest sets the rate, and every peer that rate serves comes along.
    assert select("selmcast", "w1", 2, wiring, view, RoundPlan()).receivers == \
        ("w2", "w3", "w4", "w5")


def test_selmcast_plans_a_round_jointly_to_a_fixed_point(monkeypatch):
    wiring = fabric(n_leaves=3, workers_per_leaf=2, n_slow=1)
    view = idle(wiring)
    senders = ["w1", "w3", "w5", "w2"]
    round_plan = RoundPlan()
    chosen = selmcast.plan_round("selmcast", senders, 2, wiring, view, round_plan,
                                 size_bytes=SIZE_BYTES, round_=4)
    assert [c.sender for c in chosen] == senders
    # Settled: each sender's choice is its best answer to all the others' trees.
    for c in chosen:
        again = select("selmcast", c.sender, 2, wiring, view, round_plan, round_=4)
        assert again.receivers == c.receivers
    # Here the first pass alone (each sender seeing only the earlier ones) is not settled.
    monkeypatch.setattr(selmcast, "JOINT_PASSES", 1)
    first = selmcast.plan_round("selmcast", senders, 2, wiring, view, RoundPlan(),
                                size_bytes=SIZE_BYTES, round_=4)
    assert [c.receivers for c in first] != [c.receivers for c in chosen]
    # The other policies plan once, in order, as a sequence of selections would.
    seq_plan, joint_plan = RoundPlan(), RoundPlan()
    seq = [select("most-per-second", s, 2, wiring, view, seq_plan, round_=4) for s in senders]
    once = selmcast.plan_round("most-per-second", senders, 2, wiring, view, joint_plan,
                               size_bytes=SIZE_BYTES, round_=4)
    assert [c.receivers for c in once] == [c.receivers for c in seq]


def test_transfers_in_flight_are_load_for_selmcast_only():
    wiring = fabric(n_leaves=3, workers_per_leaf=2)
    view, round_plan = idle(wiring), RoundPlan()
    round_plan.fly("w3", tree_links(wiring, "w3", ["w1", "w2", "w4", "w5", "w6"]))
    chosen = select("selmcast", "w5", 1, wiring, view, round_plan, round_=0)
    assert chosen.rate_mbps == {"w1": 50, "w2": 50, "w3": 100, "w4": 50, "w6": 50}
    assert chosen.receivers == ("w3",)
    blind = select("most-per-second", "w5", 1, wiring, view, round_plan, round_=0)
    assert set(blind.rate_mbps.values()) == {100}
    round_plan.land("w3")   # w3 asked again: its transfer is over
    assert set(select("selmcast", "w5", 1, wiring, view, round_plan,
                      round_=0).rate_mbps.values()) == {100}


def test_a_receiver_dropped_when_its_sender_plans_again_has_not_received():
    wiring = fabric(n_leaves=2, workers_per_leaf=3)
    round_plan = RoundPlan()
    round_plan.start(0)
    round_plan.register("w1", frozenset(), ("w2", "w3"))
    assert round_plan.waited("w2") == 0
    round_plan.register("w1", frozenset(), ("w3",))   # planned again without w2
    assert round_plan.waited("w2") == 1               # never received: rounds since the start
    round_plan.start(1)
    assert round_plan.waited("w3") == 1 and round_plan.waited("w2") == 2
    del wiring
