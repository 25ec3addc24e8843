"""One run's every parameter, as a frozen, validated, hashable value.

A :class:`RunSpec` fully determines a run: the transport and its options, the network, the model
and data, the training schedule and the seed. Its :attr:`~RunSpec.run_id` is derived from all of
that, so a resumed sweep recognises a finished run by id alone. Specs travel to the emulated hosts
as JSON (:meth:`RunSpec.to_json`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
from typing import Any, Self

from harness.hosts.faults import FaultError, check_fault, parse_fault
from harness.hosts.pattern import PatternError, parse_pattern
from harness.hosts.sync import SyncError, parse_sync
from harness.training import datasets, models
from harness.training.aggregators import (ASYNC_OK, SCORE_BATCH, SCORE_PENALTY, VALIDATING,
                                          AggregatorError, check_aggregator)
from harness.training.byzantine import ByzantineError, check_byzantine, parse_byzantine
from harness.training.compress import (DEFAULT_RESET, CompressError, check_compress,
                                       parse_compress, parse_reset_mode)
from topologies.impair.cross import CrossError, parse_cross
from topologies.impair.delay import DelayError, check_delay
from topologies.impair.loss import LossModelError, Uniform, parse_loss
from topologies.incast import IncastParams, StarLinks, TopologyError, check_params
from transports import registry
from transports.base import OptionError, UserError, scheme_name


class SpecError(UserError, ValueError):
    """A run parameter is unknown or out of range."""


@dataclasses.dataclass(frozen=True)
class TrainingSpec:
    """What every kind of training run has, whatever carries its messages (the PS's
    :class:`RunSpec`, the peers' :class:`~harness.p2p.spec.PeerSpec`): the model and its data,
    SGD's settings, the queue and loss of the network, the seed and the time allowed."""

    model: str = "mlp"
    dataset: str = "fashion-mnist"
    batch_size: int = 32
    lr: float = 0.2
    local_steps: int = 1
    """SGD steps a worker takes per synchronisation (1: push each gradient)."""
    sync: str = "bsp"
    """Synchronisation mode: ``bsp``, ``ssp:S`` or ``async`` (:mod:`harness.hosts.ps`)."""
    target_accuracy: float | None = None
    """The accuracy time to accuracy is measured to; None: the model's own
    (``models.TARGET_ACCURACY``)."""
    queue_pkts: int = 64
    loss_pct: float = 0.0
    seed: int = 0
    timeout_s: float = 600.0

    def _training_values(self) -> None:
        """Numbers as floats where they are rates or times, and the model's target filled in."""
        for name in ("loss_pct", "lr", "timeout_s"):
            object.__setattr__(self, name, float(getattr(self, name)))
        if self.target_accuracy is None and self.model in models.TARGET_ACCURACY:
            object.__setattr__(self, "target_accuracy", float(models.TARGET_ACCURACY[self.model]))

    def _training_checks(self, error: type[Exception], whole: tuple[str, ...]) -> None:
        """The model and data set known, and the ``whole`` fields whole numbers (at least 1, the
        seed at least 0); else ``error`` with a sentence."""
        if self.model not in models.MODELS:
            raise error(f"unknown model {self.model!r}; choose one of: "
                        f"{', '.join(models.MODELS)}.")
        if self.dataset not in datasets.DATASETS:
            raise error(f"unknown data set {self.dataset!r}; choose one of: "
                        f"{', '.join(datasets.DATASETS)}.")
        for name in whole:
            value = getattr(self, name)
            low = 0 if name == "seed" else 1
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise error(f"{name} must be a whole number of at least {low}, not {value!r}.")

    def as_dict(self) -> dict[str, Any]:
        """All fields, JSON-ready."""
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        """Canonical JSON of all fields (what a run's ``spec.json`` holds)."""
        return json.dumps(self.as_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Self:
        """The spec written by :meth:`to_json`."""
        return cls(**json.loads(text))

    def digest(self) -> str:
        """Eight hex digits of the canonical JSON's SHA-256: the end of every run id."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:8]


@dataclasses.dataclass(frozen=True)
class RunSpec(TrainingSpec, StarLinks):
    """Everything that defines one run through a PS; invalid values raise :class:`SpecError`.
    The star's hosts and links are :class:`~topologies.incast.StarLinks`'s fields."""

    transport: str = "tcp-cubic"
    transport_options: tuple[tuple[str, Any], ...] = ()
    delay_ms: float = 0.0
    iterations: int = 100
    eval_every: int = 25
    port: int = 5000
    stop_at_target: bool = False
    max_train_s: float | None = None       # cap on the PS's training time; None: no cap
    loss_model: str = ""
    """A loss model's text (``ge:loss=5,burst=4``); empty: uniform loss at ``loss_pct``. With a
    model, ``loss_pct`` is its mean loss."""
    cross: str = "none"
    """Background traffic through the bottleneck (``tcp:2``, ...; :mod:`topologies.impair.cross`)."""
    fault: str = "none"
    """A fault the harness injects (``kill@20``, ``link@20:2s``, ...; :mod:`harness.hosts.faults`)."""
    byzantine: str = "0"
    """Byzantine workers: ``0`` or ``COUNT:BEHAVIOUR[:PARAM]`` (:mod:`harness.training.byzantine`)."""
    aggregator: str = "mean"
    """How the PS combines a round's updates (:mod:`harness.training.aggregators`)."""
    tolerate: int | None = None
    """Byzantine updates the aggregator tolerates (``f``); None: the run's attacker count."""
    score_batch: int = SCORE_BATCH
    """Validation samples per round of the ``score`` aggregator (``zeno++``: per parameter
    version)."""
    score_penalty: float = SCORE_PENALTY
    """``rho``: the ``score`` and ``zeno++`` aggregators' penalty on an update's squared size."""
    score_threshold: float | None = None
    """The ``score`` aggregator keeps only updates scoring at least this (None: the n - f best);
    ``zeno++`` accepts an update scoring at least minus this (None: 0)."""
    compress: str = "none"
    """How workers compress their pushes: ``none``, ``topk:R`` or ``sign`` (:mod:`harness.training.compress`)."""
    error_reset: int = DEFAULT_RESET
    """A compressing worker's residual is reset every this many synchronisations (0: never;
    under ``cser``: the gradient rounds between two residual synchronisations, at least 1)."""
    reset_mode: str = "drop"
    """What an error reset does with the residual: ``drop`` it, or ``cser``: synchronise it
    first, each worker keeping a local model (:mod:`harness.training.compress`)."""
    holdout: int = 0
    """Training samples the PS keeps for itself, as its validation set, and no worker trains
    on (0: validation samples the training set; :mod:`harness.hosts.robust`)."""
    pattern: str = "ps"
    """How gradients and parameters travel: ``ps``, ``tree`` or ``ring`` with options
    (:mod:`harness.hosts.pattern`)."""

    # Fields left out of the JSON (and so of the run id) while they hold these values, so the
    # ids of runs written before the fields existed stay the same.
    _QUIET_DEFAULTS = {"loss_model": "", "cross": "none", "sync": "bsp", "fault": "none",
                       "byzantine": "0", "aggregator": "mean", "tolerate": None,
                       "score_batch": SCORE_BATCH, "score_penalty": SCORE_PENALTY,
                       "score_threshold": None, "compress": "none", "local_steps": 1,
                       "error_reset": DEFAULT_RESET, "reset_mode": "drop", "holdout": 0,
                       "pattern": "ps"}

    def __post_init__(self) -> None:
        # Options may come in as a dict; store them sorted so equal specs hash equal.
        opts = self.transport_options
        if isinstance(opts, dict):
            opts = opts.items()
        object.__setattr__(self, "transport_options",
                           tuple(sorted((str(k), _freeze(v)) for k, v in opts)))
        self._training_values()
        for name in ("bottleneck_mbps", "delay_ms", "score_penalty"):
            object.__setattr__(self, name, float(getattr(self, name)))
        if self.worker_link_mbps is not None:
            object.__setattr__(self, "worker_link_mbps", float(self.worker_link_mbps))
        for name in ("target_accuracy", "max_train_s", "score_threshold"):
            value = getattr(self, name)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                object.__setattr__(self, name, float(value))
        try:
            if self.loss_model:
                model = parse_loss(self.loss_model)
                if isinstance(model, Uniform):
                    object.__setattr__(self, "loss_pct", model.loss_pct)
                    object.__setattr__(self, "loss_model", "")
                else:
                    object.__setattr__(self, "loss_pct", round(model.mean_loss_pct, 6))
                    object.__setattr__(self, "loss_model", model.text())
            object.__setattr__(self, "cross", parse_cross(self.cross).text())
            object.__setattr__(self, "sync", parse_sync(self.sync).text())
            object.__setattr__(self, "fault", parse_fault(self.fault).text())
            object.__setattr__(self, "byzantine", parse_byzantine(self.byzantine).text())
            object.__setattr__(self, "aggregator", str(self.aggregator).strip().lower())
            object.__setattr__(self, "compress", parse_compress(self.compress).text())
            object.__setattr__(self, "pattern", parse_pattern(self.pattern).text())
            object.__setattr__(self, "reset_mode", parse_reset_mode(self.reset_mode))
            if self.compress == "none" and isinstance(self.error_reset, int):
                # Without compression there is no residual to reset: one run, not one per period
                # or per reset mode.
                object.__setattr__(self, "error_reset", DEFAULT_RESET)
                object.__setattr__(self, "reset_mode", "drop")
        except (LossModelError, CrossError, SyncError, FaultError, ByzantineError,
                CompressError, PatternError) as exc:
            raise SpecError(str(exc)) from None
        self._validate()

    def _validate(self) -> None:
        try:
            registry.create(self.transport, dict(self.transport_options))
            check_params(self.n_workers, self.bottleneck_mbps, self.worker_link_mbps,
                         self.queue_pkts, self.loss_pct)
            check_delay(self.delay_ms)
        except (registry.UnknownTransport, OptionError, TopologyError, DelayError) as exc:
            raise SpecError(str(exc)) from None
        self._training_checks(SpecError, ("iterations", "batch_size", "eval_every", "seed", "port"))
        if not 1024 <= self.port <= 65000:
            raise SpecError(f"port must be between 1024 and 65000, not {self.port}.")
        if not self.lr > 0:
            raise SpecError(f"lr must be above 0, not {self.lr!r}.")
        if not self.timeout_s > 0:
            raise SpecError(f"timeout_s must be above 0, not {self.timeout_s!r}.")
        if not isinstance(self.target_accuracy, float) or not 0 < self.target_accuracy <= 1:
            raise SpecError(f"target_accuracy must be a fraction above 0 and at most 1, "
                            f"not {self.target_accuracy!r}.")
        if not isinstance(self.stop_at_target, bool):
            raise SpecError(f"stop_at_target must be true or false, not {self.stop_at_target!r}.")
        try:
            check_fault(parse_fault(self.fault), self.n_workers, self.iterations)
        except FaultError as exc:
            raise SpecError(str(exc)) from None
        transport = registry.create(self.transport, dict(self.transport_options))
        if parse_fault(self.fault).kind == "restart" and not transport.REJOIN:
            raise SpecError(f"fault {self.fault} needs a transport a restarted worker can rejoin "
                            f"(TCP); {self.transport}'s receive window refuses the new process's "
                            "message ids.")
        self._validate_byzantine()
        self._validate_compress(transport)
        self._validate_pattern(transport)
        if self.max_train_s is not None and not (isinstance(self.max_train_s, float)
                                                 and self.max_train_s > 0):
            raise SpecError(f"max_train_s must be above 0 seconds (or none), "
                            f"not {self.max_train_s!r}.")

    def _validate_byzantine(self) -> None:
        if self.tolerate is not None and (not isinstance(self.tolerate, int)
                                          or isinstance(self.tolerate, bool)):
            raise SpecError(f"tolerate must be a whole number (or none), not {self.tolerate!r}.")
        if not isinstance(self.score_batch, int) or self.score_batch < 1:
            raise SpecError(f"score_batch must be a whole number of at least 1, "
                            f"not {self.score_batch!r}.")
        if not self.score_penalty >= 0:
            raise SpecError(f"score_penalty must be at least 0, not {self.score_penalty!r}.")
        if self.score_threshold is not None and not isinstance(self.score_threshold, float):
            raise SpecError(f"score_threshold must be a number (or none), "
                            f"not {self.score_threshold!r}.")
        try:
            check_byzantine(parse_byzantine(self.byzantine), self.n_workers)
            check_aggregator(self.aggregator, self.n_workers, self.tolerated)
        except (ByzantineError, AggregatorError) as exc:
            raise SpecError(str(exc)) from None
        if self.aggregator not in ASYNC_OK and self.sync != "bsp":
            raise SpecError(f"the {self.aggregator} aggregator combines a round's updates, which "
                            f"only bsp has; run it with sync bsp, not {self.sync} (zeno++ "
                            "judges one update at a time).")
        self._validate_holdout()

    def _validate_holdout(self) -> None:
        if not isinstance(self.holdout, int) or isinstance(self.holdout, bool):
            raise SpecError(f"holdout must be a whole number of samples, not {self.holdout!r}.")
        if self.holdout and not self.score_batch <= self.holdout <= datasets.MAX_HOLDOUT:
            raise SpecError(f"holdout must be 0 or from score_batch ({self.score_batch}) to "
                            f"{datasets.MAX_HOLDOUT} samples, not {self.holdout}.")
        if self.holdout and self.aggregator not in VALIDATING:
            raise SpecError(f"holdout is the PS's validation set, which only the "
                            f"{' and '.join(VALIDATING)} aggregators use; run one of them or "
                            f"holdout 0, not aggregator {self.aggregator}.")

    def _validate_compress(self, transport) -> None:
        try:
            check_compress(self.compress, self.local_steps, self.error_reset, self.reset_mode)
        except CompressError as exc:
            raise SpecError(str(exc)) from None
        if self.compress != "none" and "up" not in inspect.signature(transport.serve).parameters:
            raise SpecError(f"{self.transport} cannot carry compressed pushes: its serve() and "
                            f"connect() take no `up` layout (docs/adding-a-transport.md).")

    def _validate_pattern(self, transport) -> None:
        kind = parse_pattern(self.pattern).kind
        if kind == "ps":
            if not transport.PS:
                raise SpecError(f"{self.transport} has no parameter-server ends, so it cannot run "
                                "the ps pattern; run it with --pattern ring or tree.")
            return
        if not transport.MESH:
            raise SpecError(f"{self.transport} has no end for collectives, so it cannot run the "
                            f"{kind} pattern; use a TCP variant, ltp or ltp-reliable.")
        plain = {"sync": ("bsp", self.sync), "byzantine": ("0", self.byzantine),
                 "aggregator": ("mean", self.aggregator), "reset_mode": ("drop", self.reset_mode),
                 "compress": ("none", self.compress),
                 "local_steps": (1, self.local_steps)}
        for name, (want, have) in plain.items():
            if have != want:
                raise SpecError(f"the {kind} pattern runs {name} {want} only (not {have}): its "
                                "nodes add gradients as they pass (docs/collectives.md).")
        fault = parse_fault(self.fault).kind
        if fault not in ("none", "straggler") and (kind == "ring" or fault not in ("kill", "stall")):
            raise SpecError(f"fault {self.fault} is not one the {kind} pattern survives: a tree "
                            "takes kill@K and stall@K, a ring only straggler:Fx "
                            "(docs/collectives.md).")
        if kind == "ring" and self.n_workers < 2:
            raise SpecError("a ring needs at least 2 workers.")

    @property
    def tolerated(self) -> int:
        """``f``: the Byzantine updates the aggregator tolerates (``tolerate``, or the run's
        attacker count)."""
        return self.tolerate if self.tolerate is not None else \
            parse_byzantine(self.byzantine).count

    @property
    def network(self) -> IncastParams:
        """The topology this run needs (loss included)."""
        return IncastParams(self.n_workers, self.bottleneck_mbps, self.worker_link_mbps,
                            self.queue_pkts, self.loss_pct, self.n_cross)

    @property
    def n_cross(self) -> int:
        """How many cross-traffic hosts this run's network needs."""
        return parse_cross(self.cross).n_hosts

    @property
    def network_key(self) -> tuple:
        """What a network must match to be reused for this run (all but loss and delay)."""
        return (self.n_workers, self.bottleneck_mbps, self.worker_link_mbps, self.queue_pkts,
                self.n_cross)

    @property
    def loss_text(self) -> str:
        """The loss model as text: the model's, or ``uniform:<loss_pct>``."""
        return self.loss_model or Uniform(self.loss_pct).text()

    def options(self) -> dict[str, Any]:
        """The transport options as a dict."""
        return dict(self.transport_options)

    @property
    def scheme(self) -> str:
        """Transport and options as one name (``ltp+filler=zero``): what figures group by."""
        return scheme_name(self.transport, self.options())

    def as_dict(self) -> dict[str, Any]:
        """All fields, JSON-ready (options as a dict)."""
        d = dataclasses.asdict(self)
        d["transport_options"] = self.options()
        for name, quiet in self._QUIET_DEFAULTS.items():
            if d[name] == quiet:
                del d[name]
        return d

    @property
    def run_id(self) -> str:
        """A readable, unique id: transport, loss, bandwidth, seed and a digest of everything."""
        digest = self.digest()
        delay = f"_d{self.delay_ms:g}" if self.delay_ms else ""
        kind = self.loss_model.partition(":")[0]  # ge, get, replay, trace; empty: uniform
        cross = "_cross" if self.cross != "none" else ""
        sync = f"_{self.sync.replace(':', '')}" if self.sync != "bsp" else ""
        fault = (f"_{self.fault.partition('@')[0].partition(':')[0]}"
                 if self.fault != "none" else "")
        byz = f"_byz{self.byzantine.replace(':', '')}" if self.byzantine != "0" else ""
        # '+' never appears in an id (zeno++: _zenopp).
        agg = f"_{self.aggregator.replace('+', 'p')}" if self.aggregator != "mean" else ""
        agg += f"_holdout{self.holdout}" if self.holdout else ""
        comp = f"_{self.compress.replace(':', '')}" if self.compress != "none" else ""
        comp += f"_h{self.local_steps}" if self.local_steps > 1 else ""
        comp += f"_cser{self.error_reset}" if self.reset_mode == "cser" else ""
        comp += f"_{self.pattern.partition(':')[0]}" if self.pattern != "ps" else ""
        return (f"{self.transport}_loss{kind}{self.loss_pct:g}_bw{self.bottleneck_mbps:g}{delay}"
                f"{cross}{sync}{fault}{byz}{agg}{comp}_s{self.seed}_{digest}")

    def replace(self, **changes: Any) -> RunSpec:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)


def _freeze(value: Any) -> Any:
    """Lists (also nested, e.g. PLOT's bounds) become tuples, so specs stay hashable."""
    return tuple(_freeze(v) for v in value) if isinstance(value, (list, tuple)) else value
