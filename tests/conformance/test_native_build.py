"""Builds and runs the native LTP core's own checks: C unit tests (core and UDP driver), sanitizers, a short fuzz run.

Runs ``make -C transports/native test test-asan`` and ``make ... fuzz FUZZ_SECONDS=10`` into
``transports/native/build/`` and asserts that each succeeds. Skipped when make or a compiler is
missing (the fuzz run needs clang with libFuzzer).

    .venv/bin/pytest tests/conformance/test_native_build.py
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

NATIVE = Path(__file__).resolve().parents[2] / "transports" / "native"


def _make(*targets: str, timeout_s: float) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "-C", str(NATIVE), *targets], capture_output=True, text=True,
                          timeout=timeout_s, check=False)


@pytest.mark.skipif(shutil.which("make") is None or shutil.which("cc") is None,
                    reason="make and a C compiler are needed")
def test_c_unit_tests_plain_and_sanitized() -> None:
    proc = _make("test", "test-asan", timeout_s=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    summaries = [line for line in proc.stdout.splitlines() if line.endswith(" failed")]
    assert len(summaries) == 4 and all(line.endswith(", 0 failed") for line in summaries), summaries


@pytest.mark.skipif(shutil.which("clang") is None, reason="clang with libFuzzer is needed")
def test_fuzz_input_path_briefly() -> None:
    proc = _make("fuzz", "FUZZ_SECONDS=10", timeout_s=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "Done" in proc.stderr and "ERROR" not in proc.stderr
