"""Every package's __init__ docstring is its index: it names each of its modules (and subpackages).

A reader who opens a folder of gcpgpu reads its __init__ first; a module the index does not name is one
nobody finds without reading them all (issue 48: fakes/jobs/ had grown to 22 modules while its docstring
named 6). So for every folder under gcpgpu/ with an __init__.py, each module's file stem (`runner` for
runner.py, `__main__` for __main__.py) and each subpackage's name must appear in the docstring as a word
of its own (`runner`, `runner.py` or `host/`, not `runners` or `forked_helpers`). The line beside it that
says what the module holds is for reviewers to read; this checks that no module is left out.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "gcpgpu"

def _packages() -> list[Path]:
    return sorted(p.parent for p in PACKAGE.rglob("__init__.py") if "__pycache__" not in p.parts)


def members(package: Path) -> list[str]:
    """The names a package's index must hold: its modules' stems and its subpackages' names."""
    out = [p.stem for p in package.glob("*.py") if p.name != "__init__.py"]
    out += [p.name for p in package.iterdir() if p.is_dir() and (p / "__init__.py").is_file()]
    return sorted(out)


def unnamed(docstring: str, names: list[str]) -> list[str]:
    """The names `docstring` does not mention as words of their own (`runner`, `runner.py`, `host/`)."""
    return [n for n in names if not re.search(rf"(?<!\w){re.escape(n)}(?!\w)", docstring)]


def _rel(package: Path) -> str:
    return package.relative_to(ROOT).as_posix()


@pytest.mark.parametrize("package", _packages(), ids=_rel)
def test_the_init_docstring_names_each_module(package):
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    missing = unnamed(doc, members(package))
    assert not missing, (f"{_rel(package)}/__init__.py's docstring does not name {', '.join(missing)}: "
                         "give each module one line on what it holds")


def test_the_check_sees_a_missing_module_and_a_word_inside_another():
    doc = "runner.py  starts processes.\nsandbox/   the bubblewrap room.\nthe supervisors keep them."
    assert unnamed(doc, ["runner", "sandbox", "supervisor", "forked"]) == ["supervisor", "forked"]
    assert unnamed("the forked_helpers and runners", ["forked", "runner"]) == ["forked", "runner"]
