"""MLT transport: bounded loss per gradient part, datagrams marked by importance, and the
switch's queue serving and keeping the important ones first (one interpretation, on LTP's core).

MLT (Wang et al., NSDI 2024) combines three things, each for a network that is already loaded:
order-free per-packet load balancing across paths, gradient-aware queueing and dropping in the
switches, and a fixed bound on the gradient loss a message may take. Here, point by point
(``docs/mlt.md`` says what the paper says and where we chose):

- **Bounded loss.** A worker sends its gradient as one message per *part*: a model tensor, or a
  piece of at most ``part_floats`` of one (segment ``1 + part index`` on LTP's wire, as PLOT sends
  its layers). The PS closes each part once ``1 - loss_bound`` of it arrived (LTP's early close
  with ``threshold_min = threshold_max``, past LTP's pass-end grace); what is missing is filled
  with zeros (``filler``, MLT's choice). Parameters go back reliably, as in LTP.
- **Importance.** Before each push the worker ranks its parts (``importance``: mean gradient
  magnitude, or the layer's position) and gives them ``levels`` priority levels: the most
  important ``high_frac`` of the gradient (by floats) is level 0, the rest is split evenly over
  the other levels (:func:`assign_levels`). One crossing into C per push carries every part's
  mark; the driver writes it into the IP TOS byte of every DATA datagram of that part
  (``LTP_TOS_MARK``), retransmissions included, with the class selector ``CS(levels - 1 - k)`` as
  level ``k``'s DSCP (:func:`level_dscp`). Control datagrams (HELLO, ACK, CLOSE) carry level 0's.
  With ``important_first`` the parts are queued at the sender in level order as well.
- **Queueing and dropping.** The transport asks the bottleneck for strict priority bands, one per
  level, by DSCP (:meth:`MltTransport.bottleneck_queue`); the runner builds them under the
  switch port's shaping (:mod:`topologies.testbed.bottleneck`): a band is served only when every
  higher band is empty, and the buffer (the run's ``queue_pkts``) is divided among the bands
  (``buffer_shares``), so the low bands fill and drop first under incast.
- **Load balancing** is not reproduced: the star has one path from every worker to the PS.

    >>> from transports import registry
    >>> t = registry.create("mlt", {"levels": 3})
    >>> t.bottleneck_queue()
    PriorityBands(dscp=(16, 8, 0), shares=(1.0, 1.0, 1.0), head_drop=True)
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from transports import native
from transports.base import (Addr, Delivery, Layout, Option, OptionError, PriorityBands,
                             SendReport, Session)
from transports.ltp import (LtpServer, LtpTransport, LtpWorker, _float32_payload, _msg_bytes,
                            ltp_options)

IMPORTANCE = ("magnitude", "back-layers", "front-layers")
MAX_LEVELS = 8          # eight class selectors, eight HTB priorities, eight switch queues
# LTP options that do not apply: the bound is fixed (no adaptive threshold), critical segments
# are a prefix of one message, not parts, and the receive contexts follow the number of parts.
_LTP_ONLY = ("threshold_min", "threshold_max", "loss_weight", "rtt_weight", "critical_segments",
             "max_open_per_peer")
# With one fixed bound the adaptive threshold's weights have no effect: the core is told so.
_FIXED_CORE = {"loss_weight": 0.0, "rtt_weight": 0.0}


@functools.cache
def mlt_options() -> tuple[Option, ...]:
    """MLT's option table: LTP's, less the adaptive threshold, zero filling by default, plus the
    bound, the importance rule and the queue's shape."""
    ltp = [o for o in ltp_options() if o.name not in _LTP_ONLY]
    ltp = [dataclasses.replace(o, default="zero") if o.name == "filler" else o for o in ltp]
    return (
        *ltp,
        Option("loss_bound", 0.10, "float", 0.0, 1.0, unit="fraction",
               help="fraction of each gradient part the PS may lose: it closes the part once "
                    "the rest arrived (the paper's evaluation bound)"),
        Option("part_floats", 0, "int", 0, 2**31, unit="floats",
               help="largest gradient part (one message, one mark, one bound); 0: one per "
                    "model tensor"),
        Option("importance", "magnitude", "choice", choices=IMPORTANCE,
               help="how parts are ranked: mean absolute gradient, or the layer's position "
                    "(back layers first, or front layers first)"),
        Option("levels", 2, "int", 1, MAX_LEVELS, unit="levels",
               help="priority levels (DSCP class selectors, one switch band each); 1: no "
                    "marks and the plain FIFO"),
        Option("high_frac", 0.5, "float", 0.0, 1.0, unit="fraction",
               help="share of the gradient (most important first, by floats) at the top level; "
                    "the rest is split evenly over the other levels"),
        Option("important_first", True, "bool",
               help="queue a push's parts at the sender in level order too"),
        Option("buffer_shares", (), values="a list of one positive number per level, or []",
               help="how the bottleneck's queue_pkts are divided among the bands, top first "
                    "([]: equally)"),
        Option("band_drop", "head", "choice", choices=("head", "tail"),
               help="which packet a full band drops: its oldest (head), or the arriving one "
                    "(tail, what userspace OVS punishes: docs/mlt.md)"),
    )


def level_dscp(level: int, levels: int) -> int:
    """The DSCP of priority level ``level`` of ``levels``: class selector ``CS(levels - 1 -
    level)``, so level 0 has the highest precedence and the last level is best effort."""
    return 8 * (levels - 1 - level)


def split_parts(layout: Layout, part_floats: int) -> list[tuple[int, int, int]]:
    """The gradient's parts as (layer index, float offset, float count), in layout order: each
    non-empty segment whole, or cut into pieces of at most ``part_floats`` (0: whole)."""
    out = []
    for i, s in enumerate(layout.segments):
        step = part_floats or s.length
        out += [(i, off, min(step, s.offset + s.length - off))
                for off in range(s.offset, s.offset + s.length, max(step, 1))]
    return out


def part_scores(flat: np.ndarray, parts: Sequence[tuple[int, int, int]], rule: str) -> np.ndarray:
    """Each part's importance (higher is more important): its mean absolute value, a value that
    is not finite counting as 0 (``magnitude``), or its layer's position (``back-layers``: the
    last layer highest; ``front-layers``: the first)."""
    layer = np.array([p[0] for p in parts], dtype=np.float64)
    if rule == "back-layers":
        return layer
    if rule == "front-layers":
        return -layer
    with np.errstate(invalid="ignore"):   # compressed pushes carry bit patterns, NaNs too
        size = np.abs(np.asarray(flat, dtype=np.float32))
        size[~np.isfinite(size)] = 0.0
    offsets = np.array([p[1] for p in parts], dtype=np.int64)
    counts = np.array([p[2] for p in parts], dtype=np.int64)
    cum = np.concatenate(([0.0], np.cumsum(size, dtype=np.float64)))
    return (cum[offsets + counts] - cum[offsets]) / counts


def assign_levels(scores: np.ndarray, sizes: Sequence[int], levels: int,
                  high_frac: float) -> np.ndarray:
    """Each part's level (0 most important) from its score and size.

    The parts are ranked by score (ties keep their order) and laid end to end by size; a part
    whose middle falls in the first ``high_frac`` of that line is level 0, and the rest of the
    line is cut into ``levels - 1`` equal stretches for levels 1, 2, ...
    """
    scores = np.asarray(scores, dtype=np.float64)
    out = np.zeros(len(scores), dtype=np.int64)
    if levels <= 1 or not len(scores):
        return out
    order = np.argsort(-scores, kind="stable")
    s = np.asarray(sizes, dtype=np.float64)[order]
    mid = (np.cumsum(s) - s / 2) / s.sum()
    rest = (mid - high_frac) / (1.0 - high_frac) if high_frac < 1.0 else np.zeros_like(mid)
    lower = 1 + np.minimum(levels - 2, np.floor(rest * (levels - 1)).astype(np.int64))
    out[order] = np.where(mid < high_frac, 0, lower)
    return out


def part_tos(level: np.ndarray, levels: int) -> list[int]:
    """The IP TOS byte of each part's DATA from its level: its DSCP, shifted past the two ECN
    bits (which stay 0)."""
    return [level_dscp(int(k), levels) << 2 for k in level]


class MltTransport(LtpTransport):
    """MLT: per-part bounded loss, parts marked by importance, priority bands at the switch."""

    LABEL = "MLT"
    MESH = False
    TABLE = staticmethod(mlt_options)

    def receive_thresholds(self) -> tuple[float, float]:
        bound = 1.0 - self._options["loss_bound"]
        return bound, bound

    def validate(self) -> None:
        super().validate()
        o = self._options
        shares = o["buffer_shares"]
        if isinstance(shares, str) or not isinstance(shares, (list, tuple)) or (shares and (
                len(shares) != o["levels"]
                or not all(isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0
                           for x in shares))):
            raise OptionError(f"MLT buffer_shares must be [] or {o['levels']} positive numbers "
                              f"(one per level), not {shares!r}.")

    def bottleneck_queue(self) -> PriorityBands | None:
        """One strict priority band per level (None with one level: the plain FIFO)."""
        o = self._options
        levels = o["levels"]
        if levels == 1:
            return None
        shares = tuple(float(x) for x in o["buffer_shares"]) or (1.0,) * levels
        return PriorityBands(tuple(level_dscp(k, levels) for k in range(levels)), shares,
                             head_drop=o["band_drop"] == "head")

    def mesh(self, rank, members, parts):
        # The marks and the bands are built around one bottleneck toward a PS.
        raise OptionError("MLT has no end for collectives: its priorities are for the incast "
                          "toward a PS; run tree or ring over ltp or ltp-reliable.")

    def _settings(self, receive: tuple[float, float], layout: Layout,
                  up: Layout | None) -> dict[str, float]:
        """The core configuration of one end: every part is a message, with room for this
        iteration's and the next one's, per peer."""
        n = len(split_parts(up or layout, self._options["part_floats"]))
        most = int(native.core_options()["max_open_per_peer"].high) // 4
        if n > most:
            raise OptionError(f"MLT part_floats={self._options['part_floats']} cuts the gradient "
                              f"into {n} parts, more than the {most} the core can hold; raise it.")
        return self.core_settings(receive, {**_FIXED_CORE, "max_msg_bytes": _msg_bytes(layout, up),
                                            "max_tx_per_peer": max(4, 2 * n),
                                            "max_open_per_peer": max(4, 4 * n),
                                            **self.session_settings()})

    def serve(self, bind: Addr, workers: Sequence[Addr], layout: Layout,
              up: Layout | None = None) -> MltServer:
        settings = self._settings(self.receive_thresholds(), layout, up)
        return MltServer(self._options, settings, bind, workers, layout, self.session, up)

    def connect(self, rank: int, bind: Addr, server: Addr, layout: Layout,
                up: Layout | None = None) -> MltWorker:
        pull = self._options["pull_threshold"]
        settings = self._settings((pull, pull), layout, up)
        return MltWorker(self._options, settings, rank, bind, server, layout, self.session, up)


class MltServer(LtpServer):
    """The PS end: one message per gradient part (segment ``1 + part index``), each closed at
    ``1 - loss_bound``."""

    def __init__(self, options: Mapping[str, Any], settings: Mapping[str, float], bind: Addr,
                 workers: Sequence[Addr], layout: Layout, session: Session,
                 up: Layout | None = None) -> None:
        self.parts = [(1 + j, off, cnt) for j, (_, off, cnt)
                      in enumerate(split_parts(up or layout, options["part_floats"]))]
        super().__init__(options, settings, bind, workers, layout, session, up)

    def receives(self) -> list[tuple[int, int]]:
        """Every part, as its own segment."""
        return [(seg, n) for seg, _, n in self.parts]

    def gather(self, msg_id: int, timeout_s: float) -> list[Delivery]:
        deliveries = self.net.recv_parts(range(self.n_workers), msg_id, self.parts, timeout_s)
        return [self.filler.apply(rank, d) for rank, d in enumerate(deliveries)]


class MltWorker(LtpWorker):
    """A worker's end: ranks and marks its gradient's parts, sends them in one call."""

    def __init__(self, options: Mapping[str, Any], settings: Mapping[str, float], rank: int,
                 bind: Addr, server: Addr, layout: Layout, session: Session,
                 up: Layout | None = None) -> None:
        super().__init__(options, settings, rank, bind, server, layout, session, up)
        self.options = dict(options)
        self.parts = split_parts(self.up, options["part_floats"])
        self.levels = options["levels"]
        self.level_floats = np.zeros(self.levels, dtype=np.int64)   # pushed, per level
        try:
            if self.levels > 1:   # control datagrams travel at the top level
                self.end.set_tos(level_dscp(0, self.levels) << 2)
        except BaseException:
            self.end.close()
            raise

    def levels_of(self, flat: np.ndarray) -> np.ndarray:
        """Each part's level for this gradient."""
        o = self.options
        scores = part_scores(flat, self.parts, o["importance"])
        return assign_levels(scores, [cnt for _, _, cnt in self.parts], self.levels,
                             o["high_frac"])

    def push(self, msg_id: int, values: np.ndarray, timeout_s: float) -> SendReport:
        flat = _float32_payload(values, self.up)
        level = self.levels_of(flat)
        order = (np.argsort(level, kind="stable") if self.options["important_first"]
                 else np.arange(len(self.parts)))
        parts = [(1 + j, flat[self.parts[j][1]:self.parts[j][1] + self.parts[j][2]])
                 for j in order]
        marks = ([native.tos_mark(tos) for tos in part_tos(level[order], self.levels)]
                 if self.levels > 1 else None)
        report = self.net.send_parts([self.server_peer], msg_id, parts, 0, timeout_s,
                                     marks=marks)[0]
        sizes = np.array([cnt for _, _, cnt in self.parts], dtype=np.int64)
        self.level_floats += np.bincount(level, weights=sizes, minlength=self.levels).astype(
            np.int64)
        report.stats.update({f"level_frac_{k}": float(sizes[level == k].sum() / sizes.sum())
                             for k in range(self.levels)})
        return report

    def stats(self) -> dict[str, float]:
        out = dict(super().stats())
        out.update({f"mlt_level_floats_{k}": float(n) for k, n in enumerate(self.level_floats)})
        return out
