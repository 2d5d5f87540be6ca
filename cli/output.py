"""How the CLI writes: JSON or Rich text to stdout, messages and progress to stderr."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table
from rich.text import Text

from cli.client import ProgressCallback

# Piped into grep or a file, a table's lines are not cut to a terminal's width.
_UNCUT_WIDTH = 1000


def stdout_console() -> Console:
    width = None if sys.stdout.isatty() else _UNCUT_WIDTH
    return Console(highlight=False, soft_wrap=True, width=width)


def stderr_console() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def print_json(value: Any) -> None:
    """One JSON document on stdout."""
    sys.stdout.write(json.dumps(value, indent=2, default=str) + "\n")
    sys.stdout.flush()


def print_json_line(value: Any) -> None:
    """One compact JSON object per line (for streams such as logs)."""
    sys.stdout.write(json.dumps(value, default=str, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def print_plain(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def error_line(message: str) -> None:
    stderr_console().print(Text(f"error: {message}", style="bold red"))


def note(message: str) -> None:
    """A human remark on stderr, so stdout stays clean for data."""
    stderr_console().print(Text(message, style="dim"))


@contextmanager
def transfer_progress(total: int, description: str) -> Iterator[ProgressCallback]:
    """A byte progress bar on stderr (only drawn on a terminal); yields the advance callback."""
    console = stderr_console()
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
        disable=not console.is_terminal,
    )
    task = progress.add_task(description, total=total)
    with progress:
        yield lambda n: progress.advance(task, n)


def _moment(value: Any) -> datetime | None:
    """A server timestamp (ISO text or unix seconds) as an aware time; None if it is not one."""
    moment: datetime | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        moment = datetime.fromtimestamp(float(value), tz=UTC)
    elif isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    if moment is not None and moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment


def format_time(value: Any) -> str:
    """A server timestamp (ISO text or unix seconds) as local `YYYY-MM-DD HH:MM:SS`."""
    if value is None or value == "":
        return "-"
    moment = _moment(value)
    if moment is None:
        return str(value)
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def format_from_now(value: Any, now: datetime | None = None) -> str:
    """A server timestamp as how far ahead it is: "in 45s", "in 5m", "in 2h 10m", "in 3d 4h";
    "now" once it has passed; "-" for none."""
    moment = _moment(value)
    if moment is None:
        return "-"
    seconds = int((moment - (now or datetime.now(UTC))).total_seconds())
    if seconds <= 0:
        return "now"
    if seconds < 60:
        return f"in {seconds}s"
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86_400
    if hours == 0:
        return f"in {minutes}m"
    if days == 0:
        return f"in {hours}h {minutes % 60}m" if minutes % 60 else f"in {hours}h"
    return f"in {days}d {hours % 24}h" if hours % 24 else f"in {days}d"


def format_size(size: Any) -> str:
    if not isinstance(size, int | float):
        return "-"
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def format_number(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value) if value is not None else "-"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


STATE_STYLES = {
    "COMPLETED": "green",
    "FAILED": "red",
    "DELETED": "dim",
    "HALTED": "yellow",
    "RUNNING": "cyan",
    "RECOVERING": "magenta",
    "RESCALING": "magenta",
}


def state_text(state: Any) -> Text:
    text = str(state or "-")
    return Text(text, style=STATE_STYLES.get(text, ""))


def print_table(
    columns: Sequence[str], rows: Iterable[Sequence[str | Text]], wrap: Sequence[str] = ()
) -> None:
    """A plain table on stdout, in the style of `dlaas list`. Only the `wrap` columns
    (free text such as a reason) wrap in a narrow terminal; the others, ids among them,
    are shown whole."""
    listed = list(rows)
    table = Table(box=None, header_style="bold")
    for i, column in enumerate(columns):
        if column in wrap:
            table.add_column(column, overflow="fold", min_width=min(len(column), 12))
            continue
        widest = max((_cells(row[i]) for row in listed), default=0)
        table.add_column(column, no_wrap=True, min_width=max(widest, len(column)))
    for row in listed:
        table.add_row(*row)
    stdout_console().print(table)


def _cells(cell: str | Text) -> int:
    return (cell if isinstance(cell, Text) else Text(cell)).cell_len
