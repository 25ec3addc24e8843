"""The PS and worker processes train for real over loopback TCP (no emulation, no root)."""

import json
import subprocess
import sys

from harness.spec import RunSpec


def test_two_workers_learn_over_loopback(tmp_path):
    spec = RunSpec(transport="tcp-cubic", n_workers=2, iterations=40, eval_every=20, port=17000,
                   timeout_s=120)
    (tmp_path / "spec.json").write_text(spec.to_json())
    base = [sys.executable, "-m", "harness.node", "--spec", str(tmp_path / "spec.json"),
            "--out", str(tmp_path / "raw"), "--loopback"]
    procs = [subprocess.Popen(base + ["--role", "ps"])]
    procs += [subprocess.Popen(base + ["--role", "worker", "--rank", str(r)]) for r in range(2)]
    try:
        assert [p.wait(timeout=120) for p in procs] == [0, 0, 0]
    finally:
        for p in procs:
            p.kill()
    evals = [json.loads(line) for line in (tmp_path / "raw" / "ps1.eval.jsonl").open()]
    assert [e["iteration"] for e in evals] == [0, 20, 40]
    assert evals[-1]["accuracy"] > 0.5 > evals[0]["accuracy"]
    records = [json.loads(line) for line in (tmp_path / "raw" / "w2.jsonl").open()]
    assert len(records) == 40
    assert all(r["grad_bytes"] == 4 * 109_386 and r["param_frac"] == 1.0 for r in records)
    assert all(r["compute_s"] > 0 and r["push_s"] >= 0 and r["pull_s"] >= 0 for r in records)
