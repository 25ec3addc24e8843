"""Compressed pushes (harness/training/compress.py): parsing, exact encodings, distrust, error
feedback."""

import numpy as np
import pytest

from harness.running.spec import RunSpec, SpecError
from harness.training.compress import (CompressError, Compression, ErrorFeedback, check_compress,
                                       decode, encode, parse_compress, up_layout)
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
