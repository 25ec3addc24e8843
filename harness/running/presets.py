"""Named sweeps: frozen grids of run specs that a user starts by name.

A :class:`Plan` is a grid (transports x loss x bottleneck rates x delays x cross traffic x seeds)
over a base :class:`~harness.running.spec.RunSpec` that fixes everything else. Any dimension can be
overridden from the command line (``invoke run-sweep --preset smoke --loss 0,5 --iterations 20``)
through :meth:`Plan.override`.

Every preset runs 8 workers training the MLP (batch 32 per worker) through a 64-packet
bottleneck queue at 200 Mbit/s, unless it says otherwise; "the main schemes" are TCP CUBIC, CUBIC
with a 5 ms minimum RTO (the strongest TCP baseline here), LTP, LTP reliable and PLOT, and the
evidence presets run three seeds per cell. ``docs/running.md`` has the table with times:

- ``smoke``: the three TCP variants at 0 and 1 % loss, 30 iterations; under 2 minutes.
- ``default`` (what ``invoke run-sweep`` runs): the main schemes at 0, 2, 5, 10 % loss, 40
  iterations or 30 s of training; about 20 minutes.
- ``reference``: the default sweep six times over (six blocks of three seeds, each on a testbed
  of its own), the README's headline (``results/reference/``); about 95 minutes.
- ``tolerance``: LTP, LTP reliable and PLOT at 10 % loss and 10, 25, 50 ms one way, ten seeds:
  where tolerating loss pays (``results/tolerance/``); about 50 minutes.
- ``converge``: the main schemes at 0, 5, 10 % loss to 1,000 iterations or 10 minutes of
  training: time to accuracy and converged accuracy. Hours.
- ``tta``: the main schemes at 0 and 10 % loss, each run stopping at the target accuracy or after
  150 s of training: time to accuracy alone; about 30 minutes.
- ``incast``, ``edge``, ``bursty``, ``cross``: the regimes where tolerating loss could pay (more
  workers and shallow queues; 10-50 ms one-way delay; bursty loss; background traffic). The
  last three compare LTP, LTP reliable, PLOT and the strongest TCP baseline (CUBIC with a 5 ms
  minimum RTO).
- ``patterns``, ``patterns-scale``: the PS, a tree and a ring all-reduce over TCP CUBIC (with
  and without a 5 ms minimum RTO), LTP and LTP reliable, at 0-10 % loss, 8 to 32 workers
  (``docs/collectives.md``); ``patterns-faults``: a tree and the PS through a killed and a
  stalled worker.
- ``paper``: every scheme, 100 and 200 Mbit/s, loss up to 20 %, 300 iterations; hours.
- ``plot-adaptive``: PLOT's frozen snr rule, its adaptive rule (per-layer ranges whose threshold
  follows loss and RTT) and LTP at 0 and 5 % loss, LeNet-5 and the six-layer MLP, 36 runs;
  ``plot-edge``: the two PLOT rules at the ``edge`` regime's delays and rate, 2 % loss, 18 runs
  (``docs/plot-protocol.md``).
- ``faults``: bsp, ssp:2 and async under no fault, a killed worker, a 2 s stall, a 2 s link cut
  and a 3x straggler, TCP CUBIC and LTP; about 40 minutes.
- ``byzantine``: 8 workers, none or two attackers (sign-flip, alie, ipm), under each
  aggregation rule (mean, score, median, trimmed mean, Krum, Zeno++), TCP CUBIC without loss,
  three seeds, 100 iterations; about 50 minutes (rough estimate; ``docs/byzantine.md``).
- ``byzantine-loss``: honest and Byzantine workers over LTP and PLOT at 5 and 10 % loss, mean
  against score-based validation: does the validator reject honest-but-filled updates?
- ``validation-async``: Zeno++ against mean under ``ssp:2`` and ``async``, LTP at 0 and 5 %
  loss, none or two sign-flipping attackers: how many honest (and filled) updates does a
  validator that judges each arrival alone reject?
- ``privacy``: score and Zeno++ validating on the whole training set or on 6,000 samples the PS
  holds out (``holdout``), none or two sign-flipping attackers, TCP CUBIC without loss.
- ``compression``: LTP without loss, pushes uncompressed, top-1 % and scaled sign, error
  feedback reset never or every round, one or four local steps: bytes on the wire per round
  against accuracy (``docs/compression.md``); about 25 minutes.
- ``cser``: CSER's error reset (``reset_mode`` ``cser``: the residual synchronised after every 4
  gradient rounds) against today's (``drop``: the residual dropped every 4 pushes), top-1 % and
  scaled sign over LTP without loss, each run 60 s of training (a residual round is no gradient
  step, so the runs compare by time); ``cser-async``: the same for top-1 % under ``ssp:2`` and
  ``async``; ``cser-validation``: async CSER workers under ``mean`` and ``zeno++``, none or two
  sign-flipping attackers, 12 runs. About 20, 15 and 15 minutes (rough estimates).
- ``field``: the designs of the field head to head on identical replayed loss: LTP, PLOT, the
  MLT-style and phase-aware bounds, LTP reliable and the strongest TCP through the PS, and
  OptiReduce beside LTP in a ring, in five cells (no loss, 5 % uniform, 5 % in bursts, an edge
  round trip, a shallow queue), six seeds; 240 runs, hours (``docs/field.md``).
- ``lab1`` .. ``lab5``, ``lab7``, ``lab8``: the teaching labs (``docs/labs/``).

The peer-to-peer presets (no PS: ``p2p``, ``p2p-smoke``, ``lab6``) are
:data:`harness.p2p.spec.PRESETS`; ``invoke run-sweep --preset p2p`` runs them the same way.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any, ClassVar

from pathlib import Path

from harness.running.spec import RunSpec, SpecError
from harness.training.models import TARGET_ACCURACY
from harness.training.aggregators import AGGREGATORS, ZENOPP
from transports import registry
from transports.base import UserError, parse_scheme


class UnknownPreset(UserError, KeyError):
    """The preset name is not defined."""

    def __str__(self) -> str:
        return str(self.args[0])


# Grid dimensions of a plan and the run parameter each one sets (transports set two).
GRID: dict[str, str] = {
    "transports": "transport", "loss_pcts": "loss_pct", "bottleneck_mbps": "bottleneck_mbps",
    "delays_ms": "delay_ms", "workers": "n_workers", "queues": "queue_pkts", "cross": "cross",
    "syncs": "sync", "faults": "fault", "byzantine": "byzantine", "aggregators": "aggregator",
    "compressions": "compress", "local_steps": "local_steps", "error_resets": "error_reset",
    "patterns": "pattern", "models": "model", "reset_modes": "reset_mode", "holdouts": "holdout",
    "seeds": "seed",
}


@dataclasses.dataclass(frozen=True)
class Plan:
    """A named grid of runs: every combination of the dimensions in :data:`GRID`."""

    kind: ClassVar[str] = "ps"   # its kind of run (harness.running.kinds)
    name: str
    transports: tuple[str, ...]
    loss_pcts: tuple[float | str, ...]
    """Uniform loss rates in percent, or loss models as text (``ge:5:4``;
    :func:`topologies.impair.loss.parse_loss`)."""
    bottleneck_mbps: tuple[float, ...]
    seeds: tuple[int, ...]
    base: RunSpec
    order_seed: int = 0
    delays_ms: tuple[float, ...] = (0.0,)
    workers: tuple[int, ...] = (8,)
    queues: tuple[int, ...] = (64,)
    cross: tuple[str, ...] = ("none",)
    """Background traffic through the bottleneck, as text (``tcp:2``; :mod:`topologies.impair.cross`)."""
    syncs: tuple[str, ...] = ("bsp",)
    """Synchronisation modes (``bsp``, ``ssp:2``, ``async``; :mod:`harness.hosts.ps`)."""
    faults: tuple[str, ...] = ("none",)
    """Faults the harness injects (``kill@20``, ``link@20:2s``; :mod:`harness.hosts.faults`)."""
    byzantine: tuple[str, ...] = ("0",)
    """Byzantine workers (``0``, ``2:sign-flip``, ...; :mod:`harness.training.byzantine`)."""
    aggregators: tuple[str, ...] = ("mean",)
    """Aggregation rules at the PS (``mean``, ``score``, ...; :mod:`harness.training.aggregators`)."""
    compressions: tuple[str, ...] = ("none",)
    """How workers compress their pushes (``none``, ``topk:0.01``, ``sign``; :mod:`harness.training.compress`)."""
    local_steps: tuple[int, ...] = (1,)
    """SGD steps per synchronisation."""
    error_resets: tuple[int, ...] = (1,)
    """Error-reset periods in synchronisations (0: never)."""
    patterns: tuple[str, ...] = ("ps",)
    """Communication patterns (``ps``, ``tree``, ``ring``, with options; :mod:`harness.hosts.pattern`)."""
    models: tuple[str, ...] = ()
    """Models (``mlp``, ``lenet5``, ...; :mod:`harness.training.models`); empty: the base's.
    While the base's target is its own model's, each model is measured to its own target
    (``models.TARGET_ACCURACY``) unless ``model_targets`` is off."""
    model_targets: bool = True
    """Whether ``models`` brings each model's own target; :meth:`override` turns it off when it
    is given a target, which every run then measures to."""
    reset_modes: tuple[str, ...] = ("drop",)
    """What an error reset does with the residual (``drop``, ``cser``; :mod:`harness.training.compress`)."""
    holdouts: tuple[int, ...] = (0,)
    """Training samples the PS keeps as its own validation set (0: none)."""
    regimes: tuple[tuple[tuple[str, tuple], ...], ...] = ()
    """Sub-grids, each a set of dimension overrides (``(("delays_ms", (10.0,)),)``): the plan's
    runs are the union of every regime's grid, the plan's own dimensions filling what a regime
    leaves (empty: the plan's own grid alone). One preset then holds a main grid and a few
    regimes beside it without their full product; a dimension given on the command line
    replaces the plan's own values, not a regime's."""
    plugins: tuple[str, ...] = ()   # transport plugin files (from the project folder) it uses
    blocks: int = 1
    """Into how many blocks the seeds are cut, in order: each block runs on a network of its
    own, one block after another, so the runs of one block share a testbed instance and an hour
    and those of different blocks do not. Reports then take a cell's interval over its blocks'
    medians, which covers what a fresh sweep would measure (:mod:`harness.reporting.stats`)."""

    def block_of(self, seed: int) -> int:
        """The block of ``seed`` (0 for every seed of an unblocked plan)."""
        per = -(-len(self.seeds) // self.blocks)
        return self.seeds.index(seed) // per if seed in self.seeds else 0

    def specs(self) -> list[RunSpec]:
        """Every run of the grid, in grid order (the sweep shuffles it).

        ``transports`` holds schemes: a slug, optionally with options (``ltp+filler=zero``).
        The plan's plugins are loaded first (and passed on to every process started later).
        """
        if self.plugins:
            registry.use_plugins([PROJECT / p for p in self.plugins])
        if self.regimes:
            runs = [s for r in self.regimes
                    for s in dataclasses.replace(self, regimes=(), **dict(r)).specs()]
            return list(dict.fromkeys(runs))
        dims = [(dim, field, getattr(self, dim) or (getattr(self.base, field),))
                for dim, field in GRID.items()]
        out = []
        for values in itertools.product(*(vals for _, _, vals in dims)):
            fields: dict[str, Any] = {}
            for (dim, field, _), value in zip(dims, values):
                if dim == "transports":
                    slug, options = parse_scheme(value)
                    fields.update(transport=slug,
                                  transport_options={**self.base.options(), **options})
                elif dim == "loss_pcts" and isinstance(value, str):
                    fields["loss_model"] = value   # a loss model; RunSpec derives loss_pct
                elif dim == "loss_pcts":
                    fields.update(loss_pct=value, loss_model="")
                elif dim == "models" and self.model_targets and (
                        self.base.target_accuracy == TARGET_ACCURACY.get(self.base.model)):
                    fields.update(model=value, target_accuracy=TARGET_ACCURACY.get(value))
                else:
                    fields[field] = value
            out.append(self.base.replace(**fields))
        # A dimension that does not apply to every run (error_reset without compression) makes
        # the same run twice: keep it once.
        return list(dict.fromkeys(out))

    def dimensions(self) -> dict[str, tuple]:
        """The grid's dimensions and their values."""
        return {name: getattr(self, name) for name in GRID}

    def override(self, **changes: Any) -> Plan:
        """A copy with grid dimensions (the keys of :data:`GRID`, and ``order_seed``) or base
        fields (``iterations``, ``model``, ...) replaced; ``None`` leaves a value as it is."""
        grid = {k: v for k, v in changes.items() if v is not None and k in _GRID_FIELDS}
        base = {k: v for k, v in changes.items() if v is not None and k not in _GRID_FIELDS}
        # A run parameter that is a grid dimension (n_workers=16) sets that dimension.
        for dim, field in GRID.items():
            if field in base and dim not in grid:
                grid[dim] = (base.pop(field),)
        unknown = sorted(set(base) - {f.name for f in dataclasses.fields(RunSpec)})
        if unknown:
            raise SpecError(f"there is no run parameter named {unknown[0]!r}.")
        for key in GRID:
            if key in grid:
                grid[key] = tuple(grid[key])
                if not grid[key]:
                    raise SpecError(f"{key} needs at least one value.")
                twice = sorted({v for v in grid[key] if grid[key].count(v) > 1}, key=str)
                if twice:
                    raise SpecError(f"{key} lists {twice[0]!r} more than once; each value of a "
                                    "dimension is one set of runs.")
        plan = dataclasses.replace(self, **grid)
        if base:
            plan = dataclasses.replace(plan, base=plan.base.replace(**base))
        if "target_accuracy" in base:   # a given target is every model's
            plan = dataclasses.replace(plan, model_targets=False)
        specs = plan.specs()  # validate every combination now, before anything starts
        # Two schemes that name the same effective options (ltp, ltp+threshold_min=0.8) would
        # run the same thing twice under two names.
        ids = [s.replace(transport_options=registry.create(s.transport, s.options()).options())
               .run_id for s in specs]
        if len(set(ids)) != len(ids):
            dup = next(s for s, i in zip(specs, ids) if ids.count(i) > 1)
            raise SpecError(f"two runs of this plan are the same run ({dup.scheme}, loss "
                            f"{dup.loss_pct:g} %); a scheme with its default options named twice?")
        return plan


_GRID_FIELDS = set(GRID) | {"order_seed"}
PROJECT = Path(__file__).resolve().parents[2]
TCP_VARIANTS = ("tcp-cubic", "tcp-reno", "tcp-bbr")
# The five schemes every evidence preset compares: the default TCP, the strongest TCP baseline
# (CUBIC with a 5 ms minimum RTO), LTP, its reliable ablation, and PLOT.
MAIN = ("tcp-cubic", "tcp-cubic-lowrto", "ltp", "ltp-reliable", "plot")
EVERYTHING = ("tcp-cubic", "tcp-reno", "tcp-bbr", "tcp-cubic-lowrto", "ltp", "ltp-reliable",
              "ltp-fixed", "plot", "ltp+filler=zero", "ltp+filler=previous")
# The regime presets ask whether tolerating loss beats reliable delivery: the three LTP-family
# schemes and the strongest TCP baseline. TCP CUBIC with its 200 ms RTO is left out there: at 5 %
# loss it runs into the training-time cap in every cell (the default sweep measures it).
REGIME = ("tcp-cubic-lowrto", "ltp", "ltp-reliable", "plot")
SEEDS = (0, 1, 2)
# The head-to-head (docs/field.md): the designs that run through the PS, and those of the ring.
FIELD_PS = ("tcp-cubic-lowrto", "ltp", "ltp-reliable", "plot", "mlt", "phase-bound")
FIELD_RING = ("optireduce", "ltp")
_INCAST = RunSpec(n_workers=8, queue_pkts=64, model="mlp", eval_every=10)

PRESETS: dict[str, Plan] = {
    # Does the whole testbed work? Under 2 minutes.
    "smoke": Plan(
        name="smoke", transports=TCP_VARIANTS, loss_pcts=(0.0, 1.0), bottleneck_mbps=(200.0,),
        seeds=(0,), base=_INCAST.replace(iterations=30, timeout_s=180.0)),
    # The README's main job: the main schemes across loss rates, three seeds, about 20 minutes.
    # Each run is 40 iterations or 30 s of training, whichever ends first: TCP CUBIC at 10 %
    # loss needs ~6 s an iteration, and its throughput is as well measured over 30 s.
    "default": Plan(
        name="default", transports=MAIN, loss_pcts=(0.0, 2.0, 5.0, 10.0),
        bottleneck_mbps=(200.0,), seeds=SEEDS,
        base=_INCAST.replace(iterations=40, max_train_s=30.0, timeout_s=600.0)),
    # The README's headline: the default sweep six times over, each time (a block) with three seeds
    # of its own on a testbed of its own, one block after another. Runs of one sweep share a testbed
    # instance and an hour, and a fresh sweep differs from them by more than their own spread
    # (results/default-check measured it): so the unit is the block, a cell's interval is taken over
    # its six blocks' medians (96.9 %, harness/reporting/stats.py), and a fresh default sweep is one
    # more block. About 95 minutes.
    "reference": Plan(
        name="reference", transports=MAIN, loss_pcts=(0.0, 2.0, 5.0, 10.0),
        bottleneck_mbps=(200.0,), seeds=tuple(range(18)), blocks=6,
        base=_INCAST.replace(iterations=40, max_train_s=30.0, timeout_s=600.0)),
    # Where tolerating loss pays: LTP and PLOT against LTP reliable (the same transport
    # repairing every packet) at 10 % loss and edge round-trip times, 100 Mbit/s, ten seeds,
    # 30 iterations or 60 s of training. About 50 minutes.
    "tolerance": Plan(
        name="tolerance", transports=("ltp", "ltp-reliable", "plot"), loss_pcts=(10.0,),
        bottleneck_mbps=(100.0,), delays_ms=(10.0, 25.0, 50.0), seeds=tuple(range(10)),
        base=_INCAST.replace(iterations=30, max_train_s=60.0, timeout_s=900.0)),
    # Time to accuracy and converged accuracy: to 1,000 iterations (the MLP converges near 0.86)
    # or 10 minutes of training, whichever ends first. Hours.
    "converge": Plan(
        name="converge", transports=MAIN, loss_pcts=(0.0, 5.0, 10.0),
        bottleneck_mbps=(200.0,), seeds=SEEDS,
        base=_INCAST.replace(iterations=1000, eval_every=20, max_train_s=600.0,
                             timeout_s=1800.0)),
    # Time to accuracy (the headline metric): each run stops once an evaluation reaches the
    # model's target (0.80 for the MLP, about 150-200 iterations) or after 150 s of training,
    # and is recorded as "not reached" at that cap. 0 and 10 % loss; about 30 minutes.
    "tta": Plan(
        name="tta", transports=MAIN, loss_pcts=(0.0, 10.0), bottleneck_mbps=(200.0,),
        seeds=SEEDS,
        base=_INCAST.replace(iterations=1000, eval_every=10, stop_at_target=True,
                             max_train_s=150.0, timeout_s=600.0)),
    # Regime: incast congestion without random loss, more workers and shallow queues.
    "incast": Plan(
        name="incast", transports=MAIN, loss_pcts=(0.0,), bottleneck_mbps=(200.0,), seeds=SEEDS,
        workers=(8, 16, 24, 32), queues=(8, 32),
        base=_INCAST.replace(iterations=30, max_train_s=30.0, timeout_s=900.0)),
    # Regime: edge round-trip times (10-50 ms one way) at 100 Mbit/s.
    "edge": Plan(
        name="edge", transports=REGIME, loss_pcts=(0.0, 2.0, 10.0), bottleneck_mbps=(100.0,),
        delays_ms=(10.0, 25.0, 50.0), seeds=SEEDS,
        base=_INCAST.replace(iterations=30, max_train_s=60.0, timeout_s=900.0)),
    # Regime: bursty loss: the same 5 % mean, uniform, in per-packet bursts of 4 (like netem's
    # gemodel) and in 2 ms bad periods (time-based).
    "bursty": Plan(
        name="bursty", transports=REGIME,
        loss_pcts=(5.0, "ge:loss=5,burst=4", "get:loss=5,burst_ms=2"),
        bottleneck_mbps=(200.0,), seeds=SEEDS,
        base=_INCAST.replace(iterations=30, max_train_s=30.0, timeout_s=900.0)),
    # Regime: background traffic through the bottleneck: bulk TCP flows and on/off UDP bursts.
    "cross": Plan(
        name="cross", transports=REGIME, loss_pcts=(0.0, 2.0), bottleneck_mbps=(200.0,),
        cross=("none", "tcp:2", "udp:2:rate=50,on=50ms,off=150ms"), seeds=SEEDS,
        base=_INCAST.replace(iterations=30, max_train_s=30.0, timeout_s=900.0)),
    # Training through failure and staleness (issue 13, docs/faults.md): each sync mode under
    # each fault, TCP against LTP, three seeds. About 40 minutes.
    "faults": Plan(
        name="faults", transports=("tcp-cubic", "ltp"), loss_pcts=(0.0,),
        bottleneck_mbps=(200.0,), seeds=SEEDS, syncs=("bsp", "ssp:2", "async"),
        faults=("none", "kill@20", "stall@20:2s", "link@20:2s", "straggler:3x"),
        base=_INCAST.replace(iterations=40, eval_every=5, timeout_s=300.0)),
    # Fewer bytes up (issue 14, docs/compression.md): LTP at 200 Mbit/s without loss, each run
    # 150 rounds or 60 s of training; none, top-1 % and scaled sign, with error feedback never
    # reset (0) or reset every round (1), one and four local steps. 30 runs, about 25 minutes.
    "compression": Plan(
        name="compression", transports=("ltp",), loss_pcts=(0.0,), bottleneck_mbps=(200.0,),
        seeds=SEEDS, compressions=("none", "topk:0.01", "sign"), local_steps=(1, 4),
        error_resets=(0, 1),
        base=_INCAST.replace(iterations=150, eval_every=10, max_train_s=60.0, timeout_s=600.0)),
    # CSER's error reset as published against today's drop (docs/compression.md): each run is
    # 60 s of training (its 1000 rounds only bound it), since a residual round is not a gradient
    # step: the runs compare by time to accuracy and by accuracy at the time budget.
    # Without compression the reset mode does not apply: 3 + 2 x 2 x 3 = 15 runs.
    "cser": Plan(
        name="cser", transports=("ltp",), loss_pcts=(0.0,), bottleneck_mbps=(200.0,),
        seeds=SEEDS, compressions=("none", "topk:0.01", "sign"), reset_modes=("drop", "cser"),
        error_resets=(4,),
        base=_INCAST.replace(iterations=1000, eval_every=10, max_train_s=60.0, timeout_s=600.0)),
    # The same where each worker synchronises on its own schedule: ssp:2 and async. 12 runs.
    "cser-async": Plan(
        name="cser-async", transports=("ltp",), loss_pcts=(0.0,), bottleneck_mbps=(200.0,),
        seeds=SEEDS, syncs=("ssp:2", "async"), compressions=("topk:0.01",),
        reset_modes=("drop", "cser"), error_resets=(4,),
        base=_INCAST.replace(iterations=1000, eval_every=10, max_train_s=60.0, timeout_s=600.0)),
    # Validation and error reset in one run (docs/byzantine.md, docs/compression.md): async
    # workers keeping CSER's local models push top-1 % updates, and the PS averages them or
    # judges each by Zeno++, with none or two sign-flipping attackers. 2 x 2 x 3 = 12 runs.
    "cser-validation": Plan(
        name="cser-validation", transports=("ltp",), loss_pcts=(0.0,), bottleneck_mbps=(200.0,),
        seeds=SEEDS, syncs=("async",), compressions=("topk:0.01",), reset_modes=("cser",),
        error_resets=(4,), byzantine=("0", "2:sign-flip"), aggregators=("mean", ZENOPP),
        base=_INCAST.replace(iterations=1000, eval_every=10, max_train_s=60.0, timeout_s=600.0)),
    # Untrusted workers (issue 14, docs/byzantine.md): none, or two attackers of eight flipping
    # their gradient, or estimating the honest mean and moving against it (alie, ipm), against
    # every aggregation rule, over a reliable transport, three seeds. The defender tolerates two
    # in every run, attacked or not (it cannot know; zeno++ needs no f). 4 x 6 x 3 = 72 runs.
    "byzantine": Plan(
        name="byzantine", transports=("tcp-cubic",), loss_pcts=(0.0,), bottleneck_mbps=(200.0,),
        seeds=SEEDS, byzantine=("0", "2:sign-flip", "2:alie", "2:ipm"), aggregators=AGGREGATORS,
        base=_INCAST.replace(iterations=100, eval_every=10, tolerate=2, timeout_s=600.0)),
    # The validator and loss tolerance: honest (with the defender assuming two attackers) and
    # two sign-flipping attackers, LTP and PLOT at 5 and 10 % loss, mean against score.
    "byzantine-loss": Plan(
        name="byzantine-loss", transports=("ltp", "plot"), loss_pcts=(5.0, 10.0),
        bottleneck_mbps=(200.0,), seeds=SEEDS, byzantine=("0", "2:sign-flip"),
        aggregators=("mean", "score"),
        base=_INCAST.replace(iterations=100, eval_every=10, tolerate=2, timeout_s=600.0)),
    # Validation without a round (docs/byzantine.md, Zeno++): each update judged as it arrives,
    # stale or not, under ssp:2 and async, over LTP without loss and at 5 % loss, where honest
    # updates arrive with holes filled: how many honest updates does the validator reject, and
    # does it stop two sign-flipping attackers? Against plain mean. 2 x 2 x 2 x 2 x 3 = 48 runs.
    "validation-async": Plan(
        name="validation-async", transports=("ltp",), loss_pcts=(0.0, 5.0),
        bottleneck_mbps=(200.0,), seeds=SEEDS, syncs=("ssp:2", "async"),
        byzantine=("0", "2:sign-flip"), aggregators=("mean", ZENOPP),
        base=_INCAST.replace(iterations=100, eval_every=10, timeout_s=600.0)),
    # The PS's own validation set (docs/byzantine.md, local privacy): score and zeno++ with the
    # validator sampling the whole training set (holdout 0) or 6,000 samples no worker trains
    # on, honest and two sign-flipping attackers, over TCP CUBIC without loss, bsp, tolerating
    # two. 2 x 2 x 2 x 3 = 24 runs.
    "privacy": Plan(
        name="privacy", transports=("tcp-cubic",), loss_pcts=(0.0,), bottleneck_mbps=(200.0,),
        seeds=SEEDS, byzantine=("0", "2:sign-flip"), aggregators=("score", ZENOPP),
        holdouts=(0, 6000),
        base=_INCAST.replace(iterations=100, eval_every=10, tolerate=2, timeout_s=600.0)),
    # Collectives (issue 25, docs/collectives.md): the PS, a Hoplite-style tree and a ring
    # all-reduce over the four transports that have an end for collectives, 0, 5 and 10 % loss,
    # every link at 200 Mbit/s (the workers' too: a tree and a ring use them). 40 iterations or
    # 30 s of training, as the default sweep.
    "patterns": Plan(
        name="patterns", transports=("tcp-cubic", "tcp-cubic-lowrto", "ltp", "ltp-reliable"),
        loss_pcts=(0.0, 5.0, 10.0), bottleneck_mbps=(200.0,), seeds=SEEDS,
        patterns=("ps", "tree", "ring"),
        base=_INCAST.replace(iterations=40, max_train_s=30.0, timeout_s=600.0)),
    # The same at 16 and 32 workers, where the incast grows and a tree deepens.
    "patterns-scale": Plan(
        name="patterns-scale", transports=("tcp-cubic-lowrto", "ltp", "ltp-reliable"),
        loss_pcts=(0.0, 10.0), bottleneck_mbps=(200.0,), seeds=SEEDS, workers=(16, 32),
        patterns=("ps", "tree", "ring"),
        base=_INCAST.replace(iterations=30, max_train_s=30.0, timeout_s=900.0)),
    # Tree and PS through a killed and a stalled worker (docs/collectives.md, "Failures").
    "patterns-faults": Plan(
        name="patterns-faults", transports=("tcp-cubic-lowrto", "ltp"), loss_pcts=(0.0,),
        bottleneck_mbps=(200.0,), seeds=SEEDS, patterns=("ps", "tree"),
        faults=("kill@15", "stall@15:2s"),
        base=_INCAST.replace(iterations=40, max_train_s=30.0, timeout_s=600.0)),
    # Paper figures: every scheme, both link speeds, loss up to 20 %, three seeds. Hours.
    "paper": Plan(
        name="paper", transports=EVERYTHING, loss_pcts=(0.0, 1.0, 2.0, 5.0, 10.0, 20.0),
        bottleneck_mbps=(100.0, 200.0), seeds=SEEDS,
        base=_INCAST.replace(iterations=300, eval_every=25, timeout_s=3600.0)),
    # PLOT's bounds that follow the network (docs/plot-protocol.md, the adaptive rule): the
    # frozen snr rule, the adaptive one and LTP, without loss and at 5 %, on the two models with
    # many layers (LeNet-5, the six-layer MLP), 100 iterations or 60 s of training: short of
    # either model's target, so it compares iteration times, per-layer closes and accuracy at
    # the cap. 3 x 2 x 2 x 3 = 36 runs, about half an hour (rough estimate).
    "plot-adaptive": Plan(
        name="plot-adaptive", transports=("plot", "plot+bound_rule=adaptive", "ltp"),
        loss_pcts=(0.0, 5.0), bottleneck_mbps=(200.0,), seeds=SEEDS, models=("lenet5", "mlp6"),
        base=_INCAST.replace(iterations=100, eval_every=10, max_train_s=60.0, timeout_s=900.0)),
    # The field head to head (issue 27, docs/field.md): LTP, PLOT, the MLT-style and
    # phase-aware designs, LTP reliable and the strongest TCP through the PS, and OptiReduce
    # with LTP as its reference in a ring all-reduce, on identical replayed loss (every seed
    # drops the same packet positions for every scheme): the main incast without loss, at 5 %
    # uniform and at 5 % in bursts of 4 packets; an edge round trip (10 ms one way, 100 Mbit/s,
    # 2 %); a shallow queue (8 packets, no loss). Six seeds (95 % intervals), each run 300
    # iterations or 90 s of training, and ended at 300 s: TCP in the bursty cell may sit in
    # timeout for minutes (per-packet bursts, docs/architecture.md), and such a run is a
    # measured "timeout". 5 cells x 8 designs x 6 seeds = 240 runs; hours.
    "field": Plan(
        name="field", transports=FIELD_PS, loss_pcts=(0.0, "replay:5", "ge:5:4"),
        bottleneck_mbps=(200.0,), seeds=tuple(range(6)),
        regimes=tuple((*pattern, *cell) for pattern in
                      ((), (("transports", FIELD_RING), ("patterns", ("ring",))))
                      for cell in ((), (("loss_pcts", ("replay:2",)), ("delays_ms", (10.0,)),
                                        ("bottleneck_mbps", (100.0,))),
                                   (("loss_pcts", (0.0,)), ("queues", (8,))))),
        base=_INCAST.replace(iterations=300, eval_every=10, max_train_s=90.0,
                             timeout_s=300.0)),
    # Teaching labs (docs/labs/).
    "lab1": Plan(
        name="lab1", transports=("tcp-cubic", "tcp-cubic-lowrto", "tcp-bbr"),
        loss_pcts=(0.0, 2.0), bottleneck_mbps=(100.0,), seeds=(0,), queues=(16,),
        base=_INCAST.replace(queue_pkts=16, iterations=30, timeout_s=600.0)),
    "lab2": Plan(
        name="lab2", transports=("ltp", "ltp-reliable", "ltp+filler=zero", "ltp+filler=previous",
                                 "tcp-cubic"),
        loss_pcts=(0.0, 5.0, 10.0), bottleneck_mbps=(100.0,), seeds=(0,),
        base=_INCAST.replace(iterations=60, timeout_s=600.0)),
    "lab3": Plan(
        name="lab3", transports=("udp-blast", "udp-blast+rate_mbps=11", "ltp"),
        loss_pcts=(0.0, 5.0), bottleneck_mbps=(100.0,), seeds=(0,),
        plugins=("docs/labs/instructor/udp_blast.py",),
        base=_INCAST.replace(iterations=30, timeout_s=600.0)),
    "lab4": Plan(
        name="lab4", transports=("tcp-cubic", "ltp"), loss_pcts=(0.0,), bottleneck_mbps=(100.0,),
        seeds=(0,), workers=(4,), faults=("none", "kill@15", "link@15:2s"),
        base=_INCAST.replace(n_workers=4, iterations=40, eval_every=5, timeout_s=300.0)),
    "lab5": Plan(
        name="lab5", transports=("tcp-cubic",), loss_pcts=(0.0,), bottleneck_mbps=(100.0,),
        seeds=(0,), byzantine=("0", "2:sign-flip"), aggregators=("mean", "score", "median"),
        base=_INCAST.replace(iterations=60, eval_every=10, tolerate=2, timeout_s=300.0)),
    "lab7": Plan(
        name="lab7", transports=("tcp-cubic", "ltp"), loss_pcts=(0.0,), bottleneck_mbps=(200.0,),
        seeds=(0,), patterns=("ps", "tree", "ring"),
        base=_INCAST.replace(iterations=30, timeout_s=600.0)),
    # Lab 8: the designs through the PS ranked on one recorded trace (docs/labs/traces/lab8:
    # 60 iterations of ltp-reliable under get:5:2, every host's drops by packet position). TCP
    # is left out: replayed by position, a burst holds a sender in timeout for as many of its
    # own packets as it spans, minutes of exponential backoff (docs/architecture.md, Loss).
    "lab8": Plan(
        name="lab8", transports=FIELD_PS[1:], loss_pcts=("trace:docs/labs/traces/lab8",),
        bottleneck_mbps=(200.0,), seeds=(0,),
        base=_INCAST.replace(iterations=60, eval_every=10, timeout_s=600.0)),
    # Lab 9: one lossy ltp run to read on the wire (run with --capture ps1): four workers keep
    # the capture small, 5 % loss makes early closes and retransmissions to find.
    "lab9": Plan(
        name="lab9", transports=("ltp",), loss_pcts=(5.0,), bottleneck_mbps=(100.0,),
        seeds=(0,), workers=(4,),
        base=_INCAST.replace(n_workers=4, iterations=20, eval_every=10, timeout_s=300.0)),
}
# PLOT's frozen snr rule against the adaptive one in the edge regime's grid: its one-way delays
# (10, 25, 50 ms; issue 10's stall was at 25 ms, docs/ltp-protocol.md §12), loss and rate.
# 2 x 3 x 3 x 3 = 54 runs.
# The edge regime's round trips, at its middle loss only: 18 runs of up to a minute.
PRESETS["plot-edge"] = dataclasses.replace(
    PRESETS["edge"], name="plot-edge", transports=("plot", "plot+bound_rule=adaptive"),
    loss_pcts=(2.0,))
DEFAULT_PRESET = "default"


def get(name: str) -> Plan:
    """The preset ``name``, or :class:`UnknownPreset` listing the known ones."""
    try:
        return PRESETS[name]
    except KeyError:
        from harness.p2p.spec import PRESETS as PEER_PRESETS

        raise UnknownPreset(f"unknown preset {name!r}; choose one of: "
                            f"{', '.join([*PRESETS, *PEER_PRESETS])}.") from None
