"""The labs' expected-results blocks (harness/reporting/publish/claims/labs.py) on a lab folder
written here: the block cites the folder and the page's own command, gives each cell's median
and range over seeds, and prints the checker's verdicts with their numbers, a wrong one in full;
a lab whose folder is missing says how to fill it."""

import shutil
from pathlib import Path

from harness.reporting.publish.claims import labs
from harness.reporting.publish.context import Context
from tests.unit.test_lab_check import _lab2

PROJECT = Path(__file__).resolve().parents[2]


def _root(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    shutil.copytree(PROJECT / "docs" / "labs", root / "docs" / "labs")
    (root / "results" / "labs").mkdir(parents=True)
    return root


def test_a_missing_folder_says_how_to_fill_it(tmp_path):
    text = labs.block(2, Context(_root(tmp_path)))
    assert text.startswith("Not measured yet: `results/labs/lab2/`")
    assert "--preset lab2" in text and "--out results/labs/lab2" in text


def test_the_block_gives_ranges_over_seeds_and_the_checkers_numbers(tmp_path):
    root = _root(tmp_path)
    folder = _lab2(root / "results" / "labs" / "lab2")
    runs = labs.pd.read_csv(folder / "runs.csv")
    again = runs.assign(run_id=runs.run_id + "b", iters_per_s=runs.iters_per_s + 1.0)
    labs.pd.concat([runs, again]).to_csv(folder / "runs.csv", index=False)
    text = labs.block(2, Context(root))
    assert "`results/labs/lab2/` (8 runs" in text
    assert "| scheme | loss_pct | iterations/s |" in text
    assert "| ltp | 10 | 3.00 [2.50, 3.50] | 12 | 0.900 |" in text   # median [lowest, highest]
    assert "**statement 1** holds in 4 of 4 checks" in text
    assert "filled_frac_max" in text                      # the checker's numbers, not just marks


def test_a_statement_the_folder_breaks_is_printed_in_full(tmp_path):
    root = _root(tmp_path)
    _lab2(root / "results" / "labs" / "lab2", {("r3", "early_closes"): 3})
    text = labs.block(2, Context(root))
    line = next(l for l in text.splitlines() if l.startswith("- **statement 1**"))
    assert "holds in 1 of 2 checks" in line and "early_closes 3" in line


def test_checks_that_need_the_runs_files_are_notes_on_a_committed_folder(tmp_path):
    # results/labs/lab9 as committed: its tables, not its runs' captures (runs/ stays local)
    root = _root(tmp_path)
    shutil.copytree(PROJECT / "results" / "labs" / "lab9", root / "results" / "labs" / "lab9")
    assert not (root / "results" / "labs" / "lab9" / "runs").exists()
    text = labs.block(9, Context(root))
    assert "**statements 1-3** not tested: needs the runs' own files" in text
    assert "holds in 0" not in text
    # a student's folder without its captures is still wrong, not excused
    sheet = labs.grading.grade(9, root / "results" / "labs" / "lab9")
    assert not sheet.passed


def test_the_block_names_the_seeds_it_ran_beyond_the_students_one(tmp_path):
    root = _root(tmp_path)
    folder = _lab2(root / "results" / "labs" / "lab2")
    runs = labs.pd.read_csv(folder / "runs.csv")
    runs.assign(seed=0).to_csv(folder / "runs.csv", index=False)
    text = labs.block(2, Context(root))
    assert "(4 runs, seed 0)" in text and "--seeds" not in text   # the page's command as is
    three = labs.pd.concat([runs.assign(seed=s, run_id=runs.run_id + str(s)) for s in range(3)])
    three.to_csv(folder / "runs.csv", index=False)
    text = labs.block(2, Context(root))
    assert "(12 runs, seeds 0-2)" in text
    assert "--preset lab2 --seeds 0,1,2 --out results/labs/lab2`" in text
    one = runs.iloc[:1].assign(seed=0)
    one.to_csv(folder / "runs.csv", index=False)
    assert "(1 run, seed 0)" in labs.block(2, Context(root))


def test_a_short_folder_cites_its_time_in_words_not_zero_minutes(tmp_path):
    root = _root(tmp_path)
    folder = _lab2(root / "results" / "labs" / "lab2")
    runs = labs.pd.read_csv(folder / "runs.csv")
    runs.assign(seed=0, wall_s=5.0).to_csv(folder / "runs.csv", index=False)
    assert "(4 runs, seed 0, under a minute of runs)" in labs.block(2, Context(root))
    runs.assign(seed=0, wall_s=60.0).to_csv(folder / "runs.csv", index=False)
    assert "(4 runs, seed 0, 4 min of runs)" in labs.block(2, Context(root))
