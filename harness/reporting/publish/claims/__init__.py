"""The generated blocks and the findings page's sections, by topic.

Each module of this package defines ``BLOCKS`` (block name -> function of the
:class:`~harness.reporting.publish.context.Context` returning Markdown; README.md and docs/*.md hold
the markers) and ``SECTIONS`` (the findings page's sections, each a question with the folders that
answer it and a function writing the answer), and may define ``FOLDERS`` (folders its blocks cite
that no section does, such as the labs' own sweeps) and ``README`` (the README's blocks, each a
:class:`Readme` naming the folders it rests on: a block withholds its numbers while any of them is
not fresh). Every number in them is computed from the tables; every verdict comes from
:func:`harness.reporting.stats.compare` or :func:`harness.reporting.stats.judge`, and each
section says how many comparisons it made (:class:`Section`).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable

from harness.reporting import stats
from harness.reporting.publish.claims.common import withheld
from harness.reporting.publish.context import Context, MissingFolder

Render = Callable[[Context], str]

# The topics, in the order the findings page takes them.
TOPICS = ("headline", "training", "compression", "cser", "regimes", "traffic", "trust",
          "validation", "plotbounds", "field", "peers", "collectives", "simvalidation",
          "simulation", "firstpush", "loopback", "protocol", "labs", "folders")


@dataclasses.dataclass(frozen=True)
class Section:
    """One question of the findings page, the folders that answer it, and the answer."""

    key: str
    question: str
    folders: tuple[str, ...]
    body: Callable[[Context], list[str]]

    def render(self, ctx: Context) -> str:
        """The section: its question, where the numbers come from, the answer, the count of
        comparisons it made."""
        try:
            cited = [ctx.folder(f) for f in self.folders]
        except MissingFolder as exc:
            return f"## {self.question}\n\nNot measured yet: {exc}.\n"
        with stats.tally() as tally:
            body = self.body(ctx)
        lines = [f"## {self.question}", ""]
        stale = [f for f in cited if not f.freshness.same_code]
        if stale:
            lines += ["> **Stale:** the code that produces these numbers has changed since "
                      + ("they were" if len(stale) == len(cited) else "some of them were")
                      + " measured; they describe the code at the commits named below, not "
                      "today's. Rerun the commands to refresh them.", ""]
        short = [f for f in cited if f.freshness.missing_runs]
        if short:
            lines += ["> **Incomplete:** runs that the sweep planned are missing from "
                      + ("its table" if len(cited) == 1 else "some of the tables")
                      + " (the sweep stopped); the numbers below rest on the runs that are "
                      "there. `invoke refresh` runs the rest.", ""]
        for f in cited:
            lines.append(f"- {f.cite()}: {f.status()}")
            for cmd in f.commands():
                lines.append(f"  - `{cmd}`")
        lines += [""] + body + ["", tally.sentence("section"), ""]
        return "\n".join(lines)


@dataclasses.dataclass(frozen=True)
class Readme:
    """One of the README's blocks: its text, the folders it rests on and the findings page's
    question that keeps the numbers. While any of the folders is not fresh the block says why
    its finding is withheld instead (:func:`common.withheld`); a block without a question keeps
    its text and says itself that it was measured at other code (the quickstart's minutes)."""

    render: Render
    folders: tuple[str, ...]
    question: str | None = None

    def __call__(self, ctx: Context) -> str:
        if self.question is None:
            return self.render(ctx)
        try:
            cited = [ctx.folder(f) for f in self.folders]
        except MissingFolder as exc:
            return f"Not measured yet: {exc}."
        return withheld(cited, self.question) or self.render(ctx)


def _modules():
    return [importlib.import_module(f"harness.reporting.publish.claims.{t}") for t in TOPICS]


def blocks() -> dict[str, Render]:
    """Every generated block, by name."""
    out: dict[str, Render] = {}
    for mod in _modules():
        made = {**getattr(mod, "BLOCKS", {}), **getattr(mod, "README", {})}
        for name, fn in made.items():
            if name in out:
                raise ValueError(f"two topics generate the block {name!r}")
            out[name] = fn
    return out


def sections() -> list[Section]:
    """The findings page's sections, in order."""
    return [s for mod in _modules() for s in getattr(mod, "SECTIONS", [])]


def readme_folders() -> dict[str, tuple[str, ...]]:
    """The README's generated blocks and the folders each rests on (a topic's ``README``)."""
    return {k: r.folders for mod in _modules() for k, r in getattr(mod, "README", {}).items()}


def block_folders() -> set[str]:
    """The folders that blocks outside the findings page cite (a topic's ``FOLDERS``)."""
    return {f for mod in _modules() for f in getattr(mod, "FOLDERS", ())}
