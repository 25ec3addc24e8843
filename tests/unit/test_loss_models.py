"""Loss models without root: the text form, Gilbert-Elliott's parameters, the nftables rules, the
helper's command line, and the chain itself (the helper's ``simulate`` runs the very code the
kernel runs)."""

import json
import subprocess

import pytest

from topologies.impair import loss as impair
from topologies.impair.loss import (GilbertElliott, GilbertElliottTime, Impairment, LossModelError,
                                    Uniform, parse_loss)


@pytest.mark.parametrize("text, model", [
    ("5", Uniform(5.0)),
    (2.5, Uniform(2.5)),
    ("uniform:1.5", Uniform(1.5)),
    ("ge:5:4", GilbertElliott.from_mean(5, 4)),
    ("ge:loss=5,burst=4", GilbertElliott.from_mean(5, 4)),
    ("GE: loss=5 , burst=4", GilbertElliott.from_mean(5, 4)),
    ("ge:p_gb=1,p_bg=10,loss_good=0.5,loss_bad=60", GilbertElliott(1, 10, 0.5, 60)),
    ("get:5:2", GilbertElliottTime.from_mean(5, 2)),
    ("get:loss=5,burst_ms=2", GilbertElliottTime.from_mean(5, 2)),
    ("GET: loss=5 , burst_ms=2", GilbertElliottTime.from_mean(5, 2)),
    ("get:good_ms=38,bad_ms=2,loss_good=0,loss_bad=100", GilbertElliottTime(38, 2, 0, 100)),
    ("get:good_ms=20,bad_ms=5,loss_good=1,loss_bad=60", GilbertElliottTime(20, 5, 1, 60)),
])
def test_texts_parse(text, model):
    assert parse_loss(text) == model


@pytest.mark.parametrize("text, words", [
    ("x", "not a loss model"),
    ("ge", "not a loss model"),
    ("nan", "finite"),
    ("-1", "at least 0"),
    ("50", "below 50"),
    ("uniform:", "number"),
    ("gx:5", "not a loss model"),
    ("ge:5", "ge:LOSS:BURST"),
    ("ge:5:4:3", "ge:LOSS:BURST"),
    ("ge:5:0.5", "at least 1 packet"),
    ("ge:60:4", "below 50"),
    ("ge:loss=5", "either loss and burst"),
    ("ge:loss=5,burst=4,p_gb=1", "either loss and burst"),
    ("ge:loss=5,seed=4", "not one of"),
    ("ge:loss=5,loss=4", "twice"),
    ("ge:p_gb=1,p_bg=0,loss_good=0,loss_bad=100", "p_bg must be above 0"),
    ("ge:p_gb=1,p_bg=10,loss_good=0,loss_bad=101", "at most 100"),
    ("get", "not a loss model"),
    ("get:5", "get:LOSS:BURST_MS"),
    ("get:5:2:1", "get:LOSS:BURST_MS"),
    ("get:0:2", "above 0"),
    ("get:50:2", "below 50"),
    ("get:5:0", "from 0.001 to 100000 ms"),
    ("get:5:1e6", "from 0.001 to 100000 ms"),
    ("get:5:inf", "finite"),
    ("get:0.001:2", "good periods of 199998 ms, above the 100000 ms"),
    ("get:loss=5", "either loss and burst_ms"),
    ("get:loss=5,burst=4", "not one of"),
    ("get:loss=5,burst_ms=2,good_ms=3", "either loss and burst_ms"),
    ("get:loss=5,loss=4", "twice"),
    ("get:good_ms=0,bad_ms=2,loss_good=0,loss_bad=100", "good_ms must be a mean duration"),
    ("get:good_ms=10,bad_ms=2,loss_good=0,loss_bad=101", "at most 100"),
])
def test_bad_texts_raise_one_sentence(text, words):
    with pytest.raises(LossModelError, match=words) as info:
        parse_loss(text)
    message = str(info.value)
    assert message.endswith(".") and message.count(". ") == 0, message


@pytest.mark.parametrize("loss, burst", [(5, 4), (1, 1), (10, 2.5), (49, 1), (0.1, 20)])
def test_mean_parametrisation_gives_the_stated_loss_and_burst(loss, burst):
    ge = GilbertElliott.from_mean(loss, burst)
    assert ge.is_gilbert()
    assert ge.p_bg_pct == pytest.approx(100 / burst)
    assert ge.mean_loss_pct == pytest.approx(loss)
    assert ge.mean_burst_pkts == pytest.approx(burst)
    again = parse_loss(ge.text())
    assert again.mean_loss_pct == pytest.approx(loss, rel=1e-5)
    assert again.mean_burst_pkts == pytest.approx(burst, rel=1e-5)


def test_general_chain_burst_formula_matches_a_short_derivation():
    # With equal loss in both states the chain is uniform loss: bursts are geometric,
    # mean 1 / (1 - p).
    ge = GilbertElliott(3, 30, 20, 20)
    assert ge.mean_loss_pct == pytest.approx(20)
    assert ge.mean_burst_pkts == pytest.approx(1 / 0.8)
    assert GilbertElliott(0, 50, 0, 100).mean_burst_pkts is None  # never bad: nothing dropped


def test_canonical_texts():
    assert Uniform(2).text() == "uniform:2"
    assert GilbertElliott.from_mean(5, 4).text() == "ge:loss=5,burst=4"
    assert GilbertElliott(1, 10, 0.5, 60).text() == \
        "ge:p_gb=1,p_bg=10,loss_good=0.5,loss_bad=60"


def test_impairment_parses_its_loss_and_checks_delay_and_seed():
    imp = Impairment("ge:5:4", delay_ms=10, seed=7)
    assert imp.loss == GilbertElliott.from_mean(5, 4) and imp.delay_ms == 10.0
    assert Impairment().loss == Uniform(0.0)
    with pytest.raises(ValueError, match="delay_ms"):
        Impairment(1, delay_ms=-1)
    with pytest.raises(LossModelError, match="seed"):
        Impairment(1, seed=-3)


# ---- rules and the helper's command line ---------------------------------------------------------

def test_uniform_rules_drop_by_themselves():
    rules = impair.ruleset("w1-eth0", Uniform(2.5))
    assert 'device "w1-eth0"' in rules
    assert f"mod {impair.RESOLUTION} < 25000" in rules
    assert "meta mark" not in rules


def test_ge_rules_drop_what_the_program_marked_and_count_both_ways():
    rules = impair.ruleset("ps1-eth0", GilbertElliott.from_mean(5, 4))
    assert f"meta mark {impair.GE_MARK:#x} counter name \"dropped\" drop" in rules
    assert 'meta protocol ip counter name "arrived"' in rules
    assert "numgen" not in rules
    # The arrived counter comes first, so marked packets are counted as arrived too.
    assert rules.index('name "arrived"') < rules.index('name "dropped" drop')


def test_the_mark_is_read_from_the_c_header():
    assert impair.GE_MARK == 0x4745


def test_attach_command_line_carries_probabilities_seed_and_stream(helper):
    argv = impair.ge_argv("attach", "w2-eth0", GilbertElliott(1, 25, 0, 100), seed=9, stream=2)
    assert argv[:4] == [str(helper), "attach", "--dev", "w2-eth0"]
    flags = dict(zip(argv[4::2], argv[5::2]))
    assert flags == {"--p-gb": "0.01", "--p-bg": "0.25", "--loss-good": "0.0",
                     "--loss-bad": "1.0", "--seed": "9", "--stream": "2"}
    assert impair.ge_argv("read", "w2-eth0")[1:] == ["read", "--dev", "w2-eth0"]
    with pytest.raises(LossModelError, match="attach, read, dump or detach"):
        impair.ge_argv("load", "w2-eth0")


def simulate(helper, model, packets, seed=1, stream=0):
    argv = [str(helper), "simulate", "--packets", str(packets), "--seed", str(seed),
            "--stream", str(stream)]
    for name, p in model.probabilities().items():
        argv += [f"--{name}", repr(p)]
    return json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)


@pytest.mark.parametrize("loss, burst", [(5, 4), (1, 1.5), (10, 8)])
def test_the_chain_meets_its_loss_and_burst_over_a_million_packets(helper, loss, burst):
    model = GilbertElliott.from_mean(loss, burst)
    c = simulate(helper, model, 1_000_000)
    assert c["packets"] == 1_000_000
    # Loss within 5 % of its value and bursts within 3 % of theirs, far outside the noise of a
    # million packets (the loss's standard deviation there is ~2 % of it at 10 % and burst 8).
    assert 100 * c["drops"] / c["packets"] == pytest.approx(loss, rel=0.05)
    assert c["drops"] / c["bursts"] == pytest.approx(burst, rel=0.03)
    assert c["bad_packets"] == c["drops"]  # Gilbert: every bad packet and only those is lost


def test_the_general_chain_meets_its_stationary_figures(helper):
    model = GilbertElliott(2, 20, 1, 60)
    c = simulate(helper, model, 1_000_000)
    assert 100 * c["drops"] / c["packets"] == pytest.approx(model.mean_loss_pct, rel=0.05)
    assert c["drops"] / c["bursts"] == pytest.approx(model.mean_burst_pkts, rel=0.05)


def test_one_seed_one_sequence_and_streams_differ(helper):
    model = GilbertElliott.from_mean(5, 4)
    a, b = simulate(helper, model, 20_000, seed=3), simulate(helper, model, 20_000, seed=3)
    other = simulate(helper, model, 20_000, seed=3, stream=1)
    assert a == b
    assert other["drops"] != a["drops"] or other["bursts"] != a["bursts"]


def test_helper_rejects_bad_arguments_with_usage_status(helper):
    bad = [str(helper), "simulate", "--packets", "10", "--p-gb", "2", "--p-bg", "1",
           "--loss-good", "0", "--loss-bad", "1"]
    assert subprocess.run(bad, capture_output=True).returncode == 2
    assert subprocess.run([str(helper), "read"], capture_output=True).returncode == 2


def test_helper_command_line_checks_pass(helper):
    proc = subprocess.run(["make", "-s", "-C", str(impair.GE_DIR), "test"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "ge-loss command line: ok" in proc.stdout
