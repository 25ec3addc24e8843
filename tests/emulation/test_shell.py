"""The interactive testbed (``invoke shell``): Mininet's CLI driven from stdin, and nothing left
behind after it ends."""

import subprocess
import sys
from pathlib import Path

from tests.emulation.conftest import leftovers

PROJECT = Path(__file__).resolve().parents[2]
INVOKE = [str(Path(sys.executable).parent / "invoke"), "-r", str(PROJECT)]


def test_the_shell_runs_commands_from_stdin_and_leaves_nothing(tmp_path, clean_machine):
    proc = subprocess.run(INVOKE + ["shell", "--workers", "2", "--loss", "0", "--transport",
                                    "tcp-cubic", "--out", str(tmp_path / "shell")],
                          input="pingall\nexit\n", capture_output=True, text=True, cwd=PROJECT,
                          timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0% dropped (6/6 received)" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert "the testbed is down" in proc.stdout
    assert leftovers() == []


def test_the_shell_kills_what_was_left_running_in_a_host(tmp_path, clean_machine):
    # A daemon leaves the host shell's process group; the shell still finds it by namespace.
    proc = subprocess.run(INVOKE + ["shell", "--workers", "1", "--loss", "2", "--delay", "5",
                                    "--out", str(tmp_path / "shell")],
                          input="ps1 iperf3 -s -D\nw1 ping -c 2 -U ps1\nexit\n",
                          capture_output=True, text=True, cwd=PROJECT, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 packets transmitted" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert leftovers() == []
