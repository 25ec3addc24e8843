"""One peer-to-peer run on the fabric, and a resumable sweep of them into one results folder.

:func:`execute` writes the run's spec and session, applies its loss, starts the round coordinator
(:mod:`harness.p2p.coord`) and one :mod:`harness.p2p.peer` per worker host, waits for them, reads
every switch port's counters before and after, and returns the run's row. :data:`KIND` is what the
one sweep loop (:func:`harness.running.engine.run_plan`) needs to run a
:class:`~harness.p2p.spec.PeerPlan`: runs that share a network share one live fabric, each row is
appended the moment its run ends (a killed sweep keeps every row and the same command resumes), and
the report and figures come last (:mod:`harness.p2p.report`). The columns are
:data:`harness.running.results.P2P_COLUMNS` and :data:`~harness.running.results.P2P_CURVE_COLUMNS`
(units in ``docs/results-schema.md``).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd

from harness.hosts.zygote import Zygote
from harness.p2p.coord import Coordinator, socket_path
from harness.p2p.spec import PeerPlan, PeerSpec
from harness.running import keys as handover
from harness.running import provenance
from harness.running import capture as capture_files
from harness.running import kinds
from harness.running.capture import Capture, capturing
from harness.running.provenance import git_state
from harness.running.results import P2P_COLUMNS, P2P_CURVE_COLUMNS
from harness.running.runfiles import RunFiles, read_jsonl
from harness.running.runner import spawn_forked, wait
from topologies.fabric import SPINE_NAME, UPLINK_PORT, leaf_name
from topologies.impair.loss import Impairment
from topologies.incast import worker_name
from topologies.testbed.network import Testbed
from transports.base import Session


def port_counters(tb: Testbed, switches: list[str]) -> dict[str, dict[int, dict]]:
    """Every port's counters of every named switch."""
    return {sw: {port: vars(c) for port, c in tb.meter.switch_ports(sw).items()} for sw in switches}


def link_bytes(before: dict, after: dict, n_leaves: int) -> tuple[int, int]:
    """(bytes on the leaf-spine links both ways, bytes the leaves sent to hosts) between two
    readings of :func:`port_counters`."""
    def tx(sw: str, port: int) -> int:
        return after[sw][port]["tx_bytes"] - before[sw][port]["tx_bytes"]

    leaves = [leaf_name(i) for i in range(n_leaves)]
    trunk = sum(tx(sw, UPLINK_PORT) for sw in leaves) + sum(tx(SPINE_NAME, p)
                                                            for p in after[SPINE_NAME])
    access = sum(tx(sw, p) for sw in leaves for p in after[sw] if p != UPLINK_PORT)
    return trunk, access


def execute(tb: Testbed, spec: PeerSpec, run_dir: Path, sweep: str, spawn,
            capture: Capture | None = None) -> tuple[dict, list]:
    """Run ``spec`` on the live fabric ``tb``; return its row and its curve rows. ``capture``
    records the named hosts' packets from before the first counters to after the last
    (:func:`harness.running.capture.capturing`, ``runs/<run_id>/capture/<host>.pcap``)."""
    raw = run_dir / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    (run_dir / "spec.json").write_text(spec.to_json())
    keys = handover.blobs(handover.peer_keys(Session.draw(), spec.n_workers))   # each its own
    started_at = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    code = provenance.fingerprint("p2p").digest
    tb.ingress.configure(Impairment(spec.loss_pct, 0.0, seed=spec.seed))
    ips = [tb.host_ips()[worker_name(r)] for r in range(spec.n_workers)]
    switches = spec.fabric.switch_names
    with capturing(tb, capture, RunFiles(run_dir)):
        before = port_counters(tb, switches)
        sock = socket_path(f"{spec.seed}")
        load = provenance.LoadMeter(tb.ovs.pids())
        load.start()
        t0 = time.monotonic()
        with Coordinator(spec, tb.mcast, sock, raw / "rounds.jsonl", ips):
            procs = {}
            try:
                for r in range(spec.n_workers):
                    host = worker_name(r)
                    procs[host] = spawn(host, "harness.p2p.peer",
                                        ["--run", str(run_dir), "--rank", str(r), "--coord",
                                         str(sock)], raw / f"{host}.log", keys[host])
                status, reason = wait(procs, t0 + spec.timeout_s)
            finally:
                for proc in procs.values():
                    proc.kill()
        wall_s = time.monotonic() - t0
        other_load = load.stop()
        after = port_counters(tb, switches)
    (run_dir / "counters.json").write_text(json.dumps({"before": before, "after": after}))
    commit, dirty = git_state()
    row, curves = summarise(spec, raw, before, after)
    row.update(run_id=spec.run_id, sweep=sweep, status=status, reason=reason, wall_s=wall_s,
               started_at=started_at, git_commit=commit, git_dirty=dirty,
               code_fingerprint=code, other_load_frac=other_load, **provenance.run_columns())
    return row, curves


def _median(values) -> float | None:
    values = [v for v in values if v is not None]
    return float(np.median(values)) if values else None


def summarise(spec: PeerSpec, raw: Path, before: dict, after: dict) -> tuple[dict, list[dict]]:
    """The run's row (all but status and provenance) and its curve rows, from its raw files."""
    import torch

    from harness.hosts.node import evaluate
    from harness.training import datasets, models

    hosts = [worker_name(r) for r in range(spec.n_workers)]
    rounds = pd.DataFrame([dict(rec, host=h) for h in hosts
                           for rec in read_jsonl(raw / f"{h}.jsonl")])
    plans = read_jsonl(raw / "rounds.jsonl")
    evals = pd.DataFrame([dict(rec, host=h) for h in hosts
                          for rec in read_jsonl(raw / f"{h}.eval.jsonl")])
    row = {c.name: None for c in P2P_COLUMNS}
    row.update(method=spec.method, policy=spec.policy, copy=spec.copy, scheme=spec.scheme,
               sync=spec.sync, p=spec.p, n_workers=spec.n_workers, n_slow=spec.n_slow,
               access_mbps=spec.access_mbps, slow_frac=spec.slow_frac,
               uplink_mbps=spec.fabric.uplink_rate_mbps, loss_pct=spec.loss_pct, seed=spec.seed,
               rounds=spec.rounds, target_accuracy=spec.target_accuracy)
    t_start = rounds["start_mono"].min() if len(rounds) else None
    if len(rounds):
        done = rounds.groupby("host")["round"].max()
        row["rounds_done"] = int(done.min()) + 1 if len(done) == spec.n_workers else 0
        rounds = rounds.sort_values(["host", "round"])
        end = rounds["start_mono"] + rounds["wait_s"] + rounds["mix_s"] + rounds["eval_s"] \
            + rounds["compute_s"] + rounds["send_s"]
        rounds["round_s"] = rounds.groupby("host")["start_mono"].shift(-1) - rounds["start_mono"]
        rounds["sync_s"] = rounds["wait_s"] + rounds["send_s"]
        row["train_s"] = float(end.max() - t_start)
        row["round_s"] = _median(rounds["round_s"].dropna())
        row["sync_s"] = _median(rounds["sync_s"])
        row["sync_p90_s"] = float(np.percentile(rounds["sync_s"], 90))
        row["send_s"] = _median(rounds["send_s"])
        row["compute_s"] = _median(rounds["compute_s"])
        row["avg_p"] = float(rounds["receivers"].mean())
        row["delivered_p"] = float(rounds["delivered"].mean())
        row["mixed_per_round"] = float(rounds["mixed"].mean())
        row["mixed_frac"] = _median(rounds["mixed_frac"].dropna()) \
            if rounds["mixed_frac"].notna().any() else None
        row["retransmits"] = int(rounds["retransmits"].sum())
        n_rounds = rounds["round"].nunique()
        row["wire_bytes_per_round"] = float(rounds["wire_bytes"].sum() / n_rounds)
        trunk, access = link_bytes(before, after, spec.n_leaves)
        row["trunk_bytes_per_round"] = trunk / n_rounds
        row["access_bytes_per_round"] = access / n_rounds
    if plans:
        row["plan_s"] = _median([p["plan_s"] for p in plans])
    summaries = [json.loads((raw / f"{h}.summary.json").read_text()) for h in hosts
                 if (raw / f"{h}.summary.json").exists()]
    row["early_closes"] = sum(s["transport_stats"].get("early_closes", 0) for s in summaries)
    finals = [np.load(raw / f"{h}.final.npy") for h in hosts if (raw / f"{h}.final.npy").exists()]
    if len(finals) == spec.n_workers:
        model = models.build(spec.model, spec.seed)
        models.load_flat(model, torch.from_numpy(np.mean(finals, axis=0).astype(np.float32)))
        x_test, y_test = datasets.load(spec.dataset, "test")
        row["final_accuracy"] = evaluate(model, x_test, y_test)[0]
    curves = []
    if len(evals):
        last = evals[evals["round"] == evals["round"].max()]
        row["peer_acc_min"] = float(last["accuracy"].min())
        row["peer_acc_max"] = float(last["accuracy"].max())
        for rnd, g in evals.groupby("round"):
            if g["host"].nunique() < spec.n_workers:
                continue
            t_s = max(0.0, float(g["mono"].max() - t_start)) if t_start is not None else None
            curves.append({"run_id": spec.run_id, "round": int(rnd), "t_s": t_s,
                           "acc_mean": float(g["accuracy"].mean()),
                           "acc_min": float(g["accuracy"].min()),
                           "acc_max": float(g["accuracy"].max())})
        reached = [c for c in curves if c["acc_mean"] >= spec.target_accuracy]
        row["tta_s"] = reached[0]["t_s"] if reached else None
    return row, curves


class PeerKind(kinds.Kind):
    """Peer-to-peer training on the leaf-spine fabric (one live fabric per network)."""

    name = "p2p"
    tables = {"curves.csv": P2P_CURVE_COLUMNS, "runs.csv": P2P_COLUMNS}

    def group_key(self, spec: PeerSpec) -> tuple:
        return spec.network_key

    def network_dir(self, spec: PeerSpec) -> str:
        return ""   # the sweep's network/ itself

    @contextlib.contextmanager
    def network(self, spec: PeerSpec, net_dir: Path):
        with Testbed(spec.fabric, net_dir, stats_interval_s=0.25) as tb, \
                Zygote(net_dir, tb.ledger) as zygote:
            yield tb, spawn_forked(tb, zygote)

    def execute(self, site, spec: PeerSpec, run_dir: Path, sweep: str,
                capture: Capture | None = None) -> dict[str, list[dict]]:
        tb, spawn = site
        row, curves = execute(tb, spec, run_dir, sweep, spawn, capture=capture)
        capture_files.note(run_dir.parent.parent, spec.run_id, capture)
        return {"curves.csv": curves, "runs.csv": [row]}

    def check_capture(self, specs: list[PeerSpec], capture: Capture) -> None:
        for spec in specs:
            capture.check_hosts(spec.fabric.host_names, f"run {spec.run_id}")

    def manifest(self, plan: PeerPlan, specs: list[PeerSpec], folder: Path) -> None:
        path = folder / "manifest.json"
        if not path.exists():
            path.write_text(json.dumps({"preset": plan.name, "description": plan.description,
                                        "runs": [s.run_id for s in specs],
                                        "provenance": provenance.manifest("p2p")}, indent=1))

    def started(self, spec: PeerSpec) -> str:
        return f"{spec.method} {spec.sync} seed {spec.seed}"

    def ended(self, row: dict) -> str:
        return (f"sync {row['sync_s'] or float('nan'):.3f} s/round, p {row['avg_p'] or 0:.2f}, "
                f"accuracy {row['final_accuracy'] or float('nan'):.3f}")

    def report(self, folder: Path, figures: bool = True) -> list[Path]:
        from harness.p2p import report

        return [report.write(folder, figures)]


KIND = PeerKind()
