"""The code fingerprint: a digest of the code that produces a kind of run's numbers.

A report says "stale: code changed since" when today's code differs from the code its runs recorded
(:mod:`harness.running.provenance` compares them). The code of a kind (:data:`KINDS`) is the
project's Python modules reachable by import from its entry modules (the processes on the emulated
hosts, the runner that measures them, the controller apps), plus the C sources they load or run
(the native core, the delay line, the loss program; the simulator for simulated runs). Reporting
code is not in it (:data:`NOT_MEASURING`): a new table or a new sentence changes no measured
number.

Each file is hashed after dropping what cannot change behaviour, by a numbered rule:

- **Rule 1** (every fingerprint recorded before the harness was split into sub-packages): comments,
  the text of docstrings, blank lines and indentation width in Python; comments and whitespace in C.
- **Rule 2** (today's): rule 1, and also *where a module lives*. A module keeps the dotted name it
  had when rule 2 began (its *canonical* name, :data:`MOVES`): its import statements are hashed as
  the sorted set of what they bind under canonical names (so moving a module, or the order its
  importers' lines take after the move, changes no hash); a moved module's name inside a string
  (``"python -m harness.hosts.node"``, ``"harness/hosts/ps.py"``) counts as its canonical name; an
  expression that climbs from ``__file__`` to the project root (``Path(__file__).parents[2]`` two
  folders down) counts as the root; a package ``__init__`` with nothing but its docstring is left
  out. A move hides no other token. Where an import sits in a file (top or inside a function) is
  not hashed.

The digest is over the sorted file hashes, not their paths. A folder measured under rule 1 is
compared through a translation its manifest records (:func:`harness.running.provenance.translate`):
the rule-2 fingerprint of a commit whose rule-1 digest is the one its runs recorded.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import io
import re
import tokenize
from collections.abc import Iterable
from pathlib import Path

from harness.hosts.pattern import parse_pattern

PROJECT = Path(__file__).resolve().parents[2]
PACKAGES = ("harness", "transports", "topologies")
RULE = 2


@dataclasses.dataclass(frozen=True)
class Kind:
    """What produces the numbers of one kind of run: entry modules and non-Python sources."""

    entries: tuple[str, ...]      # dotted module names; their project imports are followed
    sources: tuple[str, ...]      # globs (relative to the project) of C sources and build files


_NATIVE = ("transports/native/include/*.h", "transports/native/src/*.[ch]",
           "transports/native/build_ffi.py")
_NETWORK = ("topologies/impair/delay/*.c", "topologies/impair/geloss/*.[ch]")
# The registry loads the transports by name, so no import statement leads to them.
_TRANSPORTS = ("transports.tcp", "transports.ltp", "transports.plot", "transports.filling",
               "transports.mlt", "transports.phase", "transports.optireduce")
# The node loads a collective pattern's module by name too (harness.hosts.pattern).
_COLLECTIVES = ("harness.hosts.tree", "harness.hosts.ring")
# Training on the incast star: the host processes, the fork server that starts them, the runner
# and the metrics that turn their records into rows, the network and its controller app (started
# by osken-manager, so named here).
_PS = ("harness.hosts.node", "harness.hosts.zygote", "harness.running.runner",
       "topologies.controller.controller_app") + _TRANSPORTS
# Modules whose changes cannot change a measured number, even where run code imports them:
# reporting (a package, with everything in it), the named plans (every run records its own
# spec), the command line, the sweep loop, benchmarks, and provenance (which only describes runs).
NOT_MEASURING = frozenset({
    "harness.reporting", "harness.p2p.report",
    "harness.simulation.figures", "harness.simulation.validate", "harness.running.presets",
    "harness.cli", "harness.running.provenance", "harness.running.fingerprint",
    "harness.bench.run", "harness.bench.series", "harness.bench.kind", "harness.bench.figures",
    "harness.hosts.bench",
    "harness.running.engine", "harness.running.kinds", "harness.running.ps",
    "harness.running.cluster", "harness.running.refresh", "transports.options_doc"})
KINDS: dict[str, Kind] = {
    # Training through a PS on the emulated network.
    "ps": Kind(_PS, _NATIVE + _NETWORK),
    # Training through a collective pattern (a tree, a ring) on the emulated network: the same,
    # and the patterns' host processes. A PS folder's runs each record the kind of their pattern
    # (:func:`run_kind`), so work on the collectives leaves the ``ps`` pattern's folders fresh.
    "collective": Kind(_PS + _COLLECTIVES, _NATIVE + _NETWORK),
    # Peer-to-peer training on the fabric: the peers, the round coordinator, the controller apps.
    "p2p": Kind(("harness.p2p.run", "harness.p2p.peer", "harness.p2p.coord",
                 "topologies.controller.controller_app", "topologies.controller.mcast_app",
                 "transports.peer.mcast", "transports.peer.tcp") + _TRANSPORTS,
                _NATIVE + _NETWORK),
    # The simulator: the same C core over a discrete-event network, and its driver.
    "simulate": Kind(("harness.simulation.driver",), _NATIVE + ("transports/native/sim/*.[ch]",)),
    # Loopback pushes (invoke bench-transport): the transports and the core, timed in one process.
    "loopback": Kind(("harness.bench.loopback",) + _TRANSPORTS, _NATIVE),
}


def run_kind(pattern: str) -> str:
    """The kind of a training run through the PS's network with communication ``pattern``."""
    return "ps" if parse_pattern(pattern).kind == "ps" else "collective"


# Where modules moved since rule 2 began: today's dotted name -> the canonical one. A package's
# entry moves everything under it (C sources in its folder too).
MOVES: dict[str, str] = {
    **{f"harness.training.{m}": f"harness.{m}" for m in
       ("models", "datasets", "aggregators", "byzantine", "compress")},
    **{f"harness.hosts.{m}": f"harness.{m}" for m in
       ("node", "ps", "sync", "faults", "zygote", "robust")},
    **{f"harness.running.{m}": f"harness.{m}" for m in
       ("spec", "presets", "runner", "runfiles", "results", "provenance", "cluster", "metrics")},
    "harness.bench.run": "harness.bench", "harness.hosts.bench": "harness.bench_node",
    "harness.bench.loopback": "harness.bench_loopback",
    **{f"topologies.testbed.{m}": f"topologies.{m}" for m in
       ("network", "ovs", "process", "ledger", "counters")},
    "topologies.impair.loss": "topologies.impair",
    **{f"topologies.impair.{m}": f"topologies.{m}" for m in ("delay", "geloss", "cross", "onoff")},
    **{f"topologies.controller.{m}": f"topologies.{m}" for m in
       ("controller_app", "mcast_app", "mcast_plan", "linkview", "selmcast", "control",
        "multicast")},
}


# ---- names -------------------------------------------------------------------------------------


def canonical(name: str) -> str:
    """The canonical dotted name of module (or attribute path) ``name`` (:data:`MOVES`)."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        head = ".".join(parts[:i])
        if head in MOVES:
            return ".".join([MOVES[head], *parts[i:]])
    return name


def canonical_path(rel: str) -> str:
    """The canonical project path of file ``rel`` (a path under a moved module's folder moves)."""
    for new, old in sorted(MOVES.items(), key=lambda kv: -len(kv[0])):
        stem, base = new.replace(".", "/"), old.replace(".", "/")
        if rel == f"{stem}.py":
            return f"{base}.py"
        if rel.startswith(f"{stem}/"):
            return base + rel[len(stem):]
    return rel


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


@functools.lru_cache(maxsize=None)
def _canonical_not_measuring() -> frozenset[str]:
    return frozenset(canonical(n) for n in NOT_MEASURING)


def _not_measuring(name: str) -> bool:
    """Whether module ``name`` is, or is inside a package that is, in :data:`NOT_MEASURING`
    (compared by canonical names, so the rule reads a tree from before a move the same way)."""
    def under(dotted: str, names: frozenset[str]) -> bool:
        parts = dotted.split(".")
        return any(".".join(parts[:i]) in names for i in range(1, len(parts) + 1))

    return under(name, NOT_MEASURING) or under(canonical(name), _canonical_not_measuring())


def _entry(name: str, root: Path) -> str:
    """An entry module as ``root`` names it: today's name, or its canonical one in an older tree."""
    return name if _module_path(name, root) is not None else canonical(name)


def python_closure(entries: Iterable[str], root: Path = PROJECT) -> list[Path]:
    """The project's Python files reachable by import from ``entries`` (sorted)."""
    todo, seen = [_entry(e, root) for e in entries], set()
    while todo:
        name = todo.pop()
        if name in seen or _not_measuring(name) or _module_path(name, root) is None:
            continue
        seen.add(name)
        todo.extend(_imports(_module_path(name, root), name, root) - seen)
    return sorted({_module_path(n, root) for n in seen})


# ---- the hash rules ----------------------------------------------------------------------------


def _docstrings(tree: ast.AST) -> set[tuple[int, int]]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                found.add((body[0].lineno, body[0].col_offset))
    return found


_SHOWN = {tokenize.INDENT: "<in>", tokenize.DEDENT: "<out>", tokenize.NEWLINE: "<nl>"}


def _python_tokens(text: str) -> str:
    """Rule 1: the source without comments, docstring texts, blank lines or indentation width.

    Frozen: fingerprints recorded before rule 2 were computed with it
    (``tests/unit/test_provenance.py`` pins it)."""
    docstrings = _docstrings(ast.parse(text))
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.ENCODING):
            continue
        if tok.type == tokenize.STRING and tok.start in docstrings:
            continue   # its statement's NEWLINE stays: adding a docstring changes the hash
        out.append(_SHOWN.get(tok.type, tok.string))
    return "\x1f".join(out)


def _bindings(node: ast.Import | ast.ImportFrom) -> list[str]:
    """What one import statement binds, under canonical names."""
    if isinstance(node, ast.Import):
        return [f"import {canonical(a.name)} as {a.asname or ''}" for a in node.names]
    if node.level:   # relative: kept as written (the project writes none)
        return [f"from {'.' * node.level}{node.module or ''} import {a.name} as {a.asname or ''}"
                for a in node.names]
    out = []
    for a in node.names:
        base, _, name = canonical(f"{node.module}.{a.name}").rpartition(".")
        out.append(f"from {base} import {name} as {a.asname or a.name}")
    return out


def _canonical_text(text: str) -> str:
    """A string token with every moved module's name (dotted, or as a path) canonical."""
    pattern, table = _pattern(tuple(sorted(MOVES.items())))
    return pattern.sub(lambda m: table[m.group(0)], text)


@functools.lru_cache(maxsize=4)
def _pattern(moves: tuple[tuple[str, str], ...]) -> tuple[re.Pattern, dict[str, str]]:
    table = {}
    for new, old in moves:
        table[new] = old
        table[new.replace(".", "/")] = old.replace(".", "/")
    names = sorted(table, key=len, reverse=True)
    return (re.compile(r"(?<![\w./])(" + "|".join(re.escape(n) for n in names) + r")(?!\w)"),
            table)


def _root_climbs(out: list[str], depth: int) -> list[str]:
    """``Path(__file__)[.resolve()]`` climbed by ``.parent`` repeated, or by ``.parents[N]``, to
    the project root (``depth`` levels: the file's path components) as one token ``<project>``."""
    i = 0
    while i < len(out):
        if out[i:i + 4] != ["Path", "(", "__file__", ")"]:
            i += 1
            continue
        j = i + 4
        if out[j:j + 4] == [".", "resolve", "(", ")"]:
            j += 4
        climbs = 0
        while out[j:j + 2] == [".", "parent"]:
            climbs, j = climbs + 1, j + 2
        if not climbs and out[j:j + 3] == [".", "parents", "["] and out[j + 3:j + 5][1:] == ["]"] \
                and out[j + 3].isdigit():
            climbs, j = int(out[j + 3]) + 1, j + 5
        if climbs == depth:
            out[i:j] = ["<project>"]
        i += 1
    return out


def _python_tokens_2(text: str, depth: int = 0) -> str | None:
    """Rule 2 (see the module docstring); None for a module with nothing but its docstring.
    ``depth``: the file's number of path components under the project (0: not known)."""
    tree = ast.parse(text)
    docstrings = _docstrings(tree)
    spans, bound = [], []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            spans.append(((node.lineno, node.col_offset), (node.end_lineno, node.end_col_offset)))
            bound.extend(_bindings(node))
    ends = {end for _, end in spans}
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.ENCODING):
            continue
        if tok.type == tokenize.STRING and tok.start in docstrings:
            continue
        if tok.type not in (tokenize.INDENT, tokenize.DEDENT) and (
                any(a <= tok.start < b for a, b in spans)
                or tok.type == tokenize.NEWLINE and tok.start in ends):
            continue
        shown = _SHOWN.get(tok.type, tok.string)
        if tok.type == tokenize.STRING and MOVES:
            shown = _canonical_text(shown)
        out.append(shown)
    if depth:
        out = _root_climbs(out, depth)
    code = [t for t in out if t not in ("<nl>", "")]
    if not code and not bound:
        return None
    return "\x1f".join(out) + "\x1e" + "\x1f".join(sorted(bound))


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


def file_hash(path: Path, rule: int = RULE, rel: str = "") -> str | None:
    """The hash of what in ``path`` (the project's ``rel``, where known) can change behaviour, by
    ``rule`` (see the module docstring); None where rule 2 leaves the file out."""
    text = path.read_text(errors="replace")
    if path.suffix == ".py":
        body = _python_tokens(text) if rule == 1 else \
            _python_tokens_2(text, len(Path(rel).parts) if rel else 0)
        if body is None:
            return None
    elif path.suffix in (".c", ".h"):
        body = _c_tokens(text)
    else:
        body = text
    return hashlib.sha256(body.encode()).hexdigest()[:16]


# ---- fingerprints ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Fingerprint:
    """The code of one kind of run: a digest and the hash of each file (by its path then)."""

    kind: str
    digest: str
    files: dict[str, str]
    rule: int = 1

    def changed(self, other: Fingerprint) -> list[str]:
        """The files whose hashes differ between the two, or that only one has (sorted; a file
        that moved is matched by its canonical path and named as ``other`` names it)."""
        mine = {canonical_path(n): h for n, h in self.files.items()}
        theirs = {canonical_path(n): (n, h) for n, h in other.files.items()}
        out = {theirs[c][0] for c in theirs if mine.get(c) != theirs[c][1]}
        return sorted(out | {n for n, h in self.files.items() if canonical_path(n) not in theirs})

    def as_dict(self) -> dict:
        """For the manifest."""
        return {"kind": self.kind, "digest": self.digest, "files": self.files, "rule": self.rule}

    @classmethod
    def from_dict(cls, data: dict) -> Fingerprint:
        """What :meth:`as_dict` wrote (no ``rule``: rule 1)."""
        return cls(data["kind"], data["digest"], dict(data["files"]), int(data.get("rule", 1)))


def digest_of(hashes: Iterable[str]) -> str:
    """The digest over file hashes: their sorted list, not their paths."""
    return hashlib.sha256("\n".join(sorted(hashes)).encode()).hexdigest()[:12]


def kind_files(kind: str, root: Path = PROJECT) -> list[Path]:
    """Every file of ``kind``'s code (:data:`KINDS`) under ``root``, sorted."""
    spec = KINDS[kind]
    files = set(python_closure(spec.entries, root))
    for pattern in spec.sources:
        found = [p for p in root.glob(pattern) if p.is_file()]
        if not found:   # an older tree: the folder's canonical place
            found = [p for p in root.glob(canonical_path(pattern)) if p.is_file()]
        files.update(found)
    return sorted(files)


@functools.lru_cache(maxsize=None)
def _fingerprint(kind: str, root: Path, rule: int) -> Fingerprint:
    files = {}
    for path in kind_files(kind, root):
        rel = str(path.relative_to(root))
        digest = file_hash(path, rule, rel)
        if digest is not None:
            files[rel] = digest
    return Fingerprint(kind, digest_of(files.values()), files, rule)


def fingerprint(kind: str, root: Path = PROJECT, cached: bool = False,
                rule: int = RULE) -> Fingerprint:
    """The fingerprint of the code under ``root`` (today's work tree by default) for runs of
    ``kind``; ``cached``: computed once per process (reports; a run always reads the files)."""
    if kind not in KINDS:
        raise KeyError(f"unknown kind of run {kind!r}; one of {', '.join(KINDS)}")
    if not cached:
        _fingerprint.cache_clear()
    return _fingerprint(kind, Path(root), rule)
