"""The house's shape (shared/ARCHITECTURE.md), kept by reading every module's imports with ast.

Data flows down: cli -> cluster / jobs / metrics -> gcp. The emulator (fakes/) and the trainer are
rooms of their own. Imports inside functions count: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "gcpgpu"
MAX_LINES = 500

# Room -> rooms it must never import (a room is gcpgpu.<first part>).
FORBIDDEN = {
    "gcp": {"cluster", "jobs", "metrics", "cli", "fakes", "trainer", "container", "demo"},
    "cluster": {"jobs", "metrics", "cli", "fakes", "container", "demo"},
    "jobs": {"metrics", "cli", "fakes", "demo"},
    "metrics": {"cli", "fakes", "demo"},
    "trainer": {"gcp", "cluster", "jobs", "metrics", "cli", "fakes", "container", "demo"},
}
# What fakes/ may import of the rest is kept by tests/fakes/test_layering.py.


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Every gcpgpu module `path` imports, at any depth (relative imports resolved)."""
    tree = ast.parse(path.read_text(), str(path))
    here = _module_name(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("gcpgpu"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            if not base.startswith("gcpgpu"):
                continue
            for alias in node.names:  # `from gcpgpu.x import y` may name a module y
                candidate = f"{base}.{alias.name}"
                out.add(candidate if _exists(candidate) else base)
    return {m for m in out if _exists(m)}


def _exists(module: str) -> bool:
    path = ROOT.joinpath(*module.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _graph() -> dict[str, set[str]]:
    return {_module_name(p): _imports(p) for p in sorted(PACKAGE.rglob("*.py"))}


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_no_import_cycle_among_gcpgpus_modules():
    graph = _graph()
    # Tarjan's strongly connected components: any component of two or more modules is a cycle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w == v or w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in graph:
        if module not in index:
            visit(module)
    # A package's __init__ importing its own submodules (and them importing a name from it) is how a
    # package re-exports; only cycles between distinct modules outside that count.
    assert cycles == [], f"import cycles: {cycles}"


def test_no_room_imports_a_room_above_it():
    wrong = [f"{m} imports {d}" for m, deps in _graph().items() for d in sorted(deps)
             if _room(d) in FORBIDDEN.get(_room(m), set())]
    assert wrong == []


def test_nothing_but_the_cli_the_demo_and_tests_reaches_the_emulator():
    allowed = {"fakes", "cli", "demo"}
    wrong = [f"{m} imports {d}" for m, deps in _graph().items() if _room(m) not in allowed for d in sorted(deps)
             if _room(d) == "fakes"]
    assert wrong == []


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_over_500_lines(path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(ROOT)} has {lines} lines: split it along what it holds"


def test_the_checker_sees_a_lazy_import_and_a_relative_one(tmp_path):
    """The walker must see imports inside functions and resolve `from ..x import y`, or the tests above
    would pass on any tree."""
    deps = _imports(PACKAGE / "cluster" / "doctor.py")
    assert "gcpgpu.cluster.observe" in deps  # imported inside check()
    assert "gcpgpu.gcp.operations" in deps
