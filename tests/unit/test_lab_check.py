"""The lab checker (harness/reporting/labs) on small folders written here: a folder that shows what
the page says passes, one with a wrong row fails on that statement with its numbers, answers are
compared within their tolerance, and bad input gets one clear sentence. The emulation test
(tests/emulation/test_labs.py) grades the folders the labs' real commands write."""

import json
from pathlib import Path

import pandas as pd
import pytest

from harness.reporting.labs import grading
from transports.base import UserError

PROJECT = Path(__file__).resolve().parents[2]
OPTIONS = json.dumps({"threshold_min": 0.8})


def _lab2(folder, changes=None):
    rows = []
    for i, (scheme, loss) in enumerate([(s, l) for s in ("ltp", "ltp-reliable")
                                        for l in (0.0, 10.0)]):
        reliable = scheme == "ltp-reliable"
        rows.append(dict(run_id=f"r{i}", status="ok", scheme=scheme, transport=scheme,
                         loss_pct=loss, early_closes=0 if reliable or not loss else 12,
                         filled_frac_max=0.0 if reliable or not loss else 0.05,
                         filled_frac_mean=0.0 if reliable or not loss else 0.02,
                         min_recv_frac=1.0 if reliable or not loss else 0.9,
                         retransmits=40 if loss else 0, transport_options=OPTIONS,
                         iters_per_s=2.0 if reliable else 2.5, push_bound_s=0.28))
    runs = pd.DataFrame(rows)
    for (run_id, column), value in (changes or {}).items():
        runs.loc[runs.run_id == run_id, column] = value
    folder.mkdir()
    runs.to_csv(folder / "runs.csv", index=False)
    its = pd.DataFrame([dict(run_id=r, iteration=k, push_s=0.3 + 0.01 * k, mean_recv_frac=0.95)
                        for r in runs.run_id for k in range(3)])
    its.to_csv(folder / "iterations.csv", index=False)
    # as run-sweep writes a PS sweep's manifest (a peer-to-peer one says "preset")
    (folder / "manifest.json").write_text(json.dumps({"plan": {"name": "lab2"}}))
    return folder


def test_a_folder_that_shows_the_page_passes_and_a_wrong_row_fails(tmp_path):
    good = grading.grade(2, _lab2(tmp_path / "good"))
    assert good.passed, good.text()
    assert {v.item for v in good.verdicts} >= {"data", "statement 1", "statement 2",
                                               "statement 3", "statement 4"}
    # ltp-reliable at 10 % loss that closed early: statement 1 is wrong, and says the numbers
    bad = grading.grade(2, _lab2(tmp_path / "bad", {("r3", "early_closes"): 3}))
    wrong = [v for v in bad.verdicts if v.ok is False]
    assert not bad.passed and [v.item for v in wrong] == ["statement 1"]
    assert "early_closes 3" in wrong[0].text


def test_a_push_faster_than_the_link_allows_is_wrong(tmp_path):
    folder = _lab2(tmp_path / "fast")
    its = pd.read_csv(folder / "iterations.csv")
    its.loc[0, "push_s"] = 0.1        # below 0.28 s x 0.95 received
    its.to_csv(folder / "iterations.csv", index=False)
    sheet = grading.grade(2, folder)
    assert [v.item for v in sheet.verdicts if v.ok is False] == ["data"]
    assert "1 faster than it" in sheet.text()


def test_answers_are_compared_within_their_tolerance_and_never_given_away(tmp_path):
    folder = _lab2(tmp_path / "a")
    unanswered = grading.grade(2, folder)
    q1 = [v for v in unanswered.verdicts if v.item == "Q1"]
    assert q1 and q1[0].ok is None and "0.5" not in q1[0].text
    assert grading.grade(2, folder, {"q1": 0.52}).passed           # 2.5 - 2.0, within 0.05
    assert not grading.grade(2, folder, {"q1": 0.2}).passed
    answers = tmp_path / "answers.toml"
    answers.write_text("q1 = 0.5\n")
    assert grading.read_answers(answers) == {"q1": 0.5}
    answers.write_text("q1 = 'fast'\n")
    with pytest.raises(UserError, match="a number"):
        grading.read_answers(answers)


def test_bad_input_gets_one_sentence(tmp_path):
    with pytest.raises(UserError, match="there is no lab 12"):
        grading.grade(12, tmp_path)
    with pytest.raises(UserError, match="no such folder"):
        grading.grade(2, tmp_path / "nowhere")
    with pytest.raises(UserError, match="runs.csv does not exist"):
        grading.grade(2, tmp_path)


def test_every_lab_page_has_a_grader():
    from harness.reporting.labs import graders  # noqa: F401

    pages = sorted(p.name for p in (PROJECT / "docs" / "labs").glob("lab*.md"))
    assert sorted(page for page, _ in grading.LABS.values()) == pages


def test_the_files_a_grader_reads_from_the_project_exist():
    from harness.reporting.labs import advanced

    assert advanced.LAB8_TRACE.is_file(), advanced.LAB8_TRACE


def _lab7(folder, accuracy):
    """A lab 7 sweep: two schemes, three patterns, two seeds; ``accuracy(seed, pattern)``."""
    from harness.training import models

    gradient, iters = 4 * models.n_params("mlp"), 30
    per = {"ps": 8.0, "tree": 1.2, "ring": 0.1}          # gradients through the PS's link
    rows = [dict(run_id=f"{s}-{p}-{seed}", status="ok", scheme=s, pattern=p, seed=seed,
                 model="mlp", n_workers=8, iterations_done=iters, eval_every=10, early_closes=0,
                 bottleneck_tx_bytes=per[p] * gradient * iters,
                 final_accuracy=accuracy(seed, p))
            for s in ("tcp-cubic", "ltp") for p in per
            for seed in ((1, 0) if p == "ring" else (0, 1))]   # in a sweep's order: mixed
    folder.mkdir()
    pd.DataFrame(rows).to_csv(folder / "runs.csv", index=False)
    (folder / "manifest.json").write_text(json.dumps({"plan": {"name": "lab7"}}))
    return folder


def test_cells_are_set_side_by_side_seed_by_seed(tmp_path):
    # the patterns agree within a seed and the seeds differ: right (it failed when the checker
    # set one seed's ps beside another seed's ring)
    good = grading.grade(7, _lab7(tmp_path / "good", lambda seed, p: 0.70 + 0.02 * seed))
    assert good.passed, good.text()
    assert any("(seed 1)" in v.text for v in good.verdicts)
    bad = grading.grade(7, _lab7(tmp_path / "bad",
                                 lambda seed, p: 0.70 + 0.02 * (seed and p == "ring")))
    wrong = [v for v in bad.verdicts if v.ok is False]
    assert [v.item for v in wrong] == ["statement 3", "statement 3"]
    assert all("(seed 1)" in v.text for v in wrong)
