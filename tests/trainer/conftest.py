"""Fixtures for the trainer tests: a marker for multi-process tests and a small text corpus."""

from __future__ import annotations

import random
from pathlib import Path

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "multiprocess: starts several trainer processes (gloo on CPU)")


@pytest.fixture(scope="session")
def small_text(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """About 190 kB of repetitive English-like text: a byte-level model learns it within a few dozen steps."""
    rng = random.Random(0)
    words = ("the quick brown fox jumps over the lazy dog and then runs into a forest where many "
             "tall trees grow under a bright sun while birds sing").split()
    lines = [" ".join(rng.choice(words) for _ in range(12)) for _ in range(3000)]
    path = tmp_path_factory.mktemp("data") / "small.txt"
    path.write_text("\n".join(lines) + "\n")
    return path
