"""phase-bound over loopback: the PS's phase rule switches the core's early-close threshold while
gradients flow, and every gradient closes at the threshold of its round's phase.

The PS drops a seeded 10 % of the DATA it receives (``rx_drop_frac``) and closes a message as
soon as its sender's first pass is over (no grace), so a loose round's gradients close with
about nine tenths of them, a strict round's only once 99 % arrived. The workers' gradients are
noise whose scale jumps once: windows of equal scale leave the rule loose, the jump makes the
window after it strict (docs/phase-bound.md).
"""

import numpy as np
import pytest

from transports import registry
from transports.base import Layout
from transports.phase import PhaseRule
from tests.conformance.loopback import on_free_ports, train_in_threads

LAYOUT = Layout.from_sizes([("w1", 1000), ("b1", 50000), ("w2", 7), ("b2", 2093)])
N_WORKERS, TIMEOUT_S = 2, 20.0
STRICT, LOOSE, WARMUP, WINDOW = 0.99, 0.6, 2, 2
SCALES = [1.0] * 4 + [3.0] * 6   # windows [0,2) [2,4) equal; [4,6) jumps; then equal again
OPTIONS = {"strict_threshold": STRICT, "loose_threshold": LOOSE, "warmup_rounds": WARMUP,
           "window_rounds": WINDOW, "rx_drop_frac": 0.1, "close_grace_min_us": 0,
           "grace_rtt_mult": 0.0, "packet_payload_bytes": 1472}


def _train(ports):
    """PS and workers in threads; per round, each delivery's (received fraction, stats)."""
    ps_addr, addrs = ("127.0.0.1", ports[0]), [("127.0.0.1", p) for p in ports[1:]]
    transport = registry.create("phase-bound", OPTIONS)
    noise = [np.random.default_rng(rank + 20) for rank in range(N_WORKERS)]
    server = transport.serve(ps_addr, addrs, LAYOUT)
    seen = []

    def gathered(t, deliveries):
        seen.append([(d.received_frac, dict(d.stats)) for d in deliveries])
        server.observe(t, deliveries)

    train_in_threads(server, lambda rank: transport.connect(rank, addrs[rank], ps_addr, LAYOUT),
                     N_WORKERS, len(SCALES),
                     lambda t, rank, _: (SCALES[t] * noise[rank].standard_normal(
                         LAYOUT.n_floats)).astype(np.float32),
                     lambda t: np.zeros(LAYOUT.n_floats, np.float32), gathered, TIMEOUT_S)
    return seen, server.stats()


def test_gradients_close_at_the_threshold_of_their_rounds_phase():
    seen, stats = on_free_ports(N_WORKERS + 1, _train)
    rule = PhaseRule(WARMUP, WINDOW, 0.5)
    expected = [rule.strict] + [rule.observe(np.full(4, s)) for s in SCALES][:-1]
    assert expected == [True] * 4 + [False] * 2 + [True] * 2 + [False] * 2
    loose_partial = 0
    for t, deliveries in enumerate(seen):
        bound = STRICT if expected[t] else LOOSE
        for frac, s in deliveries:
            assert s["phase_strict"] == float(expected[t]), (t, s)
            assert s["threshold_frac"] == pytest.approx(bound, abs=1e-6), (t, s)
            assert frac >= bound - 1e-6, (t, frac, bound)
            loose_partial += not expected[t] and frac < STRICT
    assert loose_partial > 0, "no loose round closed below the strict threshold"
    assert (stats["strict_rounds"], stats["loose_rounds"]) == (6, 4)
    assert stats["phase_switches"] == 3
