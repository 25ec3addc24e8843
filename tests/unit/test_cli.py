"""Bad input at the command line: one sentence, exit code 2, no traceback, nothing written."""

import subprocess
import sys
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[2]
INVOKE = [str(Path(sys.executable).parent / "invoke"), "-r", str(PROJECT)]


@pytest.mark.parametrize("args, words", [
    (["--transports", "quic"], "unknown transport 'quic'"),
    (["--preset", "huge"], "unknown preset 'huge'"),
    (["--model", "resnet"], "unknown model 'resnet'"),
    (["--loss", "60"], "loss_pct must be"),
    (["--loss", "1,x"], "'x' is not a loss model"),
    (["--workers", "0"], "n_workers must be"),
    (["--delay", "5000"], "delay_ms must be"),
    (["--queue", "0"], "queue_pkts must be"),
    (["--bandwidth", "0"], "bottleneck_mbps must be"),
    (["--transports", "ltp+filler=sideways"], "filler must be one of"),
])
def test_bad_sweep_arguments(tmp_path, args, words):
    out = tmp_path / "sweep"
    proc = subprocess.run(INVOKE + ["run-sweep", "--out", str(out)] + args,
                          capture_output=True, text=True, cwd=PROJECT)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and words in lines[0], proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert not out.exists()


def test_figures_of_a_missing_sweep(tmp_path):
    proc = subprocess.run(INVOKE + ["figures", "--sweep", str(tmp_path / "nothing")],
                          capture_output=True, text=True, cwd=PROJECT)
    assert proc.returncode == 2
    assert "run a sweep" in proc.stderr and "Traceback" not in proc.stderr
