"""Generated blocks in Markdown: ``<!-- generated:NAME -->`` ... ``<!-- /generated:NAME -->``.

Everything between the two markers belongs to the block's function
(:data:`harness.reporting.publish.claims.BLOCKS`); the text around it is written by hand and must
state no measured number (``tests/unit/test_publish.py`` checks README.md and docs/findings.md for
that).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from transports.base import UserError

_BLOCK = re.compile(r"<!-- generated:([a-z0-9-]+) -->\n(.*?)<!-- /generated:\1 -->", re.S)


class BlockError(UserError, ValueError):
    """A page names a block nobody generates, or its markers do not pair."""


def names(text: str) -> list[str]:
    """The blocks ``text`` holds, in order."""
    return [m.group(1) for m in _BLOCK.finditer(text)]


def fill(text: str, render: Callable[[str], str], where: str = "the page") -> str:
    """``text`` with every block's body replaced by ``render(name)``."""
    opened = re.findall(r"<!-- generated:([a-z0-9-]+) -->", text)
    closed = re.findall(r"<!-- /generated:([a-z0-9-]+) -->", text)
    if sorted(opened) != sorted(closed) or len(names(text)) != len(opened):
        raise BlockError(f"{where} has a generated block whose markers do not pair.")

    def one(match: re.Match) -> str:
        name = match.group(1)
        body = render(name).strip("\n")
        return f"<!-- generated:{name} -->\n{body}\n<!-- /generated:{name} -->"

    return _BLOCK.sub(one, text)


def outside(text: str) -> str:
    """``text`` without its generated blocks, code blocks and inline code (what a person wrote)."""
    text = _BLOCK.sub("", text)
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"^(    |\t).*$", "", text, flags=re.M)
    return re.sub(r"`[^`\n]*`", "", text)
