"""OptiReduce (transports/optireduce.py, optireduce_mesh.py, hadamard.py) without sockets: the
randomized Hadamard transform is orthonormal and undoes itself, both ends draw the same signs, a
lost run of coded floats spreads as small noise where zeroing the same floats uncoded loses them
whole, the deadline follows its rule on synthetic step times, and bad options and the ps pattern
are refused in one sentence."""

import numpy as np
import pytest

from harness.running.spec import RunSpec, SpecError
from transports import hadamard, registry
from transports.base import Delivery, OptionError
from transports.hadamard import HadamardCode
from transports.mesh import Part
from transports.optireduce import AdaptiveTimeout
from transports.optireduce_mesh import OptiReduceMesh

SIZES = [1, 2, 7, 64, 100, 2 * 64 + 45]


@pytest.mark.parametrize("n", SIZES)
def test_blocks_cover_a_part_without_padding(n):
    cut = hadamard.blocks(n, 64)
    assert sum(size * count for _, size, count in cut) == n
    at = 0
    for offset, size, count in cut:
        assert offset == at and hadamard.is_power_of_two(size) and size <= 64
        at += size * count
    assert [s for _, s, _ in cut[1:]] == sorted({s for _, s, _ in cut[1:]}, reverse=True)


@pytest.mark.parametrize("n", SIZES)
def test_the_transform_is_orthonormal_and_exactly_invertible(n):
    sign = hadamard.signs(3, 1, 9, 2, n)
    matrix = np.stack([hadamard.transform(e, 64, sign) for e in np.eye(n)], axis=1)
    np.testing.assert_allclose(matrix @ matrix.T, np.eye(n), atol=1e-12)
    x = np.random.default_rng(n).normal(size=n)
    y = hadamard.transform(x, 64, sign)
    assert np.linalg.norm(y) == pytest.approx(np.linalg.norm(x), rel=1e-12)
    np.testing.assert_allclose(hadamard.transform(y, 64, sign, inverse=True), x, atol=1e-12)
    if n >= 64:   # it mixes: no coded float is a signed copy of one value
        assert np.count_nonzero(np.abs(np.abs(y) - np.abs(x)) > 1e-9) > n // 2


def test_the_float32_code_round_trips_within_rounding():
    code = HadamardCode(seed=0, block=8192)
    x = np.random.default_rng(0).normal(size=2 * 8192 + 2770).astype(np.float32)
    coded = code.encode(x, 2, 7, 3)
    assert coded.dtype == np.float32 and coded.shape == x.shape
    np.testing.assert_allclose(code.decode(coded, 2, 7, 3), x, atol=1e-6)


def _end(rank, n_parts=3, n=5000, seed=0):
    """A mesh end as far as its coding goes (no socket): its member number, parts and code."""
    end = object.__new__(OptiReduceMesh)
    end.rank, end.parts = rank, [Part(0, n)] * (n_parts - 1) + [Part(0, 1, (1.0, 1.0))]
    end.coded = [p.thresholds is None for p in end.parts]
    end.code = HadamardCode(seed, 1024)
    return end


def test_both_ends_derive_the_same_signs_without_a_message():
    sender, receiver, other = _end(rank=3), _end(rank=0), _end(rank=1)
    x = np.random.default_rng(5).normal(size=5000).astype(np.float32)
    coded = sender._encode(1, 42, x)
    assert not np.allclose(coded, x)
    got = receiver._decode((3, 42, 1), Delivery(coded.copy(), None, 1.0, (1.0,)))
    np.testing.assert_allclose(got.values, x, atol=1e-6)
    # the signs are the message's: another sender, id, part or seed decodes to something else
    for key, end in (((2, 42, 1), other), ((3, 43, 1), other), ((3, 42, 0), other),
                     ((3, 42, 1), _end(rank=0, seed=1))):
        wrong = end._decode(key, Delivery(coded.copy(), None, 1.0, (1.0,)))
        assert np.abs(wrong.values - x).max() > 1.0
    # a whole part (parameters, control) goes as it is
    one = np.ones(1, np.float32)
    assert sender._encode(2, 42, one) is one


def test_a_lost_run_of_coded_floats_spreads_instead_of_zeroing_a_block():
    code = HadamardCode(seed=0, block=8192)
    rng = np.random.default_rng(2)
    x = rng.normal(size=8192).astype(np.float32)
    lost = slice(4000, 4410)            # 5 %: a run of packets
    x[4100] = 40.0                      # a large coordinate in it, as gradients have
    coded = code.encode(x, 1, 7, 0)
    coded[lost] = 0.0                   # the filler: zero in the coded domain
    err_coded = np.abs(code.decode(coded, 1, 7, 0) - x).max()
    err_plain = np.abs(x[lost]).max()   # the same floats lost uncoded, zero-filled
    assert err_coded < 0.1 * err_plain
    # without a spike too: the largest error is well below the largest value lost
    y = rng.normal(size=8192).astype(np.float32)
    coded = code.encode(y, 1, 8, 0)
    coded[lost] = 0.0
    assert np.abs(code.decode(coded, 1, 8, 0) - y).max() < 0.5 * np.abs(y[lost]).max()


def test_the_deadline_follows_its_rule_on_synthetic_step_times():
    rule = AdaptiveTimeout(pct=95, mult=1.5, history=5, warmup=3, floor_s=0.01, max_s=10.0)
    assert rule.timeout_s(0) == 10.0                   # no samples: the warm-up's
    for t in (0.10, 0.20):
        rule.observe(0, t, 1.0)
    assert rule.timeout_s(0) == 10.0                   # still warming up
    rule.observe(0, 0.30, 1.0)
    assert rule.timeout_s(0) == pytest.approx(1.5 * np.percentile([0.1, 0.2, 0.3], 95))
    assert rule.timeout_s(1) == 10.0                   # every part has its own samples
    # a part given up at half: the time it would have needed whole
    assert rule.observe(0, 0.10, 0.5) == pytest.approx(0.20)
    assert rule.observe(0, 0.10, 0.0) == 10.0          # nothing arrived: the longest
    assert rule.observe(0, 60.0, 1.0) == 10.0          # samples stop at the longest
    assert list(rule.samples[0]) == pytest.approx([0.2, 0.3, 0.2, 10.0, 10.0])   # the last 5
    for _ in range(5):
        rule.observe(0, 0.001, 1.0)
    assert rule.timeout_s(0) == 0.01                   # never below the floor
    for _ in range(5):
        rule.observe(0, 9.0, 1.0)
    assert rule.timeout_s(0) == 10.0                   # nor above the longest


def test_the_rule_reads_the_options():
    rule = AdaptiveTimeout.of(registry.create("optireduce", {"timeout_floor_ms": 2.0}).options())
    assert (rule.pct, rule.mult, rule.history, rule.warmup) == (95.0, 1.5, 20, 5)
    assert (rule.floor_s, rule.max_s) == (0.002, 30.0)


@pytest.mark.parametrize("options, words", [
    ({"timeout_warmup": 30}, r"timeout_warmup \(30\) must not exceed timeout_history \(20\)"),
    ({"timeout_floor_ms": 50.0, "timeout_max_ms": 20.0}, "must not exceed timeout_max_ms"),
    ({"hadamard_block_floats": 1000}, "must be a power of two"),
    ({"timeout_pct": 0}, "timeout_pct must be a number from 1 to 100"),
    ({"threshold_min": 0.8}, "no option 'threshold_min'"),
    ({"hadamard": "yes"}, "hadamard must be true or false"),
])
def test_bad_options_are_refused_in_one_sentence(options, words):
    with pytest.raises(OptionError, match=words) as caught:
        registry.create("optireduce", options)
    text = str(caught.value)
    assert text.endswith(".") and "\n" not in text and ". " not in text.replace("..., ", "")


def test_the_ps_pattern_is_refused_and_the_collectives_are_not():
    transport = registry.create("optireduce")
    assert transport.MESH and not transport.PS and registry.get("optireduce").loss_tolerant
    with pytest.raises(OptionError, match="all-reduce and has no parameter-server ends"):
        transport.serve(("127.0.0.1", 1), [("127.0.0.1", 2)], None)
    with pytest.raises(SpecError, match="cannot run the ps pattern; run it with --pattern ring"):
        RunSpec(transport="optireduce")
    for pattern in ("ring", "tree"):
        assert RunSpec(transport="optireduce", pattern=pattern).pattern == pattern
