"""A sweep on a Ray cluster (a head that only coordinates and one node, both on this machine)
gives the rows a local sweep gives, a node killed mid-sweep loses no finished row, and a head
stopped mid-sweep stops its nodes' groups and resumes.

The cluster is Ray's own test cluster (:class:`ray.cluster_utils.Cluster`): real raylets and
workers, started and stopped by the fixture; the sweep's head is ``invoke run-sweep --cluster``
in a subprocess. Ray's session files go to a short folder of their own (its socket paths must
stay under 108 characters), removed after a passing test.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from harness.running import cluster as ltp_cluster
from harness.running import results
from tests.emulation.conftest import leftovers

ray_cluster_utils = pytest.importorskip("ray.cluster_utils")

PROJECT = Path(__file__).resolve().parents[2]
INVOKE = [str(Path(sys.executable).parent / "invoke"), "-r", str(PROJECT)]
RAY_DIRS = Path(os.environ.get("LTP_RAY_TEST_DIR", "/work/logs/ray"))
# Two runs sharing one network (one group), the smallest sweep where a row can land before
# the group ends; one evaluation at the end. 10 iterations take about 1.5 s of training; the
# tests that interrupt the second run give it 40 (about 6 s) to be caught in.
SWEEP = ["run-sweep", "--preset", "smoke", "--transports", "tcp-cubic,ltp", "--loss", "0",
         "--workers", "2", "--bandwidth", "100", "--seeds", "0"]
SHORT, LONG = 10, 40
ACCURACY_TOLERANCE = 0.03   # same seed, same code: only the order gradients arrive in differs
NODE = {"num_cpus": 1, "resources": {ltp_cluster.TESTBED: 1}}


def _ray_processes(marker: str) -> list[str]:
    """Processes (other than this one) started with our RAY_TMPDIR in their environment."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) == os.getpid():
            continue
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if f"RAY_TMPDIR={marker}".encode() in env:
            found.append(f"{pid}: {cmd[:100]}")
    return found


@pytest.fixture
def ray_cluster(monkeypatch):
    """A Ray head offering no testbed (it only coordinates); the test adds the nodes. Every
    process it started is gone afterwards."""
    RAY_DIRS.mkdir(parents=True, exist_ok=True)
    folder = tempfile.mkdtemp(prefix="t", dir=RAY_DIRS)
    monkeypatch.setenv("RAY_TMPDIR", folder)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    cluster = ray_cluster_utils.Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "resources": {ltp_cluster.TESTBED: 0}, "include_dashboard": False})
    try:
        yield cluster
    finally:
        cluster.shutdown()
        # Workers leave on their own once their raylet is gone.
        deadline = time.monotonic() + 30
        while _ray_processes(folder) and time.monotonic() < deadline:
            time.sleep(0.2)
    assert _ray_processes(folder) == []
    shutil.rmtree(folder, ignore_errors=True)


def _sweep(out: Path, iterations: int, *extra: str) -> list[str]:
    return INVOKE + SWEEP + ["--iterations", str(iterations), "--out", str(out), *extra]


def _rows(folder: Path) -> dict[str, dict]:
    return {r["run_id"]: r for r in results.read_rows(folder / "runs.csv")}


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


def test_a_sweep_through_ray_gives_the_rows_of_a_local_sweep(tmp_path, clean_machine,
                                                             ray_cluster):
    node = ray_cluster.add_node(**NODE)
    times = {}
    for name, extra in (("local", ()), ("ray", ("--cluster", ray_cluster.address))):
        t0 = time.monotonic()
        proc = subprocess.run(_sweep(tmp_path / name, SHORT, *extra), cwd=PROJECT,
                              capture_output=True, text=True, timeout=300)
        times[name] = time.monotonic() - t0
        assert proc.returncode == 0, proc.stdout + proc.stderr
    local, remote = _rows(tmp_path / "local"), _rows(tmp_path / "ray")
    print(f"local {times['local']:.0f} s, through Ray {times['ray']:.0f} s; it/s local "
          f"{[local[k]['iters_per_s'][:5] for k in sorted(local)]}, Ray "
          f"{[remote[k]['iters_per_s'][:5] for k in sorted(local)]}")
    assert sorted(local) == sorted(remote) and len(local) == 2
    for run_id, row in local.items():
        other = remote[run_id]
        assert row["status"] == other["status"] == "ok", (row["reason"], other["reason"])
        assert row["iterations_done"] == other["iterations_done"] == str(SHORT)
        assert abs(float(row["final_accuracy"]) - float(other["final_accuracy"])) \
            <= ACCURACY_TOLERANCE
        # The same files in form: run folder, network folder, per-run rows of every table.
        assert _files(tmp_path / "local" / "runs" / run_id) == \
            _files(tmp_path / "ray" / "runs" / run_id)
    for table in ("curves.csv", "iterations.csv"):
        counts = [sorted(r["run_id"] for r in results.read_rows(tmp_path / name / table))
                  for name in ("local", "ray")]
        assert counts[0] == counts[1]
    assert sorted(os.listdir(tmp_path / "local" / "network")) == \
        sorted(os.listdir(tmp_path / "ray" / "network"))
    assert (tmp_path / "ray" / "report.md").exists()
    manifest = json.loads((tmp_path / "ray" / "manifest.json").read_text())
    [attempt] = manifest["cluster"][0]["attempts"]
    assert attempt["outcome"] == "done" and attempt["node_id"] == node.node_id
    assert "cluster" not in json.loads((tmp_path / "local" / "manifest.json").read_text())


def _wait_for_a_row(out: Path, head: subprocess.Popen, log: Path, deadline_s=180) -> dict:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        assert head.poll() is None, log.read_text()
        rows = results.read_rows(out / "runs.csv")
        if rows:
            return rows[0]
        time.sleep(0.1)
    raise AssertionError("no run finished in time:\n" + log.read_text())


def test_a_node_killed_mid_sweep_loses_no_finished_row(tmp_path, clean_machine, ray_cluster):
    first_node = ray_cluster.add_node(**NODE)
    out, log = tmp_path / "ray", tmp_path / "head.log"
    with open(log, "w") as f:
        head = subprocess.Popen(_sweep(out, LONG, "--cluster", ray_cluster.address),
                                cwd=PROJECT, stdout=f, stderr=subprocess.STDOUT)
    try:
        first = _wait_for_a_row(out, head, log)
        t_kill = time.monotonic()
        # Its raylet and every Ray process of it SIGKILLed: the group's worker exits without
        # taking its testbed down (the retry reclaims it: network/*/reclaimed.txt).
        ray_cluster.remove_node(first_node, allow_graceful=False)
        print(f"node killed {time.monotonic() - t_kill:.1f} s after the first row landed")
        second_node = ray_cluster.add_node(**NODE)
        assert head.wait(timeout=240) == 0, log.read_text()
        print(f"finished {time.monotonic() - t_kill:.0f} s after the kill")
    finally:
        if head.poll() is None:
            head.terminate()   # the head cancels its groups and exits
            head.wait(timeout=180)
    rows = results.read_rows(out / "runs.csv")
    assert len(rows) == 2 and {r["status"] for r in rows} == {"ok"}, log.read_text()
    assert [r for r in rows if r["run_id"] == first["run_id"]] == [first], "the row changed"
    attempts = json.loads((out / "manifest.json").read_text())["cluster"][0]["attempts"]
    assert [a["attempt"] for a in attempts] == [1, 2]
    assert attempts[0]["outcome"].startswith("node lost")
    assert attempts[0]["node_id"] == first_node.node_id
    assert attempts[0]["finished"] == [first["run_id"]]
    assert attempts[1]["runs"] == [r["run_id"] for r in rows if r["run_id"] != first["run_id"]]
    assert attempts[1]["outcome"] == "done" and attempts[1]["node_id"] == second_node.node_id
    assert "lost node" in log.read_text()
    assert not any(ltp_cluster.SCRATCH.iterdir()), "a node's scratch folder was left behind"
    assert leftovers() == []


def test_stopping_the_head_stops_the_groups_on_the_nodes_and_the_same_command_resumes(
        tmp_path, clean_machine, ray_cluster):
    ray_cluster.add_node(**NODE)
    out, log = tmp_path / "ray", tmp_path / "head.log"
    command = _sweep(out, LONG, "--cluster", ray_cluster.address)
    with open(log, "w") as f:
        head = subprocess.Popen(command, cwd=PROJECT, stdout=f, stderr=subprocess.STDOUT)
    try:
        first = _wait_for_a_row(out, head, log)
        head.send_signal(signal.SIGTERM)
        assert head.wait(timeout=180) == 130, log.read_text()
    finally:
        if head.poll() is None:
            head.kill()
            head.wait()
    assert "resume" in log.read_text()
    # The head waited for the node to take its network down.
    assert leftovers() == []
    assert results.read_rows(out / "runs.csv") == [first]
    attempts = json.loads((out / "manifest.json").read_text())["cluster"][0]["attempts"]
    assert [a["outcome"] for a in attempts] == ["cancelled"]

    again = subprocess.run(command, cwd=PROJECT, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    rows = results.read_rows(out / "runs.csv")
    assert len(rows) == 2 and rows[0] == first and rows[1]["status"] == "ok"
    assert len(json.loads((out / "manifest.json").read_text())["cluster"]) == 2
