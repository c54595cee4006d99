"""How a long cluster command shows its progress on a terminal: the CLI's Reporter."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from gcpgpu.cluster.session import Reporter


class ConsoleReporter(Reporter):
    """Phases as lines on stderr, waits as a live spinner (rich)."""

    def __init__(self) -> None:
        from rich.console import Console

        self.console = Console(stderr=True, highlight=False)

    def step(self, key: str, text: str) -> None:
        self.console.print(f"[bold cyan]>[/] {text}")

    def note(self, text: str) -> None:
        self.console.print(f"  {text}")

    @contextlib.contextmanager
    def waiting(self, text: str) -> Iterator[Any]:
        with self.console.status(text) as status:
            yield lambda t: status.update(t)
