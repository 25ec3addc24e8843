"""Everything published is what the committed tables give (claims as code).

`invoke publish --check` in test form: every results folder's report, every generated block of
README.md and docs/, and docs/findings.md regenerate byte for byte from the committed tables;
a hand-edited number fails; the README states no measured number outside its generated blocks
and rests only on folders whose code is still today's.
"""

import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from harness.reporting.publish import blocks, build, claims
from harness.reporting.publish.claims import headline
from harness.reporting.publish.context import Context, published_folders

PROJECT = Path(__file__).resolve().parents[2]


def test_every_published_file_matches_the_tables():
    out = build.publish(check=True, say=lambda line: None)
    assert not out.changed, ("these files differ from what the tables give; run "
                             f".venv/bin/invoke publish: {out.changed}")


def _copy(tmp_path: Path) -> Path:
    """The published files in a scratch root (the tables linked, the pages copied)."""
    root = tmp_path / "root"
    root.mkdir()
    shutil.copytree(PROJECT / "results", root / "results",
                    ignore=shutil.ignore_patterns("runs", "network", "*.png", "*.pdf"))
    shutil.copytree(PROJECT / "docs", root / "docs")
    shutil.copy(PROJECT / "README.md", root / "README.md")
    return root


def test_a_hand_edited_number_fails_the_check(tmp_path):
    root = _copy(tmp_path)
    readme = (root / "README.md").read_text()
    block = re.search(r"<!-- generated:headline -->.*?<!-- /generated:headline -->", readme,
                      re.S).group(0)
    number = re.search(r"\d+\.\d\d", block).group(0)
    edited = block.replace(number, f"{float(number) + 0.01:.2f}", 1)
    (root / "README.md").write_text(readme.replace(block, edited))
    findings = (root / "docs" / "findings.md").read_text()
    (root / "docs" / "findings.md").write_text(findings.replace("[", "[0", 1))
    out = build.publish(root=root, check=True, say=lambda line: None, reports=False)
    assert "README.md" in out.changed and "docs/findings.md" in out.changed


_MEASURED = re.compile(r"\d+\.\d+|\b\d+(\.\d+)?x\b|\[\d")


@pytest.mark.parametrize("page", ["README.md", "results/README.md"])   # findings: all generated
def test_no_measured_number_outside_generated_blocks(page):
    text = blocks.outside((PROJECT / page).read_text())
    found = [m.group(0) for m in _MEASURED.finditer(text)]
    assert not found, f"{page} types numbers by hand outside its generated blocks: {found}"


def test_the_readme_rests_only_on_fresh_folders():
    # A README block gives numbers only from fresh folders; from any other it is withheld (the
    # quickstart's minutes say they were measured at earlier code). What the README says is
    # what publish generates (the first test), so this reads the page.
    ctx, readme = Context(), (PROJECT / "README.md").read_text()
    for name, rels in claims.readme_folders().items():
        text = re.search(rf"<!-- generated:{name} -->\n(.*?)<!-- /generated:{name} -->", readme,
                         re.S).group(1)
        late = [rel for rel in rels if (PROJECT / rel / "runs.csv").exists()
                and not ctx.folder(rel).fresh]
        if late and name == "quickstart":
            assert "measured at earlier code" in text
        elif late:
            assert text.startswith("Withheld until") and not re.search(r"\d\.\d", text), name
    assert "Stale" not in readme


def test_a_finding_on_a_folder_of_other_code_leaves_the_readme(tmp_path):
    # One run of the tolerance sweep recorded another code fingerprint: the README's paragraph
    # on tolerating loss is withheld, naming the folder; the findings page keeps its numbers.
    root = tmp_path / "root"
    for rel in (headline.REFERENCE, headline.TOLERANCE):
        shutil.copytree(PROJECT / rel, root / rel,
                        ignore=shutil.ignore_patterns("runs", "network", "figures"))
    runs = (root / headline.TOLERANCE / "runs.csv")
    table = pd.read_csv(runs)
    table.loc[0, "code_fingerprint"] = "0123456789ab"
    table.to_csv(runs, index=False)
    ctx = Context(root)
    text = headline.README["tolerance"](ctx)
    assert text.startswith(f"Withheld until `{headline.TOLERANCE}/` is refreshed: it holds")
    assert "refresh --folders results/tolerance" in text
    assert headline.tolerance(ctx).count("x [") > 3


def test_every_block_a_page_names_is_generated_and_every_folder_is_cited():
    known = claims.blocks()
    for page in build.pages(PROJECT):
        for name in blocks.names(page.read_text()):
            assert name in known, f"{page.name} names the block {name!r} nobody generates"
    cited = {f for s in claims.sections() for f in s.folders} | claims.block_folders()
    cited |= {s for sources in build.COMBINED.values() for s in sources}
    for folder in published_folders(PROJECT):
        rel = str(folder.relative_to(PROJECT))
        assert rel in cited or rel in build.COMBINED, f"no finding cites {rel}"


def test_unpaired_markers_are_one_sentence():
    with pytest.raises(blocks.BlockError, match="do not pair"):
        blocks.fill("<!-- generated:a -->\nx\n", lambda name: "")


def test_a_folder_git_ignores_is_not_published(tmp_path):
    # A scratch benchmark folder in the workspace (results/bench/ is ignored) is no clone's: it
    # is neither published nor cited. Outside a git checkout every folder counts.
    import subprocess

    for rel in ("results/kept", "results/bench/scratch"):
        (tmp_path / rel).mkdir(parents=True)
        (tmp_path / rel / "runs.csv").write_text("run_id\n")
    assert published_folders(tmp_path) == [tmp_path / "results/bench/scratch",
                                            tmp_path / "results/kept"]
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("/results/bench/\n")
    assert published_folders(tmp_path) == [tmp_path / "results/kept"]
