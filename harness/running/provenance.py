"""Where a result came from: the machine, the code that produced it, and what else ran meanwhile.

Three records, each written with every run (``runs.csv``) and every folder (``manifest.json``):

- **The machine** (:func:`machine`): CPU model, core count, kernel, and the versions of what shapes
  a result (Python, torch, numpy, pandas, os-ken, Open vSwitch, Mininet).
- **The code fingerprint** (:func:`fingerprint`, from :mod:`harness.running.fingerprint`): a
  digest of the code that produces a kind of run's numbers, so a report can say "stale: code
  changed since" when today's code differs (:func:`freshness`). The manifest keeps the per-file
  hashes, so a stale report names what changed; a digest recorded under an earlier hash rule is
  compared through its translation (:func:`translate`).
- **Other load** (:class:`LoadMeter`): the CPU that processes outside the testbed used during a
  run, as a fraction of the whole machine. The testbed is this process's descendants (hosts,
  controller, fork server and its children, delay line, cross traffic) and the private Open
  vSwitch daemons; kernel threads are left out (the network's own softirq work runs there).
  A process that started and ended within the run is counted through its parent's ``cutime`` once
  reaped (a compiler under ``make``), and missed only if its parent did not reap it during the run.
  Near 0 means the run had the machine to itself.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import functools
import io
import json
import os
import platform
import subprocess
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

from harness.running.fingerprint import (PACKAGES, PROJECT, RULE, Fingerprint, fingerprint,
                                         run_kind)
from harness.running.results import read_table


# ---- the machine -------------------------------------------------------------------------------


def _first_line(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout
        return out.splitlines()[0].strip() if out else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _pkg(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "unknown"


@functools.lru_cache(maxsize=1)
def machine() -> dict:
    """The machine's facts that shape a result (the same for every run of a process)."""
    ovs = _first_line(["ovs-vswitchd", "--version"])
    return {
        "cpu_model": _cpu_model(), "cpu_cores": os.cpu_count() or 0,
        "kernel": platform.release(),
        "versions": {"python": platform.python_version(), "torch": _pkg("torch"),
                     "numpy": _pkg("numpy"), "pandas": _pkg("pandas"), "os_ken": _pkg("os-ken"),
                     "mininet": _pkg("mininet") if _pkg("mininet") != "unknown"
                     else _mininet_version(),
                     "openvswitch": ovs.rsplit(" ", 1)[-1] if ovs != "unknown" else ovs},
    }


def _mininet_version() -> str:
    try:
        import mininet.net

        return str(mininet.net.VERSION)
    except ImportError:
        return "unknown"


def run_columns() -> dict:
    """The machine's columns of a ``runs.csv`` row (``versions`` as JSON)."""
    m = machine()
    return {"cpu_model": m["cpu_model"], "cpu_cores": m["cpu_cores"], "kernel": m["kernel"],
            "versions": json.dumps(m["versions"], sort_keys=True)}


# ---- the load of everything else ---------------------------------------------------------------

_PF_KTHREAD = 0x00200000
_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def _proc_table() -> dict[tuple[int, int], tuple[int, int, int]]:
    """(pid, start ticks) -> (ppid, flags, CPU ticks incl. reaped children) for every process."""
    table = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # after the command: state ppid pgrp session tty tpgid flags minflt cminflt majflt
        # cmajflt utime stime cutime cstime ... starttime (index 19)
        ticks = sum(int(x) for x in fields[11:15])
        table[(int(entry.name), int(fields[19]))] = (int(fields[1]), int(fields[6]), ticks)
    return table


def _testbed_pids(table: dict, root: int, extra: Iterable[int]) -> set[int]:
    children: dict[int, list[int]] = {}
    for (pid, _), (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = set(), [root, *extra]
    while todo:
        pid = todo.pop()
        if pid not in out:
            out.add(pid)
            todo.extend(children.get(pid, ()))
    return out


class LoadMeter:
    """The CPU processes outside the testbed used between :meth:`start` and :meth:`stop`."""

    def __init__(self, extra_pids: Iterable[int] = (), table=None, clock=None,
                 root_pid: int | None = None) -> None:
        import time

        self.extra = list(extra_pids)     # testbed daemons that are not our descendants (OVS)
        self._table = table or _proc_table          # tests pass their own process tables
        self._clock = clock or time.monotonic
        self._root = root_pid or os.getpid()
        self._before: dict = {}
        self._t0 = 0.0

    def start(self) -> None:
        """Take the first snapshot."""
        self._before, self._t0 = self._table(), self._clock()

    def _foreign(self, table: dict) -> set:
        ours = _testbed_pids(table, self._root, self.extra)
        return {key for key, (ppid, flags, _) in table.items()
                if key[0] not in ours and not flags & _PF_KTHREAD and key[0] != 2 and ppid != 2}

    def stop(self) -> float | None:
        """The other processes' CPU since :meth:`start`, over every core's time (0-1).

        A process's CPU counts its reaped children's (``cutime``); a process that was already
        running at the start and has ended since brings its earlier CPU into the count of the
        ancestor that reaped it, so that is taken off again."""
        if not self._before:
            return None
        before, after = self._before, self._table()
        wall = self._clock() - self._t0
        ours_before = set(before) - self._foreign(before)
        foreign = self._foreign(after) - ours_before
        used = sum(after[k][2] - before.get(k, (0, 0, 0))[2] for k in foreign)
        alive = {k[0]: k for k in after}
        at_start = {k[0]: k for k in before}
        for key in set(before) - set(after) - ours_before:
            # up the parents it had at the start, through the ones that ended too
            pid = before[key][0]
            while pid in at_start and at_start[pid] not in after:
                pid = before[at_start[pid]][0]
            if alive.get(pid) in foreign:
                used -= before[key][2]
        cores = os.cpu_count() or 1
        return round(max(used, 0) / _TICKS_PER_S / (cores * wall), 4) if wall > 0 else None


# ---- a folder's record -------------------------------------------------------------------------


def git_state() -> tuple[str, bool]:
    """(commit, dirty) of the project's work tree ('unknown' outside git); results/ changes do
    not count as dirty (the committed results folders are the sweeps' output, not code)."""
    try:
        commit = subprocess.run(["git", "-C", str(PROJECT), "rev-parse", "HEAD"],
                                capture_output=True, text=True, check=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "-C", str(PROJECT), "status", "--porcelain",
                                     "--untracked-files=no", "--", ".", ":!results"],
                                    capture_output=True, text=True).stdout.strip())
        return commit, dirty
    except (subprocess.CalledProcessError, FileNotFoundError):
        return "unknown", False


def manifest(kind: str, others: Iterable[str] = ()) -> dict:
    """A manifest's provenance: git state, the machine, the command, today's code fingerprint
    (and those of the ``others`` kinds its runs may record, e.g. ``collective`` in a PS folder)."""
    import sys

    commit, dirty = git_state()
    out = {"git_commit": commit, "git_dirty": dirty, **machine(), "host": platform.node(),
           "command": " ".join(sys.argv), "fingerprint": fingerprint(kind).as_dict()}
    if others:
        out["other_fingerprints"] = [fingerprint(k).as_dict() for k in others]
    return out


def extension(kind: str, others: Iterable[str] = (), **what) -> dict:
    """A manifest's ``extended`` entry: another grid run into a folder that had one, when, what
    it added (``what``) and its own provenance."""
    return {"at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            **what, "provenance": manifest(kind, others)}


# Options that choose which runs of a folder run again, or leave out its figures: a pass over a
# folder made with them (``invoke refresh`` adds both) changes neither which runs it holds nor
# their numbers, so the command that fills the folder is the recorded one without them.
PASS_WITH_VALUE = ("--redo",)
PASS_ALONE = ("--no-figures",)


def without_options(words: Iterable[str], with_value: Iterable[str],
                    alone: Iterable[str]) -> list[str]:
    """``words`` without the options named ``with_value`` (and their values, ``--o v`` or
    ``--o=v``) and those named ``alone``."""
    with_value, alone = set(with_value), set(alone)
    out, skip = [], False
    for word in words:
        name = word.split("=", 1)[0]
        if skip or name in alone:
            skip = False
            continue
        if name in with_value:
            skip = "=" not in word
            continue
        out.append(word)
    return out


def filling_command(command: str) -> str:
    """``command`` (as a manifest recorded it) without the options of a pass over its folder."""
    return " ".join(without_options(command.split(), PASS_WITH_VALUE, PASS_ALONE))


# ---- is a folder fresh? ------------------------------------------------------------------------


def folder_kind(folder: Path) -> str:
    """The kind of run a results folder holds: ``p2p``, ``simulate``, ``loopback`` or ``ps``."""
    try:
        header = (Path(folder) / "runs.csv").open().readline().strip().split(",")
    except OSError:
        header = []
    if "method" in header and "policy" in header:
        return "p2p"
    # A simulation's runs.csv has its virtual time; its pushes.csv may be left out of git.
    if "virtual_s" in header or (Path(folder) / "pushes.csv").exists():
        return "simulate"
    if "goodput_gbps" in header:
        return "loopback"
    return "ps"


def read_manifest(folder: Path) -> dict:
    """The folder's manifest (empty if it has none)."""
    path = Path(folder) / "manifest.json"
    return json.loads(path.read_text()) if path.exists() else {}


def recorded_fingerprints(folder: Path) -> dict[str, Fingerprint]:
    """Every fingerprint the folder's manifest holds (recorded at a sweep's start or extension,
    or backfilled from a commit), by digest."""
    found: dict[str, Fingerprint] = {}
    man = read_manifest(folder)
    entries = [man.get("provenance", {})] + [e.get("provenance", {})
                                             for e in man.get("extended", [])]
    for entry in entries:
        for data in ([entry["fingerprint"]] if "fingerprint" in entry else []) + \
                entry.get("other_fingerprints", []):
            fp = Fingerprint.from_dict(data)
            found[fp.digest] = fp
    for data in man.get("backfilled_fingerprints", {}).values():
        fp = Fingerprint.from_dict(data)
        found[fp.digest] = fp
    return found


@dataclasses.dataclass(frozen=True)
class Freshness:
    """Whether a folder's numbers were measured with today's code."""

    kind: str                     # the kinds of its runs, e.g. "ps" or "ps and collective"
    today: str                    # today's digest (of each kind, comma-separated)
    recorded: tuple[str, ...]     # the digests its runs ran with (as their rows say)
    unknown_runs: int             # runs with no known fingerprint
    changed: tuple[str, ...]      # files that differ from today's (every recorded digest)
    current: tuple[str, ...] = ()   # the recorded digests under today's rule (translated)
    missing_runs: int = 0         # runs its manifest records that runs.csv does not hold
    planned_runs: int = 0         # runs its manifest records (0: it records none)

    @property
    def same_code(self) -> bool:
        """Every run in the table ran with today's code."""
        return (self.current or self.recorded) == tuple(self.today.split(", ")) \
            and not self.unknown_runs

    @property
    def fresh(self) -> bool:
        """Every run ran with today's code, and every run the folder records is in its table."""
        return self.same_code and not self.missing_runs

    def _missing_text(self) -> str:
        return (f"{self.missing_runs} of the {self.planned_runs} runs its manifest records are "
                "not in its runs.csv (a sweep or refresh that stopped; `invoke refresh` runs them)")

    def text(self) -> str:
        """One sentence for a report."""
        if self.same_code and self.missing_runs:
            return f"**Incomplete:** {self._missing_text()}."
        if self.fresh:
            was = "" if self.recorded == tuple(self.today.split(", ")) else \
                f", recorded as {', '.join(self.recorded)} under the earlier hash rule"
            plural = "s" if ", " in self.today else ""
            return (f"Fresh: every run ran with the code of today's fingerprint{plural} "
                    f"{self.today} "
                    f"({self.kind} runs{was}; harness/running/fingerprint.py).")
        parts = []
        if self.recorded:
            plural = "s" if len(self.recorded) > 1 else ""
            parts.append(f"its runs ran with code fingerprint{plural} "
                         f"{', '.join(self.recorded)}, today's is {self.today}")
        if self.unknown_runs:
            parts.append(f"{self.unknown_runs} run{'s' if self.unknown_runs > 1 else ''} recorded "
                         "no fingerprint")
        changed = ""
        if self.changed:
            shown = ", ".join(f"`{c}`" for c in self.changed[:6])
            more = f" and {len(self.changed) - 6} more" if len(self.changed) > 6 else ""
            changed = f"; changed since: {shown}{more}"
        text = self._missing_text()
        missing = f" {text[0].upper()}{text[1:]}." if self.missing_runs else ""
        return f"**Stale: code changed since** ({'; '.join(parts)}{changed}).{missing}"


def _translations(man: dict) -> dict[str, Fingerprint]:
    """A manifest's recorded digests' fingerprints under today's rule (:func:`translate`)."""
    return {old: Fingerprint.from_dict(data)
            for old, data in man.get("translated_fingerprints", {}).items()}


def _run_digests(folder: Path, today: Fingerprint | None = None):
    """(runs table, today's fingerprint of each kind, each run's kind and recorded digest,
    manifest) of a results folder; a digest is '' where a run recorded none."""
    kind = folder_kind(folder)
    runs = read_table(folder / "runs.csv")
    # A PS folder's runs each ran the code of their pattern's kind (fingerprint.run_kind).
    kinds = [run_kind(str(p)) for p in runs["pattern"].fillna("ps")] \
        if kind == "ps" and "pattern" in runs else [kind] * len(runs)
    todays = {k: today if today is not None and today.kind == k else fingerprint(k, cached=True)
              for k in sorted(set(kinds) or {kind})}
    man = read_manifest(folder)
    backfill = {c: d["digest"] for c, d in man.get("backfilled_fingerprints", {}).items()}
    digests = []
    for _, row in runs.iterrows():
        code = row.get("code_fingerprint")
        if isinstance(code, str) and code:
            digests.append(code)
        else:   # written before runs recorded it: the commit's (or the table's first commit's)
            digests.append(backfill.get(str(row.get("git_commit", man.get("table_commit", ""))),
                                        ""))
    return runs, todays, kinds, digests, man


def missing_run_ids(folder: Path) -> set[str]:
    """Ids of the runs ``folder``'s manifest records (the sweep's plan) that its runs.csv does
    not hold: a sweep that stopped, or a refresh whose ``--redo stale`` dropped stale rows it had
    not yet rerun. Empty for a folder whose manifest records no run ids."""
    return _missing(read_manifest(folder), read_table(Path(folder) / "runs.csv"))


def _missing(man: dict, runs) -> set[str]:
    """The manifest's run ids that the runs table does not hold."""
    return set(map(str, man.get("run_ids", []))) - set(runs["run_id"].astype(str))


def stale_run_ids(folder: Path) -> set[str]:
    """Ids of the runs of ``folder`` that did not run with today's code (or recorded no
    fingerprint): what ``invoke run-sweep --redo stale`` runs again."""
    runs, todays, kinds, digests, man = _run_digests(Path(folder))
    moved = _translations(man)
    return {str(run_id) for run_id, k, d in zip(runs["run_id"], kinds, digests)
            if not d or (moved[d].digest if d in moved else d) != todays[k].digest}


def freshness(folder: Path, today: Fingerprint | None = None) -> Freshness:
    """Compare the fingerprints a folder's runs recorded with today's code's (a digest recorded
    under an earlier hash rule through its translation, where the manifest has one)."""
    runs, todays, kinds, digests, man = _run_digests(Path(folder), today)
    of_kind = dict(zip(digests, kinds))
    known = sorted({d for d in digests if d})
    table, moved = recorded_fingerprints(folder), _translations(man)
    changed: set[str] = set()
    for digest in known:
        fp, now = moved.get(digest) or table.get(digest), todays[of_kind[digest]]
        if fp is None or fp.digest == now.digest:
            continue
        against = now if fp.rule == now.rule else fingerprint(now.kind, cached=True, rule=fp.rule)
        changed.update(fp.changed(against))
    current = tuple(sorted({moved[d].digest if d in moved else d for d in known}))
    return Freshness(" and ".join(todays), ", ".join(sorted(t.digest for t in todays.values())),
                     tuple(known), sum(1 for d in digests if not d), tuple(sorted(changed)),
                     current, len(_missing(man, runs)), len(man.get("run_ids", [])))


@contextlib.contextmanager
def _tree(commit: str):
    """The project's packages at ``commit``, in a scratch folder for the ``with`` block."""
    import tarfile
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "-C", str(PROJECT), "archive", commit, *PACKAGES],
                                 capture_output=True, check=True).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tmp)   # our own commit's tree
        yield Path(tmp)


def translate(folder: Path, commits: Iterable[str] = ()) -> dict[str, str]:
    """Record in the manifest the today's-rule fingerprint of every digest the folder's runs
    recorded under an earlier rule: the rule-``RULE`` fingerprint of a commit (the runs' own, or
    one of ``commits``) whose earlier-rule digest is the recorded one, checked, so a folder stays
    fresh across a change that moved modules only. Returns {recorded: translated} for the digests
    it could translate."""
    import pandas as pd

    folder = Path(folder).resolve()
    kind = folder_kind(folder)
    runs = read_table(folder / "runs.csv")
    man = read_manifest(folder)
    done = man.setdefault("translated_fingerprints", {})
    recorded = recorded_fingerprints(folder)
    rules = {d: recorded[d].rule if d in recorded else 1
             for d in runs.get("code_fingerprint", pd.Series(dtype=str)).dropna()}
    wanted = {d for d, rule in rules.items() if d and d not in done and rule < RULE}
    candidates = list(dict.fromkeys([*runs.get("git_commit", pd.Series(dtype=str)).dropna(),
                                     *commits]))
    for commit in candidates:
        if not wanted:
            break
        if commit == "unknown":
            continue
        with _tree(commit) as tmp:
            for rule in sorted({rules[d] for d in wanted}):
                old = fingerprint(kind, tmp, rule=rule)
                if old.digest in wanted:
                    new = fingerprint(kind, tmp, rule=RULE)
                    done[old.digest] = {**new.as_dict(), "source": (
                        f"the tree of commit {commit[:12]}, whose rule-{rule} digest is "
                        f"{old.digest}, hashed by rule {RULE}")}
                    wanted.discard(old.digest)
    (folder / "manifest.json").write_text(json.dumps(man, indent=1, default=list))
    return {d: done[d]["digest"] for d in done}


def backfill(folder: Path) -> dict[str, str]:
    """Record in the manifest of a folder written before runs recorded fingerprints the
    fingerprint of the code at each commit its runs name (from git; a table without commits:
    the commit that first added it). Returns {commit: digest}. The runs' work trees may have
    differed from their commits (``git_dirty``); the manifest says so."""
    folder = Path(folder).resolve()
    kind = folder_kind(folder)
    runs = read_table(folder / "runs.csv")
    if "git_commit" in runs:
        commits = sorted(set(runs.git_commit.dropna()) - {"unknown"})
    else:
        first = subprocess.run(["git", "-C", str(PROJECT), "log", "--diff-filter=A", "--format=%H",
                                "--", str((folder / "runs.csv").relative_to(PROJECT))],
                               capture_output=True, text=True, check=True).stdout.split()
        commits = first[-1:]
    man = read_manifest(folder)
    done = man.setdefault("backfilled_fingerprints", {})
    for commit in commits:
        if commit in done:
            continue
        with _tree(commit) as tmp:
            fp = fingerprint(kind, tmp)
        done[commit] = {**fp.as_dict(), "source": f"the tree of commit {commit[:12]} (backfilled; "
                        "the runs' own work trees may have had uncommitted changes)"}
    if "git_commit" not in runs:
        man["table_commit"] = commits[0] if commits else ""
    (folder / "manifest.json").write_text(json.dumps(man, indent=1, default=list))
    return {c: done[c]["digest"] for c in commits}
