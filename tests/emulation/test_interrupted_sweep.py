"""A sweep killed mid-run leaves nothing behind and resumes without repeating finished runs."""

import json
import signal
import subprocess
import time
from pathlib import Path

from harness.running import results
from tests.emulation.conftest import leftovers

PROJECT = Path(__file__).resolve().parents[2]
INVOKE = [str(PROJECT / ".venv" / "bin" / "invoke"), "-r", str(PROJECT)]


def _sweep(out, iterations):
    return INVOKE + ["run-sweep", "--preset", "smoke", "--transports", "tcp-cubic", "--loss",
                     "0,1", "--workers", "2", "--bandwidth", "100", "--iterations",
                     str(iterations), "--out", str(out)]


def _wait_for_training(out, proc, deadline_s=120):
    """Return once some run has recorded a few iterations."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the sweep ended before it could be interrupted"
        for ps in out.glob("runs/*/raw/ps1.jsonl"):
            if len(ps.read_text().splitlines()) >= 3:
                return
        time.sleep(0.1)
    raise AssertionError("no run started training in time")


def test_sigterm_mid_run_cleans_up_and_the_same_command_resumes(tmp_path, clean_machine):
    out = tmp_path / "sweep"
    proc = subprocess.Popen(_sweep(out, 60), cwd=PROJECT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    _wait_for_training(out, proc)
    proc.send_signal(signal.SIGTERM)
    output = proc.communicate(timeout=60)[0]
    assert proc.returncode == 130, output
    assert "resume" in output
    assert leftovers() == []
    assert results.finished_run_ids(out) == set()

    done = subprocess.run(_sweep(out, 60), cwd=PROJECT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = results.read_rows(out / "runs.csv")
    assert sorted(r["status"] for r in rows) == ["ok", "ok"]
    assert list(out.glob("runs/*.interrupted-*")), "the interrupted run's files were not kept"
    again = subprocess.run(_sweep(out, 60), cwd=PROJECT, capture_output=True, text=True)
    assert again.returncode == 0 and "nothing to run" in again.stdout
    assert len(results.read_rows(out / "runs.csv")) == 2


def test_sigkill_leftovers_are_reclaimed_by_clean(tmp_path, clean_machine):
    out = tmp_path / "sweep"
    proc = subprocess.Popen(_sweep(out, 60), cwd=PROJECT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    _wait_for_training(out, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert leftovers(), "SIGKILL should leave the network up for `invoke clean` to remove"
    cleaned = subprocess.run(INVOKE + ["clean"], cwd=PROJECT, capture_output=True, text=True)
    assert cleaned.returncode == 0, cleaned.stderr
    assert "deleted link" in cleaned.stdout or "killed" in cleaned.stdout
    assert leftovers() == []
    assert json.loads((out / "manifest.json").read_text())["plan"]["name"] == "smoke"
