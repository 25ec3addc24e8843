"""Every command of every teaching lab runs, in its smallest form (few iterations, two workers).

The commands are read from the labs' ``sh`` blocks, so the pages and this test cannot drift
apart. Sweeps are written to a temporary folder instead of ``results/``.
"""

import re
import subprocess
from pathlib import Path

import pytest

from harness import results

PROJECT = Path(__file__).resolve().parents[2]
LABS = sorted((PROJECT / "docs" / "labs").glob("lab*.md"))


def lab_commands(page: Path) -> list[str]:
    """The command lines of a lab page's ``sh`` code blocks, in order."""
    blocks = re.findall(r"```sh\n(.*?)```", page.read_text(), re.S)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def smallest(command: str, out: Path) -> str:
    """The command in its smallest form, writing under ``out`` instead of ``results/``."""
    command = re.sub(r"results/(lab\d[\w-]*)", lambda m: str(out / m.group(1)), command)
    if " run-sweep " in command + " ":
        preset = re.search(r"--preset (\S+)", command).group(1)
        if "--out" not in command:
            command += f" --out {out / preset}"
        if preset == "lab4":   # its faults must strike within the run, and a worker survive
            command += " --iterations 10 --workers 2 --fault none,kill@4,link@4:1s"
        else:
            command += " --iterations 3 --workers 2"
    if " bench-network" in command:
        command += " --seconds 1"
    return command


@pytest.mark.parametrize("page", LABS, ids=lambda p: p.stem)
def test_lab_commands_run(page, tmp_path, clean_machine):
    for command in lab_commands(page):
        small = smallest(command, tmp_path)
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
        assert "Headline numbers" in (runs.parent / "report.md").read_text()
        if runs.parent.name == "lab4":
            # What students explain: the PS noticed the kill (TCP by the reset, LTP by the
            # deadline) and trained on.
            kills = {r["scheme"]: r for r in rows if r["fault"].startswith("kill")}
            assert kills["tcp-cubic"]["detected_as"] == "gone"
            assert kills["ltp"]["detected_as"] == "missing"
            assert all(float(r["detection_s"]) < 2.0 for r in kills.values())
            assert "Training through failure" in (runs.parent / "report.md").read_text()
