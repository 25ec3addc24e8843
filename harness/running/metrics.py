"""From one run's raw records to its rows in the sweep's tables (pure functions, no network).

:func:`summarize` reads a run folder through :class:`~harness.running.runfiles.RunFiles` and
returns the metric columns of its ``runs.csv`` row, its ``curves.csv`` rows and its
``iterations.csv`` rows. The columns are defined, with units, in :mod:`harness.running.results`.
Three groups need a word:

**Bounds.** With ``N`` workers, a message of ``M`` bytes and a PS link of ``B`` bit/s, pushing
every gradient needs ``N * M * 8 / B`` (the *push bound*, what the incast alone costs). An
iteration moves the parameters down and the gradients up the same link, in opposite directions:
full duplex, so they can overlap. With the parameters sent to one worker after another, the last
worker has them after ``N * M * 8 / B`` and its gradient needs ``M * 8 / B`` more: the *full-duplex
bound* is ``(N + 1) * M * 8 / B``. Both count payload only; Ethernet, IP and transport headers add
about 4.6 % at a 1500-byte MTU. The iteration's own floor adds what no transport can remove: the
last worker's compute and the PS's update, measured per iteration (``iter_bound_s``).

**Tolerance accounting.** Per gradient message the PS's transport reports how it closed. An
*early close* ended a message before every packet arrived (at the adaptive threshold), a
*max-wait close* at the hard time cap; the *filled fraction* is what the filler supplied (one
minus the received fraction); *retransmissions avoided* counts the packets still missing when a
message closed early, each of which a reliable transport would have had to resend at least once.

**Faults and staleness.** ``staleness_mean``/``max`` are over every gradient the PS applied
(:mod:`harness.hosts.ps`). With a fault: ``fault_t_s`` is when the harness injected it (from the
start of training, wall clock: the injector and the PS share the machine's clocks),
``detection_s`` how long until the PS counted the worker missing or gone (its membership
events), ``iterations_lost`` how many rounds from the fault on closed without that worker's
gradient, ``rejoin_s`` how long after the fault ended (a link restored, a process continued)
until the PS had the worker back, ``recovered_s`` how long after the fault (after its end, for one
that ends) until the first round that held every worker then running (a killed one left out: for
a ``tree`` run, how long the tree took to re-form), and ``fault_iter_max_s`` the slowest round
from the fault on.
``false_alarms`` counts workers the PS counted missing that no fault had hit (a slow worker, a
TCP flow in a retransmission timeout): the price of a deadline.

**Rejections.** Every host reports the datagrams its transport refused as not from its run's
peers or not what it expected (forged, corrupt or stray ones: LTP's ``malformed``, ``bad_mac``,
``bad_shape``, ... counters, ``docs/ltp-protocol.md`` §11); their sum over hosts is the run's
``rejected_datagrams`` and the sum per counter its ``rejections``. A run that heard only its own
peers has none.

**CPU.** The PS reads the machine's ``/proc/stat`` when training starts and ends
(``cpu_busy_frac``: both cores busy is 1.0), and every host reports its own CPU time, so a run
shows when the CPU rather than the network set its pace.
"""

from __future__ import annotations

import numpy as np

from harness.hosts.faults import parse_fault
from harness.hosts.pattern import parse_pattern
from harness.running.runfiles import PsIteration, RunFiles, WorkerIteration
from harness.running.spec import RunSpec
from harness.training import models
from harness.training.byzantine import parse_byzantine
from topologies.incast import PS_NAME, worker_name

CLOSE_EARLY, CLOSE_MAX_WAIT = 2, 3   # close reasons a loss-tolerant transport reports per message


def push_times(ps: list[PsIteration], workers: list[list[WorkerIteration]]) -> np.ndarray:
    """Per iteration: from the first worker starting its push until the PS held every gradient.

    Only where every worker is at the PS's iteration: in bsp before any fault (a worker's k-th
    gradient is then round k); nan elsewhere."""
    out = []
    for t, rec in enumerate(ps):
        if rec.staleness and max(rec.staleness) > 0 or rec.missing or rec.late:
            out.append(np.nan)
            continue
        starts = [w[t].push_start_mono for w in workers if len(w) > t]
        out.append(rec.gather_end_mono - min(starts) if starts else np.nan)
    return np.array(out)


def bounds_s(spec: RunSpec, msg_bytes: int, down_bytes: int | None = None) -> tuple[float, float]:
    """(push bound, full-duplex bound) in seconds for pushes of ``msg_bytes`` and parameters of
    ``down_bytes`` (None: the same), by the run's pattern (payload only):

    - ``ps``: the incast of ``n`` pushes over the PS link; the serial broadcast of ``n``
      parameter messages, then the last worker's push (the others' overlap the broadcast).
    - ``tree``: a node's busiest link carries ``max(root x B/B_ps, fanout x B/B_w)`` of one
      message each way (the PS serves ``root`` workers, a worker ``fanout``); the pipeline adds
      one chunk per level below the first. Down, then up: an iteration needs both.
    - ``ring``: every worker sends and receives 2(N - 1)/N of a gradient over its own link, at
      once (full duplex): that is the push and the iteration both.
    """
    pat = parse_pattern(spec.pattern)
    n, down = spec.n_workers, (msg_bytes if down_bytes is None else down_bytes)
    ps_rate = spec.bottleneck_mbps * 1e6 / 8
    w_rate = spec.network.worker_mbps * 1e6 / 8
    if pat.kind == "ring":
        one = 2 * (n - 1) / n * msg_bytes / w_rate
        return one, one
    if pat.kind == "tree":
        depth = tree_depth(n, pat["root"], pat["fanout"])
        def leg(size: int) -> float:
            chunk = size / pat["chunks"]
            return max(pat["root"] * size / ps_rate, pat["fanout"] * size / w_rate) \
                + (depth - 1) * chunk / min(ps_rate, w_rate)
        return leg(msg_bytes), leg(down) + leg(msg_bytes)
    return n * msg_bytes / ps_rate, (n * down + msg_bytes) / ps_rate


def tree_depth(n: int, root: int, fanout: int) -> int:
    """The depth of the shallowest tree of ``n`` workers under a PS that serves ``root`` and
    workers that serve ``fanout`` each (what :class:`harness.hosts.tree.Directory` forms when
    every worker asks at once)."""
    depth, level, placed = 0, root, 0
    while placed < n:
        depth += 1
        placed += level
        level *= fanout
    return depth


def _pct(values, q: float) -> float | None:
    arr = np.asarray(values, dtype=float)
    arr = arr[~np.isnan(arr)]
    return float(np.percentile(arr, q)) if arr.size else None


def tolerance(ps: list[PsIteration]) -> dict:
    """Early closes, max-wait closes, filled fractions and avoided retransmissions of a run."""
    stats = [s for rec in ps for s in rec.msg_stats]
    fracs = np.array([f for rec in ps for f in rec.recv_frac])
    early = [s for s in stats if s.get("early_closed", 0) > 0]
    return {
        "gradient_msgs": len(stats),
        "early_closes": len(early),
        "max_wait_closes": sum(1 for s in stats if s.get("close_reason") == CLOSE_MAX_WAIT),
        "filled_frac_mean": float(1.0 - fracs.mean()) if fracs.size else None,
        "filled_frac_max": float(1.0 - fracs.min()) if fracs.size else None,
        "retx_avoided": int(sum(s.get("count", 0) - s.get("packets", 0) for s in early)),
    }


def _evals(files: RunFiles, spec: RunSpec, n_done: int) -> dict:
    evals = files.eval_records()
    final = evals[-1] if evals and evals[-1].iteration == n_done and n_done else None
    hit = next((e for e in evals if e.accuracy >= spec.target_accuracy and e.iteration > 0), None)
    return {
        "final_accuracy": final.accuracy if final else None,
        "target_accuracy": spec.target_accuracy,
        "target_reached": hit is not None,
        "time_to_target_s": hit.train_s if hit else None,
        "iterations_to_target": hit.iteration if hit else None,
    }


def resilience(spec: RunSpec, files: RunFiles, ps: list[PsIteration],
               train_start_time: float | None) -> dict:
    """Staleness, and what the run's fault did (see the module docstring)."""
    stale = np.array([s for rec in ps for s in rec.staleness], dtype=float)
    out = {"sync": spec.sync, "fault": spec.fault,
           "staleness_mean": float(stale.mean()) if stale.size else None,
           "staleness_max": int(stale.max()) if stale.size else None,
           "late_gradients": sum(rec.late for rec in ps),
           "fault_t_s": None, "detection_s": None, "detected_as": "", "iterations_lost": None,
           "rejoin_s": None, "recovered_s": None, "fault_iter_max_s": None, "false_alarms": 0}
    fault = parse_fault(spec.fault)
    rank = fault.rank(spec.n_workers)
    events = files.fault_events()
    struck = events[0]["mono"] if events else float("inf")
    out["false_alarms"] = sum(1 for e in files.member_events() if e.event == "missing"
                              and (e.rank != rank or e.mono < struck or fault.kind == "none"))
    if fault.kind == "straggler":
        out["iterations_lost"] = sum(1 for rec in ps if rec.ranks and rank not in rec.ranks)
    if not events:
        return out
    hit = events[0]
    if train_start_time:
        out["fault_t_s"] = hit["t"] - train_start_time
    # The round in progress when the fault struck, and every one after it.
    after = [rec for rec in ps if rec.gather_end_mono >= hit["mono"]]
    out["iterations_lost"] = sum(1 for rec in after if rank not in rec.ranks)
    out["fault_iter_max_s"] = max((rec.iter_s for rec in after), default=None)
    members = [e for e in files.member_events() if e.rank == rank and e.mono >= hit["mono"]]
    lost = next((e for e in members if e.event in ("missing", "gone")), None)
    if lost is not None:
        out["detection_s"], out["detected_as"] = lost.mono - hit["mono"], lost.event
    ended = next((e for e in events[1:] if e["event"] in ("restored", "continued", "restarted")),
                 None)
    out["recovered_s"] = _recovered(spec, ps, rank, fault.kind,
                                    hit["mono"] if ended is None else ended["mono"])
    if ended is not None:
        # From when the harness asked for the link back (packets may pass from the controller's
        # first flow change on, before its call returns).
        since = ended.get("called_mono", ended["mono"])
        back = next((e for e in members if e.event == "back" and e.mono >= since), None)
        if back is not None:
            out["rejoin_s"] = back.mono - since
    return out


def _recovered(spec: RunSpec, ps: list[PsIteration], rank: int, kind: str,
               since: float) -> float | None:
    """From ``since`` until the end of the first round that held every worker still running."""
    running = set(range(spec.n_workers)) - ({rank} if kind == "kill" else set())
    first = next((rec for rec in ps if rec.gather_end_mono >= since
                  and running <= set(rec.ranks)), None)
    return None if first is None else first.gather_end_mono - since


def _verdicts(spec: RunSpec, rec: PsIteration) -> list[tuple[bool, bool, bool]]:
    """Per update of a round: (from an attacker, kept, delivered in part)."""
    attackers = set(parse_byzantine(spec.byzantine).ranks(spec.n_workers))
    kept = rec.agg_kept or [True] * len(rec.ranks)
    return [(r in attackers, k, f < 1.0) for r, k, f in zip(rec.ranks, kept, rec.recv_frac)]


def robustness(spec: RunSpec, ps: list[PsIteration]) -> dict:
    """What the aggregator kept and rejected, attackers' and honest updates apart (every update
    judged: under ``zeno++`` in ``ssp``/``async`` each arrival, applied or not)."""
    v = [x for rec in ps for x in _verdicts(spec, rec)]
    return {"byzantine": spec.byzantine, "aggregator": spec.aggregator,
            "tolerate": spec.tolerated, "holdout": spec.holdout,
            "byzantine_updates": sum(1 for b, _, _ in v if b),
            "byzantine_kept": sum(1 for b, k, _ in v if b and k),
            "honest_updates": sum(1 for b, _, _ in v if not b),
            "honest_rejected": sum(1 for b, k, _ in v if not b and not k),
            "honest_filled": sum(1 for b, _, f in v if not b and f),
            "honest_filled_rejected": sum(1 for b, k, f in v if not b and not k and f),
            "agg_p50_s": _pct([rec.agg_s for rec in ps], 50)}


def compression(spec: RunSpec, ps: list[PsIteration],
                workers: list[list[WorkerIteration]]) -> dict:
    """The run's compression settings and what the pushes cost on the wire."""
    wire = sum(rec.wire_bytes for w in workers for rec in w)
    syncs = [sum(rec.residual_sync for rec in w) for w in workers]
    return {"compress": spec.compress, "local_steps": spec.local_steps,
            "error_reset": spec.error_reset, "reset_mode": spec.reset_mode,
            "residual_syncs": float(np.mean(syncs)) if syncs else None,
            "wire_bytes_per_iter": wire / len(ps) if ps else None,
            "compress_dropped": int(sum(s.get("compress_dropped", 0)
                                        for rec in ps for s in rec.msg_stats))}


def _round_verdicts(spec: RunSpec, rec: PsIteration) -> dict:
    v = _verdicts(spec, rec)
    return {"kept": sum(1 for _, k, _ in v if k),
            "byzantine_kept": sum(1 for b, k, _ in v if b and k),
            "honest_rejected": sum(1 for b, k, _ in v if not b and not k),
            "honest_filled_rejected": sum(1 for b, k, f in v if not b and not k and f),
            "agg_s": rec.agg_s}


def summarize(spec: RunSpec, files: RunFiles) -> tuple[dict, list[dict], list[dict]]:
    """(metric columns of the runs row, curve rows, iteration rows) from a run's raw records."""
    ps = files.ps_iterations()
    workers = [files.worker_iterations(worker_name(r)) for r in range(spec.n_workers)]
    summaries = {h: files.host_summary(h)
                 for h in [PS_NAME] + [worker_name(r) for r in range(spec.n_workers)]}
    ps_summary = summaries[PS_NAME]
    push_s = push_times(ps, workers)
    iter_s = np.array([rec.iter_s for rec in ps])
    # The slowest worker's compute in each iteration is on the critical path.
    compute_s = np.array([max((w[t].compute_s for w in workers if len(w) > t), default=np.nan)
                          for t in range(len(ps))])
    update_s = np.array([rec.update_s for rec in ps])
    msg_bytes = next((w[0].grad_bytes for w in workers if w), 0)
    push_bound, fd_bound = bounds_s(spec, msg_bytes,
                                    4 * models.n_params(spec.model) if spec.compress != "none"
                                    else None)
    floor_s = fd_bound + (_pct(compute_s, 50) or 0.0) + (_pct(update_s, 50) or 0.0)
    # A user-space transport reports its retransmissions in each host's stats; TCP's come from
    # the kernel counters the runner adds.
    retrans = sum(s.transport_stats.get("retransmits", 0) for s in summaries.values() if s)
    n = len(ps)
    fracs = [f for r in ps for f in r.recv_frac]
    rejections: dict[str, float] = {}
    for s in summaries.values():
        for name, count in (s.rejections if s else {}).items():
            if count:
                rejections[name] = rejections.get(name, 0) + count
    metrics = {
        "iterations_done": n,
        "stopped_by": ps_summary.stopped_by if ps_summary else "",
        "train_s": float(iter_s.sum()) if n else None,
        **_evals(files, spec, n),
        "iters_per_s": n / iter_s.sum() if n else None,
        "iter_mean_s": float(iter_s.mean()) if n else None,
        "iter_p50_s": _pct(iter_s, 50),
        "iter_p99_s": _pct(iter_s, 99),
        "gather_p50_s": _pct([r.gather_s for r in ps], 50),
        "gather_p99_s": _pct([r.gather_s for r in ps], 99),
        "broadcast_p50_s": _pct([r.broadcast_s for r in ps], 50),
        "push_p50_s": _pct(push_s, 50),
        "push_p99_s": _pct(push_s, 99),
        "compute_p50_s": _pct(compute_s, 50),
        "update_p50_s": _pct(update_s, 50),
        "push_bound_s": push_bound,
        "fd_bound_s": fd_bound,
        "iter_bound_s": floor_s,
        "iter_over_bound": _pct(iter_s, 50) / floor_s if n and floor_s > 0 else None,
        "mean_recv_frac": float(np.mean(fracs)) if fracs else None,
        "min_recv_frac": float(np.min(fracs)) if fracs else None,
        **tolerance(ps),
        **resilience(spec, files, ps, ps_summary.train_start_time if ps_summary else None),
        **robustness(spec, ps),
        **compression(spec, ps, workers),
        "grad_payload_bytes": sum(rec.grad_bytes for w in workers for rec in w),
        "grad_wire_bytes": sum(rec.wire_bytes for w in workers for rec in w),
        "retransmits": retrans,
        "rejected_datagrams": int(sum(rejections.values())),
        "rejections": rejections,
        "cpu_busy_frac": ps_summary.cpu_busy_frac if ps_summary else None,
        "ps_cpu_s": ps_summary.cpu_s if ps_summary else None,
        "workers_cpu_s": sum(s.cpu_s for h, s in summaries.items() if s and h != PS_NAME),
    }
    key = {"run_id": spec.run_id, "scheme": spec.scheme, "transport": spec.transport,
           "loss_pct": spec.loss_pct, "delay_ms": spec.delay_ms, "seed": spec.seed,
           "sync": spec.sync, "fault": spec.fault, "byzantine": spec.byzantine,
           "aggregator": spec.aggregator}
    curves = [{**key, "iteration": e.iteration, "time_s": e.train_s, "accuracy": e.accuracy,
               "test_loss": e.test_loss} for e in files.eval_records()]
    iterations = [{**key, "bottleneck_mbps": spec.bottleneck_mbps, "n_workers": spec.n_workers,
                   "iteration": rec.iteration, "iter_s": rec.iter_s,
                   "broadcast_s": rec.broadcast_s, "gather_s": rec.gather_s,
                   "update_s": rec.update_s, "compute_s": float(compute_s[t]),
                   "push_s": float(push_s[t]), "min_recv_frac": min(rec.recv_frac, default=None),
                   "mean_recv_frac": float(np.mean(rec.recv_frac)) if rec.recv_frac else None,
                   "early_closes": sum(1 for s in rec.msg_stats if s.get("early_closed", 0) > 0),
                   "contributors": len(rec.recv_frac),
                   "staleness_max": max(rec.staleness, default=0), "t_s": rec.t_s,
                   **_round_verdicts(spec, rec)}
                  for t, rec in enumerate(ps)]
    return metrics, curves, iterations
