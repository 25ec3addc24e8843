"""The collective patterns train for real over loopback (no emulation, no root): a ring
all-reduce and a tree's reduce compute the same mean as the PS, so ring, tree and PS runs of one
spec end at the same accuracy; a ring stops at its time cap with the accuracy it ended with."""

import subprocess
import sys

import pytest

from harness.running.runfiles import RunFiles, write_session
from harness.running.spec import RunSpec
from transports.base import Session


def _train(run_dir, spec: RunSpec) -> RunFiles:
    files = RunFiles(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    files.spec.write_text(spec.to_json())
    write_session(files.session, Session.draw())
    base = [sys.executable, "-m", "harness.hosts.node", "--run", str(run_dir), "--loopback"]
    logs = [open(run_dir / f"{h}.out", "w") for h in range(1 + spec.n_workers)]
    procs = [subprocess.Popen(base + ["--role", "ps"], stdout=logs[0], stderr=logs[0])]
    procs += [subprocess.Popen(base + ["--role", "worker", "--rank", str(r)],
                               stdout=logs[r + 1], stderr=logs[r + 1])
              for r in range(spec.n_workers)]
    try:
        codes = [p.wait(timeout=120) for p in procs]
    finally:
        for p in procs:
            p.kill()
        for f in logs:
            f.close()
    assert codes == [0] * (1 + spec.n_workers), [(run_dir / f"{h}.out").read_text()[-500:]
                                                 for h, c in enumerate(codes) if c]
    return files


@pytest.mark.parametrize("transport, port", [("tcp-cubic", 17600), ("ltp", 17650)])
def test_ring_and_tree_learn_what_the_ps_learns(tmp_path, transport, port):
    spec = RunSpec(transport=transport, n_workers=4, iterations=12, eval_every=6, port=port,
                   timeout_s=60)
    ps = [e.accuracy for e in _train(tmp_path / "ps", spec).eval_records()]
    ring = _train(tmp_path / "ring", spec.replace(pattern="ring:pieces=2", port=port + 10))
    tree = _train(tmp_path / "tree", spec.replace(pattern="tree:chunks=4", port=port + 20))
    for files in (ring, tree):
        evals = files.eval_records()
        assert [e.iteration for e in evals] == [0, 6, 12]
        assert [e.accuracy for e in evals] == pytest.approx(ps, abs=1e-3)
    rounds = ring.ps_iterations()
    assert len(rounds) == 12 and all(r.recv_frac == [1.0] * 4 for r in rounds)
    # each ring worker sends 2(N-1)/N of the gradient: 3/2 of 109,386 floats
    assert all(r.grad_bytes == pytest.approx(4 * 109_386 * 3 / 2, abs=16)
               for r in ring.worker_iterations("w2"))
    # the tree: the PS serves one worker, a worker two, so 4 workers make a tree 3 deep; every
    # worker's gradient reaches the PS in one sum, and each worker sends one gradient's bytes
    rounds = tree.ps_iterations()
    assert len(rounds) == 12 and all(len(r.ranks) == 1 for r in rounds)
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
