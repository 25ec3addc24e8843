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
- ``adaptive``: each layer gets a *range*, ``[its snr-rule bound, bound_max]``, and the core's
  adaptive threshold (LTP's, from the first-pass loss of the worker's recent messages of that
  layer and the RTT, weighted by ``loss_weight`` and ``rtt_weight``) chooses within it at every
  close. The profiling is the
  ``snr`` rule's; after it the SNR stays measured, as a running estimate
  ``s <- (1 - snr_weight) * s + snr_weight * snr_now`` (over the coordinates every worker
  delivered), and each layer's lower end is recomputed from it after every iteration.

The three frozen rules close each layer at one bound (``threshold_min = threshold_max``), so the
core's adaptive weights are 0 there, and ``snr_weight``, ``loss_weight`` and ``rtt_weight`` are
refused; under ``adaptive`` they default to 0.1 and LTP's defaults.

Under every rule a layer of at most ``reliable_below_floats`` values (one packet by default:
biases, small heads) is always delivered whole: it is cheap to repair and a hole in it is a large
relative loss.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from transports.base import (Addr, Delivery, Layout, Option, OptionError, SendReport, Session,
                             check_order)
from transports.ltp import (LtpServer, LtpTransport, LtpWorker, _core_option, _float32_payload,
                            _msg_bytes, _threshold_option, ltp_options)

BOUND_RULES = ("snr", "size", "explicit", "adaptive")
# LTP's thresholds and critical segments do not apply to PLOT's gradients: each layer has its own
# policy. Its adaptive weights come back as PLOT's own options, for the adaptive rule only.
_LTP_ONLY = ("threshold_min", "threshold_max", "loss_weight", "rtt_weight", "critical_segments")
# Options only the adaptive rule has: refused under the others, and left out of their options()
# so the frozen rules' recorded options (and everything derived from them) stay as they were.
ADAPTIVE_ONLY = ("snr_weight", "loss_weight", "rtt_weight")
# With fixed bounds the adaptive threshold's weights have no effect; PLOT sets them to 0 so its
# core configuration says so.
_FIXED_CORE = {"loss_weight": 0.0, "rtt_weight": 0.0}


def _adaptive_weight(name: str) -> Option:
    """LTP's core option ``name`` (its default, range and field), as the adaptive rule's."""
    row = _core_option(name)
    return dataclasses.replace(row, help=f"adaptive rule only: {row.help}")


@functools.cache
def plot_options() -> tuple[Option, ...]:
    """PLOT's option table: LTP's, less the adaptive threshold, plus the bound rules."""
    return (
        *(o for o in ltp_options() if o.name not in _LTP_ONLY),
        Option("bound_rule", "snr", "choice", choices=BOUND_RULES,
               help="where each layer's bound comes from: SNR profiling, layer size, given, or "
                    "a range from SNR whose threshold follows loss and RTT"),
        _threshold_option("bound_min", 0.80, "lowest bound a rule may give"),
        _threshold_option("bound_max", 1.0, "highest bound a rule may give"),
        Option("bounds", (), values="a list of [layer name, bound] pairs",
               help="the explicit rule's bounds, one per layer"),
        Option("profile_iterations", 10, "int", 0, 100_000, unit="iterations",
               help="whole iterations that measure SNR (snr and adaptive rules); 0: none, "
                    "bounds start at bound_max"),
        Option("reliable_below_floats", 355, "int", 0, 2**31, unit="floats",
               help="layers this small are always delivered whole"),
        Option("snr_weight", 0.1, "float", 0.0, 1.0,
               help="adaptive rule only: gain of the running SNR estimate per iteration "
                    "(0: the profiled SNR stays)"),
        _adaptive_weight("loss_weight"), _adaptive_weight("rtt_weight"),
    )


class PlotTransport(LtpTransport):
    """PLOT: per-layer messages, each closed at its own loss-tolerance bound."""

    LABEL = "PLOT"
    MESH = False
    TABLE = staticmethod(plot_options)

    def __init__(self, slug: str, options: Mapping[str, Any] | None = None) -> None:
        # What was given, not defaulted: the adaptive rule's options are refused when given to
        # another rule.
        self._given = frozenset(options or ())
        super().__init__(slug, options)

    @property
    def adaptive(self) -> bool:
        """Whether the layers close within a range (``bound_rule`` adaptive)."""
        return self._options["bound_rule"] == "adaptive"

    def options(self) -> dict[str, Any]:
        """The effective options; the adaptive rule's own only under that rule."""
        out = super().options()
        if not self.adaptive:
            for name in ADAPTIVE_ONLY:
                out.pop(name, None)
        return out

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
        given = sorted(n for n in ADAPTIVE_ONLY if n in self._given)
        if given and not self.adaptive:
            raise OptionError(f"PLOT option {given[0]} applies only to bound_rule 'adaptive' "
                              f"(bound_rule {o['bound_rule']!r} closes each layer at a fixed "
                              "bound); drop it or add bound_rule=adaptive.")
        check_order("PLOT", o, "bound_min", "bound_max")
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
        return {**({} if self.adaptive else _FIXED_CORE), "max_msg_bytes": _msg_bytes(layout, up),
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


def _signal_frac(snr: float) -> float:
    """``snr / (1 + snr)``, and 1 for an infinite ratio (no noise measured), not NaN."""
    return 1.0 if snr == float("inf") else snr / (1.0 + snr)


def bounds_by_snr(snr: Sequence[float], layout: Layout, lo: float, hi: float,
                  reliable_below: int) -> list[float]:
    """The ``snr`` rule: ``lo + (hi - lo) * snr / (1 + snr)``, small layers whole."""
    return [1.0 if s.length <= reliable_below else lo + (hi - lo) * _signal_frac(x)
            for s, x in zip(layout.segments, snr)]


def adaptive_ranges(snr: Sequence[float], layout: Layout, lo: float, hi: float,
                    reliable_below: int) -> tuple[list[float], list[float]]:
    """The ``adaptive`` rule: per layer ``[snr-rule bound, hi]`` (lower ends, upper ends); a
    small layer is whole, ``[1, 1]``."""
    lows = bounds_by_snr(snr, layout, lo, hi, reliable_below)
    return lows, [1.0 if s.length <= reliable_below else hi for s in layout.segments]


def running_snr(estimate: np.ndarray, sample: np.ndarray, weight: float) -> np.ndarray:
    """The adaptive rule's running SNR per layer: ``(1 - weight) * estimate + weight * sample``.

    A layer whose sample is not finite (no noise measured: under two workers, or no coordinate
    every worker delivered) keeps its estimate; one whose estimate is not finite yet (no
    profiling) takes the sample as it is.
    """
    est = np.array(estimate, dtype=np.float64)
    x = np.asarray(sample, dtype=np.float64)
    seen = np.isfinite(x)
    blend = seen & np.isfinite(est)
    est[blend] = (1.0 - weight) * est[blend] + weight * x[blend]
    est[seen & ~blend] = x[seen & ~blend]
    return est


def _jointly_received(deliveries: Sequence[Delivery]) -> np.ndarray | None:
    """Where every delivery has its coordinate (None: all whole)."""
    masks = [d.mask for d in deliveries if d.mask is not None]
    return np.logical_and.reduce(masks) if masks else None


def layer_snr(deliveries: Sequence[Delivery], layout: Layout) -> np.ndarray:
    """Per layer, the signal-to-noise ratio of the averaged gradient.

    ``noise`` is the expected squared norm of the average's sampling noise, ``sum(var_r(g)) / n``
    (sample variance across the ``n`` workers, per coordinate); ``signal`` is ``||mean||^2`` minus
    that noise (the unbiased estimate of the true mean's squared norm), floored at 0. Pure noise
    gives ~0; a layer every worker agrees on gives a large ratio. If some deliveries are partial,
    both sums run over the coordinates every worker delivered (NaN for a layer without any): a
    filled hole is no measurement.
    """
    g = np.stack([d.values for d in deliveries]).astype(np.float64)
    n = len(deliveries)
    if n < 2:
        return np.full(len(layout.segments), np.inf)
    mean = g.mean(axis=0)
    var = ((g - mean) ** 2).sum(axis=0) / (n - 1)
    joint = _jointly_received(deliveries)
    out = []
    for s in layout.segments:
        sl = slice(s.offset, s.offset + s.length)
        if joint is None:
            layer_var, layer_mean = var[sl], mean[sl]
        elif joint[sl].any():
            layer_var, layer_mean = var[sl][joint[sl]], mean[sl][joint[sl]]
        else:
            out.append(float("nan"))
            continue
        noise = layer_var.sum() / n
        signal = max(float((layer_mean ** 2).sum()) - noise, 0.0)
        out.append(signal / noise if noise > 0 else float("inf"))
    return np.array(out)


class PlotServer(LtpServer):
    """The PS end: per-layer receive policies, set by the bound rule.

    Bounds and SNR belong to the model's layers (``layout``); with compressed pushes each bound
    applies to its layer's compressed segment (``up``: the same layers, shorter), and the PS
    hands :meth:`observe` the decompressed gradients. ``bounds`` are the layers' lower ends and
    ``uppers`` their upper ends (the same under the frozen rules).
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
        self.adaptive = self.options["bound_rule"] == "adaptive"
        # The adaptive rule's running SNR; infinite (lower ends at bound_max) until measured.
        self.snr_now = np.full(len(layout.segments), np.inf)
        super().__init__(options, settings, bind, workers, layout, session, up)
        try:
            if self.adaptive and self.options["profile_iterations"] == 0:
                self._set_ranges()
            else:
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

    def _set_bounds(self, bounds: Sequence[float], uppers: Sequence[float] | None = None) -> None:
        """Every layer's policy: ``[bound, upper]`` through the core's per-segment table (one
        fixed bound without ``uppers``)."""
        self.bounds = [float(b) for b in bounds]
        self.uppers = self.bounds if uppers is None else [float(u) for u in uppers]
        for (seg, _, _), b, u in zip(self.parts, self.bounds, self.uppers):
            self.end.set_policy(seg, b, u)

    def _set_ranges(self) -> None:
        """The adaptive rule: every layer's range from the running SNR."""
        o = self.options
        self._set_bounds(*adaptive_ranges(self.snr_now, self.layout, o["bound_min"],
                                          o["bound_max"], o["reliable_below_floats"]))

    def gather(self, msg_id: int, timeout_s: float) -> list[Delivery]:
        deliveries = self.net.recv_parts(range(self.n_workers), msg_id, self.parts, timeout_s)
        return [self.filler.apply(rank, self._decorate(d)) for rank, d in enumerate(deliveries)]

    def _decorate(self, delivery: Delivery) -> Delivery:
        delivery.stats.update({f"bound_{i}": b for i, b in enumerate(self.bounds)})
        if self.adaptive:
            delivery.stats.update({f"bound_max_{i}": u for i, u in enumerate(self.uppers)})
        return delivery

    def observe(self, msg_id: int, deliveries: Sequence[Delivery]) -> None:
        """The ``snr`` and ``adaptive`` rules' profiling: add this iteration's per-layer SNR;
        after ``profile_iterations`` of them, set every layer's bound (range) from the mean.
        After it, the adaptive rule updates its running SNR and every layer's range."""
        o = self.options
        if self.adaptive and self.profiled >= o["profile_iterations"]:
            if len(deliveries) >= 2:   # one gradient measures no noise
                self.snr_now = running_snr(self.snr_now, layer_snr(deliveries, self.layout),
                                           o["snr_weight"])
                self._set_ranges()
            return
        if o["bound_rule"] not in ("snr", "adaptive") or self.profiled >= o["profile_iterations"]:
            return
        self.snr_sum += layer_snr(deliveries, self.layout)
        self.profiled += 1
        if self.profiled == o["profile_iterations"] and self.adaptive:
            self.snr_now = self.snr_sum / self.profiled
            self._set_ranges()
        elif self.profiled == o["profile_iterations"]:
            self._set_bounds(bounds_by_snr(self.snr_sum / self.profiled, self.layout,
                                           o["bound_min"], o["bound_max"],
                                           o["reliable_below_floats"]))

    def stats(self) -> dict[str, float | str]:
        out = dict(super().stats())
        names = [s.name for s in self.layout.segments]
        out.update({f"bound:{name}": b for name, b in zip(names, self.bounds)})
        if self.adaptive:
            out.update({f"bound_max:{name}": u for name, u in zip(names, self.uppers)})
            if self.profiled or np.isfinite(self.snr_now).any():
                out.update({f"snr:{name}": float(x) for name, x in zip(names, self.snr_now)})
        elif self.profiled:
            out.update({f"snr:{name}": float(x) for name, x in
                        zip(names, self.snr_sum / self.profiled)})
        return out


class PlotWorker(LtpWorker):
    """A worker's end: sends its gradient as one message per layer, in one call."""

    def push(self, msg_id: int, values: np.ndarray, timeout_s: float) -> SendReport:
        flat = _float32_payload(values, self.up)
        parts = [(1 + i, flat[s.offset:s.offset + s.length])
                 for i, s in enumerate(self.up.segments)]
        return self.net.send_parts([self.server_peer], msg_id, parts, 0, timeout_s)[0]
