"""phase-bound: a phase-aware loss bound on LTP's core, strict in sensitive phases, loose otherwise.

DBLP (Ma et al., "Phase-Aware Bounded-Loss Transport for Burst-Resilient Distributed ML
Training", arXiv 2605.01989, 2026) builds on MLT's bounded-loss tolerance and changes the bound
with the phase of training: a strict bound where training is sensitive to lost gradient, a loose
one elsewhere. Only its abstract was available to us; the rule here is ours, taken from the
literature on critical learning periods (Achille et al.; Accordion, Agarwal et al. 2021), and
``docs/phase-bound.md`` sets it point by point beside what the preprint says.

The PS closes every gradient at one fixed early-close threshold, as ``ltp-fixed`` (MLT-style)
does, but the threshold in force switches between ``strict_threshold`` (default 0.99: at most
1 % lost) and ``loose_threshold`` (default 0.60: up to 40 % lost) from round to round. A round is
*sensitive* (strict) when

- it is one of the first ``warmup_rounds`` rounds, or
- the last decision of the gradient-norm detector said so (Accordion's detector): the rounds are
  cut into windows of ``window_rounds``; at the end of each window the PS compares its gradient
  norm with the previous window's, and the next window is sensitive when the relative change
  ``|now - before| / before`` is at least ``norm_change``. Until two windows were measured the
  detector has no evidence and the rounds stay strict.

The decision lives inside the transport: the PS's end sees every gradient it takes, and
:meth:`PhaseServer.observe` (which the harness calls after every round) measures the norm, feeds
:class:`PhaseRule` and, when the phase changes, sets the core's policy of segment 0 (LTP's one
gradient message) to the new threshold: one call into C per change, never per packet. What a
window's *norm* is (``norm_of``): ``sum``, the norm of the window's accumulated gradient (the sum
of the rounds' mean gradients, each coordinate averaged over the workers that delivered it), as
Accordion measures it; or ``mean``, the mean over the rounds of the workers' mean gradient norm,
each estimated from the coordinates that arrived (received sum of squares / received fraction).

Everything else (packets, selective ACKs, pacing, Bubble Filling, parameters sent back reliably)
is LTP's; see ``docs/ltp-protocol.md``. The harness has no learning-rate schedule (one ``lr`` per
run), so the rule has no learning-rate trigger.

    >>> from transports import registry
    >>> t = registry.create("phase-bound", {"warmup_rounds": 10})
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from transports.base import Addr, Delivery, Layout, Option, OptionError, Session
from transports.filling import masked_mean
from transports.ltp import LtpServer, LtpTransport, _msg_bytes, _threshold_option, ltp_options

NORM_OF = ("sum", "mean")
# LTP's adaptive threshold does not apply: each phase closes gradients at one fixed threshold.
_LTP_ONLY = ("threshold_min", "threshold_max", "loss_weight", "rtt_weight")
# With fixed thresholds the adaptive threshold's weights have no effect; set to 0 so the core's
# configuration says so (as PLOT's frozen rules do).
_FIXED_CORE = {"loss_weight": 0.0, "rtt_weight": 0.0}
GRADIENT_SEGMENT = 0   # LTP's gradient: one message per worker and round, segment 0


@functools.cache
def phase_options() -> tuple[Option, ...]:
    """phase-bound's option table: LTP's, less the adaptive threshold, plus the phase rule."""
    return (
        *(o for o in ltp_options() if o.name not in _LTP_ONLY),
        _threshold_option("strict_threshold", 0.99,
                          "early-close threshold of gradients in sensitive rounds "
                          "(loss bound 1 - it)"),
        _threshold_option("loose_threshold", 0.60,
                          "early-close threshold of gradients in the other rounds "
                          "(loss bound 1 - it)"),
        Option("warmup_rounds", 20, "int", 0, 10**7, unit="rounds",
               help="the first rounds, always sensitive (the critical period of early training)"),
        Option("window_rounds", 10, "int", 1, 10**6, unit="rounds",
               help="rounds per window of the gradient-norm detector; one decision per window"),
        Option("norm_change", 0.5, "float", 0.0, 1e6, unit="fraction",
               help="relative change of a window's gradient norm from the previous window's "
                    "that makes the next window sensitive (Accordion's 0.5)"),
        Option("norm_of", "sum", "choice", choices=NORM_OF,
               help="a window's norm: of its accumulated mean gradient (sum, Accordion's) or "
                    "the mean of the workers' gradient norms (mean)"),
    )


def relative_change(before: float, after: float) -> float:
    """``|after - before| / before``; infinite when ``before`` is 0 (as Accordion, which counts
    any change from a zero norm as large)."""
    return math.inf if before == 0 else abs(after - before) / before


class PhaseRule:
    """Which rounds are sensitive: pure arithmetic, fed one measurement per round.

    :meth:`observe` takes round ``t``'s measurement (``norm_of`` ``sum``: the round's mean
    gradient, a vector; ``mean``: the round's gradient norm, a number; None or not finite: no
    measurement) and returns whether round ``t + 1`` is strict. Windows are rounds
    ``[k W, (k + 1) W)`` from round 0, warm-up included; a window's norm is compared with the
    last window that had one.
    """

    def __init__(self, warmup_rounds: int, window_rounds: int, norm_change: float,
                 norm_of: str = "sum") -> None:
        if norm_of not in NORM_OF:
            raise OptionError(f"norm_of must be one of {', '.join(NORM_OF)}, not {norm_of!r}.")
        if window_rounds < 1:
            raise OptionError(f"window_rounds must be at least 1, not {window_rounds!r}.")
        self.warmup_rounds = warmup_rounds
        self.window_rounds = window_rounds
        self.norm_change = norm_change
        self.norm_of = norm_of
        self.rounds = 0                            # rounds observed so far
        self.strict = True                         # round 0: warm-up, or no evidence yet
        self.decision: bool | None = None          # the detector's last word (None: none yet)
        self.last_norm: float | None = None        # the last window's norm
        self.last_change: float | None = None      # its relative change from the one before
        self.windows = 0                           # windows that had a norm
        self._acc: Any = None
        self._measured = 0

    def observe(self, sample: Any) -> bool:
        """Take one round's measurement; return whether the next round is strict."""
        if sample is not None and bool(np.all(np.isfinite(sample))):
            sample = np.asarray(sample, dtype=np.float64)
            self._acc = sample.copy() if self._acc is None else self._acc + sample
            self._measured += 1
        self.rounds += 1
        if self.rounds % self.window_rounds == 0:
            self._close_window()
        self.strict = self.rounds < self.warmup_rounds or self.decision is not False
        return self.strict

    def window_norm(self) -> float | None:
        """The norm of the window so far (None: nothing measured in it)."""
        if not self._measured:
            return None
        if self.norm_of == "mean":
            return float(self._acc) / self._measured
        # A window with unmeasured rounds is scaled up to a whole one.
        return float(np.sqrt(np.sum(np.square(self._acc)))) * self.window_rounds / self._measured

    def _close_window(self) -> None:
        norm = self.window_norm()
        self._acc, self._measured = None, 0
        if norm is None:
            return   # nothing to compare: the last decision stands
        if self.last_norm is not None:
            self.last_change = relative_change(self.last_norm, norm)
            self.decision = self.last_change >= self.norm_change
        self.last_norm = norm
        self.windows += 1


def round_gradient(deliveries: Sequence[Delivery]) -> np.ndarray | None:
    """The round's mean gradient, each coordinate averaged over the workers that delivered it
    (one that nobody delivered is 0); None without a delivery."""
    got = [d for d in deliveries if d.received_frac > 0]
    return masked_mean(got) if got else None


def round_norm(deliveries: Sequence[Delivery]) -> float | None:
    """The mean over the workers of each one's gradient norm, estimated from what arrived:
    ``sqrt(sum of the received squares / received fraction)``; None without a delivery."""
    norms = []
    for d in deliveries:
        got = d.values if d.mask is None else d.values[d.mask]
        if got.size:
            squares = float(np.dot(got.astype(np.float64), got.astype(np.float64)))
            norms.append(math.sqrt(squares * d.values.size / got.size))
    return float(np.mean(norms)) if norms else None


class PhaseTransport(LtpTransport):
    """phase-bound: LTP with a fixed early-close threshold per round, strict or loose by phase."""

    LABEL = "phase-bound"
    MESH = False
    TABLE = staticmethod(phase_options)

    def receive_thresholds(self) -> tuple[float, float]:
        # The core starts strict: the first rounds are sensitive (warm-up, or no evidence yet).
        strict = self._options["strict_threshold"]
        return strict, strict

    def core_settings(self, receive: tuple[float, float],
                      extra: Mapping[str, float] | None = None) -> dict[str, float]:
        return super().core_settings(receive, {**_FIXED_CORE, **(extra or {})})

    def validate(self) -> None:
        super().validate()
        o = self._options
        if o["strict_threshold"] < o["loose_threshold"]:
            raise OptionError(f"phase-bound strict_threshold ({o['strict_threshold']}) must not "
                              f"be below loose_threshold ({o['loose_threshold']}).")

    def mesh(self, rank, members, parts):
        # The phase rule is the PS's, from the gradients it gathers; a collective has no PS.
        raise OptionError("phase-bound has no end for collectives: its phase rule runs at the "
                          "PS; run tree or ring over ltp or ltp-fixed.")

    def serve(self, bind: Addr, workers: Sequence[Addr], layout: Layout,
              up: Layout | None = None) -> PhaseServer:
        settings = self.core_settings(self.receive_thresholds(),
                                      {"max_msg_bytes": _msg_bytes(layout, up),
                                       **self.session_settings()})
        return PhaseServer(self._options, settings, bind, workers, layout, self.session, up)


class PhaseServer(LtpServer):
    """The PS end: LTP's, with the threshold of segment 0 set by :class:`PhaseRule`.

    ``strict_rounds`` and ``loose_rounds`` count the rounds (calls of :meth:`observe`) by the
    threshold in force while their gradients were received; every gathered delivery carries that
    threshold (``phase_threshold``) and whether it was the strict one (``phase_strict``).
    """

    def __init__(self, options: Mapping[str, Any], settings: Mapping[str, float], bind: Addr,
                 workers: Sequence[Addr], layout: Layout, session: Session,
                 up: Layout | None = None) -> None:
        self.thresholds = {True: options["strict_threshold"], False: options["loose_threshold"]}
        self.rule = PhaseRule(options["warmup_rounds"], options["window_rounds"],
                              options["norm_change"], options["norm_of"])
        self.strict_rounds = self.loose_rounds = self.switches = 0
        super().__init__(options, settings, bind, workers, layout, session, up)

    @property
    def phase_threshold(self) -> float:
        """The early-close threshold of gradients now in force."""
        return self.thresholds[self.rule.strict]

    def gather(self, msg_id: int, timeout_s: float) -> list[Delivery]:
        return [self._decorate(d) for d in super().gather(msg_id, timeout_s)]

    def _decorate(self, delivery: Delivery) -> Delivery:
        delivery.stats.update(phase_strict=float(self.rule.strict),
                              phase_threshold=self.phase_threshold)
        return delivery

    def observe(self, msg_id: int, deliveries: Sequence[Delivery]) -> None:
        """Count the round in its phase, measure its gradient, and set the next round's
        threshold when the phase changes (the only call into C here)."""
        before = self.rule.strict
        if before:
            self.strict_rounds += 1
        else:
            self.loose_rounds += 1
        sample = (round_gradient(deliveries) if self.rule.norm_of == "sum"
                  else round_norm(deliveries))
        if self.rule.observe(sample) != before:
            t = self.phase_threshold
            self.end.set_policy(GRADIENT_SEGMENT, t, t)
            self.switches += 1

    def stats(self) -> dict[str, float | str]:
        out = dict(super().stats())
        out.update(strict_rounds=float(self.strict_rounds), loose_rounds=float(self.loose_rounds),
                   phase_switches=float(self.switches), norm_windows=float(self.rule.windows))
        if self.rule.last_change is not None and math.isfinite(self.rule.last_change):
            out["last_norm_change"] = self.rule.last_change
        return out
