"""How a long cluster command shows its progress on a terminal: the CLI's Reporter."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from gcpgpu.cluster.session import Reporter


class ConsoleReporter(Reporter):
    """Phases as lines on stderr, waits as a live spinner (rich) on a terminal. Elsewhere (CI, a pipe,
    nohup) a wait is a line, and what it waits on (who holds the lease, how many nodes run) a line
    when it first changes and then at most every QUIET_S seconds: never minutes of silence."""

    QUIET_S = 10.0

    def __init__(self) -> None:
        from rich.console import Console

        self.console = Console(stderr=True, highlight=False)

    # soft_wrap: a line is one line in a log or pipe (rich would break it at 80 columns there).
    def step(self, key: str, text: str) -> None:
        from rich.markup import escape

        self.console.print(f"[bold cyan]>[/] {escape(text)}", soft_wrap=True)

    def note(self, text: str) -> None:
        self.console.print(f"  {text}", soft_wrap=True, markup=False)

    @contextlib.contextmanager
    def waiting(self, text: str) -> Iterator[Any]:
        if self.console.is_terminal:
            with self.console.status(text) as status:
                yield lambda t: status.update(t)
            return
        self.note(text)
        said: dict[str, Any] = {"at": None, "text": text}

        def update(new: str) -> None:
            now = time.monotonic()
            if new != said["text"] and (said["at"] is None or now - said["at"] >= self.QUIET_S):
                self.note(new)
                said.update(at=now, text=new)

        yield update
