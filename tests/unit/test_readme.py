"""The README's results come from the committed reference sweep, with seeds and intervals."""

import re
from pathlib import Path

from harness import report
from harness.analysis import load

PROJECT = Path(__file__).resolve().parents[2]
REFERENCE = PROJECT / "results" / "reference"


def _block(text: str, name: str) -> str:
    match = re.search(rf"<!-- {name} -->\n(.*?)\n<!-- /{name} -->", text, re.S)
    assert match, f"the README has no <!-- {name} --> block"
    return match.group(1).strip()


def test_readme_table_matches_the_reference_sweep():
    readme = (PROJECT / "README.md").read_text()
    assert _block(readme, "reference-table") == report.readme_table(load(REFERENCE))


def test_reference_has_three_seeds_per_cell_and_names_its_commit():
    sweep = load(REFERENCE)
    fewest, _ = sweep.seeds_per_cell()
    assert fewest >= 3
    commits = set(sweep.runs.git_commit.astype(str))
    assert len(commits) == 1, "the reference sweep ran at one commit"
    text = (REFERENCE / "report.md").read_text()
    assert next(iter(commits))[:12] in text
    readme = (PROJECT / "README.md").read_text()
    assert next(iter(commits))[:12] in readme
