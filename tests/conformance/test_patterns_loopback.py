"""The collective patterns train for real over loopback (no emulation, no root): a ring
all-reduce and a tree's reduce compute the same mean as the PS, so ring, tree and PS runs of one
spec end at the same accuracy (over LTP); a ring stops at its time cap with the accuracy it ended with; a
tree routes around a worker the fault injector kills, and takes back one it stalled, with the
fault columns a PS run has."""

import contextlib
import os
import signal
import subprocess
import sys
import time

import pytest

from harness.hosts.faults import FaultInjector, parse_fault
from harness.running import metrics
from harness.running import keys
from harness.running.runfiles import RunFiles
from harness.running.spec import RunSpec
from topologies.incast import PS_NAME, worker_name
from transports.base import Session


def _wait(proc: subprocess.Popen, limit: float) -> int | None:
    """The process's exit code, or None if it had not ended by ``limit`` (then its stacks are
    dumped to its log)."""
    try:
        return proc.wait(timeout=max(limit - time.monotonic(), 1))
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        return None


class _Proc:
    """A host process as the fault injector handles one (``kill``, ``ref``)."""

    def __init__(self, popen: subprocess.Popen) -> None:
        self.ref = popen

    def kill(self) -> None:
        self.ref.kill()


def _train(run_dir, spec: RunSpec) -> RunFiles:
    """Run the PS and the workers of ``spec`` as processes, with its fault injected by the
    harness's injector; every process that was not killed on purpose must end cleanly."""
    files = RunFiles(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    files.spec.write_text(spec.to_json())
    blobs = keys.blobs(keys.run_keys(Session.draw(), spec.pattern, spec.n_workers))
    base = [sys.executable, "-m", "harness.hosts.node", "--run", str(run_dir), "--loopback"]
    logs = [open(run_dir / f"{h}.out", "w") for h in range(1 + spec.n_workers)]
    env = dict(os.environ, PYTHONFAULTHANDLER="1")   # a hung host's stacks go to its log
    procs = [keys.popen(base + ["--role", "ps"], blobs[PS_NAME], stdout=logs[0], stderr=logs[0],
                        env=env)]
    procs += [keys.popen(base + ["--role", "worker", "--rank", str(r)], blobs[worker_name(r)],
                         stdout=logs[r + 1], stderr=logs[r + 1], start_new_session=True, env=env)
              for r in range(spec.n_workers)]
    fault = parse_fault(spec.fault)
    victim = worker_name(fault.rank(spec.n_workers))
    injector = FaultInjector(fault, victim, files.ps_progress,
                             {worker_name(r): _Proc(p) for r, p in enumerate(procs[1:])},
                             files.faults)
    try:
        limit = time.monotonic() + 120
        while procs[0].poll() is None and time.monotonic() < limit:
            injector.tick()
            time.sleep(0.02)
        injector.finish()
        codes = [_wait(p, limit) for p in procs]
    finally:
        for p in procs:
            p.kill()
        for f in logs:
            f.close()
    survivors = [c for h, c in enumerate(codes) if h == 0 or worker_name(h - 1) not in
                 injector.killed]
    assert survivors == [0] * len(survivors), [(run_dir / f"{h}.out").read_text()[-3000:]
                                               for h, c in enumerate(codes) if c != 0]
    return files


def test_ring_and_tree_learn_what_the_ps_learns(tmp_path):
    # over LTP here; over TCP CUBIC and LTP on the testbed in lab 7's check (test_labs.py)
    port = 17650
    spec = RunSpec(transport="ltp", n_workers=4, iterations=6, eval_every=3, port=port,
                   timeout_s=60)
    ps = [e.accuracy for e in _train(tmp_path / "ps", spec).eval_records()]
    ring = _train(tmp_path / "ring", spec.replace(pattern="ring:pieces=2", port=port + 10))
    tree = _train(tmp_path / "tree", spec.replace(pattern="tree:chunks=4", port=port + 20))
    for files in (ring, tree):
        evals = files.eval_records()
        assert [e.iteration for e in evals] == [0, 3, 6]
        assert [e.accuracy for e in evals] == pytest.approx(ps, abs=1e-3)
    rounds = ring.ps_iterations()
    assert len(rounds) == 6 and all(r.recv_frac == [1.0] * 4 for r in rounds)
    # each ring worker sends 2(N-1)/N of the gradient: 3/2 of 109,386 floats
    assert all(r.grad_bytes == pytest.approx(4 * 109_386 * 3 / 2, abs=16)
               for r in ring.worker_iterations("w2"))
    # the tree: the PS serves one worker, a worker two, so 4 workers make a tree 3 deep; every
    # worker's gradient reaches the PS, whole, in one sum, and each worker sends one gradient's
    # bytes
    rounds = tree.ps_iterations()
    assert len(rounds) == 6 and all(r.ranks == [0, 1, 2, 3] and r.recv_frac == [1.0] * 4
                                     for r in rounds)
    assert all(r.msg_stats[0]["gradients"] == 4 and r.msg_stats[0]["tree_depth"] == 3
               for r in rounds)
    assert all(r.grad_bytes == 4 * 109_386 for r in tree.worker_iterations("w3"))


def test_a_ring_stops_at_its_time_cap(tmp_path):
    spec = RunSpec(transport="tcp-cubic", n_workers=2, iterations=100_000, eval_every=1000,
                   port=17700, timeout_s=60, max_train_s=1.0, pattern="ring")
    files = _train(tmp_path, spec)
    ps = files.host_summary("ps1")
    assert ps.stopped_by == "time_cap" and 1.0 <= ps.train_s < 3.0
    assert files.eval_records()[-1].iteration == ps.iterations
    assert files.host_summary("w1").iterations == ps.iterations


def _resilience(files: RunFiles, spec: RunSpec) -> dict:
    ps = files.ps_iterations()
    return metrics.resilience(spec, files, ps, files.host_summary("ps1").train_start_time)


# Fault runs train for 7 s (the time cap), long past the fault at iteration 4, so that workers
# cut off with the victim's subtree have time to come back.
_FAULTED = RunSpec(transport="ltp", n_workers=4, iterations=100_000, eval_every=100_000,
                   timeout_s=60, max_train_s=7.0, pattern="tree")


def test_a_tree_routes_around_a_killed_worker(tmp_path):
    spec = _FAULTED.replace(port=17720, fault="kill@4")
    files = _train(tmp_path, spec)
    rounds = files.ps_iterations()
    struck = files.fault_events()[0]
    # the dead worker is in no round that started after the kill (the one in progress may hold
    # the gradient it sent before); the others are back in a later tree
    after = [r for r in rounds if r.iteration > struck["ps_iterations"]]
    assert after and all(3 not in r.ranks for r in after)
    assert after[-1].ranks == [0, 1, 2] and rounds[0].ranks == [0, 1, 2, 3]
    got = _resilience(files, spec)
    assert got["detected_as"] == "missing" and 0 < got["detection_s"] < 5
    assert got["iterations_lost"] >= len(after) and got["false_alarms"] == 0
    # re-formed: the first round without it that held the three others
    assert 0 < got["recovered_s"] < 6


def test_a_tree_takes_back_a_stalled_worker(tmp_path):
    # stopped for longer than any node waits for a child (a 4-worker tree is 3 deep: the PS's
    # child waits 2 deadlines of REFORM_S), so the stop is a failure and not a slow round
    # Over TCP: LTP refuses a message id more than 63 past the last it took from a peer, so a
    # worker that was away for longer cannot rejoin an LTP tree (docs/collectives.md)
    spec = _FAULTED.replace(port=17740, fault="stall@4:3s", transport="tcp-cubic")
    files = _train(tmp_path, spec)
    rounds = files.ps_iterations()
    got = _resilience(files, spec)
    # out while stopped (the PS counts it missing), in again once it continues
    assert got["detected_as"] == "missing" and got["iterations_lost"] >= 1
    assert got["false_alarms"] == 0 and 0 <= got["rejoin_s"] <= got["recovered_s"] < 6
    assert rounds[-1].ranks == [0, 1, 2, 3]
