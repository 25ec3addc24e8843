"""Byzantine workers: who attacks, how, and what their gradient becomes (``--byzantine``).

Text form, as a sweep takes it: ``0`` (nobody attacks) or ``COUNT:BEHAVIOUR[:PARAM]``, e.g.
``2:sign-flip``, ``2:scaled:10``, ``1:alie``. The attackers are the **highest ranks**
(``2:`` of 8 workers: ranks 6 and 7, hosts ``w7`` and ``w8``), so a fault's default target (the
last worker) is an attacker too and the honest workers keep ranks 0 .. n-b-1. The behaviour runs
inside the worker process, on the gradient it really computed, and its result travels through
the run's transport like any honest gradient.

========================  =============================================  ===================
behaviour                 what the attacker pushes instead of ``g``       ``PARAM`` (default)
========================  =============================================  ===================
``sign-flip``             ``-F g``                                        ``F`` (4, as Zeno)
``scaled``                ``F g``                                         ``F`` (10)
``gaussian``              ``g + N(0, S^2)`` per coordinate                ``S`` (1.0)
``random``                ``N(0, S^2)`` per coordinate, ``g`` ignored     ``S`` (1.0)
``alie``                  ``mu - Z sigma`` ("a little is enough")         ``Z`` (Baruch et al.)
``ipm``                   ``-E mu`` (inner-product manipulation)          ``E`` (0.5)
========================  =============================================  ===================

``alie`` and ``ipm`` track the honest mean and move against it. The attackers cannot see the
honest workers' gradients (nothing in the testbed carries them), so they estimate them: they
collude, and each draws the same ``n - b`` batches of ``batch_size`` from the whole training set
(seeded by the run's seed and the message id) and computes their gradients at the parameters it
received: ``mu`` is the coordinate-wise mean of those, ``sigma`` their standard deviation. Every
attacker therefore pushes the same vector, an estimate of what the honest mean and spread are
this round (the papers' omniscient attacker uses the true ones). ``Z``'s default is Baruch et
al.'s: ``s = floor(n/2 + 1) - b`` workers must be won over, ``Z = Phi^-1((n - s) / n)``.

Light on purpose (numpy only): the spec and the command line parse with it, the worker corrupts
with it (:func:`corrupt`), and the unit tests check each behaviour exactly.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable
from statistics import NormalDist

import numpy as np

from transports.base import UserError

# behaviour -> (parameter's meaning, default); the one table the parser, docs and errors share.
BEHAVIOURS: dict[str, tuple[str, float | None]] = {
    "sign-flip": ("factor F: pushes -F g", 4.0),
    "scaled": ("factor F: pushes F g", 10.0),
    "gaussian": ("standard deviation S of the noise added to g", 1.0),
    "random": ("standard deviation S of the random vector", 1.0),
    "alie": ("Z: pushes mu - Z sigma (default from n and b)", None),
    "ipm": ("E: pushes -E mu", 0.5),
}
ESTIMATING = ("alie", "ipm")   # behaviours that estimate the honest mean first


class ByzantineError(UserError, ValueError):
    """A ``--byzantine`` text names no attack, or one that cannot happen in the run."""


@dataclasses.dataclass(frozen=True)
class Attack:
    """``count`` attackers (the highest ranks), each behaving as ``behaviour`` with ``param``."""

    count: int = 0
    behaviour: str = ""
    param: float | None = None

    def text(self) -> str:
        """The canonical text (what :func:`parse_byzantine` reads back)."""
        if not self.count:
            return "0"
        default = BEHAVIOURS[self.behaviour][1]
        tail = "" if self.param is None or self.param == default else f":{self.param:g}"
        return f"{self.count}:{self.behaviour}{tail}"

    def ranks(self, n_workers: int) -> list[int]:
        """The attackers' ranks: the highest ``count`` of ``n_workers``."""
        return list(range(n_workers - self.count, n_workers))

    def value(self, n_workers: int) -> float:
        """The behaviour's parameter in force (``alie``: Baruch et al.'s ``Z`` for ``n``, ``b``)."""
        if self.param is not None:
            return self.param
        if self.behaviour == "alie":
            return alie_z(n_workers, self.count)
        return float(BEHAVIOURS[self.behaviour][1])


def alie_z(n: int, b: int) -> float:
    """Baruch et al.'s ``z_max``: ``Phi^-1((n - s) / n)`` with ``s = floor(n/2 + 1) - b``."""
    s = math.floor(n / 2 + 1) - b
    p = min(max((n - s) / n, 1e-6), 1 - 1e-6)
    return NormalDist().inv_cdf(p)


def parse_byzantine(text: str | int) -> Attack:
    """``"2:sign-flip"`` -> ``Attack(2, "sign-flip")``; a sentence in :class:`ByzantineError`."""
    raw = str(text).strip().lower()
    m = re.fullmatch(r"(\d+)(?::([a-z-]+)(?::([-+0-9.e]+))?)?", raw)
    if not m:
        raise ByzantineError(f"{text!r} is not a Byzantine setting; write 0 (none) or "
                             "COUNT:BEHAVIOUR[:PARAM], e.g. 2:sign-flip or 2:scaled:10.")
    count, behaviour, param = int(m[1]), m[2] or "", m[3]
    if count == 0:
        if behaviour:
            raise ByzantineError(f"{text!r}: no attacker cannot behave; write 0 alone.")
        return Attack()
    if not behaviour:
        raise ByzantineError(f"{text!r} names no behaviour; write {count}:BEHAVIOUR, one of "
                             f"{', '.join(BEHAVIOURS)}.")
    if behaviour not in BEHAVIOURS:
        raise ByzantineError(f"unknown Byzantine behaviour {behaviour!r}; choose one of "
                             f"{', '.join(BEHAVIOURS)}.")
    value = None
    if param is not None:
        try:
            value = float(param)
        except ValueError:
            raise ByzantineError(f"{text!r}: the parameter of {behaviour} must be a number, "
                                 f"not {param!r}.") from None
        if not math.isfinite(value) or (behaviour in ("gaussian", "random") and value <= 0):
            raise ByzantineError(f"{text!r}: {BEHAVIOURS[behaviour][0]} must be a finite "
                                 "number" + (" above 0." if behaviour in ("gaussian", "random")
                                             else "."))
    return Attack(count, behaviour, value)


def check_byzantine(attack: Attack, n_workers: int) -> None:
    """Raise :class:`ByzantineError` unless at least one of ``n_workers`` stays honest."""
    if attack.count >= n_workers:
        raise ByzantineError(f"{attack.text()} needs at least {attack.count + 1} workers (one "
                             f"honest at least), and the run has {n_workers}.")


def corrupt(attack: Attack, grad: np.ndarray, n_workers: int, rng: np.random.Generator,
            estimate: Callable[[], np.ndarray] | None = None) -> np.ndarray:
    """What an attacker pushes instead of its honest gradient ``grad`` (a new float32 array).

    ``estimate()`` returns the ``n - b`` estimated honest gradients (rows) for ``alie``/``ipm``;
    ``rng`` draws the noise of ``gaussian``/``random``.
    """
    v = attack.value(n_workers)
    kind = attack.behaviour
    if kind == "sign-flip":
        out = -v * grad
    elif kind == "scaled":
        out = v * grad
    elif kind == "gaussian":
        out = grad + rng.normal(0.0, v, grad.shape)
    elif kind == "random":
        out = rng.normal(0.0, v, grad.shape)
    elif kind in ESTIMATING:
        if estimate is None:
            raise ByzantineError(f"{kind} needs the estimated honest gradients.")
        honest = np.asarray(estimate(), dtype=np.float64)
        mu = honest.mean(axis=0)
        out = mu - v * honest.std(axis=0) if kind == "alie" else -v * mu
    else:
        raise ByzantineError(f"unknown Byzantine behaviour {kind!r}.")
    return np.asarray(out, dtype=np.float32)
