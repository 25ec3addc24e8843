"""One handle for every process the testbed starts inside an emulated host (and :func:`run`, for
commands in the root namespace).

A host process is the leader of its own process group (its own session), writes its output to one
file, and is recorded in the testbed's ledger (``groups``) from the moment it exists until it has
been killed, so that a harness killed outright still leaves a record for ``invoke clean``. Two
launchers make them: :meth:`topologies.testbed.network.Testbed.start_process` (``mnexec`` through
Mininet, a :class:`subprocess.Popen` to reap) and :class:`harness.hosts.zygote.Zygote` (forked by
the fork server, which reaps its own children; the exit code travels through a status file). Both
hand back a :class:`HostProcess`, so the runner and the benchmarks treat them alike.
"""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path

from topologies.testbed.ledger import Ledger, ProcessRef
from transports.base import UserError


class TestbedError(UserError, RuntimeError):
    """The emulated network could not be brought up or used."""

    __test__ = False  # not a pytest test class, despite the name


def run(*args: str, env: dict | None = None) -> str:
    """Run a command in the root namespace (30 s at most) and return its output; raise
    :class:`TestbedError` with its error text when it fails."""
    proc = subprocess.run(args, capture_output=True, text=True, env=env, timeout=30)
    if proc.returncode != 0:
        raise TestbedError(f"{' '.join(args)} failed: {(proc.stderr or proc.stdout).strip()}")
    return proc.stdout


class HostProcess:
    """A program running inside emulated host ``host``, as the leader of its own process group.

    Give exactly one of ``popen`` (a child of this process, reaped here) or ``pid`` with
    ``status_path`` (someone else's child that writes its exit code to that file as its last
    act; one that leaves no code died abnormally and polls as -1).
    """

    def __init__(self, host: str, log_path: Path, ledger: Ledger, *,
                 popen: subprocess.Popen | None = None, pid: int | None = None,
                 status_path: Path | None = None) -> None:
        if (popen is None) == (pid is None) or (pid is not None and status_path is None):
            raise ValueError("give either popen, or pid with status_path.")
        self.host = host
        self.log_path = log_path
        self.ledger = ledger
        self.popen = popen
        self.status_path = status_path
        self.ref = ProcessRef.of(popen.pid if popen is not None else pid)
        ledger.add_process("groups", self.ref)

    @property
    def pid(self) -> int:
        """The process (and process group) id."""
        return self.ref.pid

    def poll(self) -> int | None:
        """The exit code (-1 if it died without leaving one), or None while it runs."""
        if self.popen is not None:
            return self.popen.poll()
        code = self._status()
        if code is not None:
            return code
        if self.ref.alive():
            return None
        # It may have written its status between the two checks.
        code = self._status()
        return -1 if code is None else code

    def _status(self) -> int | None:
        with contextlib.suppress(FileNotFoundError, ValueError):
            text = self.status_path.read_text().strip()
            return int(text) if text else None
        return None

    def kill(self) -> None:
        """Kill the whole process group (a no-op once it is gone), reap it, forget it."""
        self.ref.kill_group()
        if self.popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=5)
        self.ledger.remove_process("groups", self.ref)
