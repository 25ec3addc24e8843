"""Builds and runs the native LTP core's own checks: C unit tests (core and UDP driver), sanitizers, a short fuzz run.

Compiles every binary side by side (``make -j2 binaries``), then runs
``make -C transports/native test test-asan`` (the core's tests, the forged-datagram
reproductions of ``tests/test_trust.c``, the guards of ``tests/test_guards.c``, keys per pair
and replays in ``tests/test_pairs.c``,
the driver's receive batches of ``tests/test_udp_io.c`` and the staged AES-NI GMAC against
OpenSSL's tags in ``tests/test_gmac.c``) and a 10-second ``make ... fuzz``
(the stateful core target, the driver's receive batches and placement, its parsing) into
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
    built = _make("-j2", "binaries", timeout_s=600)   # compiled side by side, run one by one
    assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-4000:]
    proc = _make("test", "test-asan", timeout_s=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    summaries = [line for line in proc.stdout.splitlines() if line.endswith(" failed")]
    # test_core, test_trust, test_guards, test_pairs, test_udp_io, test_udp and test_gmac, plain
    # and sanitized
    assert len(summaries) == 14, summaries
    assert all(line.endswith(", 0 failed") for line in summaries), summaries


@pytest.mark.skipif(shutil.which("clang") is None, reason="clang with libFuzzer is needed")
def test_fuzz_state_machine_and_driver_briefly() -> None:
    proc = _make("fuzz", "FUZZ_SECONDS=6", "FUZZ_RX_SECONDS=3", "FUZZ_UDP_SECONDS=1",
                 timeout_s=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert proc.stderr.count("Done") == 3 and "ERROR" not in proc.stderr


@pytest.mark.skipif(shutil.which("make") is None or shutil.which("cc") is None,
                    reason="make and a C compiler are needed")
def test_every_defence_is_guarded_by_a_test() -> None:
    """The mutation check (``make mutants``, tests/mutants.py): each defence of the receive path
    removed in turn, some C test fails on it; none survives, each mutant builds."""
    proc = _make("mutants", timeout_s=1200)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    killed = [line for line in proc.stdout.splitlines() if line.startswith("killed ")]
    assert len(killed) >= 13 and " 0 problems" in proc.stdout, proc.stdout[-2000:]
