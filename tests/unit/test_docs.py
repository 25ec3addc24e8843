"""The generated parts of docs/ are current: `invoke docs` would change nothing."""

from pathlib import Path

import pytest

from transports import options_doc
from transports.base import TransportError

PROJECT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("page", sorted(options_doc.PAGES))
def test_generated_option_tables_are_current(page):
    text = (PROJECT / page).read_text()
    expected = text
    try:
        for key, make in options_doc.PAGES[page].items():
            expected = options_doc.fill(expected, key, make())
    except TransportError as exc:   # LTP's tables need the native core
        pytest.skip(str(exc))
    assert text == expected, f"{page} is out of date: run .venv/bin/invoke docs"
