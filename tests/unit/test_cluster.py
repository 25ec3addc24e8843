"""Cluster sweeps without a cluster: the head's logic against an in-process fake of Ray and a fake
group runner (no root, no network, no Ray processes). tests/emulation/test_cluster.py runs the
real thing."""

import io
import json
import os
import subprocess
import sys
import tarfile
import types
from pathlib import Path

import pytest

from harness.running import cluster, presets, results
from harness.running import engine
from harness.running import ps as ps_kind
from harness.running import provenance
from harness.running.provenance import git_state
from topologies.testbed import network

PROJECT = Path(__file__).resolve().parents[2]
INVOKE = [str(Path(sys.executable).parent / "invoke"), "-r", str(PROJECT)]


# ---- a fake of the part of Ray the head uses ----------------------------------------------------

class RayError(Exception):
    pass


class RayTaskError(RayError):
    def __init__(self, cause):
        super().__init__(str(cause))
        self.cause = cause


class NodeDiedError(RayError):
    pass


class Ref:
    def __init__(self, value=None, error=None):
        self.value, self.error = value, error


class Gen:
    """A streaming generator task, run lazily in this process as the head asks for items."""

    def __init__(self, ray, node_id, it, die_after):
        self.ray, self.node_id, self.it, self.die_after = ray, node_id, it, die_after
        self.items, self.over = 0, False

    def __next__(self):
        if self.over:
            raise StopIteration
        if self.die_after is not None and self.items >= self.die_after:
            self.over = True
            self.it.close()
            return Ref(error=NodeDiedError(f"node {self.node_id} died"))
        self.ray.current_node = self.node_id
        try:
            value = next(self.it)
        except StopIteration:
            self.over = True
            raise
        except Exception as exc:
            self.over = True
            return Ref(error=RayTaskError(exc))
        self.items += 1
        return Ref(value)


class FakeRay(types.SimpleNamespace):
    """``die_after[k]``: the k-th task submitted (from 0) loses its node after that many items."""

    def __init__(self, testbeds=1, die_after=None, connect_error=None):
        super().__init__(__version__="fake", exceptions=types.SimpleNamespace(
            RayError=RayError, RayTaskError=RayTaskError))
        self.testbeds, self.die_after = testbeds, dict(die_after or {})
        self.connect_error = connect_error
        self.submitted, self.options, self.current_node = [], {}, None
        self.connected = False

    def init(self, address, **kw):
        if self.connect_error:
            raise self.connect_error
        self.connected = True

    def shutdown(self):
        self.connected = False

    def nodes(self):
        return [{"NodeID": "head", "Alive": True, "NodeManagerHostname": "head",
                 "Resources": {"CPU": 2}},
                {"NodeID": "n0", "Alive": True, "NodeManagerHostname": "n0",
                 "Resources": {"CPU": 2, "testbed": self.testbeds}}]

    def cluster_resources(self):
        return {"testbed": self.testbeds}

    available_resources = cluster_resources

    def remote(self, fn):
        fake = self

        class Task:
            def options(self, **kw):
                fake.options = kw
                return self

            def remote(self, *args):
                k = len(fake.submitted)
                fake.submitted.append([s.run_id for s in args[0]])
                return Gen(fake, f"n{k}", fn(*args), fake.die_after.get(k))
        return Task()

    def wait(self, gens, num_returns=1, timeout=None):
        return gens[:1], gens[1:]

    def get(self, ref):
        if ref.error is not None:
            raise ref.error
        return ref.value

    def cancel(self, gen):
        gen.die_after = gen.items

    def get_runtime_context(self):
        return types.SimpleNamespace(get_node_id=lambda: self.current_node)


# ---- a fake group runner: files and rows, no network -------------------------------------------

def _row(columns, spec, **values):
    row = {c.name: "" for c in columns}
    row.update(run_id=spec.run_id, scheme=spec.scheme, transport=spec.transport, **values)
    return {k: v for k, v in row.items() if k in {c.name for c in columns}}


class FakeGroups:
    """Stands in for engine.run_group; notes how many rows the head held as each run started."""

    def __init__(self, head_folder, fail_on=None):
        self.head_folder, self.fail_on = head_folder, fail_on
        self.rows_seen, self.ran = [], []

    def __call__(self, kind, group, folder, sweep_name):
        net = folder / "network" / kind.network_dir(group[0])
        net.mkdir(parents=True)
        (net / "controller.log").write_text("up\n")
        for spec in group:
            if spec.run_id == self.fail_on:
                raise network.TestbedError("s1-eth1 exists already: run `invoke clean`.")
            self.rows_seen.append(len(results.read_rows(self.head_folder / "runs.csv")))
            run_dir = folder / "runs" / spec.run_id
            (run_dir / "raw").mkdir(parents=True)
            (run_dir / "raw" / "ps1.log").write_text(f"trained {spec.run_id}\n")
            yield engine.Started(spec)
            self.ran.append(spec.run_id)
            row = _row(results.RUNS_COLUMNS, spec, status="ok", final_accuracy=0.5,
                       iters_per_s=2.0, measured_loss_pct=0.0, queue_drops=0, overhead_s=0.1)
            curves = [_row(results.CURVES_COLUMNS, spec)]
            iterations = [_row(results.ITERATIONS_COLUMNS, spec, iteration=i) for i in range(3)]
            yield engine.Finished(spec, {"curves.csv": curves, "iterations.csv": iterations,
                                         "runs.csv": [row]}, 0.2)


def _plan():
    # Two networks (100 and 200 Mbit/s) of two runs each.
    return presets.get("smoke").override(transports=("tcp-cubic", "tcp-reno"), loss_pcts=(0.0,),
                                         bottleneck_mbps=(100.0, 200.0), workers=(2,))


@pytest.fixture
def fakes(tmp_path, monkeypatch):
    """The head's folder, with Ray, the group runner and provenance replaced."""
    folder = tmp_path / "sweep"
    groups = FakeGroups(folder)
    commit = git_state()[0]
    monkeypatch.setattr(engine, "run_group", groups)
    monkeypatch.setattr(provenance, "manifest", lambda kind, others=(): {"git_commit": commit, "host": "fake"})
    monkeypatch.setattr(engine, "draw", lambda kind, folder, progress, figures=True: None)
    monkeypatch.setattr(cluster, "SCRATCH", tmp_path / "scratch")
    monkeypatch.setattr(network, "running_owner", lambda: None)   # no testbed of this checkout
    monkeypatch.setenv("PYTHONPATH", "")
    ray = FakeRay()
    monkeypatch.setattr(cluster, "import_ray", lambda: ray)
    return types.SimpleNamespace(folder=folder, groups=groups, ray=ray, monkeypatch=monkeypatch)


def _manifest(folder):
    return json.loads((folder / "manifest.json").read_text())


def test_rows_land_on_the_head_as_each_run_returns(fakes):
    lines = []
    cluster.run_plan(_plan(), fakes.folder, "auto", lines.append)
    rows = results.read_rows(fakes.folder / "runs.csv")
    assert len(rows) == 4 and len({r["run_id"] for r in rows}) == 4
    # Each run started after every earlier one had its row on the head.
    assert fakes.groups.rows_seen == [0, 1, 2, 3]
    for row in rows:
        log = fakes.folder / "runs" / row["run_id"] / "raw" / "ps1.log"
        assert log.read_text() == f"trained {row['run_id']}\n"
    assert len(results.read_rows(fakes.folder / "iterations.csv")) == 12
    assert sorted(p.name for p in (fakes.folder / "network").iterdir()) == [
        "n2_bw100_q64", "n2_bw200_q64"]
    assert not list(fakes.folder.glob(".incoming-*"))
    assert fakes.ray.options == {"num_cpus": 0, "resources": {"testbed": 1},
                                 "num_returns": "streaming", "max_retries": 0}
    entry = _manifest(fakes.folder)["cluster"][0]
    assert entry["address"] == "auto" and entry["finished_at"]
    assert [a["outcome"] for a in entry["attempts"]] == ["done", "done"]
    assert {a["node_id"] for a in entry["attempts"]} == {"n0", "n1"}
    assert set(entry["node_provenance"]) == {"n0", "n1"}
    assert any("on fake" in line for line in lines)
    assert not fakes.ray.connected
    assert not list((fakes.folder.parent / "scratch").iterdir()), "a node left its scratch"


def test_a_lost_node_costs_only_its_running_run(fakes):
    # Items of a task: node, start, run, start, ... so after 3 the first run is back.
    fakes.ray.die_after = {0: 3}
    lines = []
    cluster.run_plan(_plan(), fakes.folder, "auto", lines.append)
    first, retry = fakes.ray.submitted[0], fakes.ray.submitted[-1]
    assert retry == first[1:], "only the unfinished run is resubmitted"
    rows = results.read_rows(fakes.folder / "runs.csv")
    assert sorted(r["run_id"] for r in rows) == sorted(sum(fakes.ray.submitted[:2], []))
    attempts = _manifest(fakes.folder)["cluster"][0]["attempts"]
    lost = [a for a in attempts if a["outcome"].startswith("node lost")]
    assert len(lost) == 1 and lost[0]["finished"] == first[:1]
    again = [a for a in attempts if a["attempt"] == 2]
    assert again[0]["runs"] == first[1:] and again[0]["outcome"] == "done"
    assert again[0]["node_id"] != lost[0]["node_id"]
    assert any("go to another node (attempt 2 of 3)" in line for line in lines)
    assert not [line for line in lines if line.startswith("[5/")], "a retried run counted twice"


def test_a_group_losing_its_node_every_time_is_given_up_and_the_rest_kept(fakes):
    fakes.ray.die_after = {0: 1, 2: 1, 3: 1}   # the first group, on each of its three attempts
    with pytest.raises(cluster.ClusterError, match="lost their node 3 times"):
        cluster.run_plan(_plan(), fakes.folder, "auto", lambda line: None)
    assert len(results.read_rows(fakes.folder / "runs.csv")) == 2   # the other group's
    cluster.run_plan(_plan(), fakes.folder, "auto", lambda line: None)   # resumes
    assert len(results.read_rows(fakes.folder / "runs.csv")) == 4


def test_a_failing_group_stops_the_sweep_keeps_rows_and_the_same_command_resumes(fakes):
    specs = [s for g in ps_kind.order(_plan().specs(), _plan().order_seed) for s in g]
    fakes.groups.fail_on = specs[1].run_id   # the second run of the first group
    with pytest.raises(cluster.ClusterError, match="s1-eth1 exists already"):
        cluster.run_plan(_plan(), fakes.folder, "auto", lambda line: None)
    assert results.finished_run_ids(fakes.folder) == {specs[0].run_id}
    attempts = _manifest(fakes.folder)["cluster"][0]["attempts"]
    assert attempts[0]["outcome"].startswith("failed: TestbedError")
    assert attempts[1]["outcome"] == "cancelled"

    fakes.groups.fail_on = None
    cluster.run_plan(_plan(), fakes.folder, "auto", lambda line: None)
    rows = results.read_rows(fakes.folder / "runs.csv")
    assert sorted(r["run_id"] for r in rows) == sorted(s.run_id for s in specs)
    assert fakes.groups.ran.count(specs[0].run_id) == 1, "a finished run ran again"
    assert len(_manifest(fakes.folder)["cluster"]) == 2
    lines = []
    cluster.run_plan(_plan(), fakes.folder, "auto", lines.append)
    assert "nothing to run" in lines[-1]


def test_groups_are_cut_so_that_every_testbed_has_work(fakes):
    specs = _plan().specs()
    groups = ps_kind.order(specs, 0)
    assert cluster.split(groups, 1) == groups
    assert [len(g) for g in cluster.split(groups, 4)] == [1, 1, 1, 1]
    assert [len(g) for g in cluster.split([specs[:3]], 2)] == [2, 1]
    fakes.ray.testbeds = 4
    cluster.run_plan(_plan(), fakes.folder, "auto", lambda line: None)
    assert len(fakes.ray.submitted) == 4
    assert len(results.read_rows(fakes.folder / "runs.csv")) == 4


def test_a_node_at_another_commit_is_refused(fakes):
    fakes.monkeypatch.setattr(provenance, "manifest", lambda kind, others=(): {"git_commit": "0" * 40, "host": "x"})
    with pytest.raises(cluster.ClusterError, match="check out the same commit"):
        cluster.run_plan(_plan(), fakes.folder, "auto", lambda line: None)
    assert not (fakes.folder / "runs.csv").exists()


@pytest.mark.parametrize("ray, words", [
    (FakeRay(testbeds=0), "offers a testbed"),
    (FakeRay(connect_error=ConnectionError("nobody there")), "cannot join a Ray cluster"),
])
def test_a_cluster_that_cannot_run_it_says_so(fakes, ray, words):
    fakes.monkeypatch.setattr(cluster, "import_ray", lambda: ray)
    with pytest.raises(cluster.ClusterError, match=words):
        cluster.run_plan(_plan(), fakes.folder, "auto", lambda line: None)


def _tar(name):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo(name)
        info.size = 2
        tar.addfile(info, io.BytesIO(b"hi"))
    return buf.getvalue()


@pytest.mark.parametrize("name", ["../evil", "/etc/evil", "runs/other/x", "runs/r1/../../x"])
def test_the_head_unpacks_only_the_run_folder_it_expects(tmp_path, name):
    with pytest.raises(cluster.ClusterError, match="refuses"):
        cluster.unpack_run(tmp_path, "r1", _tar(name))
    assert [p.name for p in tmp_path.iterdir()] == ["runs"]


def test_network_logs_append_across_attempts_as_a_local_resume_does(tmp_path):
    src = tmp_path / "node"
    (src / "network" / "n2").mkdir(parents=True)
    (src / "network" / "n2" / "controller.log").write_text("attempt\n")
    (src / "network" / "n2" / "config.json").write_text("{}")
    data = cluster.pack(src, Path("network"))
    for _ in range(2):
        cluster.unpack_network(tmp_path / "head", data)
    assert (tmp_path / "head/network/n2/controller.log").read_text() == "attempt\nattempt\n"
    assert (tmp_path / "head/network/n2/config.json").read_text() == "{}"


def test_without_cluster_ray_is_never_imported(tmp_path):
    code = f"""
import sys
import invoke
import tasks
from harness import cli
from harness.running import engine
ran = []
cli.require_root = cli.require_setup = lambda *also: None
engine.run_plan = lambda plan, folder, figures=True, redo=None, capture=None: ran.append(folder)
tasks.run_sweep(invoke.Context(), preset="smoke", out={str(tmp_path / 'sweep')!r})
assert ran, "the local sweep did not run"
assert "ray" not in sys.modules, "ray was imported"
print("ok")
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=PROJECT, capture_output=True,
                          text=True)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr


# (Not `auto`: Ray finds any cluster running on this machine by its processes, e.g. the one an
# emulation test runs.)
@pytest.mark.parametrize("address, words", [("127.0.0.1:1", "nothing answers at 127.0.0.1:1"),
                                            ("head", "takes the head's HOST:PORT")])
def test_a_cluster_that_is_not_there_is_one_sentence_and_nothing_written(tmp_path, address,
                                                                          words):
    proc = subprocess.run(INVOKE + ["run-sweep", "--preset", "smoke", "--cluster", address,
                                    "--out", str(tmp_path / "sweep")],
                          capture_output=True, text=True, cwd=PROJECT, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and words in lines[0], proc.stderr
    assert not (tmp_path / "sweep").exists()


def test_a_scratch_folder_goes_once_its_worker_is_gone(tmp_path, monkeypatch):
    from topologies.testbed.ledger import ProcessRef

    monkeypatch.setattr(cluster, "SCRATCH", tmp_path)
    me = ProcessRef.of(os.getpid())
    mine = tmp_path / f"{me.pid}-{me.start_ticks}-abc"
    gone = tmp_path / f"{me.pid}-{me.start_ticks + 1}-abc"   # an earlier process with my PID
    for folder in (mine, gone):
        folder.mkdir()
    new = cluster._scratch()
    assert sorted(tmp_path.iterdir()) == sorted([mine, new])
