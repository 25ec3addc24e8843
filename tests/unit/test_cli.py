"""Bad input at the command line: one sentence, exit code 2, no traceback, nothing written."""

import subprocess
import sys
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[2]
INVOKE = [str(Path(sys.executable).parent / "invoke"), "-r", str(PROJECT)]


def _run(args):
    return subprocess.run(INVOKE + args, capture_output=True, text=True, cwd=PROJECT)


def _one_sentence(proc, words):
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and words in lines[0], proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr


SWEEP_CASES = [
    (["--transports", "quic"], "unknown transport 'quic'"),
    (["--transports", ","], "transports needs at least one value"),
    (["--transports", "ltp+=1"], "write transport options as slug+name=value"),
    (["--transports", "ltp+cc=maybe"], "must be true or false"),
    (["--transports", "ltp,ltp"], "transports lists 'ltp' more than once"),
    (["--transports", "ltp,ltp+threshold_min=0.8"], "the same run"),
    (["--transports", "ltp+filler=sideways"], "filler must be one of"),
    (["--preset", "huge"], "unknown preset 'huge'"),
    (["--model", "resnet"], "unknown model 'resnet'"),
    (["--model", "mlp,resnet"], "unknown model 'resnet'"),
    (["--model", "mlp6,mlp6"], "models lists 'mlp6' more than once"),
    (["--transports", "plot+loss_weight=2"], "applies only to bound_rule 'adaptive'"),
    (["--loss", "60"], "loss_pct must be"),
    (["--loss", "1,x"], "'x' is not a loss model"),
    (["--loss", "1,1"], "loss_pcts lists 1.0 more than once"),
    (["--loss", "nan"], "a loss rate must be a finite number"),
    (["--seeds", "0,0"], "seeds lists 0 more than once"),
    (["--seeds", "-1"], "seed must be a whole number of at least 0"),
    (["--seeds", "0.5"], "--seeds must be a comma-separated list"),
    (["--workers", "0"], "n_workers must be"),
    (["--workers", "2.5"], "--workers must be a comma-separated list"),
    (["--queue", "0"], "queue_pkts must be"),
    (["--queue", "a"], "--queue must be a comma-separated list"),
    (["--delay", "5000"], "delay_ms must be"),
    (["--bandwidth", "0"], "bottleneck_mbps must be"),
    (["--iterations", "1.5"], "--iterations must be a whole number"),
    (["--iterations", "0"], "iterations must be a whole number of at least 1"),
    (["--timeout", "soon"], "--timeout must be a number"),
    (["--timeout", "-5"], "timeout_s must be above 0"),
    (["--target", "1.5"], "target_accuracy must be a fraction"),
    (["--max-train", "0"], "max_train_s must be above 0"),
    (["--stop-at-target", "--target", "0"], "target_accuracy must be a fraction"),   # a flag
    (["--sync", "bsp,ssp"], "needs its staleness bound"),
    (["--sync", "bsp,bsp"], "syncs lists 'bsp' more than once"),
    (["--fault", "explode@3"], "is not a fault"),
    (["--fault", "kill@500", "--iterations", "40"], "never reaches"),
    (["--fault", "restart@5"], "needs a duration"),
    (["--aggregator", "avg"], "unknown aggregator 'avg'"),
    (["--aggregator", "score", "--sync", "async"], "only bsp has"),
    (["--holdout", "6000"], "only the score and zeno++ aggregators use"),
    (["--holdout", "0,10", "--aggregator", "zeno++"], "from score_batch (64) to 30000"),
    (["--holdout", "lots"], "--holdout must be a comma-separated list"),
    (["--out", "/proc/version"], "is a file"),
    (["--out", "/proc/sys/none/sweep"], "is not writable"),
]


@pytest.mark.parametrize("args, words", SWEEP_CASES)
def test_bad_sweep_arguments(tmp_path, args, words):
    out = tmp_path / "sweep"
    if "--out" not in args:
        args = args + ["--out", str(out)]
    _one_sentence(_run(["run-sweep"] + args), words)
    assert not out.exists()


def test_sweep_options_have_long_names_only():
    # Short flags were assigned by first letter and moved when an option was added (-s went
    # from --seeds to --score-batch); the sweep takes long names only.
    proc = _run(["--help", "run-sweep"])
    options = [line.split()[0] for line in proc.stdout.splitlines() if line.startswith("  -")]
    assert options and all(o.startswith("--") and len(o) > 3 for o in options), options


BENCH_CASES = [
    (["bench-transport", "--bandwidth", "0"], "bottleneck_mbps must be"),
    (["bench-transport", "--iterations", "x"], "--iterations must be a whole number"),
    (["bench-transport", "--iterations", "0"], "--iterations must be from 1"),
    (["bench-transport", "--queue", "1.5"], "--queue must be a whole number"),
    (["bench-transport", "--transports", "ltp,ltp"], "more than once"),
    (["bench-transport", "--transports", "nope"], "unknown transport 'nope'"),
    (["bench-transport", "--loss", "80"], "loss_pct must be"),
    (["bench-transport", "--transports", "peer-mcast"], "timed on loopback only"),
    (["bench-transport", "--loopback-only", "--transports", "peer-nope"],
     "unknown peer transport 'nope'"),
    (["bench-transport", "--loopback-only", "--transports", "peer-mcast+close_frac=7"],
     "close_frac"),
    (["bench-network", "--bandwidth", "fast"], "--bandwidth must be a number"),
    (["bench-network", "--queue", "0"], "queue_pkts must be"),
    (["bench-network", "--seconds", "0"], "--seconds must be from 0.5"),
    (["bench-network", "--loss", "-1"], "loss_pct must be"),
]


@pytest.mark.parametrize("args, words", BENCH_CASES)
def test_bad_benchmark_arguments(args, words):
    _one_sentence(_run(args), words)


def test_figures_of_a_missing_sweep(tmp_path):
    _one_sentence(_run(["figures", "--sweep", str(tmp_path / "nothing")]), "run a sweep")


@pytest.mark.parametrize("text, words", [
    ("run_id,status\n\"unterminated,ok\n", "is not a CSV"),
    ("run_id,status\na,ok\n", "lacks the column"),
    ("\x00\x01garbage", "lacks the column"),
])
def test_figures_of_a_malformed_table(tmp_path, text, words):
    (tmp_path / "runs.csv").write_text(text)
    _one_sentence(_run(["figures", "--sweep", str(tmp_path)]), words)
