"""The PS and worker processes train for real over loopback TCP (no emulation, no root)."""

import sys

import numpy as np

from harness.running import keys
from harness.running.runfiles import RunFiles
from harness.running.spec import RunSpec
from topologies.incast import PS_NAME, worker_name
from transports.base import Session


def _train(run_dir, spec: RunSpec) -> RunFiles:
    files = RunFiles(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    files.spec.write_text(spec.to_json())
    # One session, each host handed its own pairs' keys through a pipe, as the runner does.
    blobs = keys.blobs(keys.run_keys(Session.draw(), spec.pattern, spec.n_workers))
    base = [sys.executable, "-m", "harness.hosts.node", "--run", str(run_dir), "--loopback"]
    procs = [keys.popen(base + ["--role", "ps"], blobs[PS_NAME])]
    procs += [keys.popen(base + ["--role", "worker", "--rank", str(r)], blobs[worker_name(r)])
              for r in range(spec.n_workers)]
    try:
        assert [p.wait(timeout=120) for p in procs] == [0] * (1 + spec.n_workers)
    finally:
        for p in procs:
            p.kill()
    return files


def test_two_workers_learn_over_loopback(tmp_path):
    spec = RunSpec(transport="tcp-cubic", n_workers=2, iterations=40, eval_every=20, port=17000,
                   timeout_s=120)
    files = _train(tmp_path, spec)
    evals = files.eval_records()
    assert [e.iteration for e in evals] == [0, 20, 40]
    assert evals[-1].accuracy > 0.5 > evals[0].accuracy
    assert evals[-1].train_s > evals[1].train_s > 0
    records = files.worker_iterations("w2")
    assert len(records) == 40
    assert all(r.grad_bytes == 4 * 109_386 and r.param_frac == 1.0 for r in records)
    assert all(r.compute_s > 0 and r.push_s >= 0 and r.pull_s >= 0 for r in records)
    ps = files.host_summary("ps1")
    assert ps.stopped_by == "iterations" and ps.iterations == 40 and ps.cpu_s > 0
    assert 0 < ps.cpu_busy_frac <= 1
    assert not files.stop_marker.exists()


def test_a_run_stops_at_its_target_and_every_host_ends_cleanly(tmp_path):
    spec = RunSpec(transport="tcp-cubic", n_workers=2, iterations=400, eval_every=5, port=17100,
                   timeout_s=120, target_accuracy=0.5, stop_at_target=True)
    files = _train(tmp_path, spec)
    ps = files.host_summary("ps1")
    evals = files.eval_records()
    assert ps.stopped_by == "target" and files.stop_marker.exists()
    assert evals[-1].accuracy >= 0.5 > max(e.accuracy for e in evals[:-1])
    assert ps.iterations == evals[-1].iteration < 400
    # The workers got the final parameters, found the marker and stopped without pushing.
    for host in ("w1", "w2"):
        assert len(files.worker_iterations(host)) == ps.iterations
        assert files.host_summary(host).iterations == ps.iterations


def test_a_run_stops_at_its_time_cap(tmp_path):
    spec = RunSpec(transport="tcp-cubic", n_workers=2, iterations=100_000, eval_every=1000,
                   port=17200, timeout_s=120, max_train_s=1.0)
    files = _train(tmp_path, spec)
    ps = files.host_summary("ps1")
    assert ps.stopped_by == "time_cap" and 1.0 <= ps.train_s < 3.0
    assert files.eval_records()[-1].iteration == ps.iterations  # the accuracy it ended with


def test_score_validation_rejects_a_sign_flipping_worker_over_loopback(tmp_path):
    """The attack runs in the worker process and its vector crosses the transport; the PS's
    score rule drops it and records why (harness/training/aggregators.py,
    harness/training/byzantine.py)."""
    spec = RunSpec(transport="tcp-cubic", n_workers=4, iterations=12, eval_every=12, port=17300,
                   timeout_s=120, byzantine="1:sign-flip", aggregator="score")
    files = _train(tmp_path, spec)
    assert all(r.byzantine for r in files.worker_iterations("w4"))
    assert not any(r.byzantine for r in files.worker_iterations("w1"))
    rounds = files.ps_iterations()
    assert len(rounds) == 12
    for rec in rounds:
        verdict = dict(zip(rec.ranks, rec.agg_kept))
        assert verdict[3] is False and all(verdict[r] for r in (0, 1, 2)), rec.agg_reasons
        assert rec.agg_f == 1 and rec.agg_s > 0
    evals = files.eval_records()
    assert evals[-1].accuracy > evals[0].accuracy + 0.2


def test_compressed_local_steps_learn_and_push_fewer_bytes(tmp_path):
    """Top-k pushes (1 %) after 4 local steps, with error feedback, over LTP: each push is the
    up layout's size (about 2 % of the dense gradient), and the model still learns."""
    spec = RunSpec(transport="ltp", n_workers=2, iterations=30, eval_every=30, port=17400,
                   timeout_s=120, compress="topk:0.01", local_steps=4, error_reset=0)
    files = _train(tmp_path, spec)
    evals = files.eval_records()
    assert evals[-1].accuracy > 0.5 > evals[0].accuracy
    records = files.worker_iterations("w1")
    assert len(records) == 30
    # (index, value) pairs for ceil(1 % of each of the MLP's six tensors):
    # 2 x (1004 + 2 + 82 + 1 + 7 + 1) floats, 2.0 % of the dense 109,386
    assert all(r.grad_bytes == 4 * 2 * 1097 for r in records)
    rounds = files.ps_iterations()
    assert sum(s["compress_dropped"] for rec in rounds for s in rec.msg_stats) == 0


def test_cser_synchronises_residuals_in_rounds_of_their_own(tmp_path):
    """Top-1 % pushes with CSER's error reset over LTP (harness/training/compress.py): after every
    4 gradient rounds each worker spends one pushing its residual, both in the same rounds (bsp),
    in the same push layout; the PS's model still learns."""
    spec = RunSpec(transport="ltp", n_workers=2, iterations=30, eval_every=30, port=17500,
                   timeout_s=120, compress="topk:0.01", reset_mode="cser", error_reset=4)
    files = _train(tmp_path, spec)
    evals = files.eval_records()
    assert evals[-1].accuracy > evals[0].accuracy + 0.2   # it learns (chance is 0.1)
    for host in ("w1", "w2"):
        records = files.worker_iterations(host)
        assert [r.residual_sync for r in records] == [i % 5 == 4 for i in range(30)]
        assert all(np.isnan(r.train_loss) == r.residual_sync for r in records)   # no batch
        assert {r.grad_bytes for r in records} == {4 * 2 * 1097}
