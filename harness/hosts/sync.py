"""Synchronisation modes as text: ``bsp``, ``ssp:S``, ``async`` (what :mod:`harness.hosts.ps` runs).

Light on purpose (no torch): the spec and the command line read it.
"""

from __future__ import annotations

import dataclasses
import re
from transports.base import UserError

SYNC_KINDS = ("bsp", "ssp", "async")


class SyncError(UserError, ValueError):
    """A synchronisation mode's text names no mode."""


@dataclasses.dataclass(frozen=True)
class Sync:
    """A synchronisation mode: ``bsp``, ``ssp`` with a staleness bound, or ``async``."""

    kind: str = "bsp"
    bound: int = 0

    def text(self) -> str:
        """The canonical text (what :func:`parse_sync` reads back)."""
        return f"ssp:{self.bound}" if self.kind == "ssp" else self.kind


def parse_sync(text: str) -> Sync:
    """``"ssp:2"`` -> ``Sync("ssp", 2)``; a sentence in :class:`SyncError` otherwise."""
    raw = str(text).strip().lower()
    m = re.fullmatch(r"(bsp|async)|ssp:(\d+)", raw)
    if not m:
        hint = " (ssp needs its staleness bound, e.g. ssp:2)" if raw == "ssp" else ""
        raise SyncError(f"{text!r} is not a synchronisation mode{hint}; write bsp, ssp:S with a "
                        "bound S of at least 0, or async.")
    return Sync(m[1]) if m[1] else Sync("ssp", int(m[2]))
