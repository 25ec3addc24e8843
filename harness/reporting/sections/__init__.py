"""The report's optional sections: each one a module that knows when it applies to a sweep, the
Markdown it adds to ``report.md`` and the figures it draws.

A section module provides

- ``applies(sw) -> bool``: whether the sweep has what the section is about;
- ``section(sw) -> list[str]``: its Markdown lines;
- ``draw(sw, folder, save) -> list[Path]``: its figures, each written by ``save(fig, folder,
  name)``;
- ``FIGURES``: ``(name, caption)`` of the figures the report lists at its end.

:data:`SECTIONS` is the registry, in the order the report shows them: :mod:`.faults` (faults
and sync modes), :mod:`.byzantine` (attacks and aggregation rules), :mod:`.compression`
(compressed pushes), :mod:`.patterns` (collectives against their bounds), :mod:`.field` (the
designs of the field head to head), :mod:`.captures` (the runs' packet captures). A new section
is a module here and one entry in :data:`SECTIONS`. The registry asks ``applies`` first:
``section`` and ``draw`` are called only for a sweep the section applies to.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from harness.reporting.sections import (byzantine, captures, compression, faults, field,
                                        patterns)

SECTIONS = (faults, byzantine, compression, patterns, field, captures)
FIGURES = tuple(item for s in SECTIONS for item in s.FIGURES)


def text(sw) -> list[str]:
    """Every section's Markdown, in registry order, of the sections that apply."""
    return [line for s in SECTIONS if s.applies(sw) for line in s.section(sw)]


def draw(sw, folder: Path, save: Callable) -> list[Path]:
    """Every section's figures, in registry order, of the sections that apply."""
    return [path for s in SECTIONS if s.applies(sw) for path in s.draw(sw, folder, save)]
