"""A private userspace Open vSwitch, run from the project's state folder.

The kernel here has no Open vSwitch datapath, so bridges use ``datapath_type=netdev`` (userspace
forwarding); the same code path runs on machines that do have the kernel module. ``ovsdb-server``
and ``ovs-vswitchd`` run with their database, sockets, pid files and logs under one folder
(``OVS_RUNDIR``, ``OVS_DBDIR``, ``OVS_LOGDIR``, ``OVS_SYSCONFDIR``), so they never touch a system
Open vSwitch and Mininet's own ``ovs-vsctl`` calls find them through the same variables.

Userspace OVS transmits through one socket whose buffer is ``net.core.wmem_default`` (past about
90 queued full-size packets it drops silently) and receives through per-port sockets sized by
``net.core.rmem_default`` (which overflow under load, also silently). The caller raises both
before :meth:`PrivateOVS.start` (see :mod:`topologies.testbed.network`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from pathlib import Path

from topologies.testbed.ledger import ProcessRef
from transports.base import UserError

SCHEMA = Path("/usr/share/openvswitch/vswitch.ovsschema")
DAEMONS = ("ovs-vswitchd", "ovsdb-server")  # stop order


class OVSError(UserError, RuntimeError):
    """Open vSwitch could not be started."""


def ovs_env(folder: Path) -> dict[str, str]:
    """The environment variables that point OVS tools at the private instance in ``folder``."""
    return {"OVS_RUNDIR": str(folder / "run"), "OVS_LOGDIR": str(folder / "log"),
            "OVS_DBDIR": str(folder / "db"), "OVS_SYSCONFDIR": str(folder / "etc")}


def _pid(folder: Path, daemon: str) -> ProcessRef | None:
    try:
        return ProcessRef.of(int((folder / "run" / f"{daemon}.pid").read_text()))
    except (OSError, ValueError):
        return None


class PrivateOVS:
    """``ovsdb-server`` + ``ovs-vswitchd`` with every file under ``folder``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.env = {**os.environ, **ovs_env(folder)}

    def _run(self, *args: str) -> str:
        proc = subprocess.run(args, env=self.env, capture_output=True, text=True, timeout=30)
        if proc.returncode != 0:
            raise OVSError(f"{' '.join(args)} failed: {proc.stderr.strip()}")
        return proc.stdout

    def settle_datapath(self) -> None:
        """Return once the datapath forwards by the current flow table.

        A barrier reply means the switch's OpenFlow table has changed; the flows the datapath
        has cached from the old table are revalidated asynchronously (a few milliseconds
        later), so a packet sent right after a barrier can still meet an old decision.
        ``revalidator/wait`` returns after a full revalidation pass. The same command serves
        the userspace and the kernel datapath.
        """
        self._run("ovs-appctl", "--timeout=5", "-t", "ovs-vswitchd", "revalidator/wait")

    def purge_datapath(self) -> None:
        """Drop every flow the datapath has cached, so the next packets are forwarded by the
        current flow table (through the slow path, once). Returns at once, where
        :meth:`settle_datapath` waits for a revalidation pass (up to half a second)."""
        self._run("ovs-appctl", "--timeout=5", "-t", "ovs-vswitchd", "revalidator/purge")

    def start(self) -> None:
        """Create a fresh database and start both daemons (they detach and write pid files)."""
        for tool in ("ovsdb-server", "ovs-vswitchd", "ovs-vsctl", "ovsdb-tool"):
            if shutil.which(tool) is None:
                raise OVSError(f"{tool} is missing; run ./setup.sh to install openvswitch-switch.")
        stop(self.folder)  # a previous instance that was killed outright
        shutil.rmtree(self.folder, ignore_errors=True)
        for sub in ("run", "log", "db", "etc"):
            (self.folder / sub).mkdir(parents=True)
        db = self.folder / "db" / "conf.db"
        self._run("ovsdb-tool", "create", str(db), str(SCHEMA))
        self._run("ovsdb-server", str(db), f"--remote=punix:{self.folder}/run/db.sock",
                  "--pidfile", "--detach", "--log-file")
        self._run("ovs-vsctl", "--no-wait", "init")
        self._run("ovs-vswitchd", "--pidfile", "--detach", "--log-file")
        self._run("ovs-vsctl", "--timeout=10", "show")

    def pids(self) -> list[int]:
        """The running daemons' process ids (they detach, so they are nobody's children)."""
        return [ref.pid for ref in (_pid(self.folder, d) for d in DAEMONS) if ref and ref.alive()]

    def stop(self) -> list[str]:
        """Stop both daemons; see :func:`stop`."""
        return stop(self.folder)

    def log_tail(self, lines: int = 20) -> str:
        """The end of ovs-vswitchd's log, for error messages."""
        log = self.folder / "log" / "ovs-vswitchd.log"
        with contextlib.suppress(OSError):
            return "\n".join(log.read_text().splitlines()[-lines:])
        return ""


def stop(folder: Path) -> list[str]:
    """Stop the daemons of the private instance in ``folder`` if they run; return what was done.

    Asks each daemon to exit through its control socket, and kills it by its recorded PID if it
    does not go within a few seconds.
    """
    env = {**os.environ, **ovs_env(folder)}
    done = []
    for daemon in DAEMONS:
        ref = _pid(folder, daemon)
        if ref is None or not ref.alive():
            continue
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            subprocess.run(["ovs-appctl", "--timeout=5", "-t", daemon, "exit"], env=env,
                           capture_output=True, timeout=10)
        deadline = time.monotonic() + 5
        while ref.alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        ref.kill()
        done.append(f"stopped {daemon} ({ref.pid})")
    return done
