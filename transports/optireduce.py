"""OptiReduce: bounded-time collectives with Hadamard-coded gradients, on LTP's core.

OptiReduce (Warraich et al., "OptiReduce: Resilient and Tail-Optimal AllReduce for Distributed
Deep Learning in the Cloud", NSDI 2025) bounds the time of every step of an all-reduce: a
receiver waits at most an adaptive timeout and gives up what has not arrived (it counts as
lost), and every gradient goes through a randomized Hadamard transform before it is sent, so a
lost tail becomes a little noise spread over the whole vector instead of a block of zeros.
``docs/optireduce.md`` sets the paper's points beside ours; this module is the scheme:

- :class:`AdaptiveTimeout`: how long a part may take. Each part a receiver takes gives one
  *sample*, its time from the first ask to its close divided by the fraction that arrived (the
  time it would have needed whole: the authors' released code projects a step's time this way).
  A part's deadline is ``timeout_mult`` times the ``timeout_pct`` percentile of its part's last
  ``timeout_history`` samples, within ``[timeout_floor_ms, timeout_max_ms]``; until a part has
  ``timeout_warmup`` samples it is ``timeout_max_ms``.
- :class:`OptiReduceTransport`: the options, and the mesh end (:mod:`transports.optireduce_mesh`).
  A loss-tolerant part (a gradient's, a sum's) is received whole, repaired by LTP's
  retransmissions, or whatever of it has arrived at its deadline; whole parts (parameters,
  control messages) are LTP's. The coding is :mod:`transports.hadamard`.

OptiReduce is an all-reduce: it runs the ``ring`` and ``tree`` patterns and refuses ``ps``
(``PS = False``; :meth:`serve` and :meth:`connect` say so).

    >>> from transports import registry
    >>> t = registry.create("optireduce", {"timeout_pct": 99})
"""

from __future__ import annotations

import collections
import dataclasses
import functools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from transports import hadamard
from transports.base import Addr, Layout, Option, OptionError, check_order
from transports.ltp import LtpTransport, _core_option, ltp_options

# LTP's options that mean nothing here: the early-close threshold and its weights and grace (a
# part closes whole or at its deadline), the filler (lost coded coordinates are zero), and the
# PS's own (the pull threshold, critical segments).
_LTP_ONLY = ("threshold_min", "threshold_max", "loss_weight", "rtt_weight", "close_grace_min_us",
             "grace_rtt_mult", "filler", "pull_threshold", "critical_segments", "max_wait_ms")
WHOLE = (1.0, 1.0)    # the core's policy of a loss-tolerant part until its deadline
GIVE_UP = (0.0, 0.0)  # ... and at its deadline: close with whatever arrived


@functools.cache
def optireduce_options() -> tuple[Option, ...]:
    """OptiReduce's option table: LTP's, less what does not apply, plus the deadline rule and
    the transform."""
    max_wait = _core_option("max_wait_ms")
    return (
        *(o for o in ltp_options() if o.name not in _LTP_ONLY),
        dataclasses.replace(
            max_wait, default=1.0,
            help="a part given up at its deadline closes at once if its first packet came this "
                 "long before, else this long after it (the core's hard cap; it also bounds the "
                 "sender RTT the core believes)"),
        Option("timeout_pct", 95.0, "float", 1.0, 100.0, unit="percent",
               help="percentile of a part's recent samples its deadline follows"),
        Option("timeout_mult", 1.5, "float", 0.1, 1000.0,
               help="a part's deadline is this many times that percentile"),
        Option("timeout_history", 20, "int", 1, 100_000, unit="samples",
               help="recent samples kept per part (a sample: time to the close / fraction "
                    "that arrived)"),
        Option("timeout_warmup", 5, "int", 1, 100_000, unit="samples",
               help="until a part has this many samples its deadline is timeout_max_ms"),
        Option("timeout_floor_ms", 5.0, "float", 0.01, 3_600_000.0, unit="ms",
               help="shortest deadline"),
        Option("timeout_max_ms", 30_000.0, "float", 0.01, 3_600_000.0, unit="ms",
               help="longest deadline, and every deadline during the warm-up"),
        Option("hadamard", True, "bool",
               help="send loss-tolerant parts through the randomized Hadamard transform"),
        Option("hadamard_block_floats", 8192, "int", 1, 2**24, unit="floats",
               help="largest block the transform mixes (a power of two; the rest of a part in "
                    "power-of-two blocks)"),
        Option("hadamard_seed", 0, "int", 0, 2**32 - 1,
               help="seed of the transform's signs, with the sender, message id and part"),
    )


@dataclasses.dataclass
class AdaptiveTimeout:
    """Per part, the deadline rule: ``mult`` x the ``pct`` percentile of the last ``history``
    samples (numpy's linear interpolation), within ``[floor_s, max_s]``; ``max_s`` until the
    part has ``warmup`` samples."""

    pct: float
    mult: float
    history: int
    warmup: int
    floor_s: float
    max_s: float
    samples: dict[int, collections.deque] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(cls, options: Mapping[str, Any]) -> AdaptiveTimeout:
        """The rule an OptiReduce transport's options give."""
        return cls(options["timeout_pct"], options["timeout_mult"], options["timeout_history"],
                   options["timeout_warmup"], options["timeout_floor_ms"] / 1000.0,
                   options["timeout_max_ms"] / 1000.0)

    def timeout_s(self, part: int) -> float:
        """How long a new message of ``part`` may take from its first ask."""
        seen = self.samples.get(part)
        if seen is None or len(seen) < self.warmup:
            return self.max_s
        t = self.mult * float(np.percentile(np.fromiter(seen, float, len(seen)), self.pct))
        return min(max(t, self.floor_s), self.max_s)

    def observe(self, part: int, elapsed_s: float, received_frac: float) -> float:
        """Learn from a message of ``part`` that closed ``elapsed_s`` after its first ask with
        ``received_frac`` of it: the sample is the time it would have taken whole,
        ``elapsed_s / received_frac``, at most ``max_s`` (and ``max_s`` when nothing came).
        Returns the sample."""
        whole = elapsed_s / received_frac if received_frac > 0 else self.max_s
        sample = min(max(whole, 0.0), self.max_s)
        self.samples.setdefault(part, collections.deque(maxlen=self.history)).append(sample)
        return sample


class OptiReduceTransport(LtpTransport):
    """OptiReduce on LTP's core: collectives whose loss-tolerant parts are Hadamard-coded and
    given up at an adaptive deadline."""

    LABEL = "OptiReduce"
    MESH = True
    PS = False
    TABLE = staticmethod(optireduce_options)

    def receive_thresholds(self) -> tuple[float, float]:
        # Until its deadline a part is received whole (the core's default policy); the mesh end
        # lowers a part's policy to GIVE_UP for the moment it gives the part up.
        return WHOLE

    def validate(self) -> None:
        super().validate()
        o = self._options
        check_order("OptiReduce", o, "timeout_warmup", "timeout_history",
                    "a part keeps only that many samples")
        check_order("OptiReduce", o, "timeout_floor_ms", "timeout_max_ms")
        if not hadamard.is_power_of_two(o["hadamard_block_floats"]):
            raise OptionError("OptiReduce hadamard_block_floats must be a power of two (1, 2, 4, "
                              f"..., 8192, ...), not {o['hadamard_block_floats']}.")

    def serve(self, bind: Addr, workers: Sequence[Addr], layout: Layout):
        raise OptionError(_NO_PS)

    def connect(self, rank: int, bind: Addr, server: Addr, layout: Layout):
        raise OptionError(_NO_PS)

    def mesh(self, rank: int, members: Sequence[Addr], parts: Sequence[Any]):
        """Member ``rank``'s end of a collective
        (:class:`~transports.optireduce_mesh.OptiReduceMesh`)."""
        from transports.optireduce_mesh import OptiReduceMesh

        settings = self.core_settings(WHOLE, {"max_msg_bytes": 4 * max(p.n_floats for p in parts),
                                              **self.session_settings()})
        return OptiReduceMesh(self._options, settings, rank, members, parts, self.session)


_NO_PS = ("OptiReduce is an all-reduce and has no parameter-server ends; run it with --pattern "
          "ring or tree.")
