"""Bubble Filling: repair the coordinates a loss-tolerant transport did not deliver.

A received :class:`~transports.base.Delivery` carries a ``mask`` (True where the coordinate
arrived, ``None`` if all did). A filler decides what the holes hold:

- ``"zero"``: missing coordinates are 0 (a missing gradient coordinate contributes nothing).
- ``"previous"``: the same sender's previous value for that coordinate (0 before its first
  message); the remembered value is whatever the application last saw, filled or not.
- ``"masked-mean"``: used at the PS. Each delivery's holes are 0, and :func:`masked_mean` averages
  every coordinate only over the workers that delivered it; a coordinate nobody delivered is 0
  (or, with ``empty="previous"``, the previous average).

The mask is left as received, so statistics know exactly what was filled. Everything is
vectorised numpy; nothing loops over floats in Python.

    >>> f = Filler("previous")
    >>> d = f.apply(sender=0, delivery=d)   # fills d.values in place and returns d
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from transports.base import Delivery

FILLERS = ("masked-mean", "zero", "previous")


def fill_zero(values: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """Set the coordinates where ``mask`` is False to 0, in place; returns ``values``."""
    if mask is not None:
        values[~mask] = 0.0
    return values


def fill_previous(values: np.ndarray, mask: np.ndarray | None,
                  previous: np.ndarray | None) -> np.ndarray:
    """Copy ``previous`` into the coordinates where ``mask`` is False (0 if there is none)."""
    if mask is None:
        return values
    if previous is None:
        return fill_zero(values, mask)
    np.copyto(values, previous, where=~mask)
    return values


def masked_mean(deliveries: Sequence[Delivery], empty: str = "zero",
                previous_mean: np.ndarray | None = None) -> np.ndarray:
    """Average each coordinate over the deliveries that carry it.

    Coordinates that no delivery carries are 0 with ``empty="zero"``, or taken from
    ``previous_mean`` with ``empty="previous"`` (0 if it is None).
    """
    if not deliveries:
        raise ValueError("masked_mean needs at least one delivery.")
    if empty not in ("zero", "previous"):
        raise ValueError(f"empty must be 'zero' or 'previous', not {empty!r}.")
    n = deliveries[0].values.shape[0]
    total = np.zeros(n, dtype=np.float64)
    count = np.zeros(n, dtype=np.int32)
    for d in deliveries:   # one vector operation per worker
        if d.mask is None:
            total += d.values
            count += 1
        else:
            total += np.where(d.mask, d.values, 0.0)
            count += d.mask
    out = np.zeros(n, dtype=np.float32)
    np.divide(total, count, out=out, where=count > 0, casting="unsafe")
    if empty == "previous" and previous_mean is not None:
        np.copyto(out, previous_mean, where=count == 0)
    return out


class Filler:
    """A filler with per-sender memory (needed by ``"previous"``)."""

    def __init__(self, kind: str) -> None:
        if kind not in FILLERS:
            raise ValueError(f"filler must be one of {', '.join(FILLERS)}, not {kind!r}.")
        self.kind = kind
        self._previous: dict[int, np.ndarray] = {}

    def apply(self, sender: int, delivery: Delivery) -> Delivery:
        """Fill ``delivery.values`` in place according to this filler; returns the delivery."""
        if self.kind == "previous":
            fill_previous(delivery.values, delivery.mask, self._previous.get(sender))
            self._previous[sender] = delivery.values.copy()
        else:   # zero, and masked-mean, whose averaging happens in ServerEnd.average
            fill_zero(delivery.values, delivery.mask)
        delivery.stats["filled_frac"] = 1.0 - delivery.received_frac
        return delivery
