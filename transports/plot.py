"""PLOT transport: a per-layer loss-tolerance bound on LTP's core (one core, two policies).

PLOT (Lu et al., IEEE TNSM 2024) holds that the loss a model tolerates differs by layer. Here a
worker sends its gradient as one message per model tensor (segment ``1 + layer index`` on LTP's
wire), all in one call, and the PS closes each layer's message once the fraction of it that
arrived reaches that layer's **bound** (and LTP's pass-end-plus-grace deadline has passed): the
core's per-segment policy table holds ``threshold_min = threshold_max = bound``. Parameters go
back as one reliable message, as in LTP. Everything else (packets, selective ACKs, pacing,
Bubble Filling) is LTP's; see ``docs/ltp-protocol.md``.

Where the bounds come from (``bound_rule``; details and formulas in ``docs/plot-protocol.md``):

- ``snr`` (default): a profiling phase. For the first ``profile_iterations`` iterations every
  layer is delivered whole (bound 1.0) and the PS measures (in :meth:`PlotServer.observe`, which
  the harness calls after every gather), per layer, the signal-to-noise ratio of the averaged
  gradient: ``snr = (||mean||^2 - N) / N`` with ``N = sum(var_r(g)) / n`` the
  average's expected noise (:func:`layer_snr`).
  Then ``bound = bound_min + (bound_max - bound_min) * snr / (1 + snr)``: a layer whose averaged
  gradient is dominated by noise loses little when a worker's share of it is missing, so it may
  lose more.
- ``size``: no profiling; the largest layer gets ``bound_min``, smaller layers proportionally
  more, up to ``bound_max``.
- ``explicit``: ``bounds`` gives every layer's bound, as ``[[name, bound], ...]``.

Under every rule a layer of at most ``reliable_below_floats`` values (one packet by default:
biases, small heads) is always delivered whole: it is cheap to repair and a hole in it is a large
relative loss.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from transports.base import Addr, Delivery, Layout, Option, OptionError, SendReport, Session
from transports.ltp import (LtpServer, LtpTransport, LtpWorker, _float32_payload, _msg_bytes,
                            _threshold_option, ltp_options)

BOUND_RULES = ("snr", "size", "explicit")
# LTP's adaptive-threshold options do not apply to PLOT's gradients: each layer closes at its
# own fixed bound.
_LTP_ONLY = ("threshold_min", "threshold_max", "loss_weight", "rtt_weight", "critical_segments")
# With fixed bounds the adaptive threshold's weights have no effect; PLOT sets them to 0 so its
# core configuration says so.
_FIXED_CORE = {"loss_weight": 0.0, "rtt_weight": 0.0}


@functools.cache
def plot_options() -> tuple[Option, ...]:
    """PLOT's option table: LTP's, less the adaptive threshold, plus the bound rules."""
    return (
        *(o for o in ltp_options() if o.name not in _LTP_ONLY),
        Option("bound_rule", "snr", "choice", choices=BOUND_RULES,
               help="where each layer's bound comes from: SNR profiling, layer size, or given"),
        _threshold_option("bound_min", 0.80, "lowest bound a rule may give"),
        _threshold_option("bound_max", 1.0, "highest bound a rule may give"),
        Option("bounds", (), values="a list of [layer name, bound] pairs",
               help="the explicit rule's bounds, one per layer"),
        Option("profile_iterations", 10, "int", 0, 100_000, unit="iterations",
               help="whole iterations that measure SNR (snr rule); 0: bounds = bound_max"),
        Option("reliable_below_floats", 355, "int", 0, 2**31, unit="floats",
               help="layers this small are always delivered whole"),
    )


class PlotTransport(LtpTransport):
    """PLOT: per-layer messages, each closed at its own loss-tolerance bound."""

    LABEL = "PLOT"
    MESH = False

    @classmethod
    def option_table(cls) -> tuple[Option, ...]:
        return plot_options()

    def receive_thresholds(self) -> tuple[float, float]:
        # Segment 0 (parameters, which the PS only sends) is never closed early; the layers get
        # per-segment policies.
        return 1.0, 1.0

    def mesh(self, rank, members, parts):
        # PLOT's bounds are per layer, set at the PS from what it measured of each layer; a
        # collective's parts cut across layers, and no rule for them is built yet.
        raise OptionError("PLOT has no end for collectives yet: its per-layer bounds are the "
                          "PS's; run tree or ring over ltp or ltp-reliable.")

    def validate(self) -> None:
        super().validate()
        o = self._options
        if o["bound_min"] > o["bound_max"]:
            raise OptionError(f"PLOT bound_min ({o['bound_min']}) must not exceed bound_max "
                              f"({o['bound_max']}).")
        bounds = o["bounds"]
        if o["bound_rule"] == "explicit" and not bounds:
            raise OptionError("PLOT bound_rule 'explicit' needs bounds, e.g. "
                              "[['0.weight', 0.8], ['0.bias', 1.0], ...].")
        bound = {o.name: o for o in self.option_table()}["bound_min"]   # every bound's range
        if isinstance(bounds, str) or not isinstance(bounds, (list, tuple)):
            bounds = [bounds]
        for item in bounds:
            if (not isinstance(item, (list, tuple)) or len(item) != 2 or not isinstance(item[0], str)
                    or not isinstance(item[1], (int, float)) or not bound.low <= item[1] <= bound.high):
                raise OptionError(f"each PLOT bound must be [layer name, fraction from "
                                  f"{bound.low:g} to {bound.high:g}], not {item!r}.")

    def _layer_settings(self, layout: Layout, up: Layout | None) -> dict[str, float]:
        # Every layer is a message: room for this iteration's and the next one's, per peer.
        n = len(layout.segments)
        return {**_FIXED_CORE, "max_msg_bytes": _msg_bytes(layout, up),
                "max_tx_per_peer": max(4, 2 * n), "max_open_per_peer": max(4, 4 * n)}

    def serve(self, bind: Addr, workers: Sequence[Addr], layout: Layout,
              up: Layout | None = None) -> PlotServer:
        settings = self.core_settings(self.receive_thresholds(),
                                      {**self._layer_settings(layout, up),
                                       **self.session_settings()})
        return PlotServer(self._options, settings, bind, workers, layout, self.session, up)

    def connect(self, rank: int, bind: Addr, server: Addr, layout: Layout,
                up: Layout | None = None) -> PlotWorker:
        pull = self._options["pull_threshold"]
        settings = self.core_settings((pull, pull),
                                      {**self._layer_settings(layout, up),
                                       **self.session_settings()})
        return PlotWorker(self._options, settings, rank, bind, server, layout, self.session, up)


def bounds_by_size(layout: Layout, lo: float, hi: float, reliable_below: int) -> list[float]:
    """The ``size`` rule: the largest layer gets ``lo``, smaller ones proportionally more."""
    biggest = max(s.length for s in layout.segments)
    return [1.0 if s.length <= reliable_below else hi - (hi - lo) * s.length / biggest
            for s in layout.segments]


def bounds_by_snr(snr: Sequence[float], layout: Layout, lo: float, hi: float,
                  reliable_below: int) -> list[float]:
    """The ``snr`` rule: ``lo + (hi - lo) * snr / (1 + snr)``, small layers whole."""
    return [1.0 if s.length <= reliable_below else lo + (hi - lo) * (x / (1.0 + x))
            for s, x in zip(layout.segments, snr)]


def layer_snr(deliveries: Sequence[Delivery], layout: Layout) -> np.ndarray:
    """Per layer, the signal-to-noise ratio of the averaged gradient.

    ``noise`` is the expected squared norm of the average's sampling noise, ``sum(var_r(g)) / n``
    (sample variance across the ``n`` workers, per coordinate); ``signal`` is ``||mean||^2`` minus
    that noise (the unbiased estimate of the true mean's squared norm), floored at 0. Pure noise
    gives ~0; a layer every worker agrees on gives a large ratio.
    """
    g = np.stack([d.values for d in deliveries]).astype(np.float64)
    n = len(deliveries)
    if n < 2:
        return np.full(len(layout.segments), np.inf)
    mean = g.mean(axis=0)
    var = ((g - mean) ** 2).sum(axis=0) / (n - 1)
    out = []
    for s in layout.segments:
        sl = slice(s.offset, s.offset + s.length)
        noise = var[sl].sum() / n
        signal = max(float((mean[sl] ** 2).sum()) - noise, 0.0)
        out.append(signal / noise if noise > 0 else float("inf"))
    return np.array(out)


class PlotServer(LtpServer):
    """The PS end: per-layer receive policies, set by the bound rule.

    Bounds and SNR belong to the model's layers (``layout``); with compressed pushes each bound
    applies to its layer's compressed segment (``up``: the same layers, shorter), and the PS
    hands :meth:`observe` the decompressed gradients.
    """

    def __init__(self, options: Mapping[str, Any], settings: Mapping[str, float], bind: Addr,
                 workers: Sequence[Addr], layout: Layout, session: Session,
                 up: Layout | None = None) -> None:
        self.options = dict(options)
        # Segment 0 (parameters, which the PS only sends) keeps the configured thresholds; each
        # layer is segment 1 + its index, with its own policy.
        self.parts = [(1 + i, s.offset, s.length) for i, s in enumerate((up or layout).segments)]
        self.snr_sum = np.zeros(len(layout.segments))
        self.profiled = 0
        super().__init__(options, settings, bind, workers, layout, session, up)
        try:
            self._set_bounds(self._initial_bounds())
        except BaseException:
            self.end.close()
            raise

    def _initial_bounds(self) -> list[float]:
        o, layout = self.options, self.layout
        small = o["reliable_below_floats"]
        if o["bound_rule"] == "explicit":
            given = dict((name, float(b)) for name, b in o["bounds"])
            missing = [s.name for s in layout.segments if s.name not in given]
            if missing:
                raise OptionError(f"PLOT bounds give no bound for layer {missing[0]!r}.")
            return [1.0 if s.length <= small else given[s.name] for s in layout.segments]
        if o["bound_rule"] == "size":
            return bounds_by_size(layout, o["bound_min"], o["bound_max"], small)
        if o["profile_iterations"] == 0:
            return bounds_by_snr([float("inf")] * len(layout.segments), layout,
                                 o["bound_min"], o["bound_max"], small)
        return [1.0] * len(layout.segments)   # profiling: everything whole

    def receives(self) -> list[tuple[int, int]]:
        """Every layer, as its own segment (1 + its index)."""
        return [(seg, n) for seg, _, n in self.parts]

    def _set_bounds(self, bounds: Sequence[float]) -> None:
        self.bounds = [float(b) for b in bounds]
        for (seg, _, _), b in zip(self.parts, self.bounds):
            self.end.set_policy(seg, b, b)

    def gather(self, msg_id: int, timeout_s: float) -> list[Delivery]:
        deliveries = self.net.recv_parts(range(self.n_workers), msg_id, self.parts, timeout_s)
        return [self.filler.apply(rank, self._decorate(d)) for rank, d in enumerate(deliveries)]

    def _decorate(self, delivery: Delivery) -> Delivery:
        delivery.stats.update({f"bound_{i}": b for i, b in enumerate(self.bounds)})
        return delivery

    def observe(self, msg_id: int, deliveries: Sequence[Delivery]) -> None:
        """The ``snr`` rule's profiling: add this iteration's per-layer SNR; after
        ``profile_iterations`` of them, set every layer's bound from the mean."""
        o = self.options
        if o["bound_rule"] != "snr" or self.profiled >= o["profile_iterations"]:
            return
        self.snr_sum += layer_snr(deliveries, self.layout)
        self.profiled += 1
        if self.profiled == o["profile_iterations"]:
            self._set_bounds(bounds_by_snr(self.snr_sum / self.profiled, self.layout,
                                           o["bound_min"], o["bound_max"],
                                           o["reliable_below_floats"]))

    def stats(self) -> dict[str, float | str]:
        out = dict(super().stats())
        out.update({f"bound:{s.name}": b for s, b in zip(self.layout.segments, self.bounds)})
        if self.profiled:
            out.update({f"snr:{s.name}": float(x) for s, x in
                        zip(self.layout.segments, self.snr_sum / self.profiled)})
        return out


class PlotWorker(LtpWorker):
    """A worker's end: sends its gradient as one message per layer, in one call."""

    def push(self, msg_id: int, values: np.ndarray, timeout_s: float) -> SendReport:
        flat = _float32_payload(values, self.up)
        parts = [(1 + i, flat[s.offset:s.offset + s.length])
                 for i, s in enumerate(self.up.segments)]
        return self.net.send_parts([self.server_peer], msg_id, parts, 0, timeout_s)[0]
