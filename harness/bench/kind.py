"""The loopback kind of run: ``invoke bench-transport``'s loopback part through the one sweep loop
(:mod:`harness.running.engine`).

A run is one scheme's ``pushes`` pushes of one message size in one repetition, over 127.0.0.1 in
this process (:func:`harness.bench.loopback.loopback_push`); its pushes go into ``loopback.csv``
and a row with its goodput and CPU per GB into ``runs.csv``. A plan runs every scheme once per
repetition, the schemes' order rotated from one repetition to the next, so that two schemes
compared ran seconds apart and in both orders (:func:`plan`). Like any sweep, a folder resumes,
records the code it ran (a fingerprint of the transports and the native core, kind
``loopback``), and ``--redo stale`` runs again what today's code would measure otherwise;
``invoke bench-transport --loopback-only --out results/loopback`` keeps a folder the findings
cite (docs/ltp-protocol.md §6, "Measuring the driver").
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import errno
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from harness.running import kinds, results


@dataclasses.dataclass(frozen=True)
class LoopbackRun:
    """One scheme's pushes of one size in one repetition."""

    scheme: str
    n_bytes: int
    repeat: int
    pushes: int

    @property
    def run_id(self) -> str:
        """The run's id: scheme, size and repetition."""
        return f"{self.scheme}-{self.n_bytes}B-r{self.repeat}"

    def key(self) -> dict:
        """The run's settings, for the manifest and its table rows."""
        return {"transport": self.scheme, "bytes": self.n_bytes, "repeat": self.repeat,
                "pushes": self.pushes}


@dataclasses.dataclass(frozen=True)
class LoopbackPlan:
    """Every scheme at every size, ``repeats`` repetitions interleaved."""

    kind: ClassVar[str] = "loopback"   # its kind of run (harness.running.kinds)
    name: str
    runs: tuple[LoopbackRun, ...]
    description: str = ""

    def specs(self) -> list[LoopbackRun]:
        """Every run of the plan, in order."""
        return list(self.runs)


def plan(schemes: Sequence[str], sizes: Sequence[int], pushes: int,
         repeats: int) -> LoopbackPlan:
    """Per size, ``repeats`` repetitions; each runs every scheme once, in an order rotated by one
    per repetition."""
    runs = []
    for size in sizes:
        for r in range(repeats):
            k = r % len(schemes)
            runs += [LoopbackRun(s, size, r, pushes) for s in list(schemes[k:]) + list(schemes[:k])]
    return LoopbackPlan("loopback", tuple(runs),
                        f"{', '.join(schemes)} over 127.0.0.1, {pushes} pushes a run, "
                        f"{repeats} repetitions")


def _push(spec: LoopbackRun):
    """The run's pushes; a port taken between the probe and the bind is tried again on others."""
    from harness.bench import loopback

    push = (loopback.peer_push if spec.scheme.startswith(loopback.PEER_PREFIX) else
            loopback.mac_push if spec.scheme.startswith(loopback.MAC_PREFIX) else
            loopback.floor_push if spec.scheme == loopback.FLOOR else
            loopback.loopback_push)
    for attempt in range(3):
        try:
            return push(spec.scheme, spec.n_bytes, spec.pushes, spec.repeat)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE or attempt == 2:
                raise
    raise AssertionError("unreachable")


class LoopbackKind(kinds.Kind):
    """Loopback runs: no network to bring up, both ends in this process."""

    name = "loopback"
    tables = {"loopback.csv": results.BENCH_LOOPBACK_COLUMNS,
              "runs.csv": results.LOOPBACK_RUNS_COLUMNS}

    @contextlib.contextmanager
    def network(self, spec: LoopbackRun, net_dir: Path):
        from harness.running import provenance

        record = provenance.manifest("loopback")
        yield {"git_commit": record["git_commit"], "git_dirty": record["git_dirty"],
               "code_fingerprint": record["fingerprint"]["digest"], **provenance.run_columns()}

    def execute(self, site: dict, spec: LoopbackRun, run_dir: Path,
                sweep: str) -> dict[str, list[dict]]:
        from harness.running import provenance

        meter = provenance.LoadMeter()
        meter.start()
        t0 = time.monotonic()
        started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        got, reason = None, ""
        try:
            got = _push(spec)
        except Exception as exc:   # a run that fails is a row, and the sweep goes on
            reason = f"{type(exc).__name__}: {exc}"[:300]
        done = len(got.push_s) if got else 0
        if got and done != spec.pushes:
            reason = f"{done} of {spec.pushes} pushes finished"
        row = {"run_id": spec.run_id, **spec.key(), "status": "crash" if reason else "ok",
               "reason": reason, "pushes_done": done,
               "median_s": got.median_s if done else None,
               "goodput_gbps": got.goodput_gbps if done else None,
               "cpu_s_per_gb": got.cpu_s_per_gb if done else None,
               "wall_s": time.monotonic() - t0, "started_at": started, **site,
               "other_load_frac": meter.stop()}
        return {"loopback.csv": [{"run_id": spec.run_id, **r} for r in got.rows()] if got else [],
                "runs.csv": [row]}

    def manifest(self, plan: LoopbackPlan, specs: list[LoopbackRun], folder: Path) -> None:
        from harness.running import provenance

        path = folder / "manifest.json"
        if not path.exists():
            path.write_text(json.dumps({"kind": "loopback", "preset": plan.name,
                                        "description": plan.description,
                                        "runs": [s.key() for s in specs],
                                        "provenance": provenance.manifest("loopback")}, indent=1))

    def started(self, spec: LoopbackRun) -> str:
        return f"{spec.scheme} {spec.n_bytes:,} B repetition {spec.repeat}"

    def report(self, folder: Path, figures: bool = True) -> list[Path]:
        from harness.bench import figures as drawing

        return drawing.draw(folder) if figures else []

    def ended(self, row: dict) -> str:
        if row.get("goodput_gbps") is None:
            return ""
        return f"{row['goodput_gbps']:.2f} Gbit/s, {row['cpu_s_per_gb']:.3f} CPU s/GB"


KIND = LoopbackKind()
