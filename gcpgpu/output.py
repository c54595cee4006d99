"""Printing results: a table for people, JSON or YAML for programs, chosen by --format.

Results go to stdout; progress and info go to stderr, so `gcpgpu ... --format json | jq` works.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import io
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import PurePath
from typing import IO, Any, Literal

import click


@dataclasses.dataclass(frozen=True)
class Column:
    """How one field shows in a table; JSON and YAML always carry every field."""

    key: str  # dots reach into nested dicts: "gpu.model"
    header: str | None = None  # default: the key in capitals, "gpu_count" -> "GPU COUNT"
    justify: Literal["left", "center", "right"] = "left"
    format: Callable[[Any], str] | None = None  # for the table cell only; None shows as "-"
    wrap: int | None = None  # a long cell (a status sentence) wraps at this many characters, not widening the table

    @property
    def title(self) -> str:
        return (
            self.header if self.header is not None else self.key.rsplit(".", 1)[-1].replace("_", " ").upper()
        )


# A column is given as a Column, a key ("gpu_count") or a (key, header) pair.
ColumnSpec = Column | str | tuple[str, str]


def emit(
    data: Any,
    columns: Sequence[ColumnSpec] | None = None,
    *,
    fmt: str | None = None,
    title: str | None = None,
    caption: str | None = None,
    empty: str = "Nothing to show.",
    file: IO[str] | None = None,
    max_width: int | None = None,
) -> None:
    """Print a list of records, or one record, as a table, JSON or YAML (fmt defaults to --format).

    Records are dicts or dataclasses. Columns pick and label the table's fields (default: the
    first record's keys); JSON and YAML print every field. A single record shows as a
    two-column FIELD/VALUE table. An empty list prints `empty` to stderr in table format.
    max_width: when stdout is not a terminal, fold the table's cells to this many columns instead of
    printing it at its natural width.
    """
    fmt = fmt or current_format()
    plain = to_plain(data)
    out = file if file is not None else sys.stdout  # looked up now: CliRunner swaps it
    if fmt == "json":
        out.write(json.dumps(plain, indent=2, default=str) + "\n")
        return
    if fmt == "yaml":
        import yaml  # only paid for by --format yaml

        out.write(yaml.safe_dump(plain, sort_keys=False, default_flow_style=False, allow_unicode=True))
        return
    if fmt != "table":
        raise ValueError(f"unknown output format {fmt!r}")

    if isinstance(plain, Mapping):
        _print_record(plain, _columns(columns, [plain]), out, title, caption)
    else:
        rows = list(plain)
        if not rows:
            info(empty)
            return
        _print_table(rows, _columns(columns, rows), out, title, caption, max_width)


def info(message: str) -> None:
    """A progress or info line for people, on stderr so it never mixes into results."""
    click.echo(message, err=True)


def to_plain(value: Any) -> Any:
    """Dataclasses, enums, dates and paths turned into JSON/YAML-safe dicts, lists and scalars."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_plain(v) for v in value]
    if isinstance(value, enum.Enum):
        return to_plain(value.value)
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    if isinstance(value, PurePath):
        return str(value)
    return value


def footnote_sources(rows: Sequence[Mapping[str, Any]], key: str = "details",
                     width: int = 120) -> tuple[list[dict[str, Any]], str | None]:
    """Rows whose `key` cites "source: ..." inline, with each citation replaced by a [n] marker, and the
    numbered list of those sources (wrapped to `width`) for a table's caption; (rows, None) if none.

    A citation runs to the parenthesis that encloses it (sources may hold parentheses of their own)
    or to the end of the text. For tables only: JSON and YAML keep the rows as they are.
    """
    import textwrap

    notes: dict[str, int] = {}
    out = []
    for row in rows:
        text = row.get(key)
        if not isinstance(text, str):
            out.append(dict(row))
            continue
        while (start := text.find("source: ")) >= 0:
            depth, end = 0, len(text)
            for i in range(start, len(text)):
                depth += {"(": 1, ")": -1}.get(text[i], 0)
                if depth < 0:
                    end = i
                    break
            number = notes.setdefault(text[start + len("source: "):end].strip(), len(notes) + 1)
            if text[:start].endswith("(") and end < len(text):  # "(source: X)" -> "[n]"
                text = f"{text[:start - 1]}[{number}]{text[end + 1:]}"
            else:  # "..., source: X)" -> "... [n])"
                head = text[:start].rstrip("; ,")
                text = f"{head} [{number}]{text[end:]}"
        out.append({**row, key: text})
    if not notes:
        return out, None
    lines = ["Sources:"]
    for source, number in notes.items():
        lines += textwrap.wrap(source, width=width, initial_indent=f"[{number}] ",
                               subsequent_indent=" " * (len(str(number)) + 3), break_on_hyphens=False)
    return out, "\n".join(lines)


def current_format() -> str:
    """The --format of the running command, or "table" outside one."""
    ctx = click.get_current_context(silent=True)
    settings = ctx.find_root().obj if ctx is not None else None
    return getattr(settings, "format", None) or "table"


def _columns(specs: Sequence[ColumnSpec] | None, rows: list[Any]) -> list[Column]:
    if specs is None:
        keys: dict[str, None] = {}
        for row in rows:
            keys.update(dict.fromkeys(row))  # union of keys, in first-seen order
        return [Column(key) for key in keys]
    return [
        spec if isinstance(spec, Column) else Column(*spec) if isinstance(spec, tuple) else Column(spec)
        for spec in specs
    ]


def _lookup(row: Mapping[str, Any], key: str) -> Any:
    value: Any = row
    for part in key.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(part)
    return value


def _cell(column: Column, row: Mapping[str, Any]) -> Any:
    from rich.text import Text

    value = _lookup(row, column.key)
    if column.format is not None and value is not None:
        shown = column.format(value)
    elif value is None or (isinstance(value, (str, list, tuple, Mapping)) and not value):
        shown = "-"
    elif isinstance(value, bool):
        shown = "yes" if value else "no"
    elif isinstance(value, (list, tuple)):
        shown = ", ".join(str(v) for v in value)
    elif isinstance(value, Mapping):
        shown = ", ".join(f"{k}={v}" for k, v in value.items())
    else:
        shown = str(value)
    # Text, not str: a value like "[default]" must not be read as rich markup.
    return Text(shown)


def _render(out: IO[str], table: Any, max_width: int | None = None) -> None:
    from rich.console import Console

    if getattr(out, "isatty", lambda: False)():
        Console(file=out, highlight=False).print(table)
        return
    # Piped: the table's natural width instead of rich's 80-column guess, and no trailing
    # blanks from cell padding, so `grep`, `awk` and diffs see clean lines.
    buffer = io.StringIO()
    Console(file=buffer, width=max_width or 10_000, highlight=False, color_system=None).print(table)
    out.write("".join(line.rstrip() + "\n" for line in buffer.getvalue().splitlines()))


def _print_table(
    rows: list[Mapping[str, Any]], columns: list[Column], out: IO[str], title: str | None, caption: str | None,
    max_width: int | None = None,
) -> None:
    from rich import box
    from rich.table import Table

    table = Table(
        title=title, caption=caption, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
        title_justify="left", caption_justify="left",
    )  # fmt: skip
    for column in columns:
        # Folded to a width, a long word (an image name) breaks across lines instead of losing its end.
        table.add_column(column.title, justify=column.justify, no_wrap=False, max_width=column.wrap,
                         overflow="fold" if max_width or column.wrap else "ellipsis")
    for row in rows:
        table.add_row(*(_cell(column, row) for column in columns))
    _render(out, table, max_width)


def _print_record(
    record: Mapping[str, Any], columns: list[Column], out: IO[str], title: str | None, caption: str | None
) -> None:
    from rich.table import Table

    table = Table(
        title=title, caption=caption, box=None, show_header=False, pad_edge=False,
        title_justify="left", caption_justify="left",
    )  # fmt: skip
    table.add_column("FIELD", style="bold")
    table.add_column("VALUE")
    for column in columns:
        table.add_row(column.title, _cell(column, record))
    _render(out, table)
