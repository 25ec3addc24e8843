"""One run on a live testbed: start the hosts' processes, wait with a timeout, collect, record.

:func:`execute` never raises for a failed run: a run that times out or crashes comes back as a row
with ``status`` ``timeout`` or ``crash`` and the reason, and every process it started is killed by
process group. It does raise on interruption (Ctrl-C, SIGTERM), after killing its processes.

Per-run folder ``runs/<run_id>/``:

- ``spec.json``: the spec; ``raw/``: each host's log, JSON-lines records and summary (write-once);
- ``counters.json``: every counter before and after (switch ports, bottleneck queue, loss rules,
  kernel TCP/UDP counters per host) and the run's figures from them (``delta``);
- ``port_stats.jsonl``: the controller's periodic port statistics during the run;
- ``iterations.csv``: the per-iteration records of all hosts in one long table.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from harness.spec import RunSpec
from harness.zygote import Zygote
from topologies.counters import Snapshot
from topologies.cross import CrossSpec, CrossTraffic
from topologies.impair import Impairment
from topologies.incast import PS_NAME, PS_PORT, SUBNET, intf, worker_name
from topologies.network import Testbed

POLL_S = 0.1
# Once the PS has finished, every gradient it needed has arrived: a worker still running this long
# after that is stuck (a transport bug), and waiting out the run's whole timeout teaches nothing.
AFTER_PS_GRACE_S = 60.0


def git_state() -> tuple[str, bool]:
    """(commit, dirty) of the project's work tree ('unknown' outside git)."""
    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                                text=True, check=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                                     "--untracked-files=no"],
                                    capture_output=True, text=True).stdout.strip())
        return commit, dirty
    except (subprocess.CalledProcessError, FileNotFoundError):
        return "unknown", False


def _read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _last_line(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1][-300:] if lines else ""


def _wait(procs: dict, deadline: float,
          grace_s: float = AFTER_PS_GRACE_S) -> tuple[str, str]:
    """Wait until every process exits, one fails, or a deadline; return (status, reason).

    The deadline is the run's timeout, or ``grace_s`` after the PS (``procs[PS_NAME]``) exited
    successfully, whichever comes first.
    """
    ps_done_at = None
    while True:
        codes = {host: p.poll() for host, p in procs.items()}
        failed = {h: c for h, c in codes.items() if c not in (None, 0)}
        if failed:
            host = sorted(failed)[0]
            return "crash", (f"{host} exited with code {failed[host]}: "
                             f"{_last_line(procs[host].log_path)}")
        if all(c == 0 for c in codes.values()):
            return "ok", ""
        now = time.monotonic()
        running = ", ".join(sorted(h for h, c in codes.items() if c is None))
        if ps_done_at is None and codes.get(PS_NAME) == 0:
            ps_done_at = now
        if ps_done_at is not None and now - ps_done_at > grace_s:
            return "timeout", f"still running {grace_s:g} s after the PS finished: {running}"
        if now > deadline:
            return "timeout", f"still running at the deadline: {running}"
        time.sleep(POLL_S)


def counter_deltas(before: Snapshot, after: Snapshot) -> dict:
    """Loss, queue and byte figures of a run from two :meth:`Testbed.snapshot` results."""
    return after.delta(before).as_dict()


def utilisation(stats: list[dict], port: int, rate_mbps: float) -> float | None:
    """Busy fraction of ``port``'s transmit side between the first and last statistics record."""
    recs = sorted((r for r in stats if r["port"] == port), key=lambda r: r["t"])
    if len(recs) < 2 or recs[-1]["t"] <= recs[0]["t"]:
        return None
    bits = 8 * (recs[-1]["tx_bytes"] - recs[0]["tx_bytes"])
    return bits / (rate_mbps * 1e6 * (recs[-1]["t"] - recs[0]["t"]))


def _training_window(raw: Path, stats: list[dict]) -> list[dict]:
    """The statistics records that fall inside the PS's training (evaluations included)."""
    path = raw / f"{PS_NAME}.summary.json"
    if not path.exists():
        return stats
    summary = json.loads(path.read_text())
    return [r for r in stats if summary["train_start_time"] <= r["t"] <= summary["train_end_time"]]


def iterations_table(raw: Path, spec: RunSpec) -> pd.DataFrame:
    """All hosts' per-iteration records as one long table (one row per host and iteration)."""
    frames = []
    ps = _read_jsonl(raw / f"{PS_NAME}.jsonl")
    if ps:
        df = pd.DataFrame(ps)
        df["host"], df["role"], df["rank"] = PS_NAME, "ps", -1
        df["min_recv_frac"] = df["recv_frac"].map(min)
        df["mean_recv_frac"] = df["recv_frac"].map(np.mean)
        for col in ("recv_frac", "segment_fracs", "param_wire_bytes", "param_retransmits",
                    "msg_stats"):
            df[col] = df[col].map(json.dumps)
        frames.append(df)
    for r in range(spec.n_workers):
        rows = _read_jsonl(raw / f"{worker_name(r)}.jsonl")
        if rows:
            df = pd.DataFrame(rows)
            df["host"], df["role"], df["rank"] = worker_name(r), "worker", r
            frames.append(df)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def push_times(ps: list[dict], workers: list[list[dict]]) -> np.ndarray:
    """Per iteration: from the first worker starting its push until the PS held every gradient.

    Both ends read ``time.monotonic()``, one clock for every namespace on the machine.
    """
    out = []
    for t, rec in enumerate(ps):
        starts = [w[t]["push_start_mono"] for w in workers if len(w) > t]
        out.append(rec["gather_end_mono"] - min(starts) if starts else np.nan)
    return np.array(out)


def summarize(spec: RunSpec, raw: Path, deltas: dict) -> tuple[dict, list[dict], list[dict]]:
    """(metric columns of the runs row, curve rows, iteration rows) from a run's raw records."""
    ps = _read_jsonl(raw / f"{PS_NAME}.jsonl")
    evals = _read_jsonl(raw / f"{PS_NAME}.eval.jsonl")
    workers = [_read_jsonl(raw / f"{worker_name(r)}.jsonl") for r in range(spec.n_workers)]
    push_s = push_times(ps, workers)
    summaries = [raw / f"{worker_name(r)}.summary.json" for r in range(spec.n_workers)]
    iter_s = np.array([rec["iter_s"] for rec in ps])
    gather_s = np.array([rec["gather_s"] for rec in ps])
    fracs = np.array([f for rec in ps for f in rec["recv_frac"]])
    final = evals[-1] if evals and ps and evals[-1]["iteration"] == len(ps) else None
    # Kernel TCP retransmissions come from the hosts' counters; a user-space transport reports
    # its own as "retransmits" in each host's summary.
    retrans = deltas["tcp_retransmits"]
    for path in [raw / f"{PS_NAME}.summary.json"] + summaries:
        if path.exists():
            retrans += json.loads(path.read_text()).get("transport_stats", {}).get("retransmits", 0)
    metrics = {
        "iterations_done": len(ps),
        "final_accuracy": final["accuracy"] if final else None,
        "iters_per_s": len(ps) / iter_s.sum() if len(ps) else None,
        "iter_mean_s": float(iter_s.mean()) if len(ps) else None,
        "iter_p50_s": float(np.percentile(iter_s, 50)) if len(ps) else None,
        "iter_p99_s": float(np.percentile(iter_s, 99)) if len(ps) else None,
        "gather_p50_s": float(np.percentile(gather_s, 50)) if len(ps) else None,
        "gather_p99_s": float(np.percentile(gather_s, 99)) if len(ps) else None,
        "push_p50_s": float(np.nanpercentile(push_s, 50)) if len(ps) else None,
        "push_p99_s": float(np.nanpercentile(push_s, 99)) if len(ps) else None,
        "mean_recv_frac": float(fracs.mean()) if len(fracs) else None,
        "min_recv_frac": float(fracs.min()) if len(fracs) else None,
        "grad_payload_bytes": sum(rec["grad_bytes"] for w in workers for rec in w),
        "grad_wire_bytes": sum(rec["wire_bytes"] for w in workers for rec in w),
        "retransmits": retrans,
        **{k: v for k, v in deltas.items() if k != "tcp_retransmits"},
    }
    cum = np.concatenate([[0.0], np.cumsum(iter_s)]) if len(ps) else np.array([0.0])
    curves = [{"run_id": spec.run_id, "scheme": spec.scheme, "transport": spec.transport,
               "loss_pct": spec.loss_pct, "delay_ms": spec.delay_ms,
               "seed": spec.seed, "iteration": e["iteration"],
               "time_s": float(cum[min(e["iteration"], len(cum) - 1)]),
               "accuracy": e["accuracy"], "test_loss": e["test_loss"]} for e in evals]
    iterations = [{"run_id": spec.run_id, "scheme": spec.scheme, "transport": spec.transport,
                   "loss_pct": spec.loss_pct, "delay_ms": spec.delay_ms,
                   "bottleneck_mbps": spec.bottleneck_mbps, "seed": spec.seed,
                   "iteration": rec["iteration"], "iter_s": rec["iter_s"],
                   "broadcast_s": rec["broadcast_s"], "gather_s": rec["gather_s"],
                   "push_s": float(push_s[t]), "min_recv_frac": min(rec["recv_frac"]),
                   "mean_recv_frac": float(np.mean(rec["recv_frac"]))}
                  for t, rec in enumerate(ps)]
    return metrics, curves, iterations


def spawn_plain(testbed: Testbed) -> Callable:
    """A launcher that starts each host's Python with ``mnexec`` (a fresh interpreter per host)."""
    def spawn(host: str, module: str, args: list[str], log_path: Path):
        return testbed.start_process(host, [sys.executable, "-m", module] + args, log_path)
    return spawn


def spawn_forked(testbed: Testbed, zygote: Zygote) -> Callable:
    """A launcher that forks each host's Python from a preloaded :class:`Zygote`."""
    def spawn(host: str, module: str, args: list[str], log_path: Path):
        return zygote.spawn(host, testbed.host(host).pid, module, args, log_path)
    return spawn


def execute(testbed: Testbed, spec: RunSpec, run_dir: Path, sweep: str,
            spawn: Callable | None = None, *, impairment: Impairment | None = None,
            cross: CrossSpec | str | None = None) -> tuple[dict, list[dict], list[dict]]:
    """Run ``spec`` on ``testbed``; return its rows for runs.csv, curves.csv and iterations.csv.

    ``spawn(host, module, args, log_path)`` starts a host's process (default
    :func:`spawn_plain`). The spec's loss model (seeded with its seed) and delay apply at every
    host unless ``impairment`` replaces them; its cross traffic (or ``cross``, instead) runs
    through the bottleneck for the whole run (:mod:`topologies.cross`; reports in
    ``raw/cross/``).
    """
    from transports import registry

    raw = run_dir / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    spec_path = run_dir / "spec.json"
    spec_path.write_text(spec.to_json())
    transport = registry.create(spec.transport, spec.options())
    started_at = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    commit, dirty = git_state()

    t_begin = time.monotonic()
    testbed.configure(impairment or Impairment(spec.loss_text, spec.delay_ms, seed=spec.seed))
    testbed.reset_routes()
    rtt_ms = testbed.rtt_ms(worker_name(0))
    for host in [PS_NAME] + testbed.params.worker_names:
        for command in transport.host_commands(intf(host), SUBNET):
            testbed.host_run(host, "sh", "-c", command)
    testbed.controller_errors()  # only what this run causes counts
    traffic = CrossTraffic(testbed, cross or spec.cross, raw / "cross", seed=spec.seed)
    with traffic:
        before = testbed.snapshot()
        t0 = time.monotonic()
        spawn = spawn or spawn_plain(testbed)
        procs = {}
        try:
            base = ["--spec", str(spec_path), "--out", str(raw)]
            procs[PS_NAME] = spawn(PS_NAME, "harness.node", base + ["--role", "ps"],
                                   raw / f"{PS_NAME}.log")
            for r in range(spec.n_workers):
                host = worker_name(r)
                procs[host] = spawn(host, "harness.node", base + ["--role", "worker", "--rank", str(r)],
                                    raw / f"{host}.log")
            status, reason = _wait(procs, t0 + spec.timeout_s)
        finally:
            for proc in procs.values():
                proc.kill()
        wall_s = time.monotonic() - t0
        after = testbed.snapshot()
    errors = testbed.controller_errors()
    if errors and status == "ok":
        status, reason = "crash", f"controller: {errors[0][:300]}"

    deltas = counter_deltas(before, after)
    (run_dir / "counters.json").write_text(json.dumps(
        {"before": before.to_dict(), "after": after.to_dict(), "delta": deltas}, indent=1))
    stats = testbed.port_stats_between(before.t, after.t)
    with open(run_dir / "port_stats.jsonl", "w") as f:
        for rec in stats:
            f.write(json.dumps(rec) + "\n")
    iterations_table(raw, spec).to_csv(run_dir / "iterations.csv", index=False)

    metrics, curves, iterations = summarize(spec, raw, deltas)
    ps_summary = raw / f"{PS_NAME}.summary.json"
    training_s = 0.0
    if ps_summary.exists():
        s = json.loads(ps_summary.read_text())
        training_s = s["train_end_time"] - s["train_start_time"]
    overhead_s = time.monotonic() - t_begin - training_s
    row = {
        "run_id": spec.run_id, "sweep": sweep, "status": status, "reason": reason,
        "scheme": spec.scheme, "transport": spec.transport, "transport_options": transport.options(),
        "n_workers": spec.n_workers, "bottleneck_mbps": spec.bottleneck_mbps,
        "worker_link_mbps": spec.network.worker_mbps, "queue_pkts": spec.queue_pkts,
        "loss_pct": spec.loss_pct, "loss_model": spec.loss_text, "delay_ms": spec.delay_ms,
        "cross": spec.cross, "rtt_ms": rtt_ms,
        "model": spec.model, "dataset": spec.dataset,
        "iterations": spec.iterations, "batch_size": spec.batch_size, "lr": spec.lr,
        "eval_every": spec.eval_every, "seed": spec.seed,
        **metrics,
        "bottleneck_util_frac": utilisation(_training_window(raw, stats), PS_PORT,
                                            spec.bottleneck_mbps),
        "wall_s": wall_s, "overhead_s": overhead_s, "started_at": started_at, "git_commit": commit, "git_dirty": dirty,
    }
    return row, curves, iterations
