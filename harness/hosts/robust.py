"""The torch side of Byzantine runs: the PS's aggregation of a round, and the attackers' estimate.

Run inside the host processes (:mod:`harness.hosts.node`). :func:`make_combine` gives the PS its
``combine(deliveries)``: the run's rule (:mod:`harness.training.aggregators`) over the round's
updates as the transport delivered them (holes filled by its filler), tolerating ``f`` =
``RunSpec.tolerated`` or, in a round with fewer updates than that allows (a missing worker), the
most the rule can (recorded as ``agg_f``). For ``score`` it draws a fresh validation batch of
``score_batch`` samples from the training set each round (seeded by the run's seed) and computes
the losses on the PS's own copy of the model. :func:`honest_estimate` is what ``alie`` and ``ipm``
attackers compute (:mod:`harness.training.byzantine`).
"""

from __future__ import annotations

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


def make_combine(spec: RunSpec, model: torch.nn.Module, params: torch.Tensor,
                 end: ServerEnd) -> Callable[[list[Delivery]], tuple[Outcome, int]]:
    """The PS's ``combine`` for ``spec.aggregator`` (``params``: the PS's live flat parameters)."""
    name = spec.aggregator
    rng = np.random.default_rng([spec.seed, 0x5C0E])
    x_train = y_train = None
    if name == "score":
        x_train, y_train = datasets.load(spec.dataset, "train")

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
        if name == "score":
            idx = torch.from_numpy(rng.choice(len(y_train), spec.score_batch, replace=False))
            xb, yb = x_train[idx], y_train[idx]

            def loss(u: np.ndarray | None) -> float:
                step = params if u is None else params - spec.lr * torch.from_numpy(u)
                models.load_flat(model, step)
                with torch.no_grad():
                    return float(F.cross_entropy(model(xb), yb))
        out = aggregators.aggregate(name, updates, f, loss, spec.lr, spec.score_penalty,
                                    spec.score_threshold)
        return out, f

    return combine


def honest_estimate(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, spec: RunSpec,
                    msg: int, count: int) -> np.ndarray:
    """``count`` gradients at the model's current parameters, each on a batch drawn from the
    whole training set with a generator every attacker seeds alike (run seed, message id), so
    colluding attackers agree on the estimate. One row per gradient."""
    rng = np.random.default_rng([spec.seed, msg, 0xB42])
    rows = []
    for _ in range(count):
        batch = torch.from_numpy(rng.choice(len(y), spec.batch_size, replace=False))
        model.zero_grad(set_to_none=False)
        F.cross_entropy(model(x[batch]), y[batch]).backward()
        rows.append(models.flat_grads(model).numpy().copy())
    return np.stack(rows)
