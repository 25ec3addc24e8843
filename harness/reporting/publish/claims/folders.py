"""The index of committed results folders (results/README.md): what each holds, how it was
filled, whether it is fresh, and which findings rest on it."""

from __future__ import annotations

from harness.reporting.publish.claims import Section
from harness.reporting.publish.claims.common import anchor
from harness.reporting.publish.context import Context


def index(ctx: Context) -> str:
    """One entry per committed folder."""
    from harness.reporting.publish import build, claims

    users: dict[str, list[Section]] = {}
    for section in claims.sections():
        for rel in section.folders:
            users.setdefault(rel, []).append(section)
    lines = []
    for f in ctx.all():
        sources = build.COMBINED.get(f.rel)
        state = ("fresh" if f.fresh else "stale (code changed since)"
                 if not f.freshness.same_code else "incomplete (runs it records are missing)")
        lines.append(f"- {f.cite()}: {state}.")
        if sources:
            lines.append(f"  The tables of {', '.join(f'`{s}/`' for s in sources)} "
                         "concatenated (by `invoke publish`), for one figure across them.")
        else:
            for cmd in f.commands():
                lines.append(f"  - `{cmd}`")
        for s in users.get(f.rel, []):
            lines.append(f"  - answers: [{s.question}](../docs/findings.md#{anchor(s.question)})")
    return "\n".join(lines)


BLOCKS = {"results-folders": index}
