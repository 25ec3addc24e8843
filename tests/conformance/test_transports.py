"""Every registered transport honours the contract of transports.base, over loopback.

New slugs are picked up automatically. A loss-tolerant transport declares, in its registry
entry's ``test_loss_options``, options that make it drop part of what it receives and close
messages before repairing everything (on loopback a repair takes microseconds); it must then
report the partial delivery exactly through the mask.
"""

import inspect
from pathlib import Path

import numpy as np
import pytest

from transports import registry
from transports.base import Layout
from tests.conformance.loopback import on_free_ports, train_in_threads

# The lab 3 example is a plugin; hold it to the same contract as the built-in transports.
registry.load_plugins(str(Path(__file__).resolve().parents[2] / "docs/labs/instructor/udp_blast.py"))

LAYOUT = Layout.from_sizes([("w1", 1000), ("b1", 50000), ("w2", 7), ("b2", 2093)])
N_WORKERS = 2
TIMEOUT_S = 20.0
# The schemes with a parameter server's ends (an all-reduce only scheme, OptiReduce, has none).
PS_SLUGS = [s for s in registry.slugs() if registry.get(s).transport_class().PS]


def _job(slug, options, iterations=3, up=None):
    """Run PS and workers in threads; return (sent gradients, gathered, params sent, pulled).

    ``up``: the workers push messages of this layout (compressed pushes) instead of ``LAYOUT``.
    """
    return on_free_ports(N_WORKERS + 1, lambda ports: _job_on(ports, slug, options, iterations, up))


def _job_on(ports, slug, options, iterations, up):
    ps_addr = ("127.0.0.1", ports[0])
    worker_addrs = [("127.0.0.1", p) for p in ports[1:]]
    rng = np.random.default_rng(7)
    n_up = (up or LAYOUT).n_floats
    grads = [[rng.standard_normal(n_up).astype(np.float32) if up is None
              # compressed pushes carry indices and sign bits: any bit pattern, NaNs included
              else rng.integers(0, 2**32, n_up, dtype=np.uint64).astype(np.uint32).view(np.float32)
              for _ in range(N_WORKERS)] for _ in range(iterations)]
    extra = {"up": up} if up is not None else {}
    params = [rng.standard_normal(LAYOUT.n_floats).astype(np.float32) for _ in range(iterations)]
    gathered, pulled = [], [[] for _ in range(N_WORKERS)]
    transport = registry.create(slug, options)

    def push(t, rank, got):
        pulled[rank].append(got)
        return grads[t][rank]

    train_in_threads(transport.serve(ps_addr, worker_addrs, LAYOUT, **extra),
                     lambda rank: transport.connect(rank, worker_addrs[rank], ps_addr, LAYOUT,
                                                    **extra),
                     N_WORKERS, iterations, push, lambda t: params[t],
                     lambda t, got: gathered.append(got), TIMEOUT_S)
    return grads, gathered, params, pulled


@pytest.mark.parametrize("slug", PS_SLUGS)
def test_whole_message_without_loss(slug):
    grads, gathered, params, pulled = _job(slug, {})
    for t, deliveries in enumerate(gathered):
        assert len(deliveries) == N_WORKERS
        for rank, d in enumerate(deliveries):
            assert d.values.dtype == np.float32 and d.values.shape == (LAYOUT.n_floats,)
            np.testing.assert_array_equal(d.values, grads[t][rank])
            assert d.received_frac == 1.0
            assert d.mask is None or d.mask.all()
            assert d.segment_fracs == (1.0,) * len(LAYOUT.segments)
    for rank in range(N_WORKERS):
        for t, d in enumerate(pulled[rank]):
            np.testing.assert_array_equal(d.values, params[t])
            assert d.received_frac == 1.0


@pytest.mark.parametrize("slug", [s for s in PS_SLUGS if registry.get(s).loss_tolerant])
def test_partial_delivery_with_injected_loss(slug):
    grads, gathered, _, _ = _job(slug, registry.get(slug).test_loss_options, iterations=4)
    partial = 0
    for t, deliveries in enumerate(gathered):
        for rank, d in enumerate(deliveries):
            mask = np.ones(LAYOUT.n_floats, bool) if d.mask is None else d.mask
            np.testing.assert_array_equal(d.values[mask], grads[t][rank][mask])
            assert d.received_frac == pytest.approx(mask.mean())
            for seg, frac in zip(LAYOUT.segments, d.segment_fracs):
                assert frac == pytest.approx(mask[seg.offset:seg.offset + seg.length].mean())
            partial += d.received_frac < 1.0
    assert partial > 0, "the injected loss never showed in a mask"


UP = Layout.from_sizes([("w1", 20), ("b1", 1000), ("w2", 2), ("b2", 42)])


@pytest.mark.parametrize("slug", [s for s in PS_SLUGS
                                  if "up" in inspect.signature(registry.get(s).transport_class().serve).parameters])
def test_compressed_pushes_arrive_bit_for_bit(slug):
    """Pushes in a shorter layout than the parameters (harness/training/compress.py), carrying
    integer
    indices and sign bits as float32 words: every bit pattern (NaNs included) arrives as sent."""
    grads, gathered, params, pulled = _job(slug, {}, up=UP)
    assert any(np.isnan(g).any() for row in grads for g in row)
    for t, deliveries in enumerate(gathered):
        for rank, d in enumerate(deliveries):
            assert d.values.shape == (UP.n_floats,)
            np.testing.assert_array_equal(d.values.view(np.uint32), grads[t][rank].view(np.uint32))
            assert len(d.segment_fracs) == len(UP.segments)
    for rank in range(N_WORKERS):
        for t, d in enumerate(pulled[rank]):
            np.testing.assert_array_equal(d.values, params[t])
