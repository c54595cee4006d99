"""The emulator's layers import one way: server.py builds the backends and the jobs; none of those
imports server.py, not even for type hints (an import circle makes any of them fragile to load alone)."""

from __future__ import annotations

import ast
from pathlib import Path

import gcpgpu.fakes

FAKES = Path(gcpgpu.fakes.__file__).parent


def _imports(path: Path) -> set[str]:
    """Every module a file imports (relative imports resolved), type-checking-only ones included."""
    package = "gcpgpu." + ".".join(path.relative_to(FAKES.parent).with_suffix("").parts[:-1])
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(p for p in (base, node.module or "") if p)
            out.add(module)
            out.update(f"{module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
    return out


def test_jobs_and_compute_never_import_the_server():
    for folder in ("jobs", "compute"):
        for path in sorted((FAKES / folder).glob("*.py")):
            assert "gcpgpu.fakes.server" not in _imports(path), f"{path.name} imports gcpgpu.fakes.server"


def test_the_check_sees_an_import_of_the_server():
    # The server itself imports jobs: the resolver must see it, or the test above could never fail.
    assert "gcpgpu.fakes.jobs" in _imports(FAKES / "server.py")
    assert "gcpgpu.fakes.server" in _imports(FAKES / "pytest_plugin.py")


def test_jobs_load_on_their_own():
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", "import gcpgpu.fakes.jobs.agent, gcpgpu.fakes.jobs.cloud_logging, sys;"
                           "assert 'gcpgpu.fakes.server' not in sys.modules"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
