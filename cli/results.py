"""Job outputs: `dlaas metrics` and `dlaas download`."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

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
from cli.terminal_text import visible

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
        # the program names its metrics: neither Rich markup nor terminal controls
        table.add_column(Text(visible(column)), justify="right" if column != "TIME" else "left")
    for record in records:
        raw = record.get("values")
        values: dict[str, Any] = raw if isinstance(raw, dict) else {}
        table.add_row(
            str(record.get("learner", "")),
            format_number(record.get("step")),
            format_time(record.get("time")),
            *(
                Text(visible(format_number(values.get(name)))) if name in values else ""
                for name in names
            ),
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
    force: Annotated[
        bool, typer.Option("--force", help="Replace files that already exist under DEST.")
    ] = False,
) -> None:
    """Download a job's results into DEST, keeping their paths.

    A FAILED job's results are those its learners stored before it failed, if any; the
    command then exits 1, as the job did not complete."""
    root = dest if dest is not None else Path(job_id)
    named = f"--dest {root}" if dest is not None else f"the default destination ./{root}"
    check_dest(root, named)
    client = inv.client()
    job = client.get_job(job_id)
    files = client.job_results(job_id)
    plan: list[tuple[str, Path, int]] = []
    for item in files:
        path = str(item.get("path", ""))
        plan.append((path, safe_target(root, path), _size(item)))
    check_targets(root, [target for _, target, _ in plan], force=force)
    done: list[dict[str, Any]] = []
    if plan:
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CliError(
                f"{named}: cannot create it ({exc.strerror}); pass --dest a directory "
                "you may write to"
            ) from exc
        total = sum(size for _, _, size in plan)
        with transfer_progress(total, f"downloading {job_id}") as advance:
            for path, target, _ in plan:
                written = client.download_result(job_id, path, target, progress=advance)
                done.append({"path": path, "size": written, "local_path": str(target)})
    if inv.json:
        print_json({"job": job_id, "dest": str(root.resolve()), "files": done})
    else:
        for item in done:
            print_plain(f"{item['local_path']}  ({format_size(item['size'])})")
    state = str(job.get("state") or "")
    said = results_note(job_id, state, str(job.get("reason") or ""), len(done))
    if state == "FAILED":
        raise CliError(said)
    if said:
        note(said)


def results_note(job_id: str, state: str, reason: str, count: int) -> str:
    """What to say about `count` results downloaded of a job in `state` ("" if nothing)."""
    why = f" ({reason})" if reason else ""
    if state == "FAILED":
        if count:
            return (
                f"job {job_id} FAILED{why}: the {count} file(s) above are what it stored "
                f"before it failed; see why with `dlaas logs {job_id}`"
            )
        return f"job {job_id} FAILED{why} and stored no results; see why with `dlaas logs {job_id}`"
    if state == "COMPLETED":
        return (
            ""
            if count
            else f"job {job_id} COMPLETED without results: its program wrote nothing to RESULT_DIR"
        )
    if state == "HALTED":
        then = f"`dlaas resume {job_id}` continues it"
    else:
        then = f"`dlaas wait {job_id}`, then download again, for all of them"
    if count:
        return f"job {job_id} is {state}: these are the results stored so far; {then}"
    return f"job {job_id} is {state} and has no results yet; {then}"


def check_dest(root: Path, named: str) -> None:
    """Refuse a destination that is, or lies below, a file: before any request is made."""
    for place in (root, *root.parents):
        if place.exists() or place.is_symlink():
            if place.is_dir():
                return
            where = "is a file" if place == root else f"lies below {place}, which is a file"
            raise CliError(f"{named} {where}, not a directory; pass --dest a directory")


def check_targets(root: Path, targets: list[Path], *, force: bool) -> None:
    """Refuse results that would replace a file under `root` unless `force`, and any whose
    folder is a file there; before anything is downloaded."""
    real_root = root.resolve()
    present: list[Path] = []
    for target in targets:
        for folder in reversed(target.parents):
            if folder.is_relative_to(real_root) and folder.exists() and not folder.is_dir():
                raise CliError(
                    f"cannot download {target}: {folder} is a file where the results have "
                    "a folder; move it away or pass another --dest"
                )
        if target.is_dir():
            raise CliError(
                f"cannot download {target}: a directory of that name is in the way; "
                "move it away or pass another --dest"
            )
        if target.exists() and not force:
            present.append(target)
    if present:
        more = f" (and {len(present) - 1} more)" if len(present) > 1 else ""
        raise CliError(
            f"refusing to overwrite {present[0]}{more}: pass --force to replace "
            "existing files, or another --dest"
        )


def _size(item: dict[str, Any]) -> int:
    size = item.get("size")
    return size if isinstance(size, int) and size >= 0 else 0


def register(app: typer.Typer) -> None:
    app.command("metrics")(metrics)
    app.command("download")(download)
