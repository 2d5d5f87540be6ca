"""Job outputs: `dlaas metrics` and `dlaas download`."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Annotated, Any

import typer
from rich.table import Table

from cli.context import Invocation, dlaas_command
from cli.errors import CliError
from cli.output import (
    format_number,
    format_size,
    format_time,
    note,
    print_json,
    print_plain,
    stdout_console,
    transfer_progress,
)

JobId = Annotated[str, typer.Argument(metavar="ID", help="The job id (training-...).")]


@dlaas_command
def metrics(
    inv: Invocation,
    job_id: JobId,
    tail: Annotated[
        int, typer.Option("--tail", "-n", min=0, help="Only the last N records (0: all).")
    ] = 0,
) -> None:
    """Show the metrics a job's learners reported."""
    records = inv.client().job_metrics(job_id)
    if tail:
        records = records[-tail:]
    if inv.json:
        print_json({"metrics": records})
        return
    if not records:
        note(f"job {job_id} has reported no metrics yet")
        return
    names: list[str] = []
    for record in records:
        reported = record.get("values")
        for name in reported if isinstance(reported, dict) else {}:
            if name not in names:
                names.append(name)
    table = Table(box=None, header_style="bold")
    for column in ("LEARNER", "STEP", "TIME", *names):
        table.add_column(column, justify="right" if column != "TIME" else "left")
    for record in records:
        raw = record.get("values")
        values: dict[str, Any] = raw if isinstance(raw, dict) else {}
        table.add_row(
            str(record.get("learner", "")),
            format_number(record.get("step")),
            format_time(record.get("time")),
            *(format_number(values.get(name)) if name in values else "" for name in names),
        )
    stdout_console().print(table)


def safe_target(dest: Path, path: str) -> Path:
    """Where result `path` goes under `dest`; `CliError` if it would land outside `dest`."""
    refusal = CliError(
        f"refusing to download {path!r}: it would be written outside {dest}; "
        "the server sent an unsafe path"
    )
    if not path or "\\" in path or "\0" in path:
        raise refusal
    pure = PurePosixPath(path)
    if pure.is_absolute() or ".." in pure.parts or (pure.parts and ":" in pure.parts[0]):
        raise refusal
    root = dest.resolve()
    target = (root / pure).resolve()
    if target == root or not target.is_relative_to(root):
        raise refusal
    return target


@dlaas_command
def download(
    inv: Invocation,
    job_id: JobId,
    dest: Annotated[
        Path | None,
        typer.Option(
            "--dest", "-d", help="Directory to write into (default ./<ID>).", show_default=False
        ),
    ] = None,
) -> None:
    """Download a job's results into DEST, keeping their paths."""
    client = inv.client()
    files = client.job_results(job_id)
    root = dest if dest is not None else Path(job_id)
    if root.exists() and not root.is_dir():
        raise CliError(f"--dest {root} exists and is not a directory")
    plan: list[tuple[str, Path, int]] = []
    for item in files:
        path = str(item.get("path", ""))
        plan.append((path, safe_target(root, path), _size(item)))
    done: list[dict[str, Any]] = []
    if plan:
        root.mkdir(parents=True, exist_ok=True)
        total = sum(size for _, _, size in plan)
        with transfer_progress(total, f"downloading {job_id}") as advance:
            for path, target, _ in plan:
                written = client.download_result(job_id, path, target, progress=advance)
                done.append({"path": path, "size": written, "local_path": str(target)})
    if inv.json:
        print_json({"job": job_id, "dest": str(root.resolve()), "files": done})
        return
    if not done:
        note(f"job {job_id} has no results yet")
        return
    for item in done:
        print_plain(f"{item['local_path']}  ({format_size(item['size'])})")


def _size(item: dict[str, Any]) -> int:
    size = item.get("size")
    return size if isinstance(size, int) and size >= 0 else 0


def register(app: typer.Typer) -> None:
    app.command("metrics")(metrics)
    app.command("download")(download)
