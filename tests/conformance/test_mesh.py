"""Every transport with an end for collectives (:mod:`transports.mesh`), over loopback: any member
sends any part to any other, parts arrive and close on their own, and a loss-tolerant part
closes early under loss while a whole part (the parameters') does not."""

import concurrent.futures as cf

import numpy as np
import pytest

from tests.conformance.loopback import on_free_ports
from transports import registry
from transports.base import OptionError
from transports.mesh import chunks

N_MEMBERS, N_FLOATS = 3, 20_000


def _meshes():
    return [s for s in registry.slugs() if registry.create(s, {}).MESH]


def _open(slug, options, parts, ports):
    transport = registry.create(slug, options)
    members = [("127.0.0.1", p) for p in ports]
    ends = []
    try:
        for m in range(len(members)):
            ends.append(transport.mesh(m, members, parts))
        with cf.ThreadPoolExecutor(len(ends)) as pool:
            list(pool.map(lambda e: e.join(20.0), ends))
    except BaseException:
        for e in ends:
            e.close()
        raise
    return ends


def _exchange(ends, parts, values, msg_id=1):
    """Every member sends every part to every other; what each received, by (from, part)."""
    def member(m):
        others = [k for k in range(len(ends)) if k != m]
        for i, p in enumerate(parts):
            ends[m].send(others, msg_id, i, p.of(values[m]), 20.0)
        return {(k, i): ends[m].recv(k, msg_id, i, 20.0) for k in others for i in range(len(parts))}
    with cf.ThreadPoolExecutor(len(ends)) as pool:
        return list(pool.map(member, range(len(ends))))


@pytest.mark.parametrize("slug", _meshes())
def test_every_part_reaches_every_member(slug):
    parts = chunks(N_FLOATS, 4)
    ends = on_free_ports(N_MEMBERS, lambda ports: _open(slug, {}, parts, ports))
    try:
        rng = np.random.default_rng(0)
        values = [rng.normal(size=N_FLOATS).astype(np.float32) for _ in ends]
        got = _exchange(ends, parts, values)
        for m, received in enumerate(got):
            for (k, i), d in received.items():
                assert d.received_frac == 1.0
                if getattr(ends[m], "exact", True):
                    np.testing.assert_array_equal(d.values, parts[i].of(values[k]))
                else:   # an end that codes its parts (OptiReduce): float32 rounding, no more
                    np.testing.assert_allclose(d.values, parts[i].of(values[k]), rtol=0,
                                               atol=1e-5)
    finally:
        for e in ends:
            e.close()


def test_ltp_closes_gradient_parts_early_and_parameter_parts_whole():
    grads = chunks(N_FLOATS, 2)
    params = chunks(N_FLOATS, 2, thresholds=(1.0, 1.0))
    parts = params + grads
    opts = {"rx_drop_frac": 0.1, "threshold_min": 0.8, "threshold_max": 0.8, "seed": 3,
            "close_grace_min_us": 0, "grace_rtt_mult": 0.0, "filler": "zero",
            "packet_payload_bytes": 1472}   # Ethernet-sized: drops of 64 KB are too coarse
    ends = on_free_ports(N_MEMBERS, lambda ports: _open("ltp", opts, parts, ports))
    try:
        values = [np.full(N_FLOATS, m + 1.0, np.float32) for m in range(N_MEMBERS)]
        got = _exchange(ends, parts, values)
        whole = [d.received_frac for r in got for (k, i), d in r.items() if i < len(params)]
        early = [d for r in got for (k, i), d in r.items() if i >= len(params)]
        assert min(whole) == 1.0
        assert any(d.received_frac < 1.0 for d in early)
        assert all(d.received_frac >= 0.8 for d in early)
        for d in early:   # holes are zero-filled (the default filler), the rest is the sender's
            arrived = d.values[d.mask] if d.mask is not None else d.values
            assert np.all(np.isin(arrived, [1.0, 2.0, 3.0]))
    finally:
        for e in ends:
            e.close()


def test_a_transport_without_collectives_says_so():
    plot = registry.create("plot", {})
    assert not plot.MESH
    with pytest.raises(OptionError, match="no end for collectives"):
        plot.mesh(0, [("127.0.0.1", 1)], chunks(4, 1))
