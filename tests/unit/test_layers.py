"""The layers of docs/architecture.md hold: a module imports only from its own layer or below.

Lazy imports (inside functions) count too. The order, top to bottom, is the drawing's.
"""

import ast
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[2]
LAYERS = [   # top first; a module belongs to the longest prefix that names it
    ("harness.cli",),
    ("harness.running.engine", "harness.running.kinds", "harness.running.ps",
     "harness.running.cluster", "harness.running.refresh", "harness.p2p.run", "harness.bench",
     "harness.simulation.kind", "harness.simulation.validate"),
    ("harness.reporting", "harness.p2p.report", "harness.simulation.figures",
     "harness.bench.figures", "harness.bench.names"),
    ("harness.running", "harness.p2p", "harness.simulation"),
    ("harness.hosts",),
    ("harness.running.spec", "harness.running.runfiles", "harness.running.keys",
     "harness.hosts.sync", "harness.hosts.faults", "harness.hosts.pattern"),
    ("harness.training",),
    ("topologies.testbed",),
    ("topologies.controller",),
    ("topologies.impair",),
    ("topologies",),
    ("transports",),
]


def _layer(module: str) -> int | None:
    found = [(len(p), rank) for rank, prefixes in enumerate(LAYERS) for p in prefixes
             if module == p or module.startswith(p + ".")]
    return max(found)[1] if found else None


def _modules():
    for package in ("harness", "topologies", "transports"):
        for path in sorted((PROJECT / package).rglob("*.py")):
            rel = path.relative_to(PROJECT).with_suffix("")
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            yield ".".join(parts), path


def _imported(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return {n for n in found if n.split(".")[0] in ("harness", "topologies", "transports")}


def test_every_module_imports_only_its_layer_or_below():
    upward = []
    for module, path in _modules():
        mine = _layer(module)
        for name in _imported(path):
            theirs = _layer(name)
            if mine is not None and theirs is not None and theirs < mine:
                upward.append(f"{module} -> {name}")
    assert not upward, f"imports that go up a layer: {sorted(upward)}"


@pytest.mark.parametrize("package", ["harness", "topologies"])
def test_a_package_has_about_eight_entries_each_with_a_docstring(package):
    entries = [p for p in (PROJECT / package).iterdir() if p.name != "__pycache__"]
    assert len(entries) <= 9, sorted(p.name for p in entries)
    for sub in (p for p in entries if p.is_dir() and (p / "__init__.py").exists()):
        doc = ast.get_docstring(ast.parse((sub / "__init__.py").read_text()))
        assert doc and len(doc) > 40, f"{sub} says nothing about what it holds"
