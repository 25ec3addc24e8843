"""Faults a run injects into its own training: the text that names one, and the injector.

A fault is a sweep dimension (``--fault``), written as text:

- ``none``;
- ``kill@K``: the worker's process is killed (SIGKILL, its whole process group) once the PS has
  completed ``K`` iterations; it stays dead;
- ``restart@K:Ts``: killed at ``K``, and a fresh process for the same worker started ``T``
  seconds later, which joins the running job again;
- ``stall@K:Ts``: the worker is stopped (SIGSTOP) at ``K`` and continued (SIGCONT) ``T`` seconds
  later, as a long garbage-collection pause or a descheduled VM would;
- ``link@K:Ts``: the SDN controller cuts the worker's link in the switch at ``K`` and restores it
  ``T`` seconds later (:mod:`topologies.controller.control`): the failure is in the network, the
  process runs on;
- ``straggler:Fx``: the worker computes ``F`` times slower throughout (it sleeps ``F - 1`` times
  its own compute time after each gradient).

Each names its worker with a trailing ``:wN`` (``kill@20:w3``); the default is the last worker,
the one the PS's serial broadcast reaches last. :class:`FaultInjector` applies a fault while the
run's processes run (the runner calls :meth:`FaultInjector.tick` as it waits) and records what it
did and when in ``raw/faults.jsonl`` (wall clock and the machine's monotonic clock, which the hosts
share).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path
from transports.base import UserError

KINDS = ("none", "kill", "restart", "stall", "link", "straggler")
_TIMED = ("restart", "stall", "link")


class FaultError(UserError, ValueError):
    """A fault's text does not name a fault this harness can inject."""


@dataclasses.dataclass(frozen=True)
class Fault:
    """One fault: what, when (after which PS iteration), for how long, to which worker."""

    kind: str = "none"
    at_iteration: int = 0
    duration_s: float = 0.0
    factor: float = 1.0
    worker: int | None = None        # rank; None: the last worker

    def text(self) -> str:
        """The canonical text (what :func:`parse_fault` reads back)."""
        who = "" if self.worker is None else f":w{self.worker + 1}"
        if self.kind == "none":
            return "none"
        if self.kind == "straggler":
            return f"straggler:{self.factor:g}x{who}"
        if self.kind == "kill":
            return f"kill@{self.at_iteration}{who}"
        return f"{self.kind}@{self.at_iteration}:{self.duration_s:g}s{who}"

    def rank(self, n_workers: int) -> int:
        """The worker this fault hits, 0-based."""
        return n_workers - 1 if self.worker is None else self.worker


_PATTERN = re.compile(
    r"(?P<kind>[a-z]+)(?:@(?P<at>\d+))?(?::(?P<arg>[0-9.]+)(?P<unit>s|x))?(?::w(?P<w>\d+))?")


def parse_fault(text: str) -> Fault:
    """``"stall@20:2s:w3"`` -> a :class:`Fault`; a sentence in :class:`FaultError` otherwise."""
    raw = str(text).strip().lower()
    m = _PATTERN.fullmatch(raw)
    if not m or m["kind"] not in KINDS:
        raise FaultError(f"{text!r} is not a fault; write none, kill@K, restart@K:Ts, stall@K:Ts, "
                         "link@K:Ts or straggler:Fx, optionally ending in :wN.")
    kind, worker = m["kind"], (int(m["w"]) - 1 if m["w"] else None)
    if worker is not None and worker < 0:
        raise FaultError(f"{text!r}: workers are numbered from w1.")
    if kind == "none":
        if m["at"] or m["arg"] or m["w"]:
            raise FaultError(f"{text!r}: none takes no arguments.")
        return Fault()
    if kind == "straggler":
        if m["at"] or m["unit"] != "x" or not float(m["arg"]) >= 1:
            raise FaultError(f"{text!r}: write straggler:Fx with a slow-down F of at least 1, "
                             "e.g. straggler:3x.")
        return Fault("straggler", factor=float(m["arg"]), worker=worker)
    if m["at"] is None:
        raise FaultError(f"{text!r}: say after which iteration, e.g. {kind}@20.")
    if kind == "kill":
        if m["arg"]:
            raise FaultError(f"{text!r}: kill takes no duration (restart@K:Ts brings it back).")
        return Fault("kill", int(m["at"]), worker=worker)
    if m["unit"] != "s" or not 0 < float(m["arg"]) <= 600:
        raise FaultError(f"{text!r}: {kind} needs a duration from 0 to 600 s, e.g. {kind}@20:2s.")
    return Fault(kind, int(m["at"]), float(m["arg"]), worker=worker)


def check_fault(fault: Fault, n_workers: int, iterations: int) -> None:
    """Raise :class:`FaultError` if ``fault`` cannot happen in a run of this size."""
    if fault.worker is not None and fault.worker >= n_workers:
        raise FaultError(f"fault {fault.text()} names w{fault.worker + 1}, but the run has only "
                         f"{n_workers} workers.")
    if fault.kind in ("kill",) + _TIMED and not 0 < fault.at_iteration < iterations:
        raise FaultError(f"fault {fault.text()} happens after iteration {fault.at_iteration}, "
                         f"which a run of {iterations} iterations never reaches.")


class FaultInjector:
    """Applies one fault to a running job, driven by the PS's progress.

    ``procs`` maps host names to the run's process handles (``kill``, ``ref``); ``restart(host)``
    starts a fresh process for a host and returns its handle; ``cut``/``restore`` take a host's
    link down and up (the controller's). Events go to ``events_path`` as JSON lines.
    """

    def __init__(self, fault: Fault, host: str, progress: Callable[[], int], procs: dict,
                 events_path: Path, *, restart: Callable[[str], object] | None = None,
                 cut: Callable[[str], float] | None = None,
                 restore: Callable[[str], float] | None = None) -> None:
        self.fault = fault
        self.host = host
        self.progress = progress
        self.procs = procs
        self.events_path = events_path
        self.restart_fn, self.cut_fn, self.restore_fn = restart, cut, restore
        self.applied_at: float | None = None
        self.ended = fault.kind in ("none", "straggler")
        self.killed: set[str] = set()   # hosts killed on purpose (their exit is no crash)

    def _event(self, what: str, t_wall: float | None = None,
               called_mono: float | None = None) -> None:
        """Record ``what``; ``t_wall`` is when it happened if not now (the controller's record
        of when it changed the switch), and ``mono`` is then that moment on the monotonic clock:
        a cut or restore takes effect when the controller acts, not when its call returns
        (which waits for the datapath too)."""
        now_wall, now_mono = time.time(), time.monotonic()
        t = t_wall if t_wall else now_wall
        rec = {"event": what, "host": self.host, "fault": self.fault.text(),
               "t": t, "mono": now_mono - (now_wall - t), "ps_iterations": self.progress()}
        rec["called_mono"] = rec["mono"] if called_mono is None else called_mono
        with open(self.events_path, "a") as f:
            f.write(json.dumps(rec) + "\n")

    def _signal(self, sig: int) -> None:
        os.killpg(self.procs[self.host].ref.pid, sig)

    def tick(self) -> None:
        """Apply the fault when its moment has come, and end it when its time is up."""
        f = self.fault
        if self.ended:
            return
        now = time.monotonic()
        if self.applied_at is None:
            if self.progress() < f.at_iteration:
                return
            self.applied_at = now
            if f.kind in ("kill", "restart"):
                # Dated before the call: the process dies at the signal, and the PS may see its
                # connection end before kill() has reaped it and updated the ledger.
                struck = time.time()
                self.procs[self.host].kill()
                self.killed.add(self.host)
                self._event("killed", struck)
                self.ended = f.kind == "kill"
            elif f.kind == "stall":
                struck = time.time()
                self._signal(signal.SIGSTOP)
                self._event("stopped", struck)
            elif f.kind == "link":
                self._event("cut", self.cut_fn(self.host), now)
            return
        if now - self.applied_at < f.duration_s:
            return
        if f.kind == "restart":
            self.procs[self.host] = self.restart_fn(self.host)
            self.killed.discard(self.host)
            self._event("restarted")
        elif f.kind == "stall":
            self._signal(signal.SIGCONT)
            self._event("continued")
        elif f.kind == "link":
            asked = time.monotonic()
            self._event("restored", self.restore_fn(self.host), asked)
        self.ended = True

    def finish(self) -> None:
        """End the fault early (the run is over): continue a stopped process, restore a link."""
        if self.ended or self.applied_at is None:
            return
        if self.fault.kind == "stall":
            self._signal(signal.SIGCONT)
            self._event("continued")
        elif self.fault.kind == "link":
            self._event("restored", self.restore_fn(self.host))
        self.ended = True
