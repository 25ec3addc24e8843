"""Where a result came from: the machine, the code that produced it, and what else ran meanwhile.

Three records, each written with every run (``runs.csv``) and every folder (``manifest.json``):

- **The machine** (:func:`machine`): CPU model, core count, kernel, and the versions of what shapes
  a result (Python, torch, numpy, pandas, os-ken, Open vSwitch, Mininet).
- **The code fingerprint** (:func:`fingerprint`): a digest of the code that produces a kind of run's
  numbers, so a report can say "stale: code changed since" when today's code differs. The code
  of a kind (:data:`KINDS`) is the project's Python modules reachable by import from its entry
  modules (the processes on the emulated hosts, the runner that measures them, the controller
  apps), plus the C sources they load or run (the native core, the delay line, the loss program;
  the simulator for simulated runs). Reporting code is not in it: a new table or a new sentence
  changes no measured number. Each file is hashed after dropping what cannot change behaviour
  (comments, the text of docstrings, blank lines and indentation width in Python; comments and
  whitespace in C), and the digest is over the sorted file hashes, not their paths, so moving an
  unchanged file keeps it. The manifest keeps the per-file hashes, so a stale report names what changed.
- **Other load** (:class:`LoadMeter`): the CPU that processes outside the testbed used during a
  run, as a fraction of the whole machine. The testbed is this process's descendants (hosts,
  controller, fork server and its children, delay line, cross traffic) and the private Open
  vSwitch daemons; kernel threads are left out (the network's own softirq work runs there).
  A process that started and ended within the run is counted through its parent's ``cutime`` once
  reaped (a compiler under ``make``), and missed only if its parent did not reap it during the run.
  Near 0 means the run had the machine to itself.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import io
import json
import os
import platform
import re
import subprocess
import tokenize
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
PACKAGES = ("harness", "transports", "topologies")


@dataclasses.dataclass(frozen=True)
class Kind:
    """What produces the numbers of one kind of run: entry modules and non-Python sources."""

    entries: tuple[str, ...]      # dotted module names; their project imports are followed
    sources: tuple[str, ...]      # globs (relative to the project) of C sources and build files


_NATIVE = ("transports/native/include/*.h", "transports/native/src/*.[ch]",
           "transports/native/build_ffi.py")
_NETWORK = ("topologies/delay/*.c", "topologies/geloss/*.[ch]")
# The registry loads the transports by name, so no import statement leads to them.
_TRANSPORTS = ("transports.tcp", "transports.ltp", "transports.plot", "transports.filling")
# Modules whose changes cannot change a measured number, even where run code imports them:
# reporting (a package, with everything in it), the named plans (every run records its own
# spec), the command line, and this module (which only describes runs).
NOT_MEASURING = frozenset({
    "harness.reporting", "harness.p2p.report",
    "harness.simulation.figures", "harness.simulation.validate", "harness.presets", "harness.cli",
    "harness.provenance", "harness.bench", "harness.bench_node", "harness.bench_loopback",
    "harness.running.engine", "harness.running.kinds", "harness.running.ps", "harness.cluster",
    "transports.options_doc"})
KINDS: dict[str, Kind] = {
    # Training through a PS on the emulated network: the host processes, the fork server that
    # starts them, the runner and the metrics that turn their records into rows, the network and
    # its controller app (started by osken-manager, so named here).
    "ps": Kind(("harness.node", "harness.zygote", "harness.runner", "topologies.controller_app")
               + _TRANSPORTS, _NATIVE + _NETWORK),
    # Peer-to-peer training on the fabric: the peers, the round coordinator, the controller apps.
    "p2p": Kind(("harness.p2p.run", "harness.p2p.peer", "harness.p2p.coord",
                 "topologies.controller_app", "topologies.mcast_app", "transports.peer.mcast",
                 "transports.peer.tcp") + _TRANSPORTS,
                _NATIVE + _NETWORK),
    # The simulator: the same C core over a discrete-event network, and its driver.
    "simulate": Kind(("harness.simulation.driver",), _NATIVE + ("transports/native/sim/*.[ch]",)),
}


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


# ---- the code fingerprint ----------------------------------------------------------------------


def _module_path(name: str, root: Path = PROJECT) -> Path | None:
    parts = name.split(".")
    if parts[0] not in PACKAGES:
        return None
    base = root.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imports(path: Path, module: str, root: Path = PROJECT) -> set[str]:
    """The project modules ``path`` imports (every ``import`` anywhere in it, lazy ones too)."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            found.add(stem)
            found.update(f"{stem}.{alias.name}" for alias in node.names)
    out = set()
    for name in found:
        parts = name.split(".")
        # a module's parent packages run their __init__ when it is imported
        out.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return {n for n in out if _module_path(n, root) is not None}


def _not_measuring(name: str) -> bool:
    """Whether module ``name`` is, or is inside a package that is, in :data:`NOT_MEASURING`."""
    parts = name.split(".")
    return any(".".join(parts[:i]) in NOT_MEASURING for i in range(1, len(parts) + 1))


def python_closure(entries: Iterable[str], root: Path = PROJECT) -> list[Path]:
    """The project's Python files reachable by import from ``entries`` (sorted)."""
    todo, seen = list(entries), set()
    while todo:
        name = todo.pop()
        if name in seen or _not_measuring(name) or _module_path(name, root) is None:
            continue
        seen.add(name)
        todo.extend(_imports(_module_path(name, root), name, root) - seen)
    return sorted({_module_path(n, root) for n in seen})


def _python_tokens(text: str) -> str:
    """The source without comments, docstring texts, blank lines or indentation width.

    This rule is frozen: every recorded fingerprint was computed with it, and changing it makes
    every results folder stale (``tests/unit/test_provenance.py`` pins it)."""
    tree = ast.parse(text)
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                docstrings.add((body[0].lineno, body[0].col_offset))
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.ENCODING):
            continue
        if tok.type == tokenize.STRING and tok.start in docstrings:
            continue   # its statement's NEWLINE stays: adding a docstring changes the hash
        out.append({tokenize.INDENT: "<in>", tokenize.DEDENT: "<out>",
                    tokenize.NEWLINE: "<nl>"}.get(tok.type, tok.string))
    return "\x1f".join(out)


_C_TOKEN = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|/\*.*?\*/|//[^\n]*|\s+|.',
                      re.S)


def _c_tokens(text: str) -> str:
    """The source without comments, and with every run of whitespace as one space."""
    out = []
    for match in _C_TOKEN.finditer(text):
        tok = match.group(0)
        if tok.startswith(("/*", "//")) or tok.isspace():
            if out and out[-1] != " ":
                out.append(" ")
        else:
            out.append(tok)
    return "".join(out).strip()


def file_hash(path: Path) -> str:
    """The hash of what in ``path`` can change behaviour (see the module docstring)."""
    text = path.read_text(errors="replace")
    if path.suffix == ".py":
        body = _python_tokens(text)
    elif path.suffix in (".c", ".h"):
        body = _c_tokens(text)
    else:
        body = text
    return hashlib.sha256(body.encode()).hexdigest()[:16]


@dataclasses.dataclass(frozen=True)
class Fingerprint:
    """The code of one kind of run: a digest and the hash of each file (by project path)."""

    kind: str
    digest: str
    files: dict[str, str]

    def changed(self, other: Fingerprint) -> list[str]:
        """The files whose hashes differ between the two, or that only one has (sorted)."""
        names = set(self.files) | set(other.files)
        return sorted(n for n in names if self.files.get(n) != other.files.get(n))

    def as_dict(self) -> dict:
        """For the manifest."""
        return {"kind": self.kind, "digest": self.digest, "files": self.files}

    @classmethod
    def from_dict(cls, data: dict) -> Fingerprint:
        """What :meth:`as_dict` wrote."""
        return cls(data["kind"], data["digest"], dict(data["files"]))


def digest_of(hashes: Iterable[str]) -> str:
    """The digest over file hashes: their sorted list, not their paths."""
    return hashlib.sha256("\n".join(sorted(hashes)).encode()).hexdigest()[:12]


def kind_files(kind: str, root: Path = PROJECT) -> list[Path]:
    """Every file of ``kind``'s code (:data:`KINDS`) under ``root``, sorted."""
    spec = KINDS[kind]
    files = set(python_closure(spec.entries, root))
    for pattern in spec.sources:
        files.update(p for p in root.glob(pattern) if p.is_file())
    return sorted(files)


@functools.lru_cache(maxsize=None)
def _fingerprint(kind: str, root: Path) -> Fingerprint:
    files = {str(p.relative_to(root)): file_hash(p) for p in kind_files(kind, root)}
    return Fingerprint(kind, digest_of(files.values()), files)


def fingerprint(kind: str, root: Path = PROJECT, cached: bool = False) -> Fingerprint:
    """The fingerprint of the code under ``root`` (today's work tree by default) for runs of
    ``kind``; ``cached``: computed once per process (reports; a run always reads the files)."""
    if kind not in KINDS:
        raise KeyError(f"unknown kind of run {kind!r}; one of {', '.join(KINDS)}")
    if not cached:
        _fingerprint.cache_clear()
    return _fingerprint(kind, Path(root))


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


def manifest(kind: str) -> dict:
    """A manifest's provenance: git state, the machine, the command, today's code fingerprint."""
    import sys

    commit, dirty = git_state()
    return {"git_commit": commit, "git_dirty": dirty, **machine(), "host": platform.node(),
            "command": " ".join(sys.argv), "fingerprint": fingerprint(kind).as_dict()}


# ---- is a folder fresh? ------------------------------------------------------------------------


def folder_kind(folder: Path) -> str:
    """The kind of run a results folder holds: ``p2p``, ``simulate`` or ``ps``."""
    try:
        header = (Path(folder) / "runs.csv").open().readline().strip().split(",")
    except OSError:
        header = []
    if "method" in header and "policy" in header:
        return "p2p"
    if (Path(folder) / "pushes.csv").exists():
        return "simulate"
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
        if "fingerprint" in entry:
            fp = Fingerprint.from_dict(entry["fingerprint"])
            found[fp.digest] = fp
    for data in man.get("backfilled_fingerprints", {}).values():
        fp = Fingerprint.from_dict(data)
        found[fp.digest] = fp
    return found


@dataclasses.dataclass(frozen=True)
class Freshness:
    """Whether a folder's numbers were measured with today's code."""

    kind: str
    today: str                    # today's digest
    recorded: tuple[str, ...]     # the digests its runs ran with
    unknown_runs: int             # runs with no known fingerprint
    changed: tuple[str, ...]      # files that differ from today's (every recorded digest)

    @property
    def fresh(self) -> bool:
        """Every run ran with today's code."""
        return self.recorded == (self.today,) and not self.unknown_runs

    def text(self) -> str:
        """One sentence for a report."""
        if self.fresh:
            return (f"Fresh: every run ran with the code of today's fingerprint {self.today} "
                    f"({self.kind} runs; harness/provenance.py).")
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
        return f"**Stale: code changed since** ({'; '.join(parts)}{changed})."


def freshness(folder: Path, today: Fingerprint | None = None) -> Freshness:
    """Compare the fingerprints a folder's runs recorded with today's code's."""
    import pandas as pd

    folder = Path(folder)
    kind = folder_kind(folder)
    today = today or fingerprint(kind, cached=True)
    runs = pd.read_csv(folder / "runs.csv")
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
    known = sorted({d for d in digests if d})
    table = recorded_fingerprints(folder)
    changed: set[str] = set()
    for digest in known:
        if digest != today.digest and digest in table:
            changed.update(table[digest].changed(today))
    return Freshness(kind, today.digest, tuple(known), sum(1 for d in digests if not d),
                     tuple(sorted(changed)))


def backfill(folder: Path) -> dict[str, str]:
    """Record in the manifest of a folder written before runs recorded fingerprints the
    fingerprint of the code at each commit its runs name (from git; a table without commits:
    the commit that first added it). Returns {commit: digest}. The runs' work trees may have
    differed from their commits (``git_dirty``); the manifest says so."""
    import tarfile
    import tempfile

    import pandas as pd

    folder = Path(folder).resolve()
    kind = folder_kind(folder)
    runs = pd.read_csv(folder / "runs.csv")
    if "git_commit" in runs:
        commits = sorted(set(runs.git_commit.astype(str)) - {"unknown", "nan"})
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
        with tempfile.TemporaryDirectory() as tmp:
            archive = subprocess.run(["git", "-C", str(PROJECT), "archive", commit, *PACKAGES],
                                     capture_output=True, check=True).stdout
            with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
                tar.extractall(tmp)   # our own commit's tree
            fp = fingerprint(kind, Path(tmp))
        done[commit] = {**fp.as_dict(), "source": f"the tree of commit {commit[:12]} (backfilled; "
                        "the runs' own work trees may have had uncommitted changes)"}
    if "git_commit" not in runs:
        man["table_commit"] = commits[0] if commits else ""
    (folder / "manifest.json").write_text(json.dumps(man, indent=1, default=list))
    return {c: done[c]["digest"] for c in commits}
