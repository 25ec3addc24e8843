"""Kinds of run: what each communication pattern supplies to the one sweep loop.

The loop (:mod:`harness.running.engine`) knows plans, groups, run folders, tables and progress;
a :class:`Kind` knows the rest for its runs: the tables it writes and their columns, which runs
share a network, how to bring that network up, how to execute one run, how to describe it, what
its manifest holds and how its report is drawn. :data:`KINDS` names the module that defines
each kind's ``KIND``; a plan names its kind (``plan.kind``).

Adding a communication pattern is one module that defines a spec, a plan and a ``KIND``, and
one line in :data:`KINDS` (docs/architecture.md walks through it).
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import Any, Iterator

from harness.running.results import Column

# kind name -> the module whose KIND it is (imported when a plan of that kind runs)
KINDS = {
    "ps": "harness.running.ps",                 # training through a PS on the incast star
    "p2p": "harness.p2p.run",                   # peer-to-peer training on the leaf-spine fabric
    "simulate": "harness.simulation.kind",      # the native core over a discrete-event network
    "loopback": "harness.bench.kind",           # one worker pushing to the PS over 127.0.0.1
}


class Kind:
    """The defaults of a kind of run; a kind overrides what differs.

    A spec must have ``run_id``; a plan ``name``, ``kind``, ``specs()`` and ``description``.
    """

    name = ""
    # file -> columns, in the order a run's rows are appended; ``runs.csv`` (last) marks a run done
    tables: Mapping[str, tuple[Column, ...]] = {}

    def group_key(self, spec) -> Hashable:
        """Runs with equal keys share one network (brought up once for all of them)."""
        return 0

    def groups(self, plan, todo: list) -> list[list]:
        """The order to run ``todo`` in: groups of runs sharing a network (plan order kept)."""
        out: dict[Hashable, list] = {}
        for spec in todo:
            out.setdefault(self.group_key(spec), []).append(spec)
        return list(out.values())

    def network_dir(self, spec) -> str:
        """The folder, under ``network/``, of the network ``spec`` runs on."""
        return "default"

    @contextlib.contextmanager
    def network(self, spec, net_dir: Path) -> Iterator[Any]:
        """Bring up what the runs of ``spec``'s group share; yield what :meth:`execute` needs."""
        yield None

    def execute(self, site: Any, spec, run_dir: Path, sweep: str) -> dict[str, list[dict]]:
        """Run ``spec`` (its raw files under ``run_dir``); return its rows, by table."""
        raise NotImplementedError

    def check_capture(self, specs: list, capture) -> None:
        """Raise a :class:`~harness.running.capture.CaptureError` unless every run of ``specs``
        can capture ``capture``'s hosts (``invoke run-sweep --capture``). A kind that captures
        overrides this, and its :meth:`execute` takes ``capture=``."""
        from harness.running.capture import CaptureError

        raise CaptureError(f"--capture applies to training through a PS, not to {self.name} "
                           "runs.")

    def manifest(self, plan, specs: list, folder: Path) -> None:
        """Write (or check, or extend) ``folder/manifest.json`` before the first run."""
        raise NotImplementedError

    def started(self, spec) -> str:
        """What the progress line says as ``spec`` starts."""
        return spec.run_id

    def ended(self, row: dict) -> str:
        """What the progress line says of a finished run's ``runs.csv`` row (after its status)."""
        return ""

    def summary(self, done: list, total_s: float, network_s: float) -> str | None:
        """A closing line about the runs just made (``done``: their
        :class:`~harness.running.engine.Finished`; ``None``: the loop's own line)."""
        return None

    def report(self, folder: Path, figures: bool = True) -> list[Path]:
        """Write the folder's report from its tables and, with ``figures``, draw its figures;
        the paths written."""
        return []


def of(name: str) -> Kind:
    """The kind called ``name`` (:data:`KINDS`)."""
    if name not in KINDS:
        raise KeyError(f"unknown kind of run {name!r}; one of {', '.join(KINDS)}")
    return importlib.import_module(KINDS[name]).KIND
