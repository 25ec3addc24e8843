"""The time-based Gilbert-Elliott chain without root: its text form and parameters, the per-packet
chain a paced flow sees, the exponential table the program draws durations from, and the chain
itself over simulated time (the helper's ``simulate`` runs the very code the kernel runs)."""

import json
import math
import subprocess

import pytest

from harness import cli
from harness.reporting.tables import loss_kind
from harness.running.spec import RunSpec
from topologies.impair import loss as impair
from topologies.impair.loss import (GilbertElliott, GilbertElliottTime, Impairment, LossModelError,
                                    parse_loss)
from topologies.testbed.counters import LossCounters, PortCounters, QueueCounters, Snapshot


def test_the_duration_limits_are_read_from_the_c_header():
    assert (impair.GE_TIME_MIN_MS, impair.GE_TIME_MAX_MS) == (0.001, 100000.0)


@pytest.mark.parametrize("loss, burst_ms", [(5, 2), (1, 0.5), (20, 10), (49, 1), (0.1, 30)])
def test_mean_parametrisation_gives_the_stated_loss_and_periods(loss, burst_ms):
    get = GilbertElliottTime.from_mean(loss, burst_ms)
    assert get.is_gilbert() and get.bad_ms == burst_ms
    assert get.good_ms == pytest.approx(burst_ms * (1 - loss / 100) / (loss / 100))
    assert get.mean_loss_pct == pytest.approx(loss)
    assert parse_loss(get.text()).mean_loss_pct == pytest.approx(loss, rel=1e-5)
    assert parse_loss(get.text()).bad_ms == pytest.approx(burst_ms, rel=1e-5)


def test_canonical_texts_and_what_the_rest_of_the_harness_makes_of_them():
    assert GilbertElliottTime.from_mean(5, 2).text() == "get:loss=5,burst_ms=2"
    assert GilbertElliottTime(20, 5, 1, 60).text() == \
        "get:good_ms=20,bad_ms=5,loss_good=1,loss_bad=60"
    # The sweep's loss dimension, the run spec and the figures' loss facet take it as it is.
    assert cli.losses("0,get:5:2,ge:5:4") == (0.0, "get:loss=5,burst_ms=2", "ge:loss=5,burst=4")
    spec = RunSpec(loss_model="get:loss=5,burst_ms=2")
    assert spec.loss_pct == 5.0 and spec.loss_text == "get:loss=5,burst_ms=2"
    assert RunSpec.from_json(spec.to_json()) == spec
    assert "_lossget5_" in spec.run_id and "_lossge5_" in RunSpec(loss_model="ge:5:4").run_id
    assert loss_kind("get:loss=5,burst_ms=2") == "get burst_ms=2"
    assert loss_kind(spec.loss_text) != loss_kind("ge:loss=5,burst=4")


def test_a_paced_flow_sees_a_per_packet_chain():
    get = GilbertElliottTime.from_mean(5, 2)
    assert get.relaxation_ms == pytest.approx(38 * 2 / 40)
    # Sampled every d, the chain stays bad with probability pi_b + pi_g exp(-d / tau).
    for d in (0.1, 1.0, 5.0):
        ge = get.at_interval(d)
        stay_bad = 0.05 + 0.95 * math.exp(-d / get.relaxation_ms)
        assert 1 - ge.p_bg_pct / 100 == pytest.approx(stay_bad)
        assert ge.mean_loss_pct == pytest.approx(5)
        assert ge.mean_burst_pkts == pytest.approx(1 / (1 - stay_bad))
    # A packet every 50 ms, a sender in timeout: the state is drawn afresh for every packet, so
    # runs of losses are those of independent 5 % loss, not the 4 packets of ge:5:4.
    assert get.at_interval(50).mean_burst_pkts == pytest.approx(1 / 0.95, rel=1e-9)
    # Packets much closer than the bad periods: runs of about burst_ms / interval packets.
    assert get.at_interval(0.01).mean_burst_pkts == pytest.approx(200, rel=0.01)
    with pytest.raises(LossModelError, match="interval_ms"):
        get.at_interval(0)


def test_impairment_rules_and_the_helper_command_line():
    imp = Impairment("get:5:2", seed=3)
    assert imp.loss == GilbertElliottTime.from_mean(5, 2)
    rules = impair.ruleset("ps1-eth0", imp.loss)
    assert f"meta mark {impair.GE_MARK:#x}" in rules and "numgen" not in rules
    try:
        argv = impair.ge_argv("attach", "ps1-eth0", GilbertElliottTime(38, 2, 0, 100), 3, 1)
    except LossModelError:
        pytest.skip("ge-loss is not built (./setup.sh)")
    assert dict(zip(argv[4::2], argv[5::2])) == {
        "--good-ms": "38.0", "--bad-ms": "2.0", "--loss-good": "0.0", "--loss-bad": "1.0",
        "--seed": "3", "--stream": "1"}


def test_counters_give_the_mean_bad_period():
    def snap(impairs):
        return Snapshot(t=0, ports={1: PortCounters(), 2: PortCounters()},
                        bottleneck=QueueCounters(), impair=impairs, tcp={h: {} for h in impairs},
                        ps_port=1, worker_ports=(2,))
    before = snap({"ps1": LossCounters(10, 1, 1, 3, 6_000_000), "w1": LossCounters(5, 0, 0)})
    after = snap({"ps1": LossCounters(1010, 51, 11, 13, 26_000_000), "w1": LossCounters(9, 0, 0)})
    d = after.delta(before)
    assert d.bad_periods == 10 and d.mean_bad_ms == pytest.approx(2.0)
    assert d.loss_bursts == 10 and d.mean_burst_pkts == 5.0
    # Counters written before these fields existed read back without them.
    old = after.to_dict()
    for host in old["impair"].values():
        del host["bad_periods"], host["bad_ns"]
    assert Snapshot.from_dict(old).delta(Snapshot.from_dict(old)).mean_bad_ms is None


# ---- the exponential table and the simulated chain -------------------------------------------

def test_the_table_gives_an_exponential_distribution(helper):
    t = json.loads(subprocess.run([str(helper), "table"], capture_output=True, text=True,
                                  check=True).stdout)
    scale, size, top = 2.0 ** t["frac_bits"], 2 ** t["bits"], t["max_octave"]
    table = [v / scale for v in t["table"]]
    assert len(table) == size and t["ln2"] == round(math.log(2) * scale)
    ln2 = t["ln2"] / scale
    # Each entry stands for its slice of mantissas M in [1, 2): ln 2 - ln M over the slice.
    for i, v in enumerate(table):
        assert -math.log((size + i + 1) / (2 * size)) < v < -math.log((size + i) / (2 * size))
    # The exact distribution of a draw, in means: octave k (probability 2^-(k+1), the last one
    # taking the rest) plus a table entry (each 1/size).
    points = sorted((k * ln2 + v, (2.0 ** -(k + 1) if k < top else 2.0 ** -top) / size)
                    for k in range(top + 1) for v in table)
    assert sum(p for _, p in points) == pytest.approx(1, abs=1e-12)
    mean = sum(x * p for x, p in points)
    var = sum(x * x * p for x, p in points) - mean ** 2
    assert mean == pytest.approx(1, abs=1e-5) and var == pytest.approx(1, abs=1e-4)
    cdf, ks = 0.0, 0.0
    for x, p in points:
        exact = -math.expm1(-x)
        ks = max(ks, abs(cdf - exact), abs(cdf + p - exact))
        cdf += p
    # A slice of the first octave holds 1/512 of the draws, at its mean: about half a step off.
    assert ks < 0.001
    assert points[-1][0] > 38  # the tail reaches 38 means


def simulate(helper, model, packets, interval_ms, seed=1, stream=0):
    argv = [str(helper), "simulate", "--packets", str(packets), "--interval-us",
            repr(interval_ms * 1000), "--seed", str(seed), "--stream", str(stream)]
    for name, value in model.flags().items():
        argv += [f"--{name}", repr(value)]
    return json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)


# Over 20 seeds, each of these figures fell within 3 % of its expected value (standard deviation
# at most 1.1 %); the bounds are 5 % for loss and 4 % for the rest.
# Restarts: the first packet's, or every packet's where more than 64 periods end between two.
@pytest.mark.parametrize("text, packets, interval_ms, restarts", [
    ("get:5:2", 2_000_000, 0.25, 1),               # 4,000 packets/s, 500 s: 12,500 bad periods
    ("get:5:2", 100_000, 50, 1),                   # a packet every 50 ms, the sparse flow
    ("get:loss=20,burst_ms=0.1", 100_000, 50, 100_000),  # ~200 periods between packets
    ("get:good_ms=20,bad_ms=5,loss_good=1,loss_bad=60", 1_000_000, 1, 1),
])
def test_the_chain_meets_its_loss_periods_and_bursts(helper, text, packets, interval_ms,
                                                      restarts):
    model = parse_loss(text)
    c = simulate(helper, model, packets, interval_ms)
    assert c["model"] == "time" and c["packets"] == packets
    assert 100 * c["drops"] / packets == pytest.approx(model.mean_loss_pct, rel=0.05)
    assert c["bad_ns"] / c["bad_periods"] / 1e6 == pytest.approx(model.bad_ms, rel=0.04)
    assert c["good_ns"] / c["good_periods"] / 1e6 == pytest.approx(model.good_ms, rel=0.04)
    assert c["drops"] / c["bursts"] == pytest.approx(
        model.at_interval(interval_ms).mean_burst_pkts, rel=0.04)
    assert c["restarts"] == restarts


def test_a_sparse_flow_is_not_held_in_the_bad_state(helper):
    # The lead's case: one packet per 50 ms. Per packet (ge:5:4) every stay in the bad state
    # costs the flow 4 packets, 200 ms; in time (get:5:2) its losses come one at a time.
    per_packet = parse_loss("ge:5:4")
    argv = [str(helper), "simulate", "--packets", "100000", "--seed", "1"]
    for name, p in per_packet.flags().items():
        argv += [f"--{name}", repr(p)]
    c_pp = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)
    c_t = simulate(helper, parse_loss("get:5:2"), 100_000, 50)
    assert c_pp["drops"] / c_pp["bursts"] == pytest.approx(4, rel=0.05)
    assert c_t["drops"] / c_t["bursts"] == pytest.approx(1 / 0.95, rel=0.02)
    assert 100 * c_t["drops"] / c_t["packets"] == pytest.approx(5, rel=0.05)


def test_one_seed_one_sequence_and_streams_differ(helper):
    model = GilbertElliottTime.from_mean(5, 2)
    a, b = (simulate(helper, model, 50_000, 0.25, seed=3) for _ in range(2))
    other = simulate(helper, model, 50_000, 0.25, seed=3, stream=1)
    assert a == b
    assert (other["drops"], other["bad_ns"]) != (a["drops"], a["bad_ns"])


@pytest.mark.parametrize("args", [
    ["--good-ms", "38", "--bad-ms", "2", "--loss-good", "0", "--loss-bad", "1"],  # no interval
    ["--good-ms", "0", "--bad-ms", "2", "--loss-good", "0", "--loss-bad", "1",
     "--interval-us", "250"],
    ["--good-ms", "38", "--bad-ms", "2", "--p-gb", "0.1", "--loss-good", "0", "--loss-bad", "1",
     "--interval-us", "250"],
    ["--p-gb", "0.1", "--p-bg", "0.2", "--loss-good", "0", "--loss-bad", "1",
     "--interval-us", "250"],
    ["--good-ms", "38", "--bad-ms", "2", "--loss-good", "0", "--loss-bad", "1",
     "--interval-us", "0"],
])
def test_helper_rejects_bad_time_arguments_with_usage_status(helper, args):
    proc = subprocess.run([str(helper), "simulate", "--packets", "10", *args],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.startswith("ge-loss: "), proc.stderr
