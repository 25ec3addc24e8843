"""Compressed pushes (harness/training/compress.py): parsing, exact encodings, distrust, error
feedback."""

import numpy as np
import pytest

from harness.running.spec import RunSpec, SpecError
from harness.training.compress import (CompressError, Compression, ErrorFeedback, ErrorReset,
                                       check_compress, decode, encode, parse_compress,
                                       residual_keeper, up_layout)
from transports.base import Delivery, Layout

LAYOUT = Layout.from_sizes([("fc1.weight", 1000), ("fc1.bias", 10), ("fc2.weight", 64)])


def _vector(seed=0):
    return np.random.default_rng(seed).normal(size=LAYOUT.n_floats).astype(np.float32)


def _delivered(wire, mask=None, up=None):
    frac = 1.0 if mask is None else float(mask.mean())
    return Delivery(wire.copy(), mask, frac, tuple(1.0 for _ in (up or LAYOUT).segments), {})


def test_parse_texts_and_errors():
    assert parse_compress("none") == Compression("none")
    assert parse_compress("sign") == Compression("sign")
    assert parse_compress("topk") == Compression("topk", 0.01)
    assert parse_compress(" topk:0.05 ").text() == "topk:0.05"
    for bad in ("zip", "topk:0", "topk:0.9", "topk:x", "sign:2", "topk:0.1:3"):
        with pytest.raises(CompressError):
            parse_compress(bad)
    with pytest.raises(CompressError, match="local-steps"):
        check_compress("none", 0, 1)
    with pytest.raises(CompressError, match="error-reset"):
        check_compress("sign", 1, -1)


def test_up_layout_keeps_the_layers_and_shrinks_them():
    top = up_layout(LAYOUT, parse_compress("topk:0.01"))
    assert [s.name for s in top.segments] == [s.name for s in LAYOUT.segments]
    assert [s.length for s in top.segments] == [2 * 10, 2 * 1, 2 * 1]
    sign = up_layout(LAYOUT, parse_compress("sign"))
    assert [s.length for s in sign.segments] == [1 + 32, 1 + 1, 1 + 2]
    assert up_layout(LAYOUT, parse_compress("none")) is LAYOUT


def test_topk_keeps_the_largest_per_layer_and_decodes_exactly():
    comp = parse_compress("topk:0.01")
    v = _vector()
    wire, dense = encode(v, LAYOUT, comp)
    first = v[:1000]
    kept = np.flatnonzero(dense[:1000])
    assert set(kept) == set(np.argsort(np.abs(first))[-10:])
    assert np.array_equal(dense[kept], first[kept])
    got = decode(_delivered(wire), LAYOUT, comp)
    assert np.array_equal(got.values, dense) and got.mask is None
    assert got.stats["compress_dropped"] == 0


def test_sign_is_scaled_sign_per_layer_and_decodes_exactly():
    comp = parse_compress("sign")
    v = _vector(1)
    wire, dense = encode(v, LAYOUT, comp)
    for s in LAYOUT.segments:
        part = v[s.offset:s.offset + s.length]
        scale = np.float32(np.abs(part).mean())
        assert np.array_equal(dense[s.offset:s.offset + s.length],
                              np.where(part >= 0, scale, -scale))
    got = decode(_delivered(wire), LAYOUT, comp)
    assert np.array_equal(got.values, dense) and got.mask is None


def test_lost_words_leave_holes_and_nothing_else():
    comp = parse_compress("sign")
    up = up_layout(LAYOUT, comp)
    wire, dense = encode(_vector(2), LAYOUT, comp)
    mask = np.ones(up.n_floats, dtype=bool)
    mask[1] = False                      # fc1.weight's first word: coordinates 0-31
    mask[up.segments[2].offset] = False  # fc2.weight's scale: the whole layer
    wire[~mask] = np.nan                 # whatever the filler put there
    got = decode(_delivered(wire, mask, up), LAYOUT, comp)
    assert not got.mask[:32].any() and got.mask[32:1010].all()
    assert not got.mask[1010:].any()
    assert np.array_equal(got.values[got.mask], dense[got.mask])
    assert np.isfinite(got.values).all()
    assert got.stats["compress_dropped"] == 1 + 2


def test_decode_trusts_no_index_and_no_value():
    comp = parse_compress("topk:0.01")
    up = up_layout(LAYOUT, comp)
    wire, dense = encode(_vector(3), LAYOUT, comp)
    wire[0] = np.array([5000], dtype=np.int32).view(np.float32)[0]   # outside fc1.weight
    wire[2] = np.array([-1], dtype=np.int32).view(np.float32)[0]
    wire[5] = np.inf
    mask = np.ones(up.n_floats, dtype=bool)
    mask[6] = False                                                   # a lost index
    got = decode(_delivered(wire, mask, up), LAYOUT, comp)
    assert got.stats["compress_dropped"] == 4
    assert np.isfinite(got.values).all()
    assert np.count_nonzero(got.values[:1000]) == 10 - 4


def test_error_feedback_keeps_what_it_did_not_send_and_resets():
    comp = parse_compress("topk:0.01")
    v = _vector(4)
    never = ErrorFeedback(LAYOUT, comp, reset=0)
    wire = never.push(v)
    sent = decode(_delivered(wire), LAYOUT, comp).values
    assert np.allclose(never.residual, v - sent)
    # Everything is sent eventually: pushing zeros drains the residual.
    total = sent.copy()
    for _ in range(200):
        total += decode(_delivered(never.push(np.zeros_like(v))), LAYOUT, comp).values
    assert np.allclose(total, v, atol=1e-5)
    each = ErrorFeedback(LAYOUT, comp, reset=1)
    each.push(v)
    assert each.residual_norm == 0.0
    every2 = ErrorFeedback(LAYOUT, comp, reset=2)
    every2.push(v)
    assert every2.residual_norm > 0
    every2.push(v)
    assert every2.residual_norm == 0.0


def _old_push(state, update, layout, comp, reset):
    """ErrorFeedback.push as it was before reset modes existed (the reference for ``drop``)."""
    state["pushes"] += 1
    pending = state["residual"] + update
    wire, sent = encode(pending, layout, comp)
    if reset and state["pushes"] % reset == 0:
        state["residual"] = np.zeros_like(pending)
    else:
        state["residual"] = pending - sent
    return wire


@pytest.mark.parametrize("text", ["topk:0.01", "sign"])
@pytest.mark.parametrize("reset", [0, 1, 3])
def test_drop_is_bit_for_bit_what_error_feedback_was(text, reset):
    comp = parse_compress(text)
    keeper = residual_keeper(LAYOUT, comp, reset, "drop", lr=0.2)
    assert isinstance(keeper, ErrorFeedback) and not keeper.due()
    pulled = _vector(9)
    assert keeper.local(pulled) is pulled            # drop loads the pulled parameters as is
    state = {"pushes": 0, "residual": np.zeros(LAYOUT.n_floats, dtype=np.float32)}
    for i in range(7):
        v = _vector(10 + i)
        # compared as bit patterns: packed sign words can read as NaN
        assert np.array_equal(keeper.push(v).view(np.uint32),
                              _old_push(state, v, LAYOUT, comp, reset).view(np.uint32))
        assert np.array_equal(keeper.residual, state["residual"])
        assert not keeper.due()


def _cser_rounds(text, reset, rounds, schedule, lr=0.2, n=3, seed=0):
    """Workers with ErrorReset keepers against a fake PS that applies each push's decoded
    vector, ``x -= lr / n * push`` per push (bsp: a round's n pushes at once, the mean). Each
    worker's full update is a noisy gradient of a quadratic at its local model. Yields, after
    each step, (x, residuals, mean local model, plain SGD's model, who pushed, syncs)."""
    rng = np.random.default_rng(seed)
    comp = parse_compress(text)
    target = rng.normal(size=LAYOUT.n_floats).astype(np.float32)
    x = np.zeros(LAYOUT.n_floats, dtype=np.float32)
    plain = x.astype(np.float64)
    keepers = [residual_keeper(LAYOUT, comp, reset, "cser", lr=lr) for _ in range(n)]
    for step in range(rounds):
        who = schedule(step, rng)
        pushes, syncing = [], []
        for i in who:
            k = keepers[i]
            syncing.append(k.due())
            if k.due():
                pushes.append(k.sync())
            else:
                local = k.local(x)
                u = (local - target + 0.3 * rng.normal(size=x.size)).astype(np.float32)
                plain -= lr / n * u.astype(np.float64)   # SGD on the full update, nothing lost
                pushes.append(k.push(u))
        for wire in pushes:   # after every worker of the step has pulled (bsp's order)
            x -= lr / n * decode(_delivered(wire, up=up_layout(LAYOUT, comp)), LAYOUT,
                                 comp).values
        mean_local = np.mean([x + k.residual for k in keepers], axis=0)
        yield x, [k.residual for k in keepers], mean_local, plain, syncing, \
            [k.syncs for k in keepers]


@pytest.mark.parametrize("text", ["topk:0.01", "sign"])
def test_cser_loses_nothing_under_bsp(text):
    """After every round, gradient or residual synchronisation, the mean of the workers' local
    models x + e_i is exactly where plain SGD on the mean of their full updates would be."""
    reset, rounds = 3, 24
    apart = 0.0
    for t, (x, residuals, mean_local, plain, syncing, syncs) in enumerate(
            _cser_rounds(text, reset, rounds, lambda step, rng: range(3))):
        assert np.allclose(mean_local, plain, rtol=1e-4, atol=1e-4), t
        # every worker counts rounds alike: all synchronise in the same round, every R + 1
        assert syncing == [t % (reset + 1) == reset] * 3
        apart = max(apart, float(np.abs(x - plain).max()))
    assert syncs == [rounds // (reset + 1)] * 3
    assert apart > 1e-2   # the PS's own x does trail: the check above is not x == plain
    assert all(np.abs(e).max() > 0 for e in residuals)


def test_cser_loses_nothing_when_each_worker_keeps_its_own_schedule():
    """async: one worker at a time, in random order, each push applied at lr / n at once; each
    worker synchronises on its own count of rounds."""
    rounds = 0
    for x, residuals, mean_local, plain, syncing, syncs in _cser_rounds(
            "topk:0.01", 2, 60, lambda step, rng: [int(rng.integers(3))]):
        assert np.allclose(mean_local, plain, rtol=1e-4, atol=1e-4)
        rounds += syncing == [True]
    assert sum(syncs) == rounds > 0
    assert len(set(syncs)) > 1   # the workers did not synchronise in lockstep


def test_cser_without_compression_is_plain_sgd():
    keeper = residual_keeper(LAYOUT, parse_compress("none"), 2, "cser", lr=0.2)
    assert isinstance(keeper, ErrorReset)
    pulled, v = _vector(20), _vector(21)
    for _ in range(6):
        assert not keeper.due() and keeper.local(pulled) is pulled
        assert np.array_equal(keeper.push(v), v)
    assert keeper.residual_norm == 0.0 and keeper.syncs == 0


def test_cser_synchronises_with_the_runs_compressor():
    comp = parse_compress("topk:0.01")
    keeper = residual_keeper(LAYOUT, comp, 1, "cser", lr=0.5)
    with pytest.raises(RuntimeError, match="due"):
        keeper.sync()
    v = _vector(22)
    wire = keeper.push(v)
    sent = decode(_delivered(wire), LAYOUT, comp).values
    assert np.allclose(keeper.residual, -0.5 * (v - sent))
    assert np.allclose(keeper.local(np.zeros_like(v)), keeper.residual)
    assert keeper.due()
    before = keeper.residual.copy()
    sync_wire = keeper.sync()
    synced = decode(_delivered(sync_wire), LAYOUT, comp).values
    # One push layout per run: the synchronisation is the same top-k, of -e / lr.
    assert sync_wire.size == wire.size == up_layout(LAYOUT, comp).n_floats
    assert np.allclose(synced, encode(-before / 0.5, LAYOUT, comp)[1])
    assert np.allclose(keeper.residual, before + 0.5 * synced)
    assert np.count_nonzero(keeper.residual) < np.count_nonzero(before)
    assert not keeper.due() and keeper.syncs == 1


def test_reset_modes_are_checked():
    with pytest.raises(CompressError, match="reset-mode"):
        check_compress("topk", 1, 1, "cser2")
    with pytest.raises(CompressError, match="at least 1"):
        check_compress("topk", 1, 0, "cser")
    check_compress("topk", 1, 0, "DROP")


def test_the_spec_takes_the_parameters_and_names_the_run():
    spec = RunSpec(transport="ltp", compress="topk:0.05", local_steps=4, error_reset=0)
    assert "_topk0.05_h4_" in spec.run_id
    assert RunSpec.from_json(spec.to_json()) == spec
    plain = RunSpec(transport="ltp")
    assert "compress" not in plain.to_json()      # old run ids unchanged
    with pytest.raises(SpecError, match="compress"):
        RunSpec(compress="gzip")
    with pytest.raises(SpecError, match="local-steps"):
        RunSpec(local_steps=0)
