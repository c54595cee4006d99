"""The README and gcpgpu/data/differences.md point at things that exist: linked files, and every
test named as proof of a "fixed" line (a renamed or deleted test makes the claim stale)."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DIFFERENCES = ROOT / "gcpgpu" / "data" / "differences.md"


def _test_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}


def test_readme_links_point_at_files_that_exist() -> None:
    text = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)#:]+)\)", text)
    assert "gcpgpu/data/differences.md" in links
    missing = [link for link in links if not (ROOT / link).exists()]
    assert missing == []


def test_every_test_named_in_differences_exists() -> None:
    text = DIFFERENCES.read_text()
    cited: list[tuple[str, str]] = []
    current = ""
    # `FILE.py::test_x` names a file; a bare `::test_y` that follows means the same file.
    for file_part, name in re.findall(r"`([\w/]+\.py)?::(test_\w+)`", text):
        current = file_part or current
        assert current, f"::{name} names no file before it"
        cited.append((current, name))
    assert len(cited) >= 20
    missing = [f"{f}::{n}" for f, n in cited if n not in _test_names(ROOT / "tests" / f)]
    assert missing == []
