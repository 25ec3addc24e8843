"""Emulation tests need root, Mininet and Open vSwitch; they use the real testbed, no fakes."""

import os
import re
import shutil
from pathlib import Path

import pytest

from topologies.network import STATE_DIR

OUR_PROCESS = re.compile(r"mininet:(ps1|s1|w\d+)|osken-manager|harness\.node|harness\.zygote|"
                         r"harness\.bench_node|iperf3|nfq-delay")
OUR_LINK = re.compile(r"(ps1|s1|w\d+)-eth\d+")


def pytest_collection_modifyitems(config, items):
    if os.geteuid() != 0 or shutil.which("mnexec") is None:
        skip = pytest.mark.skip(reason="emulation tests need root and ./setup.sh")
        for item in items:
            if "emulation" in str(item.fspath):
                item.add_marker(skip)


def leftovers() -> list[str]:
    """Everything a testbed could leave behind that is still there."""
    found = [f"link {n}" for n in os.listdir("/sys/class/net") if OUR_LINK.fullmatch(n)]
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if OUR_PROCESS.search(cmd) and int(pid) != os.getpid():
            found.append(f"process {pid}: {cmd[:80]}")
    for daemon in ("ovs-vswitchd", "ovsdb-server"):
        pidfile = STATE_DIR / "ovs" / "run" / f"{daemon}.pid"
        if pidfile.exists() and Path(f"/proc/{pidfile.read_text().strip()}").exists():
            found.append(f"{daemon} still running")
    if (STATE_DIR / "ledger.json").exists():
        found.append("ledger.json still present")
    return found


@pytest.fixture
def clean_machine():
    """Assert the machine holds none of our resources before and after the test."""
    assert leftovers() == [], "leftovers from an earlier run; run `invoke clean`"
    yield
    assert leftovers() == []
