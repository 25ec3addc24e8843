"""The results tables: their columns (with units) and append-only, crash-safe writers.

A sweep folder holds

- ``manifest.json``: provenance, written before the first run;
- ``runs.csv``: one row per finished run (ok, timeout or crash), appended the moment it ends;
- ``curves.csv``: long form, one row per (run, evaluation point);
- ``iterations.csv``: long form, one row per (run, iteration) as the PS saw it;
- ``runs/<run_id>/``: the run's raw files (spec, per-host logs and records, counters).

Rows are appended with a flush and an fsync, so a sweep killed at any moment keeps every row it
wrote; a half-written last line (power loss) is dropped when the table is read back.
``docs/results-schema.md`` is generated from :data:`RUNS_COLUMNS` and :data:`CURVES_COLUMNS`.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from transports.base import UserError


class ResultsError(UserError, RuntimeError):
    """A results table does not have the expected columns."""


@dataclasses.dataclass(frozen=True)
class Column:
    """One column of a results table."""

    name: str
    unit: str
    description: str


# What every kind of run records of the code and the machine it ran on
# (harness/running/provenance.py).
PROVENANCE_COLUMNS = (
    Column("code_fingerprint", "", "digest of the code that produces this kind of run's numbers "
                                   "(harness/running/provenance.py); a report calls a folder stale when "
                                   "today's code has another"),
    Column("cpu_model", "", "the machine's CPU model (/proc/cpuinfo)"),
    Column("cpu_cores", "cores", "the machine's logical CPUs"),
    Column("kernel", "", "the kernel release"),
    Column("versions", "JSON", "versions of Python, torch, numpy, pandas, os-ken, Mininet and "
                               "Open vSwitch"),
    Column("other_load_frac", "fraction", "CPU used by processes outside the testbed during the "
                                          "run, over all cores' time: near 0 on an otherwise "
                                          "idle machine"),
)

RUNS_COLUMNS = (
    Column("run_id", "", "unique id: transport, loss, bandwidth, seed and a digest of the spec"),
    Column("sweep", "", "name of the sweep (preset) the run belongs to"),
    Column("status", "", "ok, timeout or crash"),
    Column("reason", "", "why a run is not ok (empty when ok)"),
    Column("scheme", "", "transport slug plus the options given in the sweep "
                         "(ltp+filler=zero); what figures group by"),
    Column("transport", "", "transport slug (see transports/registry.py)"),
    Column("transport_options", "JSON", "every effective option of the transport, as JSON"),
    Column("n_workers", "hosts", "number of workers"),
    Column("bottleneck_mbps", "Mbit/s", "rate of the PS link (HTB)"),
    Column("worker_link_mbps", "Mbit/s", "rate of each worker link"),
    Column("queue_pkts", "packets", "pfifo length on the switch port toward the PS"),
    Column("loss_pct", "%", "configured random loss per packet at each receiving host's ingress"),
    Column("loss_model", "", "loss model as text: uniform:<loss_pct>, or Gilbert-Elliott per "
                             "packet (ge:loss=5,burst=4, ...) or in time (get:loss=5,burst_ms=2, "
                             "...); loss_pct is then its mean loss"),
    Column("cross", "", "background traffic through the bottleneck (none, tcp:2, "
                        "udp:1:rate=50,on=50ms,off=150ms, ...)"),
    Column("delay_ms", "ms", "configured one-way delay added at each receiving host's ingress"),
    Column("sync", "", "synchronisation mode: bsp, ssp:S (staleness bound S) or async "
                       "(harness/hosts/ps.py)"),
    Column("fault", "", "fault the harness injected: none, kill@K, stall@K:Ts, link@K:Ts, "
                        "straggler:Fx, ... (:wN: which worker; default the last)"),
    Column("byzantine", "", "Byzantine workers: 0, or count:behaviour[:param] (2:sign-flip, ...); "
                            "the highest ranks attack (docs/byzantine.md)"),
    Column("aggregator", "", "how the PS combined a round's updates: mean, score, median, "
                             "trimmed-mean, krum or zeno++ (harness/training/aggregators.py)"),
    Column("tolerate", "updates", "f: Byzantine updates the aggregator was asked to tolerate "
                                  "(by default the attacker count)"),
    Column("holdout", "samples", "training samples the PS kept as its validation set, which no "
                                 "worker trained on (0: none; docs/byzantine.md)"),
    Column("compress", "", "how workers compressed their pushes: none, topk:R (fraction R of each "
                           "layer kept) or sign (docs/compression.md)"),
    Column("local_steps", "steps", "SGD steps each worker took per synchronisation"),
    Column("error_reset", "synchronisations", "a compressing worker's residual was reset every "
                                              "this many synchronisations (0: never)"),
    Column("reset_mode", "", "what a reset did with the residual: drop it, or cser: synchronise it "
                             "(then error_reset counts gradient rounds; docs/compression.md)"),
    Column("pattern", "", "how gradients and parameters travelled: ps, tree or ring, with options "
                          "(docs/collectives.md)"),
    Column("rtt_ms", "ms", "measured round-trip time w1 -> ps1 on the idle network before the run "
                          "(median of 5 pings timed in user space)"),
    Column("session_id", "", "the run's random session id (its key is never recorded)"),
    Column("model", "", "model name (harness/training/models.py)"),
    Column("dataset", "", "data set name (harness/training/datasets.py)"),
    Column("iterations", "iterations", "BSP iterations asked for"),
    Column("iterations_done", "iterations", "BSP iterations the PS completed"),
    Column("stopped_by", "", "why training ended: iterations (all done), target (stop_at_target "
                             "and the target accuracy reached) or time_cap (max_train_s)"),
    Column("train_s", "s", "training time at the PS: the sum of its iteration times"),
    Column("batch_size", "samples", "batch size per worker per iteration"),
    Column("lr", "", "SGD learning rate"),
    Column("eval_every", "iterations", "test accuracy measured every this many iterations"),
    Column("seed", "", "seed of model initialisation, sharding, batching and the transport's "
                       "own randomness"),
    Column("stop_at_target", "bool", "whether the run stops once it reaches target_accuracy"),
    Column("max_train_s", "s", "cap on the PS's training time (empty: none)"),
    Column("final_accuracy", "fraction", "test accuracy after the last iteration"),
    Column("target_accuracy", "fraction", "the accuracy time_to_target_s measures time to "
                                          "(the model's default unless set)"),
    Column("target_reached", "bool", "whether an evaluation reached target_accuracy"),
    Column("time_to_target_s", "s", "training time at the PS until the first evaluation at or "
                                    "above target_accuracy (empty: not reached)"),
    Column("iterations_to_target", "iterations", "updates applied before that evaluation"),
    Column("iters_per_s", "1/s", "training throughput: iterations / training time at the PS "
                                 "(evaluation excluded)"),
    Column("iter_mean_s", "s", "mean iteration time at the PS (broadcast + gather + update)"),
    Column("iter_p50_s", "s", "median iteration time at the PS"),
    Column("iter_p99_s", "s", "99th percentile iteration time at the PS"),
    Column("gather_p50_s", "s", "median time the PS waited for all gradients after broadcasting"),
    Column("gather_p99_s", "s", "99th percentile of that wait"),
    Column("broadcast_p50_s", "s", "median time the PS spent sending the parameters"),
    Column("push_p50_s", "s", "median push time: from the first worker starting to push until "
                              "the PS held every gradient of the iteration"),
    Column("push_p99_s", "s", "99th percentile push time"),
    Column("compute_p50_s", "s", "median over iterations of the slowest worker's compute "
                                 "(loading parameters, forward and backward pass)"),
    Column("update_p50_s", "s", "median time of the PS's averaging and SGD step"),
    Column("push_bound_s", "s", "push bound: ps, n_workers x gradient bytes / bottleneck rate; "
                                "tree and ring, their own (harness/running/metrics.py, bounds_s)"),
    Column("fd_bound_s", "s", "full-duplex bound of one iteration: ps, (n_workers + 1) x message "
                              "bytes / bottleneck rate (serial broadcast, gradients overlapping); "
                              "tree and ring, their own (bounds_s)"),
    Column("iter_bound_s", "s", "floor of one iteration: fd_bound_s + compute_p50_s + "
                                "update_p50_s"),
    Column("iter_over_bound", "ratio", "iter_p50_s / iter_bound_s"),
    Column("mean_recv_frac", "fraction", "mean fraction of a gradient that reached the PS"),
    Column("min_recv_frac", "fraction", "smallest fraction of any gradient that reached the PS"),
    Column("gradient_msgs", "messages", "gradient messages the PS gathered (workers x iterations)"),
    Column("early_closes", "messages", "gradient messages closed before every packet arrived "
                                       "(at the early-close threshold)"),
    Column("max_wait_closes", "messages", "gradient messages closed by the hard time cap"),
    Column("filled_frac_mean", "fraction", "mean fraction of a gradient the filler supplied"),
    Column("filled_frac_max", "fraction", "largest fraction of one gradient the filler supplied"),
    Column("retx_avoided", "packets", "packets still missing when messages closed early: "
                                      "retransmissions a reliable transport would have needed"),
    Column("measured_loss_pct", "%", "random drops / IPv4 packets arriving at all hosts "
                                      "(nftables counters)"),
    Column("arrived_packets", "packets", "IPv4 packets that arrived at all hosts' ingress"),
    Column("random_drops", "packets", "packets dropped by the random-loss rules"),
    Column("loss_bursts", "bursts", "runs of consecutive random drops at one host's ingress "
                                    "(Gilbert-Elliott loss only; empty under uniform loss)"),
    Column("mean_burst_pkts", "packets", "measured mean burst length: random drops / loss_bursts"),
    Column("bad_periods", "periods", "bad periods the time-based Gilbert-Elliott chains began, all "
                                     "hosts (empty under other loss models)"),
    Column("mean_bad_ms", "ms", "measured mean duration of those bad periods (their drawn "
                                "durations, from the chains' counters)"),
    Column("queue_drops", "packets", "bottleneck drops: packets the switch received from workers "
                                     "minus packets the PS queue sent"),
    Column("queue_drops_tc", "packets", "drops the bottleneck pfifo itself counted (undercounts "
                                        "under userspace OVS)"),
    Column("bottleneck_tx_bytes", "bytes", "bytes the switch sent toward the PS"),
    Column("cross_tx_bytes", "bytes", "bytes the cross-traffic hosts sent into the switch "
                                      "(their ports' receive counters; 0 without cross traffic)"),
    Column("bottleneck_util_frac", "fraction", "bits the switch sent toward the PS while the PS "
                                               "trained / (bottleneck rate x time), from the "
                                               "controller's port statistics"),
    Column("grad_payload_bytes", "bytes", "gradient payload the workers pushed, all iterations"),
    Column("grad_wire_bytes", "bytes", "what the transports sent for it (headers and "
                                       "retransmissions included, where the transport knows)"),
    Column("wire_bytes_per_iter", "bytes", "grad_wire_bytes per iteration: what all workers' "
                                           "pushes of one round cost on the wire"),
    Column("compress_dropped", "entries", "index-value pairs or sign words of compressed pushes "
                                          "the PS dropped (lost, out of range or not finite)"),
    Column("residual_syncs", "rounds", "rounds a worker spent synchronising its residual, not "
                                       "pushing a gradient (cser), mean over workers"),
    Column("retransmits", "packets", "retransmitted segments or packets, all hosts"),
    Column("rejected_datagrams", "datagrams", "datagrams (or fields of them) the transports refused "
                                              "as forged, corrupt or stray, all hosts (LTP: "
                                              "docs/ltp-protocol.md §11); 0 in an unattacked run"),
    Column("rejections", "JSON", "those by counter, summed over hosts (non-zero ones only)"),
    Column("cpu_busy_frac", "fraction", "the machine's busy fraction, all cores, while the PS "
                                        "trained (/proc/stat): near 1.0 the CPU sets the pace"),
    Column("staleness_mean", "updates", "mean staleness of the applied gradients: PS updates "
                                        "between sending the parameters and applying the "
                                        "gradient computed on them (bsp: 0)"),
    Column("staleness_max", "updates", "largest staleness of an applied gradient"),
    Column("late_gradients", "messages", "gradients that arrived after their round closed "
                                         "(bsp discards them)"),
    Column("fault_t_s", "s", "when the fault was injected, from the start of training"),
    Column("detection_s", "s", "from the fault until the PS counted the worker missing or gone "
                               "(empty if it never did)"),
    Column("detected_as", "", "gone (the transport saw the connection end) or missing (its "
                              "gradient or parameters overdue)"),
    Column("iterations_lost", "iterations", "rounds from the fault on that closed without the "
                                            "faulted worker's gradient"),
    Column("rejoin_s", "s", "from the end of the fault (link restored, process continued) until "
                            "the PS had the worker back"),
    Column("recovered_s", "s", "from the fault (its end, for one that ends) until the first round "
                               "that held every worker still running (a tree: its re-forming)"),
    Column("fault_iter_max_s", "s", "the slowest round from the fault on"),
    Column("false_alarms", "events", "workers counted missing that no fault had hit (slow, "
                                     "e.g. a TCP flow in a retransmission timeout)"),
    Column("byzantine_updates", "updates", "updates the attackers pushed that reached a round"),
    Column("byzantine_kept", "updates", "of those, the ones the aggregator kept"),
    Column("honest_updates", "updates", "updates of honest workers that reached a round"),
    Column("honest_rejected", "updates", "of those, the ones the aggregator rejected"),
    Column("honest_filled", "updates", "honest updates the transport delivered in part "
                                       "(holes filled by its filler)"),
    Column("honest_filled_rejected", "updates", "of those, the ones the aggregator rejected"),
    Column("agg_p50_s", "s", "median compute time of the aggregation rule per round (score and "
                             "zeno++: their validation passes included)"),
    Column("ps_cpu_s", "s", "CPU time of the PS process, all its threads"),
    Column("workers_cpu_s", "s", "CPU time of all worker processes together"),
    Column("wall_s", "s", "wall-clock time of the run, process start to exit"),
    Column("overhead_s", "s", "time the run took outside training and evaluation: setting loss and "
                             "delay, counters, starting and joining the processes, collecting"),
    Column("started_at", "ISO 8601", "when the run started (UTC)"),
    Column("git_commit", "", "commit of the project that ran"),
    Column("git_dirty", "bool", "whether the code had uncommitted changes (results/ aside)"),
    *PROVENANCE_COLUMNS,
)

ITERATIONS_COLUMNS = (
    Column("run_id", "", "the run (see runs.csv)"),
    Column("scheme", "", "transport slug plus the options given"),
    Column("transport", "", "transport slug"),
    Column("loss_pct", "%", "configured random loss"),
    Column("delay_ms", "ms", "configured one-way delay"),
    Column("bottleneck_mbps", "Mbit/s", "rate of the PS link"),
    Column("n_workers", "hosts", "number of workers"),
    Column("seed", "", "seed"),
    Column("iteration", "", "iteration index, from 0"),
    Column("iter_s", "s", "PS iteration time: broadcast + gather + update"),
    Column("broadcast_s", "s", "time the PS spent sending parameters"),
    Column("gather_s", "s", "time the PS waited for every gradient after broadcasting"),
    Column("update_s", "s", "time of the PS's averaging and SGD step"),
    Column("compute_s", "s", "the slowest worker's compute in this iteration"),
    Column("push_s", "s", "from the first worker starting its push until the PS held every gradient"),
    Column("min_recv_frac", "fraction", "smallest fraction of a worker's gradient that arrived"),
    Column("mean_recv_frac", "fraction", "mean fraction of the workers' gradients that arrived"),
    Column("early_closes", "messages", "gradients of this iteration closed early"),
    Column("sync", "", "synchronisation mode"),
    Column("fault", "", "fault injected in the run"),
    Column("contributors", "workers", "gradients the round applied (bsp: workers that delivered)"),
    Column("staleness_max", "updates", "largest staleness of a gradient the round applied"),
    Column("byzantine", "", "Byzantine workers of the run"),
    Column("aggregator", "", "aggregation rule of the run"),
    Column("kept", "updates", "updates the aggregator kept this round"),
    Column("byzantine_kept", "updates", "attackers' updates it kept"),
    Column("honest_rejected", "updates", "honest updates it rejected"),
    Column("honest_filled_rejected", "updates", "honest updates delivered in part that it rejected"),
    Column("agg_s", "s", "compute time of the aggregation rule this round"),
    Column("t_s", "s", "when the round began, from the PS's start"),
)

CURVES_COLUMNS = (
    Column("run_id", "", "the run (see runs.csv)"),
    Column("scheme", "", "transport slug plus the options given"),
    Column("transport", "", "transport slug"),
    Column("loss_pct", "%", "configured random loss"),
    Column("delay_ms", "ms", "configured one-way delay"),
    Column("seed", "", "seed"),
    Column("sync", "", "synchronisation mode"),
    Column("fault", "", "fault injected in the run"),
    Column("byzantine", "", "Byzantine workers of the run"),
    Column("aggregator", "", "aggregation rule of the run"),
    Column("iteration", "iterations", "rounds completed before this evaluation"),
    Column("time_s", "s", "training time at the PS up to this evaluation"),
    Column("accuracy", "fraction", "test accuracy"),
    Column("test_loss", "nats", "mean cross-entropy on the test set"),
)


# Peer-to-peer sweeps (harness.p2p): their own tables, in their own results folders.
P2P_COLUMNS = (
    Column("run_id", "", "unique id: policy, copies, transport, sync, p, loss, seed, digest"),
    Column("sweep", "", "the preset the run belongs to"),
    Column("status", "", "ok, timeout or crash"),
    Column("reason", "", "why a run is not ok (empty when ok)"),
    Column("method", "", "policy/copy/scheme: what the figures group by"),
    Column("policy", "", "receiver selection: random-p, selmcast or broadcast"),
    Column("copy", "", "switch (OpenFlow groups copy) or unicast (the sender's own copies)"),
    Column("scheme", "", "peer transport with options (mcast, mcast+close_frac=0.9, tcp)"),
    Column("sync", "", "bsp or ssp:S"),
    Column("p", "receivers", "the floor of receivers per sender and round"),
    Column("n_workers", "hosts", "peers"),
    Column("n_slow", "hosts", "peers on a slow access link"),
    Column("access_mbps", "Mbit/s", "a fast peer's access rate"),
    Column("slow_frac", "", "a slow peer's access rate over the fast one's"),
    Column("uplink_mbps", "Mbit/s", "each leaf-spine link's rate"),
    Column("loss_pct", "%", "random loss per packet at each host's ingress"),
    Column("seed", "", "model initialisation, data order, random-p's draws"),
    Column("rounds", "rounds", "rounds asked for"),
    Column("rounds_done", "rounds", "rounds every peer finished"),
    Column("wall_s", "s", "from starting the peers to the last one's exit"),
    Column("train_s", "s", "from the first round's start to the last round's end"),
    Column("round_s", "s", "median over peers and rounds of a round's duration"),
    Column("sync_s", "s", "median over peers and rounds of a round's synchronisation time: "
                          "waiting for the round (barrier or staleness bound, and the plan) plus "
                          "the send, i.e. the round without mixing, evaluating and computing"),
    Column("sync_p90_s", "s", "90th percentile of the same"),
    Column("send_s", "s", "median over peers and rounds of the send alone (until every receiver "
                          "closed the message)"),
    Column("compute_s", "s", "median over peers and rounds of the local steps"),
    Column("plan_s", "s", "median over rounds of the coordinator's plan: selection, installing "
                          "the groups and settling the datapaths"),
    Column("avg_p", "receivers", "mean receivers per sender and round: the achieved p"),
    Column("delivered_p", "receivers", "mean receivers per sender and round that closed the "
                                       "message"),
    Column("mixed_per_round", "messages", "mean messages a peer mixed in per round"),
    Column("mixed_frac", "", "mean received fraction of the messages mixed in"),
    Column("early_closes", "messages", "messages received and closed before complete, all peers"),
    Column("retransmits", "datagrams", "datagrams sent again, all peers"),
    Column("wire_bytes_per_round", "bytes", "bytes the peers emitted per round (headers counted)"),
    Column("trunk_bytes_per_round", "bytes", "bytes the leaf-spine links carried per round, "
                                             "both directions (switch port counters)"),
    Column("access_bytes_per_round", "bytes", "bytes the switches delivered to the peers per "
                                              "round"),
    Column("final_accuracy", "", "test accuracy of the average of the peers' final models"),
    Column("peer_acc_min", "", "the worst peer's own final test accuracy"),
    Column("peer_acc_max", "", "the best peer's own final test accuracy"),
    Column("target_accuracy", "", "the accuracy time to accuracy is measured to"),
    Column("tta_s", "s", "training time until the mean of the peers' own accuracies first "
                         "reached the target (empty if never)"),
    Column("started_at", "", "UTC start of the run"),
    Column("git_commit", "", "the project's commit"),
    Column("git_dirty", "", "uncommitted changes to the code at the run (results/ aside)"),
    *PROVENANCE_COLUMNS,
)

P2P_CURVE_COLUMNS = (
    Column("run_id", "", "the run"),
    Column("round", "rounds", "rounds done at the evaluation"),
    Column("t_s", "s", "training time at the evaluation (the slowest peer's)"),
    Column("acc_mean", "", "mean of the peers' own test accuracies"),
    Column("acc_min", "", "the worst peer's"),
    Column("acc_max", "", "the best peer's"),
)


# A simulated run (harness/simulation, docs/simulation.md): its settings lead every table's rows.
SIM_KEY_COLUMNS = (
    Column("run_id", "", "unique id: transport, workers, link rate, seed and a digest of the "
                         "settings"),
    Column("transport", "", "ltp, ltp-reliable, plot or tcp-ref (the simulator's TCP model)"),
    Column("n_workers", "workers", "workers pushing to the PS"),
    Column("bottleneck_mbps", "Mbit/s", "the PS's link rate"),
    Column("queue_pkts", "packets", "the bottleneck's queue"),
    Column("loss", "", "the loss model, as run-sweep's --loss"),
    Column("delay_ms", "ms", "one-way delay per direction at every host's ingress"),
    Column("seed", "", "seed of the network's and the core's randomness"),
    Column("iterations", "iterations", "iterations asked for"),
    Column("scenario", "", "push (synchronized pushes) or bsp (training iterations)"),
    Column("host", "", "ideal (instant hosts) or testbed (this machine's lateness)"),
)
SIM_RUNS_COLUMNS = SIM_KEY_COLUMNS + (
    Column("status", "", "ok, timeout (an iteration passed its virtual limit), stalled or crash"),
    Column("reason", "", "why a run is not ok (empty when ok)"),
    Column("iterations_done", "iterations", "iterations finished"),
    Column("pushes", "pushes", "worker pushes closed by the PS"),
    Column("mean_recv_frac", "", "mean fraction of a push the PS received before closing it"),
    Column("early_closes", "pushes", "pushes closed early (Early Close)"),
    Column("max_wait_closes", "pushes", "pushes closed at the maximum wait"),
    Column("virtual_s", "s", "simulated time"),
    Column("events", "events", "events the simulator processed"),
    Column("datagrams", "datagrams", "datagrams sent: delivered + queue drops + worker-link "
                                     "drops + random drops + in flight"),
    Column("delivered", "datagrams", "datagrams delivered"),
    Column("in_flight", "datagrams", "datagrams still in the network at the end"),
    Column("data_sent", "datagrams", "data datagrams sent (acknowledgements aside)"),
    Column("retransmits_ps", "datagrams", "datagrams the PS sent again"),
    Column("retransmits_workers", "datagrams", "datagrams the workers sent again"),
    Column("queue_drops", "datagrams", "bottleneck queue drops"),
    Column("worker_link_drops", "datagrams", "drops at the workers' own links"),
    Column("ps_refused", "datagrams", "datagrams the PS's full link refused (held for later)"),
    Column("random_drops", "datagrams", "drops by the loss model"),
    Column("loss_bursts", "bursts", "runs of consecutive random drops"),
    Column("data_lost_ps", "datagrams", "data datagrams of the PS lost"),
    Column("data_lost_workers", "datagrams", "data datagrams of the workers lost"),
    Column("bottleneck_frames", "frames", "frames through the bottleneck"),
    Column("ps_core_us_per_datagram", "us", "CPU the PS's core spent per datagram (wall clock, "
                                            "not simulated)"),
    Column("wall_s", "s", "the simulator's wall-clock time"),
    Column("events_per_s", "events/s", "events per wall-clock second"),
    Column("peak_rss_mb", "MB", "the simulator process's peak memory (VmHWM)"),
    Column("network_peak_mb", "MB", "memory the simulated network held at its peak"),
    Column("started_at", "", "UTC start of the run"),
    Column("git_commit", "", "the project's commit"),
    Column("git_dirty", "", "uncommitted changes to the code at the run (results/ aside)"),
    *PROVENANCE_COLUMNS,
)
SIM_ITERATION_COLUMNS = SIM_KEY_COLUMNS + (
    Column("iteration", "", "iteration index"),
    Column("push_s", "s", "from the iteration's start to the PS's last close"),
    Column("iteration_s", "s", "the whole iteration, broadcast included"),
    Column("broadcast_s", "s", "the PS's broadcast of the parameters"),
    Column("min_recv_frac", "", "the least fraction of a push the PS received"),
    Column("early_closes", "pushes", "pushes of the iteration closed early"),
    Column("max_wait_closes", "pushes", "pushes of the iteration closed at the maximum wait"),
    Column("queue_drops", "datagrams", "bottleneck queue drops so far"),
)
SIM_PUSH_COLUMNS = SIM_KEY_COLUMNS + (
    Column("iteration", "", "iteration index"),
    Column("worker", "", "the worker's rank"),
    Column("push_s", "s", "from the worker's send call to the PS's close"),
    Column("recv_frac", "", "fraction of the push the PS received"),
    Column("retransmits", "datagrams", "datagrams the worker sent again (its send statistics)"),
    Column("early_closes", "closes", "early closes of this push (Early Close)"),
    Column("max_wait_closes", "closes", "closes of this push at the maximum wait"),
)

# The benchmarks' tables (invoke bench-transport, under .state/bench/transport-<stamp>/).
BENCH_LOOPBACK_COLUMNS = (
    Column("transport", "", "the scheme"),
    Column("bytes", "bytes", "the message pushed, one worker to the PS over 127.0.0.1"),
    Column("push", "", "the push's index"),
    Column("push_s", "s", "from the send call to the PS's whole delivery"),
    Column("cpu_s", "s", "CPU of the process (both ends, user + system) during the push"),
)
BENCH_PUSH_COLUMNS = (
    Column("bottleneck_mbps", "Mbit/s", "the bottleneck's rate"),
    Column("loss_pct", "%", "random loss at every host's ingress"),
    Column("transport", "", "the scheme"),
    Column("median_s", "s", "median over iterations of the synchronized 8-to-1 push"),
    Column("p99_s", "s", "99th percentile of the same"),
    Column("bound_s", "s", "the physical bound: 8 messages through the bottleneck"),
    Column("min_recv_frac", "", "the least fraction of a push the PS received"),
)

def names(columns: Iterable[Column]) -> list[str]:
    """The column names, in order."""
    return [c.name for c in columns]


def _format(value) -> str:
    if hasattr(value, "item") and not isinstance(value, (list, tuple, dict, str)):
        value = value.item()  # numpy scalars
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, sort_keys=True)
    return str(value)


def _check_header(path: Path, header: list[str]) -> None:
    with open(path, newline="") as f:
        existing = next(csv.reader(f), [])
    if existing != header:
        raise ResultsError(f"{path} has other columns than this version writes; "
                           "write the sweep to a new folder.")


def check_tables(folder: Path, tables: Mapping[str, tuple[Column, ...]]) -> None:
    """Refuse a folder whose tables (file name -> columns) another version of the harness wrote.
    A sweep asks before its first run, so a refused resume costs no run and changes no file."""
    for name, columns in tables.items():
        path = folder / name
        if path.exists() and path.stat().st_size:
            _check_header(path, names(columns))


def append_rows(path: Path, columns: tuple[Column, ...], rows: Iterable[Mapping]) -> None:
    """Append ``rows`` to the CSV at ``path`` (header first if new), then flush and fsync."""
    header = names(columns)
    rows = list(rows)
    for row in rows:
        missing = set(header) - set(row)
        extra = set(row) - set(header)
        if missing or extra:
            raise ResultsError(f"row for {path.name} does not match its schema "
                               f"(missing {sorted(missing)}, unexpected {sorted(extra)}).")
    new = not path.exists() or path.stat().st_size == 0
    if not new:
        _check_header(path, header)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    if new:
        writer.writerow(header)
    for row in rows:
        writer.writerow([_format(row[h]) for h in header])
    with open(path, "a", newline="") as f:
        f.write(buf.getvalue())
        f.flush()
        os.fsync(f.fileno())


def read_rows(path: Path) -> list[dict[str, str]]:
    """Complete rows of a CSV written by :func:`append_rows` (an unterminated last line is dropped)."""
    if not path.exists():
        return []
    text = path.read_text()
    if text and not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
    return list(csv.DictReader(io.StringIO(text)))


# Columns that name things (a run, a commit, a code fingerprint): text, even when a value is all
# digits (a fingerprint such as 265933038540), which pandas would otherwise read as a number.
IDENTITY_COLUMNS = ("run_id", "git_commit", "code_fingerprint")


def read_table(path: Path):
    """A table as a pandas DataFrame, its identity columns (:data:`IDENTITY_COLUMNS`) as text."""
    import pandas as pd

    return pd.read_csv(path, dtype={c: str for c in IDENTITY_COLUMNS})


def finished_run_ids(folder: Path) -> set[str]:
    """Ids of the runs that already have a row in ``runs.csv``."""
    return {row["run_id"] for row in read_rows(folder / "runs.csv")}


def drop_rows(path: Path, run_id: str) -> None:
    """Rewrite ``path`` without the rows of ``run_id`` (for partial output of an interrupted run)."""
    rows = read_rows(path)
    keep = [r for r in rows if r["run_id"] != run_id]
    if len(keep) == len(rows):
        return
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(keep)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def schema_markdown() -> str:
    """The Markdown body of ``docs/results-schema.md``."""
    out = []
    for title, columns in (("runs.csv", RUNS_COLUMNS), ("curves.csv", CURVES_COLUMNS),
                           ("iterations.csv", ITERATIONS_COLUMNS),
                           ("runs.csv of a peer-to-peer sweep", P2P_COLUMNS),
                           ("curves.csv of a peer-to-peer sweep", P2P_CURVE_COLUMNS),
                           ("runs.csv of a simulation", SIM_RUNS_COLUMNS),
                           ("iterations.csv of a simulation", SIM_ITERATION_COLUMNS),
                           ("pushes.csv of a simulation", SIM_PUSH_COLUMNS),
                           ("loopback.csv of bench-transport", BENCH_LOOPBACK_COLUMNS),
                           ("push_times.csv of bench-transport", BENCH_PUSH_COLUMNS)):
        out += [f"## `{title}`", "", "| column | unit | meaning |", "|---|---|---|"]
        out += [f"| `{c.name}` | {c.unit} | {c.description} |" for c in columns]
        out.append("")
    return "\n".join(out)
