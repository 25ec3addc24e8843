"""Regenerate, or check, everything published: ``invoke publish [--check] [--no-figures]``.

In order:

1. the combined folders (:data:`COMBINED`: one figure across several sweeps) get their tables
   again by concatenating their sources' tables;
2. every results folder's ``report.md`` (and, unless ``figures`` is off, its figures): PS sweeps
   through :mod:`harness.reporting.report`, peer-to-peer sweeps through :mod:`harness.p2p.report`,
   simulations through :mod:`harness.simulation.figures` (figures and ``crossovers.csv``);
3. every generated block of README.md, docs/*.md and docs/labs/*.md;
4. docs/findings.md, the findings page, whole.

``check`` writes nothing and returns the files whose text would change; the figures are then
not redrawn (a fast test runs it: ``tests/unit/test_publish.py``).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pandas as pd

from harness.reporting.publish import blocks
from harness.reporting.publish.claims.common import anchor
from harness.reporting.publish.context import PROJECT, Context, MissingFolder
from harness.running.results import read_table

# Folders whose tables are other folders' tables concatenated (columns: the union; a column a
# source lacks is empty in its rows), for one figure across the settings of several sweeps.
COMBINED = {
    "results/regimes/edge-all": ("results/regimes/edge-10ms", "results/regimes/edge-25ms",
                                 "results/regimes/edge"),
    "results/regimes/incast-all": ("results/regimes/incast", "results/regimes/incast-plot"),
}
TABLES = ("runs.csv", "curves.csv", "iterations.csv")
FINDINGS = "docs/findings.md"


@dataclasses.dataclass
class Outcome:
    """What a build wrote (or, checking, would have changed)."""

    changed: list[str] = dataclasses.field(default_factory=list)
    figures: int = 0


def _put(path: Path, text: str, check: bool, out: Outcome, root: Path) -> None:
    old = path.read_text() if path.exists() else None
    if old != text:
        out.changed.append(str(path.relative_to(root)))
        if not check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)


def combine(rel: str, sources: tuple[str, ...], root: Path, check: bool, out: Outcome) -> None:
    """Rebuild a combined folder's tables and manifest from its sources."""
    folder = root / rel
    for table in TABLES:
        frames = [read_table(root / s / table) for s in sources if (root / s / table).exists()]
        if frames:
            _put(folder / table, pd.concat(frames, ignore_index=True).to_csv(index=False),
                 check, out, root)
    backfilled: dict = {}
    translated: dict = {}
    recorded = []
    for s in sources:
        man = json.loads((root / s / "manifest.json").read_text())
        backfilled.update(man.get("backfilled_fingerprints", {}))
        translated.update(man.get("translated_fingerprints", {}))
        for entry in [man.get("provenance", {})] + [e.get("provenance", {})
                                                    for e in man.get("extended", [])]:
            if "fingerprint" in entry:
                recorded.append({"fingerprint": entry["fingerprint"]})
    manifest = {"kind": "combined", "sources": list(sources),
                "provenance": {"command": f".venv/bin/invoke publish (concatenates "
                                          f"{', '.join(sources)})"},
                "extended": [{"provenance": r} for r in recorded],
                "backfilled_fingerprints": backfilled}
    if translated:
        manifest["translated_fingerprints"] = translated
    _put(folder / "manifest.json", json.dumps(manifest, indent=1) + "\n", check, out, root)


def report(ctx: Context, rel: str, check: bool, figures: bool, out: Outcome) -> None:
    """One folder's report (and figures)."""
    folder = ctx.root / rel
    kind = ctx.folder(rel).kind
    if kind == "simulate":
        if figures and not check:
            from harness.simulation import figures as simulate_figures

            out.figures += len(simulate_figures.draw(folder))
        return
    if kind == "loopback":
        if figures and not check:
            from harness.bench import figures as loopback_figures

            out.figures += len(loopback_figures.draw(folder))
        return
    if kind == "p2p":
        from harness.p2p import report as p2p_report

        if figures and not check:
            out.figures += len(p2p_report.draw(folder))
        _put(folder / "report.md", p2p_report.report_text(folder), check, out, ctx.root)
        return
    from harness.reporting import figures as fig
    from harness.reporting import report as ps_report

    sw = ctx.folder(rel).sweep
    if figures and not check:
        out.figures += len(fig.draw(sw))
    _put(folder / "report.md", ps_report.report_text(sw), check, out, ctx.root)


def pages(root: Path) -> list[Path]:
    """The hand-written pages that may hold generated blocks."""
    return [root / "README.md", root / "results" / "README.md",
            *sorted((root / "docs").glob("*.md")), *sorted((root / "docs" / "labs").glob("*.md"))]


def findings(ctx: Context) -> str:
    """docs/findings.md, whole."""
    from harness.reporting.publish import claims

    sections = claims.sections()
    lines = ["# Findings", "",
             "<!-- This page is generated by `.venv/bin/invoke publish` from the committed "
             "tables; do not edit it by hand. -->", "",
             "Every finding of the testbed, organised by the question it answers. Each names the "
             "results folders its numbers come from, the commands that filled them, their "
             "commits and seeds, and whether the code that produces the numbers is still "
             "today's (\"stale\" otherwise: the numbers then describe the code at those "
             "commits). Every number is computed from the folders' tables; every interval is "
             "labelled with the coverage its method has, and every verdict follows the rule of "
             "`harness/reporting/stats.py` and is counted. The README's results come from the fresh "
             "sections only.", ""]
    lines += [f"- [{s.question}](#{anchor(s.question)})" for s in sections]
    lines.append("")
    for s in sections:
        lines.append(s.render(ctx))
    return "\n".join(lines).rstrip("\n") + "\n"


def publish(root: Path = PROJECT, check: bool = False, figures: bool = True,
            say=print, reports: bool = True) -> Outcome:
    """Regenerate (``check``: compare) everything published; see the module docstring. Without
    ``reports``, only the pages' generated blocks and the findings page (not each folder's
    report and figures)."""
    from harness.reporting.publish import claims
    from harness.running import presets
    from transports import registry

    # Every preset's plugins, so that a scheme's label in a report is its registered one whatever
    # this process loaded before (lab 3's udp-blast read "udp-blast" unloaded, "UDP blast" loaded).
    registry.use_plugins([PROJECT / p for plan in presets.PRESETS.values() for p in plan.plugins])
    out = Outcome()
    ctx = Context(root)
    for rel, sources in COMBINED.items():
        combine(rel, sources, root, check, out)
    ctx = Context(root)   # the combined tables may have changed
    for f in ctx.all() if reports else []:
        report(ctx, f.rel, check, figures, out)
        say(f"{'checked' if check else 'wrote'} {f.rel}")
    render = claims.blocks()

    def one(name: str) -> str:
        if name not in render:
            raise blocks.BlockError(f"no topic of harness/reporting/publish/claims generates the block "
                                    f"{name!r}.")
        try:
            return render[name](ctx)
        except MissingFolder as exc:
            return f"Not measured yet: {exc}."

    for page in pages(root):
        if page.name == "findings.md" and page.parent.name == "docs":
            continue
        text = page.read_text()
        if blocks.names(text):
            _put(page, blocks.fill(text, one, str(page.relative_to(root))), check, out, root)
    _put(root / FINDINGS, findings(ctx), check, out, root)
    return out
