"""invoke refresh without running anything: which folders are stale and in what order, how a
recorded command is rerun into its own folder, and a folder's runs taken back from its manifest."""

import json
import shutil
from pathlib import Path

import pytest

from harness.reporting.publish.context import Folder
from harness.running import provenance, refresh
from harness.running.results import read_table

PROJECT = Path(__file__).resolve().parents[2]


def test_a_recorded_command_reruns_into_its_own_folder_with_the_redo():
    argv = refresh.again("run-sweep --preset byzantine --out /elsewhere/byz --no-figures "
                         "--redo failed", "results/byzantine", 0.01)
    assert argv == ["run-sweep", "--preset", "byzantine", "--out", "results/byzantine",
                    "--no-figures", "--redo", "stale,failed,loaded:0.01"]
    assert refresh.again("run-sweep -t ltp -o /tmp/x -s 0", "results/e", 0.05)[:5] == \
        ["run-sweep", "-t", "ltp", "-s", "0"]
    # The simulator's folders are rerun the same way; simulate takes no --no-figures.
    assert refresh.again("simulate --workers 8 --out elsewhere --seeds 1", "results/s", 0.01) == \
        ["simulate", "--workers", "8", "--seeds", "1", "--out", "results/s", "--redo",
         "stale,failed,loaded:0.01"]
    item = refresh.Item("results/s", 1, 1, 0.0, ("simulate --workers 8", "run-sweep -t ltp"))
    assert not item.by_hand
    assert refresh.Item("results/v", 1, 1, 0.0, ("bench-transport --loopback-only",)).by_hand


def test_a_folder_cites_the_command_that_fills_it_not_the_pass_that_refreshed_it(tmp_path):
    # A refresh pass records its own argv (the recorded command with --no-figures and a redo);
    # the folder's citation is the command without them, once, whichever pass came last.
    first = "/p/.venv/bin/invoke run-sweep --preset cser --out results/cser"
    again = "/p/.venv/bin/invoke " + " ".join(refresh.again(first.split("invoke ")[1],
                                                            "results/cser", 0.01))
    assert provenance.filling_command(again) == first
    assert provenance.filling_command(first + " --redo=failed --no-figures -s 0") == first + " -s 0"
    folder = tmp_path / "results" / "cser"
    shutil.copytree(PROJECT / "results" / "cser", folder, ignore=shutil.ignore_patterns("figures"))
    man = provenance.read_manifest(folder)
    man["provenance"]["command"] = again
    man["extended"] = [{"provenance": {"command": first}}]
    (folder / "manifest.json").write_text(json.dumps(man))
    assert Folder(folder, tmp_path).commands() == [
        ".venv/bin/invoke run-sweep --preset cser --out results/cser"]


def test_a_folder_gives_back_its_recorded_runs():
    folder = PROJECT / "results" / "default-check"
    plan = refresh.recorded_plan(folder)
    assert plan is not None
    ids = {s.run_id for s in plan.specs()}
    assert ids == set(read_table(folder / "runs.csv").run_id)


def test_the_readme_folders_come_first_and_an_unknown_folder_is_refused(tmp_path):
    for rel in ("results/tolerance", "results/default-check", "results/cser"):
        shutil.copytree(PROJECT / rel, tmp_path / rel, ignore=shutil.ignore_patterns("figures"))
    items = refresh.plan(root=tmp_path)
    rels = [it.rel for it in items]
    # Stale or fresh depends on today's code; whichever are stale, the README's come first.
    readme = [r for r in rels if r in refresh.readme_folders()]
    assert rels[:len(readme)] == readme
    with pytest.raises(refresh.RefreshError, match="not a published results folder"):
        refresh.plan(["results/nowhere"], root=tmp_path)


def test_a_folder_missing_recorded_runs_is_neither_fresh_nor_left_out(tmp_path):
    # A refresh stopped after its --redo stale had dropped the stale rows it had not rerun left
    # a folder whose table holds a few of the runs its manifest records: not fresh, and to do.
    rel = "results/default-check"
    folder = tmp_path / rel
    shutil.copytree(PROJECT / rel, folder, ignore=shutil.ignore_patterns("figures"))
    runs = read_table(folder / "runs.csv")
    assert provenance.missing_run_ids(folder) == set()
    dropped = set(runs.run_id.astype(str)[:7])
    runs[~runs.run_id.astype(str).isin(dropped)].to_csv(folder / "runs.csv", index=False)
    assert provenance.missing_run_ids(folder) == dropped
    f = provenance.freshness(folder)
    assert (f.missing_runs, f.planned_runs) == (7, len(runs)) and not f.fresh
    assert ("**Incomplete:** 7 of the" in f.text()) if f.same_code else \
        ("7 of the" in f.text() and "**Stale" in f.text())
    item, = refresh.plan([rel], root=tmp_path)
    assert item.missing == 7 and item.recorded and item.runs == len(runs) - 7
