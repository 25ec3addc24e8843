"""The files of one run, and the records they hold: the one owner of a run folder's layout.

The host processes (:mod:`harness.hosts.node`) write a run's raw files through :class:`Recorder`;
the runner, the benchmarks and the tests read them through :class:`RunFiles`. Nothing else spells a
file name of a run folder. ``runs/<run_id>/``:

- ``spec.json``: the run's :class:`~harness.running.spec.RunSpec`;
- ``raw/<host>.log``: the host's stdout and stderr;
- ``raw/<host>.jsonl``: one record per iteration (:class:`PsIteration` on the PS,
  :class:`WorkerIteration` on a worker), appended as it ends;
- ``raw/<host>.summary.json``: the host's :class:`HostSummary`, written when it finishes (its
  presence means the host finished);
- ``raw/ps1.eval.jsonl``: one :class:`EvalRecord` per evaluation of the test set;
- ``raw/ps1.members.jsonl``: the PS's membership events (:class:`MemberEvent`: a worker missing,
  gone, back), appended as they happen;
- ``raw/faults.jsonl``: what the harness injected and when (:mod:`harness.hosts.faults`);
- ``raw/stop``: written by the PS when it ends training before ``iterations`` (target reached,
  time cap);
- ``raw/end``: written by the PS once it has applied its last update, before it sends the final
  parameters; a worker that finds it after a pull stops instead of pushing;
- ``counters.json``: every counter before and after the run (:mod:`topologies.testbed.counters`);
- ``port_stats.jsonl``: the controller's port statistics during the run;
- ``loss/<host>.trace``: under a chained loss model (``replay``, ``ge``, ``get``, ``trace``), the
  packet positions each host's ingress dropped (:mod:`topologies.impair.trace`); ``--loss
  trace:runs/<run_id>/loss`` replays them;
- ``capture/<host>.pcap``: with ``invoke run-sweep --capture``, what the host's interface received
  and sent during the run (:mod:`harness.running.capture`), and ``capture/<host>.log`` tcpdump's
  own messages (its counts of packets captured and dropped);
- ``host_iterations.csv``: every host's per-iteration records in one long table (not to be confused
  with the sweep's ``iterations.csv``, which holds the PS's view of every run).

A benchmark cell of ``invoke bench-transport`` (:mod:`harness.hosts.bench`) uses the same ``raw/``
for its logs and worker records, plus ``push_times.json`` (the PS's push times) and ``sync/``
(the marker files of its barrier).

The raw files are written once and never edited. ``*_mono`` fields are ``time.monotonic()``
readings, comparable across hosts because every namespace shares the machine's monotonic clock.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from topologies.incast import PS_NAME

STOP_MARKER = "stop"
END_MARKER = "end"


@dataclasses.dataclass
class PsIteration:
    """What the PS saw in one iteration (times in seconds, lists by worker rank)."""

    iteration: int
    t_s: float                    # start of the iteration, from the PS's start
    gather_end_mono: float
    broadcast_s: float
    gather_s: float
    update_s: float
    iter_s: float                 # broadcast + gather + update
    recv_frac: list[float]        # fraction of each worker's gradient that arrived
    segment_fracs: list[list[float]]
    param_wire_bytes: list[int]
    param_retransmits: list[int]
    msg_stats: list[dict[str, float]]   # each delivery's transport counters
    # Whose gradients the round applied, in the order of the lists above (every rank before
    # the sync modes existed), and the staleness of each (harness.hosts.ps); gradients that came too
    # late to be applied (bsp); messages their senders gave up before any of them arrived
    # (abandoned: taken empty, nothing applied); ranks missing or gone when the round closed.
    ranks: list[int] = dataclasses.field(default_factory=list)
    staleness: list[int] = dataclasses.field(default_factory=list)
    late: int = 0
    abandoned: int = 0
    missing: list[int] = dataclasses.field(default_factory=list)
    # What the aggregation rule (harness.training.aggregators) made of each applied update, in the
    # order of ``ranks``: kept or not, why, its score (score, krum), the fraction of coordinates it
    # entered; the Byzantine updates the rule tolerated this round, and its compute time.
    agg_kept: list[bool] = dataclasses.field(default_factory=list)
    agg_reasons: list[str] = dataclasses.field(default_factory=list)
    agg_scores: list[float | None] = dataclasses.field(default_factory=list)
    agg_used_frac: list[float] = dataclasses.field(default_factory=list)
    agg_f: int = 0
    agg_s: float = 0.0
    # Each parameter send's transport counters, by rank (LTP: elapsed_us, wait_us,
    # first_pass_us, max_gap_us, probes, pacing_rate_mbps, ...; empty for TCP).
    param_stats: list[dict[str, float]] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class WorkerIteration:
    """What one worker saw in one iteration."""

    iteration: int
    t_s: float
    push_start_mono: float
    pull_s: float
    compute_s: float              # loading the parameters, forward and backward pass
    push_s: float
    param_frac: float             # fraction of the parameters that arrived
    train_loss: float
    grad_bytes: int
    wire_bytes: int
    packets: int
    retransmits: int
    byzantine: bool = False       # this worker pushed its attack's vector, not its gradient
    residual_sync: bool = False   # a cser round that pushed the residual, no gradient
                                  # (train_loss nan; harness.training.compress.ErrorReset)


@dataclasses.dataclass
class MemberEvent:
    """A change in whom the PS counts on (:mod:`harness.hosts.ps`)."""

    event: str                    # missing (gradient overdue), gone (connection ended), back,
                                  # cut_off (a tree: lost with an ancestor's sum)
    rank: int
    mono: float                   # time.monotonic() at the PS
    t_s: float                    # from the PS's start
    iteration: int                # the PS's round
    msg: int                      # the worker's message id then


@dataclasses.dataclass
class EvalRecord:
    """One evaluation of the test set at the PS."""

    iteration: int                # updates applied before it
    accuracy: float
    test_loss: float
    eval_s: float
    train_s: float = 0.0          # the PS's training time (no evaluations) up to it


@dataclasses.dataclass
class HostSummary:
    """Written by a host when it finishes."""

    host: str
    role: str
    iterations: int               # iterations this host completed
    elapsed_s: float
    cpu_s: float                  # user + system CPU of the process, all its threads
    transport_stats: dict[str, Any]
    rank: int = -1
    # PS only:
    train_s: float = 0.0
    train_start_time: float = 0.0  # wall clock (time.time()), to match the controller's records
    train_end_time: float = 0.0
    stopped_by: str = ""           # "iterations", "target" or "time_cap"
    cpu_busy_frac: float | None = None   # the machine's busy fraction (all cores) while training
    transport: str = ""
    transport_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    session_id: int | None = None  # the run's session (random per run)
    rejections: dict[str, float] = dataclasses.field(default_factory=dict)   # refused datagrams by reason


def _load(cls, data: dict) -> Any:
    """A record from a dict, ignoring fields this version does not know."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in names})


class RunFiles:
    """Paths of one run folder, and typed readers of what the hosts wrote there."""

    def __init__(self, run_dir: Path) -> None:
        self.dir = Path(run_dir)
        self.raw = self.dir / "raw"
        self.spec = self.dir / "spec.json"
        self.counters = self.dir / "counters.json"
        self.port_stats = self.dir / "port_stats.jsonl"
        self.loss = self.dir / "loss"
        self.host_iterations = self.dir / "host_iterations.csv"
        self.stop_marker = self.raw / STOP_MARKER
        self.end_marker = self.raw / END_MARKER
        self.members = self.raw / f"{PS_NAME}.members.jsonl"
        self.faults = self.raw / "faults.jsonl"
        # A benchmark cell (harness.hosts.bench) instead: the PS's push times and the barrier.
        self.push_times = self.dir / "push_times.json"
        self.sync = self.dir / "sync"
        self.capture = self.dir / "capture"

    def log(self, host: str) -> Path:
        """The host's stdout and stderr."""
        return self.raw / f"{host}.log"

    def records(self, host: str) -> Path:
        """The host's per-iteration records."""
        return self.raw / f"{host}.jsonl"

    def summary(self, host: str) -> Path:
        """The host's summary."""
        return self.raw / f"{host}.summary.json"

    def pcap(self, host: str) -> Path:
        """The host's packet capture (``invoke run-sweep --capture``)."""
        return self.capture / f"{host}.pcap"

    def capture_log(self, host: str) -> Path:
        """tcpdump's messages for the host's capture."""
        return self.capture / f"{host}.log"

    @property
    def evals(self) -> Path:
        """The PS's evaluation records."""
        return self.raw / f"{PS_NAME}.eval.jsonl"

    # ---- readers --------------------------------------------------------------------------

    def ps_iterations(self) -> list[PsIteration]:
        """The PS's per-iteration records (empty if it wrote none)."""
        return [_load(PsIteration, d) for d in read_jsonl(self.records(PS_NAME))]

    def worker_iterations(self, host: str) -> list[WorkerIteration]:
        """One worker's per-iteration records."""
        return [_load(WorkerIteration, d) for d in read_jsonl(self.records(host))]

    def eval_records(self) -> list[EvalRecord]:
        """The PS's evaluations, in order."""
        return [_load(EvalRecord, d) for d in read_jsonl(self.evals)]

    def member_events(self) -> list[MemberEvent]:
        """The PS's membership events, in order."""
        return [_load(MemberEvent, d) for d in read_jsonl(self.members)]

    def fault_events(self) -> list[dict]:
        """What the fault injector did, in order (:class:`harness.hosts.faults.FaultInjector`)."""
        return read_jsonl(self.faults)

    def ps_progress(self) -> int:
        """How many iterations (rounds) the PS has recorded so far (its whole lines)."""
        try:
            with open(self.records(PS_NAME), "rb") as f:
                return f.read().count(b"\n")
        except FileNotFoundError:
            return 0

    def ps_finished(self) -> bool:
        """The PS has written its summary: it will send nothing more."""
        return self.summary(PS_NAME).exists()

    def host_summary(self, host: str) -> HostSummary | None:
        """The host's summary, or None if it did not finish."""
        path = self.summary(host)
        return _load(HostSummary, json.loads(path.read_text())) if path.exists() else None


class Recorder:
    """The write-once output of one host in a run's ``raw/`` folder."""

    def __init__(self, files: RunFiles, host: str) -> None:
        files.raw.mkdir(parents=True, exist_ok=True)
        self.files = files
        self.host = host
        self._open: dict[Path, Any] = {}

    def _append(self, path: Path, record: Any) -> None:
        if path not in self._open:
            self._open[path] = open(path, "x", buffering=1)   # created once, never reopened
        self._open[path].write(json.dumps(dataclasses.asdict(record)) + "\n")

    def iteration(self, record: PsIteration | WorkerIteration) -> None:
        """Append one iteration's record."""
        self._append(self.files.records(self.host), record)

    def evaluation(self, record: EvalRecord) -> None:
        """Append one evaluation (PS)."""
        self._append(self.files.evals, record)

    def member(self, record: MemberEvent) -> None:
        """Append one membership event (PS)."""
        self._append(self.files.members, record)

    def stop(self, reason: str) -> None:
        """Record that training ends before its last iteration, and why (PS)."""
        _mark(self.files.stop_marker, reason)

    def end(self) -> None:
        """Tell the workers that the next parameters they get are the final ones (PS)."""
        _mark(self.files.end_marker, "end")

    def summary(self, record: HostSummary) -> None:
        """Write the final summary; its presence means the host finished."""
        for f in self._open.values():
            f.close()
        self._open.clear()
        self.files.summary(self.host).write_text(json.dumps(dataclasses.asdict(record), indent=1))


def _mark(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text + "\n")
    tmp.rename(path)   # atomic: a worker sees all of it or nothing


def read_jsonl(path: Path) -> list[dict]:
    """The records of a JSON-lines file (none if it does not exist; a torn last line is dropped)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                break   # a host killed mid-write
    return out
