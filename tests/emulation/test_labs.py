"""Every command of every teaching lab runs, in its smallest form (few iterations, two workers),
and the lab checker (``invoke lab-check``) grades what they wrote: it passes, and a copy with a
failed run does not.

The commands are read from the labs' ``sh`` blocks, so the pages and this test cannot drift
apart. Sweeps are written to a temporary folder instead of ``results/``.
"""

import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from harness.reporting.labs import grading
from harness.running import results

PROJECT = Path(__file__).resolve().parents[2]
LABS = sorted((PROJECT / "docs" / "labs").glob("lab*.md"))


def lab_commands(page: Path) -> list[str]:
    """The command lines of a lab page's ``sh`` code blocks, in order."""
    blocks = re.findall(r"```sh\n(.*?)```", page.read_text(), re.S)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def smallest(command: str, out: Path, drawn_later: bool = False) -> str:
    """The command in its smallest form, writing under ``out`` instead of ``results/``; a sweep
    whose figures a later command of the lab draws (``drawn_later``) leaves them to it."""
    command = re.sub(r"results/(lab\d[\w-]*)", lambda m: str(out / m.group(1)), command)
    if " run-sweep " in command + " ":
        preset = re.search(r"--preset (\S+)", command).group(1)
        if "--out" not in command:
            command += f" --out {out / preset}"
        if preset == "lab4":   # its faults strike within the run, a worker survives, and the
            # run outlasts TCP's backed-off retransmission after the link's 1 s outage
            command += " --iterations 30 --workers 2 --fault none,kill@4,link@4:1s"
        elif preset == "lab6":   # peer to peer: no --workers, the fabric is the preset's
            command += " --iterations 3"
        elif preset == "lab2":   # no loss and the most: every statement has a case
            command += " --iterations 3 --workers 2 --loss 0,10"
        elif preset == "lab5":   # one attacker of four, the defence tolerating one
            command += (" --iterations 10 --workers 4 --byzantine 0,1:sign-flip --tolerate 1"
                        " --aggregator mean,score")
        else:
            command += " --iterations 3 --workers 2"
        if drawn_later:
            command += " --no-figures"
    if " bench-network" in command:
        command += " --seconds 1"
    if " bench-series" in command:
        command += f" --pushes 2 --workers 2 --out {out / 'series'}"
    return command


def wrong_copy(folder: Path, out: Path) -> Path:
    """A copy of a lab's sweep folder with its first run marked failed: a folder the checker
    must not pass."""
    shutil.copytree(folder, out)
    runs = pd.read_csv(out / "runs.csv")
    runs.loc[0, "status"] = "failed"
    runs.to_csv(out / "runs.csv", index=False)
    return out


@pytest.mark.parametrize("page", LABS, ids=lambda p: p.stem)
def test_lab_commands_run(page, tmp_path, clean_machine):
    commands = lab_commands(page)
    for i, command in enumerate(commands):
        drawn_later = any(" figures --sweep " in later for later in commands[i + 1:])
        small = smallest(command, tmp_path, drawn_later)
        proc = subprocess.run(["bash", "-c", small], cwd=PROJECT, capture_output=True, text=True,
                              timeout=900)
        assert proc.returncode == 0, f"{small}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    sweeps = list(tmp_path.glob("lab*/runs.csv"))
    assert sweeps, "the lab ran no sweep"
    for runs in sweeps:
        rows = results.read_rows(runs)
        bad = [(r["scheme"], r["loss_pct"], r["status"], r["reason"][:80]) for r in rows
               if r["status"] != "ok"]
        assert rows and not bad, f"{runs.parent.name}: runs that did not finish: {bad}"
        if page.stem != "lab6-peer-to-peer":   # the peer-to-peer report has its own shape
            assert "Headline numbers" in (runs.parent / "report.md").read_text()
    # What the page says its commands show, graded as a student's folder is (invoke lab-check),
    # then a copy with a run marked failed, which must not pass.
    number = int(re.match(r"lab(\d+)", page.stem).group(1))
    folder = tmp_path / f"lab{number}"
    sheet = grading.grade(number, folder)
    assert sheet.passed, sheet.text()
    assert not grading.grade(number, wrong_copy(folder, tmp_path / "wrong")).passed
