"""Emulation tests need root, Mininet and Open vSwitch; they use the real testbed, no fakes."""

import contextlib
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from topologies.impair import loss as impair
from topologies.testbed.network import STATE_DIR

OUR_PROCESS = re.compile(r"mininet:(ps1|s1|w\d+|x\d+|l\d+|sp\d+)|osken-manager|harness\.node|"
                         r"harness\.zygote|harness\.bench_node|iperf3|nfq-delay|"
                         r"topologies\.onoff|topologies\.multicast|tcpdump")
OUR_LINK = re.compile(r"(ps1|s1|w\d+|x\d+|l\d+|sp\d+)-eth\d+")


def pytest_collection_modifyitems(config, items):
    if os.geteuid() != 0 or shutil.which("mnexec") is None:
        skip = pytest.mark.skip(reason="emulation tests need root and ./setup.sh")
        for item in items:
            if "emulation" in str(item.fspath):
                item.add_marker(skip)


PROJECT = Path(__file__).resolve().parents[2]


def _could_be_ours(pid: str) -> bool:
    """A testbed's processes run inside an emulated host (another network namespace) or were
    started from this project's folder. Other checkouts on the machine run the same programs on
    loopback (the conformance tests train over 127.0.0.1); those are not ours."""
    try:
        if os.readlink(f"/proc/{pid}/ns/net") != os.readlink("/proc/self/ns/net"):
            return True
        return Path(os.readlink(f"/proc/{pid}/cwd")).is_relative_to(PROJECT)
    except OSError:
        return False


def leftovers() -> list[str]:
    """Everything a testbed could leave behind that is still there."""
    found = [f"link {n}" for n in os.listdir("/sys/class/net") if OUR_LINK.fullmatch(n)]
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if OUR_PROCESS.search(cmd) and int(pid) != os.getpid() and _could_be_ours(pid):
            found.append(f"process {pid}: {cmd[:80]}")
    for daemon in ("ovs-vswitchd", "ovsdb-server"):
        pidfile = STATE_DIR / "ovs" / "run" / f"{daemon}.pid"
        if pidfile.exists() and Path(f"/proc/{pidfile.read_text().strip()}").exists():
            found.append(f"{daemon} still running")
    if impair.GE_BINARY.is_file():
        # The kernel frees a detached program a moment after its filter goes.
        deadline = time.monotonic() + 5
        while (programs := subprocess.run([str(impair.GE_BINARY), "count"], capture_output=True,
                                          text=True).stdout.strip()) != "0" \
                and time.monotonic() < deadline:
            time.sleep(0.02)
        if programs != "0":
            found.append(f"{programs} Gilbert-Elliott eBPF programs still loaded")
    if (STATE_DIR / "ledger.json").exists():
        found.append("ledger.json still present")
    return found


@pytest.fixture
def clean_machine():
    """Assert the machine holds none of our resources before and after the test."""
    assert leftovers() == [], "leftovers from an earlier run; run `invoke clean`"
    yield
    assert leftovers() == []


@contextlib.contextmanager
def network(params, folder: Path, *, forked: bool = False, **testbed_kw):
    """A live testbed of ``params`` (the incast star's or the fabric's) under ``folder``; with
    ``forked``, also its fork server, and then it yields ``(testbed, spawn)``."""
    from harness.hosts.zygote import Zygote
    from harness.running.runner import spawn_forked
    from topologies.testbed.network import Testbed

    with Testbed(params, folder, **testbed_kw) as tb:
        if not forked:
            yield tb
            return
        with Zygote(folder, tb.ledger) as zygote:
            yield tb, spawn_forked(tb, zygote)


def network_fixture(label: str, params, *, forked: bool = False, scope: str = "module",
                    **testbed_kw):
    """A fixture of one live :func:`network` shared by a module's (or a class's) tests: the one
    way the emulation tests bring a network up. ``label`` names its folder."""
    @pytest.fixture(scope=scope)
    def fixture(tmp_path_factory):
        with network(params, tmp_path_factory.mktemp(label), forked=forked, **testbed_kw) as bed:
            yield bed
    return fixture


@contextlib.contextmanager
def small_incast(folder: Path, n_workers: int, bottleneck_mbps: float = 100):
    """A live incast testbed and its forked-process spawner, for a module of short runs."""
    from topologies.incast import IncastParams

    with network(IncastParams(n_workers=n_workers, bottleneck_mbps=bottleneck_mbps), folder,
                 forked=True) as bed:
        yield bed


def incast_fixture(label: str, n_workers: int, bottleneck_mbps: float = 100):
    """:func:`network_fixture` of a forked incast star: ``(testbed, spawn)`` for short runs."""
    from topologies.incast import IncastParams

    return network_fixture(label, IncastParams(n_workers=n_workers,
                                               bottleneck_mbps=bottleneck_mbps), forked=True)


def run_ok(bed, folder: Path, **fields):
    """Run one spec on ``bed`` (from :func:`small_incast`); assert it ended ok after all its
    iterations; return its (runs row, curves rows, iterations rows)."""
    from harness.running.runner import execute
    from harness.running.spec import RunSpec

    tb, spawn = bed
    spec = RunSpec(**fields)
    row, curves, iters = execute(tb, spec, folder / spec.run_id, "test", spawn)
    assert row["status"] == "ok", row["reason"]
    assert row["iterations_done"] == spec.iterations
    return row, curves, iters


def short_run(bed, folder: Path, iterations: int, **fields):
    """:func:`run_ok` of a short run on the whole of ``bed`` (every worker, the bed's bottleneck
    rate): ``iterations`` iterations, evaluated at the end, two minutes at most."""
    params = bed[0].params
    return run_ok(bed, folder, n_workers=params.n_workers, bottleneck_mbps=params.bottleneck_mbps,
                  iterations=iterations, eval_every=iterations, timeout_s=120, **fields)
