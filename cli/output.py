"""How the CLI writes: JSON or Rich text to stdout, messages and progress to stderr."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, Literal

from rich.cells import cell_len
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
from cli.terminal_text import visible

# Tables printed when stdout is not a terminal (piped, redirected) fit this many columns
# unless COLUMNS says otherwise, as `ls` and `ps` do.
PLAIN_WIDTH = 80

# On a terminal a free-text column narrower than this is cut, not wrapped: a few letters
# a line, a row would run down the screen.
WRAP_AT_LEAST = 16

# Set by `--wide` for the command it runs with (see `cli.context.dlaas_command`).
_whole_cells: ContextVar[bool] = ContextVar("dlaas_whole_cells", default=False)


@contextmanager
def whole_cells(on: bool) -> Iterator[None]:
    """While inside, tables show every cell whole however long the lines get (`--wide`)."""
    token = _whole_cells.set(on)
    try:
        yield
    finally:
        _whole_cells.reset(token)


def plain_width() -> int:
    """The width tables fit when stdout is not a terminal: COLUMNS, else 80."""
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) > 0 else PLAIN_WIDTH


def stdout_console(width: int | None = None) -> Console:
    """A console on stdout: the terminal's width, `plain_width()` when not a terminal,
    `width` when given. Text is never wrapped by it (`soft_wrap`); tables fit its width."""
    if width is None and not sys.stdout.isatty():
        width = plain_width()
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
    sys.stdout.write(visible(line) + "\n")
    sys.stdout.flush()


def stdout_closed() -> None:
    """After the reader of stdout went away (`dlaas logs JOB | head`): point stdout at
    /dev/null, so nothing written later, the interpreter's last flush included, fails."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def error_line(message: str) -> None:
    stderr_console().print(Text(f"error: {visible(message)}", style="bold red"))


def warning_line(message: str) -> None:
    """Something the user should fix though nothing failed, on stderr."""
    stderr_console().print(Text(f"warning: {visible(message)}", style="yellow"))


def note(message: str) -> None:
    """A human remark on stderr, so stdout stays clean for data."""
    stderr_console().print(Text(visible(message), style="dim"))


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
    """Bytes in binary units: "512 B", "3.0 MiB", "23.5 GiB", "1.5 TiB"; "-" for none."""
    if isinstance(size, bool) or not isinstance(size, int | float):
        return "-"
    value = float(size)
    units = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
    for unit in units:
        if abs(value) < 1024 or unit == units[-1]:
            break
        value /= 1024
    return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"


def format_seconds(value: float | None) -> str:
    """A short span: "50 us", "12.5 ms", "1.25 s", else as `format_duration`."""
    if value is None:
        return "-"
    for scale, unit in ((1e6, "us"), (1e3, "ms")):
        if value * scale < 999.5:  # what .3g shows as at most 999
            return f"{value * scale:.3g} {unit}"
    if value < 59.5:
        return f"{value:.3g} s"
    return format_duration(value)


def format_duration(value: float | None) -> str:
    """A long span: "5.39 s", "12m 30s", "2h 05m", "3d 4h"; "-" for none."""
    if value is None:
        return "-"
    if value < 59.5:
        return format_seconds(value)
    seconds = round(value)
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86_400
    if hours == 0:
        return f"{minutes}m {seconds % 60:02d}s"
    if days == 0:
        return f"{hours}h {minutes % 60:02d}m"
    return f"{days}d {hours % 24}h"


def format_field(key: str, value: Any) -> tuple[str, str] | None:
    """A response field that holds a size or a span, as `(label, text)` in human units:
    `memory_bytes` -> ("memory", "23.5 GiB"), `memory_bytes_used` -> ("memory_used", ...),
    `elapsed_s`/`elapsed_seconds` -> ("elapsed", "12m 30s"); None for any other field.
    (`--output json` keeps the numbers as the server sent them.)"""
    if isinstance(value, bool) or not isinstance(value, int | float | None):
        return None
    parts = key.split("_")
    for unit, shown in (
        ("bytes", format_size),
        ("s", format_duration),
        ("seconds", format_duration),
    ):
        if unit in parts[1:]:
            parts.remove(unit)
            return "_".join(parts), shown(value)
    return None


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
    columns: Sequence[str],
    rows: Iterable[Sequence[str | Text]],
    free: Sequence[str] = (),
    *,
    right: Sequence[str] = (),
    title: str | None = None,
) -> None:
    """A plain table on stdout, in the style of `dlaas list`.

    The `free` columns (free text such as a name or a reason) give way so that the table
    fits the terminal: on a terminal they wrap where they have room for a readable line
    (`WRAP_AT_LEAST`), else they are cut with "…"; piped or redirected, each row stays on
    one line, cut at `plain_width()`. The other columns, ids
    and numbers among them, are always shown whole, even when that makes a line longer.
    `--wide` (`whole_cells`) shows every cell whole. The `right` columns are right-aligned.
    """
    table = Table(box=None, header_style="bold", title=title, title_justify="left")
    at = {name: i for i, name in enumerate(columns)}
    _print_fitted(
        table,
        columns,
        list(rows),
        free={at[name] for name in free},
        right={at[name] for name in right},
    )


def print_fields(fields: Iterable[tuple[str, str | Text]]) -> None:
    """`label  value` lines, as `dlaas show` begins; long values give way as a table's
    free text does (`print_table`)."""
    rows = [(Text(label, style="bold"), value) for label, value in fields]
    _print_fitted(Table.grid(padding=(0, 2)), ("", ""), rows, free={1}, right=set())


def fit_free_columns(
    natural: Sequence[int], free: Iterable[int], room: int, minimum: Sequence[int]
) -> dict[int, int]:
    """Widths for the `free` columns that together take at most `room` cells: their
    natural widths when they fit, else even shares of the room, where a column narrower
    than its share keeps its width and leaves the rest to the others. No column goes
    under its `minimum` (then they take more than `room`)."""
    widths: dict[int, int] = {}
    pending = sorted(free, key=lambda i: natural[i])
    left = max(room, 0)
    while pending and natural[pending[0]] <= left // len(pending):
        first = pending.pop(0)
        widths[first] = natural[first]
        left -= natural[first]
    for n, i in enumerate(pending):
        share = left // len(pending) + (1 if n < left % len(pending) else 0)
        widths[i] = max(minimum[i], share)
    return widths


def _print_fitted(
    table: Table,
    headers: Sequence[str],
    rows: Sequence[Sequence[str | Text]],
    *,
    free: set[int],
    right: set[int],
) -> None:
    natural = [
        max([_cells(header) if table.show_header else 0, *(_cells(row[i]) for row in rows)])
        for i, header in enumerate(headers)
    ]
    console = stdout_console()
    whole = _whole_cells.get()
    limits: dict[int, int] = {}
    if not whole:
        fixed = sum(width for i, width in enumerate(natural) if i not in free)
        room = console.width - fixed - _padding(table, len(headers))
        minimum = [min(width, max(len(headers[i]), 6)) for i, width in enumerate(natural)]
        limits = fit_free_columns(natural, free, room, minimum)
    for i, header in enumerate(headers):
        justify: Literal["left", "right"] = "right" if i in right else "left"
        if i in limits:
            wrap = console.is_terminal and limits[i] >= WRAP_AT_LEAST
            table.add_column(
                header,
                justify=justify,
                max_width=limits[i],
                no_wrap=not wrap,
                overflow="fold" if wrap else "ellipsis",
            )
        else:
            table.add_column(header, justify=justify, no_wrap=True, min_width=natural[i])
    for row in rows:
        # A cell is text as it is: a name such as "[wip] resnet" is not Rich markup.
        table.add_row(*(Text(visible(cell)) if isinstance(cell, str) else cell for cell in row))
    shown = [limits.get(i, width) for i, width in enumerate(natural)]
    needed = sum(shown) + _padding(table, len(headers))
    if needed > console.width:
        # Wider than the terminal only to show ids and numbers whole (or with --wide).
        console = stdout_console(width=needed)
    if console.is_terminal:
        console.print(table)
        return
    # In a file or a pipe, no line ends in the blanks that pad its cells.
    with console.capture() as captured:
        console.print(table)
    sys.stdout.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))
    sys.stdout.flush()


def _padding(table: Table, count: int) -> int:
    """The cells a borderless table spends on padding around `count` columns."""
    _, right, _, left = table.padding
    edges = 0 if table.pad_edge else left + right
    return max((left + right) * count - edges, 0)


def _cells(cell: str | Text) -> int:
    plain = cell.plain if isinstance(cell, Text) else cell
    return max((cell_len(line) for line in plain.split("\n")), default=0)
