"""PLOT's adaptive rule over loopback: the core's threshold chooses within each layer's range.

The PS drops a seeded 5 % of the DATA it receives (``rx_drop_frac``), so each message's first
pass loses some packets, and closes a layer as soon as its sender's first pass is over (no
grace): the threshold in force at each close (``threshold_<segment>``) is then the core's
adaptive one, ``1 - loss_weight * p_hat`` clamped to the layer's range, where ``p_hat`` is the
least first-pass loss of the worker's last ``loss_window`` (8) messages of that layer (until
there are eight: of its messages of any layer with at least ``loss_min_packets`` packets).

A layer of one packet loses all or nothing of it, mostly nothing. When the core kept one
``p_hat`` per worker over every layer's messages, one such layer among the eight recent messages
held ``p_hat`` at 0 and every range at its upper end, and every real model has such layers (its
biases): the second test checks that they no longer do (docs/plot-protocol.md, "The loss
estimate per layer"); the core before failed it with next to no close below the upper end.
"""

import numpy as np

from transports import registry
from transports.base import Layout
from transports.plot import plot_options
from tests.conformance.loopback import on_free_ports, train_in_threads

N_WORKERS, ITERATIONS, PROFILE, TIMEOUT_S = 4, 16, 3, 20.0
# What one 1472-byte datagram carries (PLOT's default for layers it always delivers whole).
PACKET_FLOATS = {o.name: o.default for o in plot_options()}["reliable_below_floats"]
OPTIONS = {"bound_rule": "adaptive", "profile_iterations": PROFILE, "bound_min": 0.7,
           "reliable_below_floats": 0, "rx_drop_frac": 0.05, "close_grace_min_us": 0,
           "grace_rtt_mult": 0.0, "udp_gso": False, "packet_payload_bytes": 1472}


def _train(layout, ports):
    """PS and workers in threads; per iteration and worker, each layer's (close threshold,
    lower end, upper end) after the PS observed the round."""
    ps_addr, addrs = ("127.0.0.1", ports[0]), [("127.0.0.1", p) for p in ports[1:]]
    transport = registry.create("plot", OPTIONS)
    rng = np.random.default_rng(1)
    common = rng.standard_normal(layout.n_floats).astype(np.float32)
    seen = []
    noise = [np.random.default_rng(rank + 10) for rank in range(N_WORKERS)]
    server = transport.serve(ps_addr, addrs, layout)

    def gathered(t, deliveries):
        server.observe(t, deliveries)
        seen.append([[(d.stats[f"threshold_{1 + i}"], d.stats[f"bound_{i}"],
                       d.stats[f"bound_max_{i}"]) for i in range(len(layout.segments))]
                     for d in deliveries])

    train_in_threads(server, lambda rank: transport.connect(rank, addrs[rank], ps_addr, layout),
                     N_WORKERS, ITERATIONS,
                     lambda t, rank, _: common + noise[rank].standard_normal(
                         layout.n_floats).astype(np.float32),
                     lambda t: np.zeros(layout.n_floats, np.float32), gathered, TIMEOUT_S)
    return seen


def _check_thresholds_move_within_ranges(layout, least_share):
    seen = on_free_ports(N_WORKERS + 1, lambda ports: _train(layout, ports))
    closes = below = 0
    for rec in seen[PROFILE + 1:]:   # the ranges are set after the profiling round
        for layers in rec:
            for i, (th, lo, hi) in enumerate(layers):
                if layout.segments[i].length <= PACKET_FLOATS:
                    continue
                assert lo < hi, "an adaptive range of width 0"
                assert lo - 1e-6 <= th <= hi + 1e-6, (i, th, lo, hi)
                closes += 1
                below += th < hi - 1e-6
    # Most messages of these layers lose a packet of their first pass here, but p_hat is the
    # least loss of eight: a lossless one among them holds the threshold at the upper end (for a
    # layer of 29 packets, most of the time), so only a share of the closes is below it.
    assert below >= least_share * closes, f"only {below} of {closes} closes were below the upper end"


def test_thresholds_move_within_the_ranges_of_layers_of_many_packets():
    _check_thresholds_move_within_ranges(
        Layout.from_sizes([("a.weight", 20000), ("b.weight", 30000), ("c.weight", 10000)]), 0.1)


def test_thresholds_move_within_the_ranges_with_a_one_packet_layer_among_them():
    # Layers of 57 and 85 packets: at 5 % loss eight first passes in a row without a loss are
    # rare for either, so with each layer's own window most closes are below the upper end; with
    # one window per worker, the one-packet layer's lossless closes among its last eight messages
    # kept nearly every close at the upper end.
    _check_thresholds_move_within_ranges(
        Layout.from_sizes([("a.weight", 20000), ("a.bias", 64), ("b.weight", 30000)]), 0.4)
