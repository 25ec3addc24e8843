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
  layer is delivered whole (bound 1.0) and the PS measures, per layer, the signal-to-noise ratio
  of the averaged gradient: ``snr = (||mean||^2 - N) / N`` with ``N = sum(var_r(g)) / n`` the
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

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from transports import filling
from transports.base import Addr, Delivery, Layout, OptionError, SendReport
from transports.ltp import (RANK_SERVER, LtpServer, LtpTransport, LtpWorker, _Endpoint,
                            _float32_payload, check)

BOUND_RULES = ("snr", "size", "explicit")
# LTP's adaptive-threshold options do not apply to PLOT's gradients (each layer has a fixed bound);
# the shared machinery gets these neutral values for them.
_LTP_NEUTRAL = {"threshold_min": 1.0, "threshold_max": 1.0, "loss_weight": 0.0, "rtt_weight": 0.0,
                "critical_segments": ()}
_LTP_ONLY = tuple(_LTP_NEUTRAL)


class PlotTransport(LtpTransport):
    """PLOT: per-layer messages, each closed at its own loss-tolerance bound."""

    DEFAULTS: Mapping[str, Any] = {
        **{k: v for k, v in LtpTransport.DEFAULTS.items() if k not in _LTP_ONLY},
        "bound_rule": "snr",
        "bound_min": 0.80,
        "bound_max": 1.0,
        "bounds": (),
        "profile_iterations": 10,
        "reliable_below_floats": 355,
    }
    _RANGES = {
        **{k: v for k, v in LtpTransport._RANGES.items() if k not in _LTP_ONLY},
        "bound_min": (0.0, 1.0, False),
        "bound_max": (0.0, 1.0, False),
        "profile_iterations": (0, 100_000, True),
        "reliable_below_floats": (0, 2**31, True),
    }

    def validate(self) -> None:
        o = self._options
        saved, self._options = o, {**_LTP_NEUTRAL, **o}
        try:
            super().validate()
        finally:
            self._options = saved
        if o["bound_rule"] not in BOUND_RULES:
            raise OptionError(f"PLOT bound_rule must be one of {', '.join(BOUND_RULES)}, "
                              f"not {o['bound_rule']!r}.")
        if o["bound_min"] > o["bound_max"]:
            raise OptionError(f"PLOT bound_min ({o['bound_min']}) must not exceed bound_max "
                              f"({o['bound_max']}).")
        bounds = o["bounds"]
        if o["bound_rule"] == "explicit" and not bounds:
            raise OptionError("PLOT bound_rule 'explicit' needs bounds, e.g. "
                              "[['0.weight', 0.8], ['0.bias', 1.0], ...].")
        for item in bounds:
            if (len(item) != 2 or not isinstance(item[0], str)
                    or not isinstance(item[1], (int, float)) or not 0 <= item[1] <= 1):
                raise OptionError(f"each PLOT bound must be [layer name, fraction from 0 to 1], "
                                  f"not {item!r}.")

    def serve(self, bind: Addr, workers: Sequence[Addr], layout: Layout) -> PlotServer:
        return PlotServer({**_LTP_NEUTRAL, **self._options}, bind, workers, layout)

    def connect(self, rank: int, bind: Addr, server: Addr, layout: Layout) -> PlotWorker:
        return PlotWorker({**_LTP_NEUTRAL, **self._options}, rank, bind, server, layout)


def _core_settings(layout: Layout) -> dict[str, float]:
    # Every layer is a message: room for this iteration's and the next one's, per peer.
    n = len(layout.segments)
    return {"max_tx_per_peer": max(4, 2 * n), "max_open_per_peer": max(4, 4 * n)}


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
    """The PS end: per-layer receive policies, set by the bound rule."""

    def __init__(self, options: Mapping[str, Any], bind: Addr, workers: Sequence[Addr],
                 layout: Layout) -> None:
        self.layout = layout
        self.n_workers = len(workers)
        self.options = dict(options)
        self.filler = filling.Filler(options["filler"])
        self.linger_s = options["linger_ms"] / 1000.0
        # Segment 0 (parameters, which the PS only sends) keeps LTP's defaults; layers get policies.
        self.end = _Endpoint(options, RANK_SERVER, bind, layout, (1.0, 1.0), _core_settings(layout))
        self.parts = [(1 + i, s.offset, s.length) for i, s in enumerate(layout.segments)]
        self.snr_sum = np.zeros(len(layout.segments))
        self.profiled = 0
        try:
            for rank, addr in enumerate(workers):
                self.end.add_peer(rank, addr)
            rule = options["bound_rule"]
            if rule == "explicit":
                given = dict((name, float(b)) for name, b in options["bounds"])
                missing = [s.name for s in layout.segments if s.name not in given]
                if missing:
                    raise OptionError(f"PLOT bounds give no bound for layer {missing[0]!r}.")
                self._set_bounds([1.0 if s.length <= options["reliable_below_floats"]
                                  else given[s.name] for s in layout.segments])
            elif rule == "size":
                self._set_bounds(bounds_by_size(layout, options["bound_min"], options["bound_max"],
                                                options["reliable_below_floats"]))
            elif options["profile_iterations"] == 0:
                self._set_bounds(bounds_by_snr([float("inf")] * len(layout.segments), layout,
                                               options["bound_min"], options["bound_max"],
                                               options["reliable_below_floats"]))
            else:
                self._set_bounds([1.0] * len(layout.segments))   # profiling: everything whole
        except BaseException:
            self.end.close()
            raise

    def _set_bounds(self, bounds: Sequence[float]) -> None:
        self.bounds = [float(b) for b in bounds]
        for (seg, _, _), b in zip(self.parts, self.bounds):
            check(self.end._so.ltp_udp_set_policy(self.end.handle, seg, b, b),
                  f"setting the bound of segment {seg}")

    def gather(self, msg_id: int, timeout_s: float) -> list[Delivery]:
        deliveries = self.end.recv_parts(range(self.n_workers), msg_id, self.parts, timeout_s)
        for d in deliveries:
            d.stats.update({f"bound_{i}": b for i, b in enumerate(self.bounds)})
        return [self.filler.apply(rank, d) for rank, d in enumerate(deliveries)]

    def average(self, deliveries: Sequence[Delivery]) -> np.ndarray:
        if self.options["bound_rule"] == "snr" and self.profiled < self.options["profile_iterations"]:
            self.snr_sum += layer_snr(deliveries, self.layout)
            self.profiled += 1
            if self.profiled == self.options["profile_iterations"]:
                self._set_bounds(bounds_by_snr(self.snr_sum / self.profiled, self.layout,
                                               self.options["bound_min"], self.options["bound_max"],
                                               self.options["reliable_below_floats"]))
        return super().average(deliveries)

    def stats(self) -> dict[str, float | str]:
        out = dict(super().stats())
        out.update({f"bound:{s.name}": b for s, b in zip(self.layout.segments, self.bounds)})
        if self.profiled:
            out.update({f"snr:{s.name}": float(x) for s, x in
                        zip(self.layout.segments, self.snr_sum / self.profiled)})
        return out


class PlotWorker(LtpWorker):
    """A worker's end: sends its gradient as one message per layer, in one call."""

    def __init__(self, options: Mapping[str, Any], rank: int, bind: Addr, server: Addr,
                 layout: Layout) -> None:
        super().__init__(options, rank, bind, server, layout, core_settings=_core_settings(layout))

    def push(self, msg_id: int, values: np.ndarray, timeout_s: float) -> SendReport:
        flat = _float32_payload(values, self.layout)
        parts = [(1 + i, flat[s.offset:s.offset + s.length])
                 for i, s in enumerate(self.layout.segments)]
        return self.end.send_parts([self.server_peer], msg_id, parts, 0, timeout_s)[0]
