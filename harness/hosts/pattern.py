"""Communication patterns as text: ``ps``, ``tree`` and ``ring``, with their options.

- ``ps``: the parameter server of the incast star (serial broadcast, incast of pushes;
  :mod:`harness.hosts.ps`).
- ``tree[:fanout=F,root=R,chunks=C]``: Hoplite-style broadcast and reduce trees that form while
  the transfer runs (:mod:`harness.hosts.tree`): the PS serves ``R`` workers (default 1), a worker
  at most ``F`` (default 2), and the parameters and sums travel in ``C`` chunks (default 8).
- ``ring[:pieces=P]``: ring all-reduce among the workers (:mod:`harness.hosts.ring`), each share
  sent as ``P`` messages (default 1).

``RunSpec.pattern`` holds the canonical text (:meth:`Pattern.text`).
"""

from __future__ import annotations

import dataclasses
import re

from transports.base import UserError

KINDS = ("ps", "tree", "ring")
_OPTIONS = {"tree": {"fanout": 2, "root": 1, "chunks": 8}, "ring": {"pieces": 1}, "ps": {}}
_LIMITS = {"fanout": 16, "root": 16, "chunks": 256, "pieces": 64}


class PatternError(UserError, ValueError):
    """A pattern's text names no pattern, or an option it does not have."""


@dataclasses.dataclass(frozen=True)
class Pattern:
    """A communication pattern and its options (every option present, defaults filled in)."""

    kind: str = "ps"
    options: tuple[tuple[str, int], ...] = ()

    def __getitem__(self, name: str) -> int:
        return dict(self.options)[name]

    def text(self) -> str:
        """The canonical text (what :func:`parse_pattern` reads back): defaults left out."""
        given = [f"{k}={v}" for k, v in self.options if v != _OPTIONS[self.kind][k]]
        return self.kind + (":" + ",".join(given) if given else "")


def parse_pattern(text: str) -> Pattern:
    """``"tree:fanout=3"`` -> ``Pattern("tree", (("chunks", 8), ("fanout", 3), ("root", 1)))``."""
    raw = str(text).strip().lower()
    kind, _, rest = raw.partition(":")
    if kind not in KINDS:
        raise PatternError(f"{text!r} is not a communication pattern; write ps, tree or ring "
                           "(e.g. tree:fanout=2,chunks=8 or ring:pieces=2).")
    options = dict(_OPTIONS[kind])
    for pair in filter(None, rest.split(",")):
        name, sep, value = pair.partition("=")
        if not sep or name not in options:
            known = ", ".join(sorted(options)) or "none"
            raise PatternError(f"{text!r}: {kind} has no option {pair!r} (its options: {known}).")
        if not re.fullmatch(r"\d+", value) or not 1 <= int(value) <= _LIMITS[name]:
            raise PatternError(f"{text!r}: {name} must be a whole number from 1 to "
                               f"{_LIMITS[name]}, not {value!r}.")
        options[name] = int(value)
    return Pattern(kind, tuple(sorted(options.items())))
