"""The emulator's layers import one way.

fakes/ imports nothing of the tool above it: only gcpgpu.fakes.* and gcpgpu.trainer.argv (the
trainer's command-line contract, stdlib only), so the emulator can never come to depend on what it
emulates for. Inside fakes/, server.py builds the backends and the jobs; none of those imports
server.py, not even for type hints (an import circle makes any of them fragile to load alone).

The rooms that run things stack one way too (ROOMS_BELOW): host/ (the machine: processes, sandbox,
folders, ports, the per-VM supervisor) knows nothing of what runs on it; guest/ (what each VM runs and
reports) uses the host but not the jobs; jobs/ (the job agent, the Slurm job engine) uses both. The
service rooms read them, never the other way: compute/ serves the guests' reports without knowing the
jobs, logging/ serves what the runner captured.

The backends are wired one way, in the emulator's constructor: each gets what it needs of the others
as constructor arguments, and reads them through public methods only; nobody patches an attribute
onto another part later, probes it with getattr, or reads its private state.
"""

from __future__ import annotations

import ast
from pathlib import Path

import gcpgpu.fakes

FAKES = Path(gcpgpu.fakes.__file__).parent
ALLOWED_OUTSIDE = ("gcpgpu.trainer.argv",)
# What the emulator's parts are called wherever one holds another (Emulator's attributes, constructor arguments).
PARTS = {"compute", "vertex", "jobs", "logging", "monitoring", "cloudbuild", "activity", "events", "clock", "faults", "agent",
         "runner", "storage", "world", "emulator", "emu", "fault_clock", "requests", "ids", "backend"}


def _imported(source: str, package: str) -> list[tuple[int, str, list[str]]]:
    """(line, module, names) for every import in `source`, anywhere in it (inside functions and
    type-checking blocks too), relative imports resolved against `package`; names is [] for `import M`."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(p for p in (base, node.module or "") if p)
            out.append((node.lineno, module, [alias.name for alias in node.names]))
        elif isinstance(node, ast.Import):
            out.extend((node.lineno, alias.name, []) for alias in node.names)
    return out


def _package(path: Path) -> str:
    return "gcpgpu." + ".".join(path.relative_to(FAKES.parent).with_suffix("").parts[:-1])


def _imports(path: Path) -> set[str]:
    """Every module a file imports; `from M import N` counts as M and M.N."""
    out = set()
    for _, module, names in _imported(path.read_text(), _package(path)):
        out.add(module)
        out.update(f"{module}.{name}" for name in names)
    return out


def _may_import(module: str) -> bool:
    outside = module == "gcpgpu" or module.startswith("gcpgpu.")
    inside = module == "gcpgpu.fakes" or module.startswith("gcpgpu.fakes.")
    return not outside or inside or module in ALLOWED_OUTSIDE


def _outside_fakes(source: str, package: str) -> list[tuple[int, str]]:
    """(line, module) for each import of gcpgpu outside gcpgpu.fakes and the allowed modules."""
    bad = []
    for line, module, names in _imported(source, package):
        # `from gcpgpu.trainer import argv` imports the allowed module by another spelling.
        if not (_may_import(module) or (names and all(_may_import(f"{module}.{n}") for n in names))):
            bad.append((line, module))
    return bad


def test_fakes_import_nothing_of_the_tool():
    bad = []
    for path in sorted(FAKES.rglob("*.py")):
        for line, module in _outside_fakes(path.read_text(), _package(path)):
            bad.append(f"{path.relative_to(FAKES.parent.parent)}:{line} imports {module}")
    assert not bad, "fakes/ may import only gcpgpu.fakes.* and gcpgpu.trainer.argv:\n" + "\n".join(bad)


def test_the_check_sees_imports_anywhere_and_allows_only_the_trainer_contract():
    source = (
        "import json\n"
        "from gcpgpu.trainer.argv import log_json_path\n"
        "from gcpgpu.trainer import argv\n"
        "from ..core import Clock\n"
        "def f():\n"
        "    from gcpgpu.node.launch import METRICS_OFF\n"
        "    from ...trainer import dist\n"
        "    import gcpgpu.node.reporter\n"
    )
    assert _outside_fakes(source, "gcpgpu.fakes.jobs") == [
        (6, "gcpgpu.node.launch"), (7, "gcpgpu.trainer"), (8, "gcpgpu.node.reporter")]


def _crossings(source: str) -> list[tuple[int, str]]:
    """(line, code) where one part of the emulator reaches into another instead of using its public methods:
    `compute._lock`, `getattr(emulator, "vertex", None)`, `self.jobs.agent.storage = ...`."""

    def part(node: ast.AST) -> bool:
        name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
        return name in PARTS

    bad = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            if part(node.value):
                bad.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args:
            if node.func.id in ("getattr", "hasattr", "setattr") and part(node.args[0]):
                bad.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            # Setting an attribute on a part someone holds (self.jobs.agent.storage = ...), or on the
            # emulator itself; a part just made here (`faults = cls(...)`) is the maker's to fill.
            bad.extend((node.lineno, ast.unparse(t)) for t in targets if isinstance(t, ast.Attribute) and (
                (isinstance(t.value, ast.Attribute) and part(t.value))
                or (isinstance(t.value, ast.Name) and t.value.id in ("emulator", "emu"))))
    return bad


def test_backends_reach_each_other_only_through_public_methods():
    bad = [f"{path.relative_to(FAKES.parent.parent)}:{line}: {code}"
           for path in sorted(FAKES.rglob("*.py")) for line, code in _crossings(path.read_text())]
    assert not bad, "wire it in the emulator's constructor and read it through a public method:\n" + "\n".join(bad)


def test_the_wiring_check_sees_each_way_of_reaching_in():
    source = (
        "self.clock._offset = 0.0\n"
        "vertex = getattr(self.emulator, 'vertex', None)\n"
        "self.runner.sidecar = self.reporter_argv\n"
        "emulator.monitoring = backend\n"
        "with compute._lock:\n    pass\n"
        "self.runner.start(run_id, replicas)\n"  # a public method: fine
        "self._lock = None\n"  # its own state: fine
        "faults = Faults()\nfaults.preemptions += extra\n"  # filling in what it just made: fine
    )
    assert sorted(line for line, _ in _crossings(source)) == [1, 1, 2, 3, 4, 5]


def test_jobs_and_compute_never_import_the_server():
    for folder in ("jobs", "compute", "host", "guest", "logging"):
        for path in sorted((FAKES / folder).glob("*.py")):
            assert "gcpgpu.fakes.server" not in _imports(path), f"{path.name} imports gcpgpu.fakes.server"


# Room -> the rooms of fakes/ it must never import, at any depth (type hints included).
ROOMS_BELOW = {
    "host": {"guest", "jobs", "logging", "vertex", "server"},
    "guest": {"jobs", "logging", "vertex", "server"},
    "jobs": {"logging", "vertex", "server"},
    "compute": {"jobs", "logging", "vertex", "server"},
    "logging": {"guest", "jobs", "vertex", "server"},
}


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["gcpgpu", "fakes"] else ""


def _reaching_up(source: str, package: str) -> list[tuple[int, str]]:
    """(line, module) for each import in `source` (of a module in `package`) of a room its room must not import."""
    below = ROOMS_BELOW.get(_room(package + ".x"), set())
    bad = []
    for line, module, names in _imported(source, package):
        reached = [module] if _room(module) else [f"{module}.{n}" for n in names]  # `from .. import jobs`
        bad.extend((line, m) for m in reached if _room(m) in below)
    return bad


def test_the_rooms_that_run_things_import_one_way():
    bad = [f"{path.relative_to(FAKES.parent.parent)}:{line} imports {module}"
           for room in ROOMS_BELOW for path in sorted((FAKES / room).rglob("*.py"))
           for line, module in _reaching_up(path.read_text(), _package(path))]
    assert not bad, "host <- guest <- jobs, and the services read them, never the other way:\n" + "\n".join(bad)


def test_the_room_check_sees_an_import_up():
    assert all((FAKES / room / "__init__.py").is_file() for room in ROOMS_BELOW)
    source = (
        "from .runner import Runner\n"
        "from ..compute.backend import ComputeBackend\n"
        "from .. import jobs\n"
        "def f():\n"
        "    from ..guest.slurm import SlurmNodes\n"
        "    from gcpgpu.fakes.server import Emulator\n"
    )
    assert _reaching_up(source, "gcpgpu.fakes.host") == [
        (3, "gcpgpu.fakes.jobs"), (5, "gcpgpu.fakes.guest.slurm"), (6, "gcpgpu.fakes.server")]
    assert _reaching_up(source, "gcpgpu.fakes.jobs") == [(6, "gcpgpu.fakes.server")]


def test_the_check_sees_an_import_of_the_server():
    # The server itself imports jobs: the resolver must see it, or the test above could never fail.
    assert "gcpgpu.fakes.jobs" in _imports(FAKES / "server.py")
    assert "gcpgpu.fakes.server" in _imports(FAKES / "pytest_plugin.py")


def test_jobs_load_on_their_own():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", "import gcpgpu.fakes.jobs.agent, gcpgpu.fakes.logging.rest, sys;"
                           "assert 'gcpgpu.fakes.server' not in sys.modules"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
