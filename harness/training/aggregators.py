"""Aggregation rules at the parameter server (``--aggregator``): how a round's updates become one.

Each rule takes the round's updates as rows of one matrix (one row per worker that delivered, in
the order of the round's ``ranks``; a loss-tolerant transport's holes already filled by its
filler, zeros under ``masked-mean``) and ``f``, the number of Byzantine updates it is asked to
tolerate (``RunSpec.tolerate``; by default the run's attacker count), and returns an
:class:`Outcome`: the vector to step with, and per update whether it was kept, why, its score
and the fraction of coordinates it contributed to. The PS times each call (``agg_s``).

- ``mean``: every update, averaged (the PS's rule before this module; under ``masked-mean`` the
  PS keeps averaging each coordinate over the workers that delivered it).
- ``score``: score-based validation (Zeno, Xie et al. 2019). Each update ``u`` is scored on a
  small validation batch the PS draws from the training set each round:
  ``score(u) = L(x) - L(x - lr u) - rho |u|^2``, the loss it removes minus a penalty on its size.
  The ``n - f`` best are kept (and, with ``score_threshold`` set, only those scoring at least
  that) and averaged; an update not kept says whether its rank or the threshold dropped it.
  ``L`` costs ``n + 1`` forward passes of ``score_batch`` samples (defaults: 64 and
  ``rho = 0.0005``, Zeno's penalty).
- ``zeno++``: each update judged on its own (Zeno++, Xie, Koyejo and Gupta 2020), against a
  validation gradient ``v`` the PS computes at its current parameters on ``score_batch``
  samples: ``score(u) = lr <v, u> - rho lr^2 |u|^2``, a first-order estimate of the validation
  loss a step removes, less a penalty on its size; accepted when ``score >= -threshold``
  (``score_threshold``; default 0: the step must not be expected to raise the loss). It needs
  no ``f`` and ranks nothing, so it also runs under ``ssp`` and ``async``, one update at a time
  (:mod:`harness.hosts.ps`); under ``bsp`` the accepted updates of a round are averaged.
- ``median``: the coordinate-wise median.
- ``trimmed-mean``: per coordinate, the ``f`` largest and ``f`` smallest values dropped, the
  rest averaged (needs ``n > 2f``).
- ``krum``: the one update whose ``n - f - 2`` nearest neighbours are closest (sum of squared
  distances; Blanchard et al. 2017; needs ``n > 2f + 2``).

"Kept" for the coordinate-wise rules (``median``, ``trimmed-mean``): an update enters each
coordinate or not, so it counts as kept when it entered at least half its fair share of
coordinates (the share it would have if every update entered equally often: ``m / n`` with ``m``
values used per coordinate), and rejected otherwise; ``used_frac`` gives the measured fraction.

Pure numpy (``score`` gets its loss as a function, ``zeno++`` its validation gradient), so the
unit tests check every rule exactly.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
from transports.base import UserError

ZENOPP = "zeno++"
AGGREGATORS = ("mean", "score", "median", "trimmed-mean", "krum", ZENOPP)
VALIDATING = ("score", ZENOPP)   # the rules that need a validation set at the PS
ASYNC_OK = ("mean", ZENOPP)      # the rules that judge one update at a time (ssp, async)
SCORE_BATCH = 64         # validation samples the PS scores each round's updates on
SCORE_PENALTY = 0.0005   # rho: the score's penalty per squared unit of an update's size
ZENOPP_THRESHOLD = 0.0   # zeno++ accepts a score of at least minus this unless told otherwise


class AggregatorError(UserError, ValueError):
    """An aggregation rule is unknown, or cannot tolerate ``f`` of ``n`` updates."""


@dataclasses.dataclass
class Outcome:
    """What a rule made of one round: the vector and, per update (row), what became of it."""

    vector: np.ndarray
    kept: list[bool]
    reasons: list[str]
    scores: list[float | None]
    used_frac: list[float]


def check_aggregator(name: str, n: int, f: int) -> None:
    """Raise :class:`AggregatorError` with a sentence unless ``name`` can run on ``n`` updates
    tolerating ``f``."""
    if name not in AGGREGATORS:
        raise AggregatorError(f"unknown aggregator {name!r}; choose one of "
                              f"{', '.join(AGGREGATORS)}.")
    if f < 0:
        raise AggregatorError(f"the number of updates to tolerate must be at least 0, not {f}.")
    if name == "krum" and n <= 2 * f + 2:
        raise AggregatorError(f"krum tolerating {f} needs more than {2 * f + 2} workers "
                              f"(n > 2f + 2), and the run has {n}.")
    if name == "trimmed-mean" and n <= 2 * f:
        raise AggregatorError(f"trimmed-mean tolerating {f} needs more than {2 * f} workers "
                              f"(n > 2f), and the run has {n}.")
    if name == "score" and n - f < 1:
        raise AggregatorError(f"score keeps n - f updates, so tolerating {f} needs more than "
                              f"{f} workers, and the run has {n}.")


def mean(updates: np.ndarray) -> Outcome:
    """Every update averaged."""
    n = len(updates)
    return Outcome(updates.mean(axis=0, dtype=np.float64).astype(np.float32), [True] * n,
                   ["averaged"] * n, [None] * n, [1.0] * n)


def _by_coordinate(updates: np.ndarray, lo: int, hi: int, what: str) -> Outcome:
    """Average, per coordinate, the values of sorted positions ``lo`` .. ``hi - 1``."""
    n, d = updates.shape
    order = np.argsort(updates, axis=0, kind="stable")
    chosen = np.take_along_axis(updates, order[lo:hi], axis=0)
    vector = chosen.mean(axis=0, dtype=np.float64).astype(np.float32)
    used = np.bincount(order[lo:hi].ravel(), minlength=n) / d
    fair = (hi - lo) / n
    kept = [bool(u >= fair / 2) for u in used]
    reasons = [f"{what} in {u:.0%} of coordinates" + ("" if k else f" (under half its fair "
                                                                  f"share, {fair:.0%})")
               for u, k in zip(used, kept)]
    return Outcome(vector, kept, reasons, [None] * n, [float(u) for u in used])


def median(updates: np.ndarray) -> Outcome:
    """The coordinate-wise median (mean of the two middle values when ``n`` is even)."""
    n = len(updates)
    lo = (n - 1) // 2
    return _by_coordinate(updates, lo, n - lo, "the median")


def trimmed_mean(updates: np.ndarray, f: int) -> Outcome:
    """Per coordinate, the ``f`` largest and ``f`` smallest values dropped, the rest averaged."""
    n = len(updates)
    check_aggregator("trimmed-mean", n, f)
    return _by_coordinate(updates, f, n - f, "kept")


def krum(updates: np.ndarray, f: int) -> Outcome:
    """The update with the smallest sum of squared distances to its ``n - f - 2`` nearest."""
    n = len(updates)
    check_aggregator("krum", n, f)
    u = updates.astype(np.float64)
    sq = (u * u).sum(axis=1)
    dist = np.maximum(sq[:, None] + sq[None, :] - 2 * u @ u.T, 0.0)
    np.fill_diagonal(dist, np.inf)
    scores = np.sort(dist, axis=1)[:, : n - f - 2].sum(axis=1)
    best = int(np.argmin(scores))
    kept = [i == best for i in range(n)]
    reasons = ["lowest krum score" if k else f"krum score {s:.4g} above the lowest "
               f"{scores[best]:.4g}" for k, s in zip(kept, scores)]
    return Outcome(updates[best].astype(np.float32).copy(), kept, reasons,
                   [float(s) for s in scores], [1.0 if k else 0.0 for k in kept])


def score(updates: np.ndarray, f: int, loss: Callable[[np.ndarray | None], float], lr: float,
          penalty: float = SCORE_PENALTY, threshold: float | None = None) -> Outcome:
    """Score-based validation: keep the ``n - f`` best-scoring updates (at least ``threshold``).

    ``loss(u)`` is the validation loss after a step ``-lr u`` from the current parameters,
    ``loss(None)`` the loss before it; ``score = loss(None) - loss(u) - penalty |u|^2``. When no
    update is kept the vector is zeros (the round takes no step).
    """
    n = len(updates)
    check_aggregator("score", n, f)
    base = loss(None)
    norms = (updates.astype(np.float64) ** 2).sum(axis=1)
    scores = np.array([base - loss(u) - penalty * norms[i] for i, u in enumerate(updates)])
    scores = np.where(np.isfinite(scores), scores, -np.inf)
    ranked = sorted(range(n), key=lambda i: (-scores[i], i))
    top = set(ranked[: n - f])
    kept, reasons = [], []
    for i in range(n):
        if i not in top:
            kept.append(False)
            reasons.append(f"score {scores[i]:.4g} not among the {n - f} best")
        elif threshold is not None and scores[i] < threshold:
            kept.append(False)
            reasons.append(f"score {scores[i]:.4g} below the threshold {threshold:g}")
        else:
            kept.append(True)
            reasons.append(f"score {scores[i]:.4g} among the {n - f} best")
    rows = [i for i in range(n) if kept[i]]
    vector = (updates[rows].mean(axis=0, dtype=np.float64).astype(np.float32) if rows
              else np.zeros(updates.shape[1], dtype=np.float32))
    return Outcome(vector, kept, reasons, [float(s) for s in scores],
                   [1.0 if k else 0.0 for k in kept])


def zenopp(updates: np.ndarray, v: np.ndarray, lr: float, penalty: float = SCORE_PENALTY,
           threshold: float | None = None) -> Outcome:
    """Zeno++'s test, each update on its own. As in the paper, an update ``u`` is first rescaled
    to the validation gradient's size, ``u' = u |v| / |u|``; then
    ``score = lr <v, u'> - penalty lr^2 |u'|^2``, accepted when at least ``-threshold`` (None:
    :data:`ZENOPP_THRESHOLD`). The vector is the mean of the accepted updates, rescaled; zeros
    when none is (the caller then takes no step). ``used_frac`` holds each accepted update's
    scale ``|v| / |u|`` (0 for a rejected one), which the caller applies to what it averages.

    ``v`` is the validation gradient at the parameters the step would start from.
    """
    limit = 0.0 - (ZENOPP_THRESHOLD if threshold is None else threshold)   # never -0
    u = updates.astype(np.float64)
    v64 = v.astype(np.float64)
    sizes = np.sqrt((u * u).sum(axis=1))
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(sizes > 0, np.linalg.norm(v64) / sizes, 0.0)
    scaled = u * scale[:, None]
    scores = lr * (scaled @ v64) - penalty * lr * lr * (scaled * scaled).sum(axis=1)
    scores = np.where(np.isfinite(scores) & (sizes > 0), scores, -np.inf)
    kept = [bool(s >= limit) for s in scores]
    reasons = [f"score {s:.4g} " + ("at least " if k else "below ") + f"{limit:g}"
               for s, k in zip(scores, kept)]
    rows = [i for i, k in enumerate(kept) if k]
    vector = (scaled[rows].mean(axis=0).astype(np.float32) if rows
              else np.zeros(updates.shape[1], dtype=np.float32))
    return Outcome(vector, kept, reasons, [float(s) for s in scores],
                   [float(c) if k else 0.0 for c, k in zip(scale, kept)])


def aggregate(name: str, updates: np.ndarray, f: int, loss=None, lr: float = 0.0,
              penalty: float = SCORE_PENALTY, threshold: float | None = None,
              v: np.ndarray | None = None) -> Outcome:
    """Apply the rule ``name`` (one of :data:`AGGREGATORS`) to ``updates`` (one row each);
    ``loss`` is ``score``'s, ``v`` the validation gradient ``zeno++`` needs."""
    check_aggregator(name, len(updates), f)
    if name == ZENOPP:
        return zenopp(updates, v, lr, penalty, threshold)
    if name == "mean":
        return mean(updates)
    if name == "median":
        return median(updates)
    if name == "trimmed-mean":
        return trimmed_mean(updates, f)
    if name == "krum":
        return krum(updates, f)
    return score(updates, f, loss, lr, penalty, threshold)
