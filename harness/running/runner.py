"""One run on a live testbed, in three steps: prepare, launch, collect.

- :func:`prepare` writes the run's spec, draws the run's session (a random session id and a
  secret from which it derives one key per pair of hosts; each host is handed only its own
  pairs' keys, through a pipe it inherits: :mod:`harness.running.keys`), sets the network's
  impairments (loss model, delay) and every training host's transport settings for this
  run, and measures the idle RTT;
- :func:`launched` starts the PS and worker processes (or a benchmark's) and kills every one of
  them by process group when its block ends; :func:`wait` waits for them with a deadline; the
  run's cross traffic (:mod:`topologies.impair.cross`) runs around them, between the two counter
  snapshots;
- :func:`collect` writes the run's derived files from the two snapshots and the raw records and
  returns its rows (:mod:`harness.running.metrics` computes them).

:func:`execute` chains the three and never raises for a failed run: a run that times out or
crashes comes back as a row with ``status`` ``timeout`` or ``crash`` and the reason. It does raise
on interruption (Ctrl-C, SIGTERM), after killing its processes. The run folder's layout is
:mod:`harness.running.runfiles`'s.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pandas as pd

from harness.hosts.faults import FaultInjector, parse_fault
from harness.hosts.zygote import Zygote
from harness.running import metrics, provenance
from harness.running.capture import Capture, capturing
from harness.running.fingerprint import run_kind
from harness.running import keys as handover
from harness.running.runfiles import RunFiles, read_jsonl
from harness.running.spec import RunSpec
from topologies.impair.cross import CrossSpec, CrossTraffic
from topologies.impair.loss import Impairment
from topologies.incast import PS_NAME, PS_PORT, SUBNET, intf, worker_name
from topologies.testbed.counters import Snapshot
from topologies.testbed.network import Testbed
from transports.base import Session, Transport

POLL_S = 0.1
# Once the PS has finished, every gradient it needed has arrived: a worker still running this long
# after that is stuck (a transport bug), and waiting out the run's whole timeout teaches nothing.
# The same holds the other way round: once every worker has finished, the PS has been sent
# everything it will ever get.
AFTER_PS_GRACE_S = 60.0
AFTER_WORKERS_GRACE_S = 60.0

Spawn = Callable[..., object]
"""``spawn(host, module, args, log_path, keys=None)`` starts ``python -m module args`` inside
``host``; ``keys``, the host's handover (:func:`harness.running.keys.encode`), reaches it through
an inherited pipe named by ``--keys-fd``."""


def _last_line(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1][-300:] if lines else ""


def wait(procs: Mapping, deadline: float, grace_s: float = AFTER_PS_GRACE_S,
         workers_grace_s: float = AFTER_WORKERS_GRACE_S,
         tick: Callable[[], None] | None = None,
         killed: Callable[[], set[str]] | None = None) -> tuple[str, str]:
    """Wait until every process exits, one fails, or a deadline; return (status, reason).

    The deadline is the run's timeout; or ``grace_s`` after the PS (``procs[PS_NAME]``) exited
    successfully while a worker still runs; or ``workers_grace_s`` after every other process
    exited successfully while the PS still runs; whichever comes first. ``tick`` runs at every
    look (the fault injector); a host in ``killed()`` was killed on purpose, and its exit by
    signal counts as done, not as a crash.
    """
    ps_done_at = workers_done_at = None
    while True:
        if tick is not None:
            tick()
        meant = killed() if killed is not None else set()
        codes = {host: (0 if host in meant and p.poll() is not None else p.poll())
                 for host, p in procs.items()}
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
        others = [c for h, c in codes.items() if h != PS_NAME]
        if workers_done_at is None and others and all(c == 0 for c in others):
            workers_done_at = now
        if ps_done_at is not None and now - ps_done_at > grace_s:
            return "timeout", f"still running {grace_s:g} s after the PS finished: {running}"
        if workers_done_at is not None and now - workers_done_at > workers_grace_s:
            return "timeout", (f"still running {workers_grace_s:g} s after every worker "
                               f"finished: {running}")
        if now > deadline:
            return "timeout", f"still running at the deadline: {running}"
        time.sleep(POLL_S)


@contextlib.contextmanager
def launched(spawn: Spawn, commands: Mapping[str, tuple[str, list[str], Path]],
             keys: Mapping[str, bytes] | None = None) -> Iterator[dict]:
    """Start ``{host: (module, args, log_path)}``, each host with its ``keys`` handover (if
    any); kill every process by group when the block ends."""
    procs = {}
    try:
        for host, (module, args, log_path) in commands.items():
            procs[host] = spawn(host, module, args, log_path, (keys or {}).get(host))
        yield procs
    finally:
        for proc in procs.values():
            proc.kill()


def spawn_plain(testbed: Testbed) -> Spawn:
    """A launcher that starts each host's Python with ``mnexec`` (a fresh interpreter per host);
    the keys' pipe is passed through it (``pass_fds``)."""
    def spawn(host: str, module: str, args: list[str], log_path: Path, keys: bytes | None = None):
        argv = [sys.executable, "-m", module] + args
        if keys is None:
            return testbed.start_process(host, argv, log_path)
        fd = handover.pipe_fd(keys)
        try:
            return testbed.start_process(host, argv + [handover.FLAG, str(fd)], log_path,
                                         pass_fds=(fd,))
        finally:
            os.close(fd)
    return spawn


def spawn_forked(testbed: Testbed, zygote: Zygote) -> Spawn:
    """A launcher that forks each host's Python from a preloaded :class:`Zygote` (which passes
    the keys' pipe on)."""
    def spawn(host: str, module: str, args: list[str], log_path: Path, keys: bytes | None = None):
        return zygote.spawn(host, testbed.host(host).pid, module, args, log_path, keys=keys)
    return spawn


def apply_host_settings(testbed: Testbed, transport: Transport) -> None:
    """Reset every host's route, then run the transport's own commands (e.g. rto_min) on the PS
    and the workers (cross-traffic hosts keep the kernel's defaults), and give the bottleneck the
    queue the transport asks for (the plain FIFO unless it wants priority bands: mlt)."""
    testbed.reset_routes()
    for host in [PS_NAME] + testbed.params.worker_names:
        for command in transport.host_commands(intf(host), SUBNET):
            testbed.host_run(host, "sh", "-c", command)
    testbed.queue.configure(transport.bottleneck_queue())


@dataclasses.dataclass
class Prepared:
    """A run ready to launch: its files, transport and what was measured before it."""

    spec: RunSpec
    files: RunFiles
    transport: Transport
    session: Session
    started_at: str
    rtt_ms: float
    t_begin: float
    fingerprint: str = ""
    keys: dict[str, bytes] = dataclasses.field(default_factory=dict, repr=False)   # by host


def prepare(testbed: Testbed, spec: RunSpec, run_dir: Path,
            impairment: Impairment | None = None) -> Prepared:
    """Write the spec, configure the network and the hosts for ``spec``, measure the idle RTT.

    The spec's loss model (seeded with its seed) and delay apply at every host unless
    ``impairment`` replaces them.
    """
    from transports import registry

    t_begin = time.monotonic()
    files = RunFiles(run_dir)
    files.raw.mkdir(parents=True, exist_ok=True)
    files.spec.write_text(spec.to_json())
    transport = registry.create(spec.transport, spec.options())
    # Drawn per run, not per spec: the spec (and so the run id) stays reproducible, while no two
    # runs, not even a re-run of one spec, share an id or a key. Each host gets its pairs' keys.
    session = Session.draw()
    keys = handover.blobs(handover.run_keys(session, spec.pattern, spec.n_workers))
    started_at = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    testbed.ingress.configure(impairment or Impairment(spec.loss_text, spec.delay_ms, seed=spec.seed))
    apply_host_settings(testbed, transport)
    rtt_ms = testbed.meter.rtt_ms(worker_name(0))
    testbed.controller_errors()  # only what this run causes counts
    code = provenance.fingerprint(run_kind(spec.pattern)).digest   # the code this run starts with
    return Prepared(spec, files, transport, session, started_at, rtt_ms, t_begin, code, keys)


def node_commands(spec: RunSpec, files: RunFiles) -> dict[str, tuple[str, list[str], Path]]:
    """The PS's and every worker's ``harness.hosts.node`` command line (the launcher adds
    ``--keys-fd``)."""
    base = ["--run", str(files.dir)]
    out = {PS_NAME: ("harness.hosts.node", base + ["--role", "ps"], files.log(PS_NAME))}
    for r in range(spec.n_workers):
        out[worker_name(r)] = ("harness.hosts.node", base + ["--role", "worker", "--rank", str(r)],
                               files.log(worker_name(r)))
    return out


def injector_for(testbed: Testbed, spec: RunSpec, files: RunFiles, procs: dict, spawn: Spawn,
                 commands: Mapping, keys: Mapping[str, bytes] | None = None) -> FaultInjector:
    """The run's fault injector (one that does nothing for ``none`` and ``straggler``, which the
    worker applies itself): driven by the PS's progress, killing and stopping by process group,
    cutting links through the controller (:mod:`topologies.controller.control`). A restarted
    worker gets its keys again."""
    fault = parse_fault(spec.fault)
    host = worker_name(fault.rank(spec.n_workers))

    def restart(name: str):
        module, args, log_path = commands[name]
        return spawn(name, module, args + ["--rejoin", "1"], log_path.with_suffix(".g1.log"),
                     (keys or {}).get(name))

    control = testbed.control
    return FaultInjector(fault, host, files.ps_progress, procs, files.faults, restart=restart,
                         cut=control.cut if control else None,
                         restore=control.restore if control else None)


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


def host_iterations_table(files: RunFiles, spec: RunSpec) -> pd.DataFrame:
    """All hosts' per-iteration records as one long table (one row per host and iteration)."""
    frames = []
    ps = read_jsonl(files.records(PS_NAME))
    if ps:
        df = pd.DataFrame(ps)
        df["host"], df["role"], df["rank"] = PS_NAME, "ps", -1
        df["min_recv_frac"] = df["recv_frac"].map(lambda v: min(v, default=None))
        for col in ("recv_frac", "segment_fracs", "param_wire_bytes", "param_retransmits",
                    "msg_stats", "ranks", "staleness", "missing", "agg_kept", "agg_reasons",
                    "agg_scores", "agg_used_frac", "param_stats"):
            if col in df:
                df[col] = df[col].map(json.dumps)
        frames.append(df)
    for r in range(spec.n_workers):
        rows = read_jsonl(files.records(worker_name(r)))
        if rows:
            df = pd.DataFrame(rows)
            df["host"], df["role"], df["rank"] = worker_name(r), "worker", r
            frames.append(df)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def collect(testbed: Testbed, prep: Prepared, before: Snapshot, after: Snapshot, status: str,
            reason: str, wall_s: float, sweep: str,
            other_load: float | None = None) -> tuple[dict, list[dict], list[dict]]:
    """Write the run's derived files; return its runs, curves and iterations rows."""
    spec, files = prep.spec, prep.files
    errors = testbed.controller_errors()
    if errors and status == "ok":
        status, reason = "crash", f"controller: {errors[0][:300]}"
    deltas = counter_deltas(before, after)
    files.counters.write_text(json.dumps(
        {"before": before.to_dict(), "after": after.to_dict(), "delta": deltas}, indent=1))
    stats = testbed.meter.port_stats_between(before.t, after.t)
    with open(files.port_stats, "w") as f:
        for rec in stats:
            f.write(json.dumps(rec) + "\n")
    host_iterations_table(files, spec).to_csv(files.host_iterations, index=False)
    testbed.ingress.record(files.loss)

    measured, curves, iterations = metrics.summarize(spec, files)
    measured["retransmits"] += deltas.pop("tcp_retransmits")
    ps = files.host_summary(PS_NAME)
    training = ([r for r in stats if ps.train_start_time <= r["t"] <= ps.train_end_time]
                if ps else stats)
    commit, dirty = provenance.git_state()
    row = {
        "run_id": spec.run_id, "sweep": sweep, "status": status, "reason": reason,
        "scheme": spec.scheme, "transport": spec.transport,
        "transport_options": prep.transport.options(),
        "n_workers": spec.n_workers, "bottleneck_mbps": spec.bottleneck_mbps,
        "worker_link_mbps": spec.network.worker_mbps, "queue_pkts": spec.queue_pkts,
        "loss_pct": spec.loss_pct, "loss_model": spec.loss_text, "delay_ms": spec.delay_ms,
        "cross": spec.cross, "rtt_ms": prep.rtt_ms, "session_id": prep.session.session_id,
        "model": spec.model, "dataset": spec.dataset,
        "iterations": spec.iterations, "batch_size": spec.batch_size, "lr": spec.lr,
        "eval_every": spec.eval_every, "seed": spec.seed, "stop_at_target": spec.stop_at_target,
        "max_train_s": spec.max_train_s, "pattern": spec.pattern,
        **measured, **deltas,
        "bottleneck_util_frac": utilisation(training, PS_PORT, spec.bottleneck_mbps),
        "wall_s": wall_s,
        "overhead_s": time.monotonic() - prep.t_begin
        - ((ps.train_end_time - ps.train_start_time) if ps else 0.0),
        "started_at": prep.started_at, "git_commit": commit, "git_dirty": dirty,
        "code_fingerprint": prep.fingerprint, **provenance.run_columns(),
        "other_load_frac": other_load,
    }
    return row, curves, iterations


def execute(testbed: Testbed, spec: RunSpec, run_dir: Path, sweep: str,
            spawn: Spawn | None = None, *, impairment: Impairment | None = None,
            cross: CrossSpec | str | None = None,
            capture: Capture | None = None) -> tuple[dict, list[dict], list[dict]]:
    """Run ``spec`` on ``testbed``; return its rows for runs.csv, curves.csv and iterations.csv.

    ``impairment`` replaces the spec's loss model and delay; ``cross`` its cross traffic, which
    runs through the bottleneck for the whole run (reports in ``raw/cross/``); ``capture`` names
    hosts whose packets are captured around the run (``capture/``, :mod:`.capture`).
    """
    prep = prepare(testbed, spec, run_dir, impairment)
    spawn = spawn or spawn_plain(testbed)
    load = provenance.LoadMeter(testbed.ovs.pids())
    with capturing(testbed, capture, prep.files), \
            CrossTraffic(testbed, cross or spec.cross, prep.files.raw / "cross",
                         seed=spec.seed):
        load.start()
        before = testbed.meter.snapshot()
        t0 = time.monotonic()
        commands = node_commands(spec, prep.files)
        with launched(spawn, commands, prep.keys) as procs:
            injector = injector_for(testbed, spec, prep.files, procs, spawn, commands, prep.keys)
            try:
                status, reason = wait(procs, t0 + spec.timeout_s, tick=injector.tick,
                                      killed=lambda: injector.killed)
            finally:
                injector.finish()
        wall_s = time.monotonic() - t0
        after = testbed.meter.snapshot()
        other_load = load.stop()
    return collect(testbed, prep, before, after, status, reason, wall_s, sweep, other_load)
