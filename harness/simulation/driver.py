"""The LTP/PLOT core at scale: ``invoke simulate`` drives ``transports/native/build/ltp_sim``.

The simulator (``transports/native/sim/``, built by ``make -C transports/native sim``) links the
same core sources as the UDP transport and runs them over a seeded discrete-event model of the
emulated incast: N workers, each on its own link, into one drop-tail queue at the switch port
toward the PS; loss (uniform or per-packet Gilbert-Elliott) and delay at every host's ingress;
the PS broadcasting through its own link. Nothing is a model of LTP: every datagram is built,
paced, acknowledged, retransmitted and closed by the core. What it does not have is CPU: virtual
time passes only on the network, so a host's processing costs nothing unless a ``host`` profile
adds the lateness of a busy machine (:data:`HOSTS`). docs/simulation.md has the model, its
validation against the testbed and the scaling results.

One simulated run is a :class:`Cell`; a :class:`SimPlan` is a grid of them, which the one sweep
loop (:func:`harness.running.engine.run_plan`, with :data:`KIND`) runs into a folder, appending
as each run ends (a restarted sweep skips runs already in ``runs.csv``):

- ``runs.csv``: one row per run, its settings and summary (status, counters, the simulator's own
  wall time, events per second and peak memory);
- ``iterations.csv``: one row per iteration (push time, iteration time, broadcast time, smallest
  received fraction, early closes, queue drops);
- ``pushes.csv``: one row per worker per iteration (its push time, received fraction,
  retransmissions, early and max-wait closes).

The columns and their units: :data:`harness.running.results.SIM_RUNS_COLUMNS` and its siblings
(docs/results-schema.md).

    .venv/bin/invoke simulate --workers 8,64,1024 --transports ltp,ltp-reliable,plot --out DIR
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import json
import subprocess
from collections.abc import Sequence
from pathlib import Path

from topologies.impair.loss import (GilbertElliott, GilbertElliottTime, ReplayUniform, Trace,
                                    Uniform, parse_loss)

PROJECT = Path(__file__).resolve().parents[2]
NATIVE = PROJECT / "transports" / "native"
BINARY = NATIVE / "build" / "ltp_sim"
# The LTP core's schemes, and the TCP reference: a stated model of TCP (SACK, NewReno-style
# window, Linux's 200 ms least RTO) in the same event simulator, sim/tcp_model.h.
SCHEMES = ("ltp", "ltp-reliable", "plot", "tcp-ref")
SCENARIOS = ("push", "bsp")

# How hosts depart from instant ones. "ideal": a thread acts the moment it is due, and the PS
# reads its socket in 20 us batches (what recvmmsg of up to 64 datagrams does at 40 Gbit/s and
# above; slower links never fill a batch in that time, so they see single reads). "testbed": the
# emulated testbed on this 2-core machine, as tests/test_core.c models it for the rate hint's
# acceptance test (every thread wakes 1 ms late on average, the PS reads its socket about once a
# millisecond, the bottleneck's HTB passes a 15 kB burst after a lull); calibrated against the
# testbed in tests/emulation/test_simulate.py and docs/simulation.md.
HOSTS = {
    "ideal": {"wake_mean_us": 0, "rx_poll_us": 20, "burst_bytes": 0},
    "testbed": {"wake_mean_us": 1000, "rx_poll_us": 1000, "burst_bytes": 15000},
}


# Settings checked against the simulator's own ranges (ltp_sim --ranges): the field, the
# simulator's flag, the command line's, the flag's units per the field's unit, that unit, whole.
CHECKED = (("workers", "--workers", "--workers", 1, "", True),
           ("bottleneck_mbps", "--bottleneck-mbps", "--bandwidth", 1, " Mbit/s", False),
           ("queue_pkts", "--queue-pkts", "--queue", 1, " packets", True),
           ("delay_ms", "--delay-us", "--delay", 1000, " ms", False),
           ("iterations", "--iterations", "--iterations", 1, "", True),
           ("seed", "--seed", "--seeds", 1, "", True))
from transports.base import UserError, parse_scheme



@functools.lru_cache(maxsize=1)
def gradient_bytes() -> int:
    """The bytes of one gradient of the MLP the testbed trains (:func:`harness.training.models.n_params`)."""
    from harness.training import models

    return 4 * models.n_params("mlp")


class SimulationError(UserError, ValueError):
    """A simulation setting is out of range (the message is one sentence)."""


@dataclasses.dataclass(frozen=True)
class Cell:
    """One simulated run: settings in the units their names say."""

    transport: str = "ltp"
    workers: int = 8
    bottleneck_mbps: float = 100.0
    queue_pkts: int = 64
    loss: str | float = 0.0          # a loss model's text, as run-sweep's --loss
    delay_ms: float = 0.0            # one way, per direction, at every host's ingress
    seed: int = 1
    iterations: int = 3
    scenario: str = "push"           # push: synchronized pushes; bsp: training iterations
    host: str = "ideal"
    compute_ms: float = 0.0
    update_ms: float = 0.0
    skew_us: float = 1000.0

    def __post_init__(self) -> None:
        if self.scheme not in SCHEMES:
            raise SimulationError(f"the simulator runs {', '.join(SCHEMES)} (with core options "
                                  f"as ltp+NAME=VALUE), not {self.transport!r}.")
        core_flags(self.transport)   # an unknown core option or a bad value: one sentence
        for name, flag, what, per_unit, unit, whole in CHECKED:
            value = getattr(self, name)
            lo, hi = (x / per_unit for x in ranges()[flag])
            if (whole and (isinstance(value, bool) or not isinstance(value, int))) \
                    or not isinstance(value, (int, float)) or not lo <= value <= hi:
                raise SimulationError(f"{what} must be {'a whole number ' if whole else ''}from "
                                      f"{_number(lo)} to {_number(hi)}{unit}, not {value!r}.")
        if self.scenario not in SCENARIOS:
            raise SimulationError(f"--scenario must be push or bsp, not {self.scenario!r}.")
        if self.host not in HOSTS:
            raise SimulationError(f"--host must be one of {', '.join(HOSTS)}, not {self.host!r}.")
        loss_flags(self.loss)   # a bad loss model: one sentence

    @property
    def scheme(self) -> str:
        """The simulated scheme without its core options (``ltp+pto_max_backoff=2``: ``ltp``)."""
        return parse_scheme(self.transport)[0]

    @property
    def run_id(self) -> str:
        """A readable id with a digest of every setting (so two cells never share one)."""
        digest = hashlib.sha256(json.dumps(dataclasses.asdict(self), sort_keys=True,
                                           default=str).encode()).hexdigest()[:8]
        return f"{self.transport}_n{self.workers}_bw{self.bottleneck_mbps:g}_s{self.seed}_{digest}"

    def key(self) -> dict:
        """The settings as a row's leading columns."""
        return {"run_id": self.run_id, "transport": self.transport, "n_workers": self.workers,
                "bottleneck_mbps": self.bottleneck_mbps, "queue_pkts": self.queue_pkts,
                "loss": loss_text(self.loss), "delay_ms": self.delay_ms, "seed": self.seed,
                "iterations": self.iterations, "scenario": self.scenario, "host": self.host}


def loss_text(loss: str | float) -> str:
    """The canonical text of a loss model (``uniform:5``, ``ge:loss=5,burst=4``)."""
    return parse_loss(loss).text()


def loss_flags(loss: str | float) -> list[str]:
    """The simulator's loss flags for a loss model; time-based chains are refused."""
    model = parse_loss(loss)
    if isinstance(model, GilbertElliottTime):
        raise SimulationError(f"the simulator's loss chain steps per packet; {model.text()!r} steps "
                              "in time (use uniform or ge:LOSS:BURST).")
    if isinstance(model, Trace):
        raise SimulationError(f"the simulator does not replay recorded traces ({model.text()!r}); "
                              "use uniform, replay or ge:LOSS:BURST.")
    if isinstance(model, (Uniform, ReplayUniform)):   # the simulator's loss is seeded anyway
        return [] if model.loss_pct == 0 else ["--loss", f"{model.loss_pct / 100:.9g}"]
    assert isinstance(model, GilbertElliott)
    p = model.probabilities()
    return ["--ge", ",".join(f"{p[k]:.9g}" for k in ("p-gb", "p-bg", "loss-good", "loss-bad"))]


def plot_segments() -> str:
    """PLOT's layers of the MLP with their bounds (the ``size`` rule: the SNR rule needs real
    gradients), as ``BYTES:BOUND,...``, from PLOT's own option defaults and rule."""
    from harness.training.models import layout, mlp
    from transports.plot import bounds_by_size, plot_options

    opts = {o.name: o.default for o in plot_options()}
    lay = layout(mlp())
    bounds = bounds_by_size(lay, opts["bound_min"], opts["bound_max"], opts["reliable_below_floats"])
    return ",".join(f"{s.length * 4}:{b:.6g}" for s, b in zip(lay.segments, bounds))


def limit_s(cell: Cell) -> float:
    """Virtual seconds an iteration may take before the run counts as a timeout: 60, or 20 times
    the iteration's bound (broadcast and push, every frame through the link) if more."""
    bound = 2 * cell.workers * gradient_bytes() * 1.08 * 8 / (cell.bottleneck_mbps * 1e6)
    return max(60.0, 20 * bound + cell.compute_ms / 1e3 + cell.update_ms / 1e3)


def argv(cell: Cell, segments: str | None = None) -> list[str]:
    """The simulator's command line for one cell."""
    host = HOSTS[cell.host]
    out = [str(BINARY), "--workers", str(cell.workers), "--iterations", str(cell.iterations),
           "--scenario", cell.scenario, "--bytes", str(gradient_bytes()),
           "--bottleneck-mbps", f"{cell.bottleneck_mbps:g}", "--queue-pkts", str(cell.queue_pkts),
           "--delay-us", f"{cell.delay_ms * 1000:.0f}", "--seed", str(cell.seed),
           "--compute-us", f"{cell.compute_ms * 1000:.0f}", "--update-us", f"{cell.update_ms * 1000:.0f}",
           "--skew-us", f"{cell.skew_us:.0f}", "--limit-s", f"{limit_s(cell):.6g}",
           "--wake-mean-us", str(host["wake_mean_us"]), "--rx-poll-us", str(host["rx_poll_us"]),
           "--burst-bytes", str(host["burst_bytes"]), *loss_flags(cell.loss)]
    if cell.scheme == "ltp-reliable":
        out += ["--reliable", "1"]
    if cell.scheme == "tcp-ref":
        out += ["--tcp", "1"]
    if cell.scheme == "plot":
        out += ["--segments", segments or plot_segments()]
    return out + core_flags(cell.transport)


def core_flags(transport: str) -> list[str]:
    """``ltp+pto_max_backoff=2`` -> ``["--cfg", "pto_max_backoff=2"]``: a simulated scheme's
    options are the core's own, by the names of its option table (include/ltp.h), passed to the
    simulator as they are (the testbed's transports expose some of them under other names)."""
    from transports import native

    scheme, given = parse_scheme(transport)
    if not given:
        return []
    if scheme == "tcp-ref":
        raise SimulationError(f"{transport!r}: tcp-ref is the TCP model, which has no core options.")
    table, items = native.core_options(), []
    for name, value in sorted(given.items()):
        row = table.get(name)
        if row is None:
            raise SimulationError(f"{transport!r}: the core has no option {name!r} (its options "
                                  "are include/ltp.h's table, such as pto_max_backoff).")
        ok = (isinstance(value, bool) if row.kind == "bool"
              else value in row.choices if row.kind == "choice"
              else isinstance(value, (int, float)) and not isinstance(value, bool)
              and row.low <= value <= row.high and (row.kind == "float" or value == int(value)))
        if not ok:
            want = ("true or false" if row.kind == "bool" else " or ".join(row.choices)
                    if row.kind == "choice" else f"a number from {row.low:g} to {row.high:g}")
            raise SimulationError(f"{transport!r}: the core option {name} must be {want}, "
                                  f"not {value!r}.")
        items.append(f"{name}={row.to_core(value):.17g}")
    return ["--cfg", ",".join(items)]


def build() -> Path:
    """Build (or bring up to date) the simulator with the project's Makefile; its path."""
    got = subprocess.run(["make", "-s", "-C", str(NATIVE), "sim"], capture_output=True, text=True)
    if got.returncode != 0:
        raise SimulationError(f"building the simulator failed (make -C {NATIVE} sim): "
                              f"{got.stderr.strip()[-300:]}")
    return BINARY


def _number(x: float) -> str:
    """``10000000.0`` -> ``10,000,000``; ``0.001`` -> ``0.001``."""
    return f"{int(x):,}" if x == int(x) and abs(x) < 1e16 else f"{x:g}"


@functools.lru_cache(maxsize=None)
def ranges() -> dict[str, tuple[float, float]]:
    """Every numeric flag's range as the simulator states it (``ltp_sim --ranges``), so the
    ranges are written once, in ``sim/sim_args.c``."""
    build()
    got = subprocess.run([str(BINARY), "--ranges"], capture_output=True, text=True)
    if got.returncode != 0:
        raise SimulationError(f"the simulator did not state its ranges: {got.stderr.strip()}")
    return {flag: (float(lo), float(hi)) for flag, (lo, hi) in json.loads(got.stdout).items()}


@dataclasses.dataclass
class Result:
    """One run's rows: pushes, iterations and the summary, each with the cell's settings."""

    pushes: list[dict]
    iterations: list[dict]
    summary: dict


def run(cell: Cell, segments: str | None = None, timeout_s: float = 3600) -> Result:
    """Run one cell and parse its JSON lines (the binary must be built: :func:`build`)."""
    got = subprocess.run(argv(cell, segments), capture_output=True, text=True, timeout=timeout_s)
    if got.returncode == 2:   # a bad argument: the simulator's own sentence
        raise SimulationError(got.stderr.strip().removeprefix("ltp_sim: "))
    tables: dict[str, list[dict]] = {"push": [], "iteration": [], "summary": []}
    for line in got.stdout.splitlines():
        row = json.loads(line)
        tables[row.pop("table")].append({**cell.key(), **row})
    if not tables["summary"]:
        summary = {**cell.key(), "status": "crash", "reason": got.stderr.strip()[-200:]}
    else:
        summary = tables["summary"][0]
        summary["reason"] = ("" if summary["status"] == "ok" else
                             f"an iteration took more than {limit_s(cell):g} virtual seconds")
    return Result(tables["push"], tables["iteration"], summary)


def cells(transports: Sequence[str] = ("ltp",), workers: Sequence[int] = (8,),
          bandwidths: Sequence[float] = (100.0,), queues: Sequence[int] = (64,),
          losses: Sequence = (0.0,), delays: Sequence[float] = (0.0,), seeds: Sequence[int] = (1,),
          **common) -> list[Cell]:
    """The grid of cells over every list (``common``: the other :class:`Cell` fields)."""
    for name, values in (("--transports", transports), ("--workers", workers),
                         ("--bandwidth", bandwidths), ("--queue", queues), ("--loss", losses),
                         ("--delay", delays), ("--seeds", seeds)):
        if not values:
            raise SimulationError(f"{name} needs at least one value.")
    return [Cell(transport=t, workers=n, bottleneck_mbps=b, queue_pkts=q, loss=l, delay_ms=d,
                 seed=s, **common)
            for t, n, b, q, l, d, s in itertools.product(transports, workers, bandwidths, queues,
                                                         losses, delays, seeds)]
