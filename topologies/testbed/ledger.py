"""What a running testbed created, on disk, so that exactly that can be removed later.

The testbed writes every process, interface and changed sysctl into ``ledger.json`` in its state
folder the moment it creates it. Normal shutdown removes them in ``finally``; if the owner was
killed outright (SIGKILL, power loss), the next testbed, or ``invoke clean``, reads the ledger and
removes what is left, and only that: processes are matched by PID *and* start time, so a recycled
PID is never signalled, and nothing is looked up by name pattern.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import time
from pathlib import Path


@dataclasses.dataclass(frozen=True)
class ProcessRef:
    """A process identified by PID and start time (so a reused PID does not match)."""

    pid: int
    start_ticks: int

    @classmethod
    def of(cls, pid: int) -> ProcessRef:
        """Reference process ``pid`` (one that already exited gets a reference that is never
        alive)."""
        try:
            return cls(pid, _start_ticks(pid))
        except OSError:
            return cls(pid, -1)

    def alive(self) -> bool:
        """True while this very process exists (zombies count as gone)."""
        try:
            stat = Path(f"/proc/{self.pid}/stat").read_text()
        except OSError:
            return False
        fields = stat.rsplit(")", 1)[1].split()
        return fields[0] != "Z" and int(fields[19]) == self.start_ticks

    def kill_group(self, grace_s: float = 2.0) -> None:
        """SIGTERM the process group led by this process, then SIGKILL what is left."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if not self.alive():
                return
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, sig)
            deadline = time.monotonic() + grace_s
            while self.alive() and time.monotonic() < deadline:
                time.sleep(0.01)

    def kill(self, grace_s: float = 2.0) -> None:
        """SIGTERM this one process, then SIGKILL it if it lingers."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if not self.alive():
                return
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)
            deadline = time.monotonic() + grace_s
            while self.alive() and time.monotonic() < deadline:
                time.sleep(0.01)


def _start_ticks(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[19])


def link_exists(name: str) -> bool:
    """True if a network interface ``name`` exists in the root namespace."""
    return Path("/sys/class/net", name).exists()


class Ledger:
    """The on-disk record of one testbed's resources.

    Sections: ``owner`` (the process that runs the testbed), ``groups`` (process groups to kill),
    ``processes`` (single processes to kill, e.g. Mininet host shells), ``links`` (root-namespace
    interfaces to delete), ``sysctl`` (original values to restore), ``ovs`` (the OVS state folder).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.data: dict = {}

    def load(self) -> dict:
        """Read the ledger; an absent file is an empty ledger."""
        try:
            self.data = json.loads(self.path.read_text())
        except FileNotFoundError:
            self.data = {}
        return self.data

    def save(self) -> None:
        """Write atomically, so a crash never leaves half a ledger."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1))
        os.replace(tmp, self.path)

    def owner(self) -> ProcessRef | None:
        """The process that owns the recorded resources, if any."""
        o = self.data.get("owner")
        return ProcessRef(**o) if o else None

    def claim(self) -> None:
        """Make this process the owner of a fresh, empty ledger."""
        me = ProcessRef.of(os.getpid())
        self.data = {"owner": dataclasses.asdict(me), "groups": [], "processes": [], "links": [],
                     "sysctl": {}, "ovs": None}
        self.save()

    def add(self, section: str, item) -> None:
        """Record one resource and save at once."""
        self.data.setdefault(section, []).append(item)
        self.save()

    def add_process(self, section: str, ref: ProcessRef) -> None:
        """Record a process (``groups`` or ``processes``)."""
        self.add(section, dataclasses.asdict(ref))

    def remove_process(self, section: str, ref: ProcessRef) -> None:
        """Forget a process that has been reaped."""
        item = dataclasses.asdict(ref)
        if item in self.data.get(section, []):
            self.data[section].remove(item)
            self.save()

    def set(self, key: str, value) -> None:
        """Record a value (``ovs`` folder, ...)."""
        self.data[key] = value
        self.save()

    def remember_sysctl(self, key: str, original: str) -> None:
        """Record a sysctl's original value, the first time it is changed."""
        self.data.setdefault("sysctl", {}).setdefault(key, original)
        self.save()

    def release(self) -> None:
        """Everything was removed: delete the ledger."""
        self.data = {}
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


def read_sysctl(key: str) -> str:
    """The current value of a sysctl, whitespace-normalised."""
    return " ".join(Path("/proc/sys", key.replace(".", "/")).read_text().split())


def write_sysctl(key: str, value: str) -> None:
    """Set a sysctl in the root namespace."""
    Path("/proc/sys", key.replace(".", "/")).write_text(str(value))


def reclaim(ledger: Ledger, stop_ovs) -> list[str]:
    """Remove everything recorded in ``ledger``; return a line per thing removed.

    ``stop_ovs(folder)`` stops a private Open vSwitch recorded in the ledger.
    """
    data = ledger.load()
    done = []
    for item in data.get("groups", []):
        ref = ProcessRef(**item)
        if ref.alive():
            ref.kill_group()
            done.append(f"killed process group {ref.pid}")
    for item in data.get("processes", []):
        ref = ProcessRef(**item)
        if ref.alive():
            ref.kill()
            done.append(f"killed process {ref.pid}")
    for name in data.get("links", []):
        if link_exists(name):
            subprocess.run(["ip", "link", "del", name], capture_output=True)
            done.append(f"deleted link {name}")
    if data.get("ovs"):
        done += stop_ovs(Path(data["ovs"]))
    for key, value in data.get("sysctl", {}).items():
        if read_sysctl(key) != value:
            write_sysctl(key, value)
            done.append(f"restored {key} = {value}")
    ledger.release()
    return done
