"""The torch side of Byzantine runs: the PS's validation and aggregation, and the attackers'
estimate.

Run inside the host processes (:mod:`harness.hosts.node`). :func:`make_combine` gives the PS its
``combine(deliveries)``: the run's rule (:mod:`harness.training.aggregators`) over the round's
updates as the transport delivered them (holes filled by its filler), tolerating ``f`` =
``RunSpec.tolerated`` or, in a round with fewer updates than that allows (a missing worker), the
most the rule can (recorded as ``agg_f``). :class:`Judge` is its ``judge(deliveries,
version)`` for ``zeno++``, which scores every update on its own and so serves every sync mode.

Both validating rules draw their batches through one :class:`Validation`: ``score_batch``
samples at a time, by a generator seeded with the run's seed, from the training set or, with
``RunSpec.holdout`` = ``N`` > 0, only from the ``N`` samples the PS holds out
(:func:`harness.training.datasets.split`), which no worker trains on. ``score`` draws a batch each
round and computes losses on the PS's own copy of the model; ``zeno++`` draws one per parameter
version (the PS's count of applied updates) and computes the validation gradient there, once:
updates arriving while the parameters stay the same (rejected ones change nothing) are judged
against the same gradient. :func:`honest_estimate` is what ``alie`` and ``ipm`` attackers compute
(:mod:`harness.training.byzantine`); being workers, they too draw only from what was not held out.
"""

from __future__ import annotations

import dataclasses

from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

from harness.running.spec import RunSpec
from harness.training import aggregators, datasets, models
from harness.training.aggregators import AggregatorError, Outcome
from transports.base import Delivery, ServerEnd


def feasible_f(name: str, n: int, f: int) -> int:
    """The largest ``f' <= f`` that rule ``name`` can tolerate with ``n`` updates."""
    for g in range(f, -1, -1):
        try:
            aggregators.check_aggregator(name, n, g)
            return g
        except AggregatorError:
            continue
    return -1


class Validation:
    """The PS's validation batches and, for ``zeno++``, its validation gradient per version.

    ``params`` is the PS's live flat parameter vector, ``model`` the PS's own copy of the model
    (its parameters are overwritten here; the trainer loads them again before evaluating)."""

    def __init__(self, spec: RunSpec, model: torch.nn.Module, params: torch.Tensor) -> None:
        self.spec, self.model, self.params = spec, model, params
        self.x, self.y = datasets.load(spec.dataset, "train")
        # Seeded as before holdouts existed, so a run without one draws the same batches.
        self.rng = np.random.default_rng([spec.seed, 0x5C0E])
        self.pool = (datasets.split(len(self.y), spec.seed, spec.holdout)[1] if spec.holdout
                     else None)
        self.version: int | None = None
        self.v: np.ndarray | None = None
        self.computed = 0   # validation gradients computed so far

    def batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next ``score_batch`` validation samples (drawn without replacement)."""
        size = self.spec.score_batch
        if self.pool is None:
            idx = self.rng.choice(len(self.y), size, replace=False)
        else:
            idx = self.pool[self.rng.choice(len(self.pool), size, replace=False)]
        idx = torch.from_numpy(idx)
        return self.x[idx], self.y[idx]

    def gradient(self, version: int) -> np.ndarray:
        """The validation gradient at the current parameters: computed on a fresh batch when
        ``version`` differs from the last call's, else the cached one."""
        if version != self.version or self.v is None:
            xb, yb = self.batch()
            models.load_flat(self.model, self.params)
            self.model.zero_grad(set_to_none=False)
            F.cross_entropy(self.model(xb), yb).backward()
            self.v = models.flat_grads(self.model).numpy().copy()
            self.version = version
            self.computed += 1
        return self.v


def make_combine(spec: RunSpec, model: torch.nn.Module, params: torch.Tensor,
                 end: ServerEnd) -> Callable[[list[Delivery]], tuple[Outcome, int]]:
    """The PS's ``combine`` for ``spec.aggregator`` (``params``: the PS's live flat parameters)."""
    name = spec.aggregator
    validation = Validation(spec, model, params) if name == "score" else None

    def combine(deliveries: list[Delivery]) -> tuple[Outcome, int]:
        n = len(deliveries)
        if name == "mean":
            out = Outcome(end.average(deliveries), [True] * n, ["averaged"] * n, [None] * n,
                          [1.0] * n)
            return out, 0
        updates = np.stack([d.values for d in deliveries])
        f = feasible_f(name, n, spec.tolerated)
        if f < 0:   # e.g. krum with two updates left: nothing to choose by; average them
            out = aggregators.mean(updates)
            out.reasons = [f"averaged: {name} cannot run on {n} updates"] * n
            return out, 0
        loss = None
        if validation is not None:
            xb, yb = validation.batch()

            def loss(u: np.ndarray | None) -> float:
                step = params if u is None else params - spec.lr * torch.from_numpy(u)
                models.load_flat(model, step)
                with torch.no_grad():
                    return float(F.cross_entropy(model(xb), yb))
        out = aggregators.aggregate(name, updates, f, loss, spec.lr, spec.score_penalty,
                                    spec.score_threshold)
        return out, f

    return combine


class Judge:
    """The PS's ``judge`` for ``zeno++``: ``judge(deliveries, version)`` scores each update
    against the validation gradient of parameter version ``version`` (the PS's live parameters)
    and returns the verdicts, the accepted updates averaged as the transport averages (``end``);
    the vector is zeros when none is accepted (the PS then takes no step)."""

    def __init__(self, spec: RunSpec, model: torch.nn.Module, params: torch.Tensor,
                 end: ServerEnd) -> None:
        self.spec, self.end = spec, end
        self.validation = Validation(spec, model, params)

    def __call__(self, deliveries: list[Delivery], version: int) -> Outcome:
        spec = self.spec
        v = self.validation.gradient(version)
        updates = np.stack([d.values for d in deliveries])
        out = aggregators.zenopp(updates, v, spec.lr, spec.score_penalty, spec.score_threshold)
        # Each accepted update, rescaled to the validation gradient's size (the paper's step).
        accepted = [dataclasses.replace(d, values=(d.values * np.float32(c)).astype(np.float32))
                    for d, k, c in zip(deliveries, out.kept, out.used_frac) if k]
        if accepted:
            out.vector = self.end.average(accepted)
        out.used_frac = [1.0 if k else 0.0 for k in out.kept]
        return out


def honest_estimate(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, spec: RunSpec,
                    msg: int, count: int) -> np.ndarray:
    """``count`` gradients at the model's current parameters, each on a batch drawn from the
    training set the workers share (all of it without a holdout) with a generator every attacker
    seeds alike (run seed, message id), so colluding attackers agree on the estimate. One row per
    gradient."""
    rng = np.random.default_rng([spec.seed, msg, 0xB42])
    pool = datasets.split(len(y), spec.seed, spec.holdout)[0] if spec.holdout else None
    rows = []
    for _ in range(count):
        if pool is None:
            batch = torch.from_numpy(rng.choice(len(y), spec.batch_size, replace=False))
        else:
            batch = torch.from_numpy(pool[rng.choice(len(pool), spec.batch_size, replace=False)])
        model.zero_grad(set_to_none=False)
        F.cross_entropy(model(x[batch]), y[batch]).backward()
        rows.append(models.flat_grads(model).numpy().copy())
    return np.stack(rows)
