"""Job commands: train, list, show, wait, halt, resume, delete."""

from __future__ import annotations

import time
import zipfile
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text

from cli.archive import LinkLeavesFolder, iter_model_files, zip_directory
from cli.client import RETRYABLE_STATUSES, ApiError, DlaasConnectionError
from cli.context import Invocation, dlaas_command
from cli.errors import CliError, describe_api_error
from cli.logs import exit_for_outcome, stream_logs
from cli.output import (
    error_line,
    format_time,
    note,
    print_fields,
    print_json,
    print_json_line,
    print_plain,
    print_table,
    state_text,
    transfer_progress,
    warning_line,
)

JobId = Annotated[str, typer.Argument(metavar="ID", help="The job id (training-...).")]

TeamFilter = Annotated[
    str | None, typer.Option("--team", help="Only this team's jobs.", show_default=False)
]

WAIT_FINAL_STATES = frozenset({"COMPLETED", "FAILED", "HALTED"})
# The event of a committed checkpoint: one every few minutes of a long job, so `dlaas show`
# counts them rather than listing them among the changes of state and the restarts.
CHECKPOINT_EVENT = "checkpoint"


@dlaas_command
def train(
    inv: Invocation,
    manifest: Annotated[Path, typer.Argument(metavar="MANIFEST", help="The manifest.yml file.")],
    model: Annotated[
        Path | None,
        typer.Argument(
            metavar="[MODEL_DIR|ZIP]",
            help="The training code: a directory (zipped for you) or a .zip. "
            "Default: the manifest's directory.",
            show_default=False,
        ),
    ] = None,
    follow: Annotated[
        bool,
        typer.Option("--follow", "-f", help="Follow the logs; exit 1 unless the job completes."),
    ] = False,
    team: Annotated[
        str | None,
        typer.Option(
            "--team",
            help="The team the job belongs to (default: your own team).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Submit a training job and print its id."""
    manifest_path, model_path = check_train_inputs(manifest, model)
    archive, temporary = (
        (model_path, False) if model_path.is_file() else (zip_directory(model_path), True)
    )
    try:
        size = archive.stat().st_size
        client = inv.client()
        try:
            with transfer_progress(size, f"uploading {model_path.name or 'model'}") as advance:
                job = client.submit_job(manifest_path, archive, progress=advance, team=team)
        except ApiError as exc:
            raise CliError(describe_submit_error(exc, manifest_path, model_path)) from exc
    finally:
        if temporary:
            archive.unlink(missing_ok=True)
    job_id = str(job.get("id", ""))
    warn_of_manifest(job, manifest_path)
    if inv.json:
        (print_json_line if follow else print_json)(job)
    else:
        print_plain(job_id)
        if not follow:
            note(f"submitted {job_id}: follow it with `dlaas logs {job_id} --follow`")
    if follow:
        final = stream_logs(inv, job_id, follow=True, job=job)
        exit_for_outcome(inv, job_id, final)


def warn_of_manifest(job: dict[str, Any], manifest: Path) -> None:
    """The server's warnings about the manifest (a key nothing reads: most often a typo), on
    stderr, in every output mode: the job was submitted all the same."""
    warnings = job.get("warnings")
    for warning in warnings if isinstance(warnings, list) else []:
        warning_line(f"{manifest}: {warning}")


def check_train_inputs(manifest: Path, model: Path | None) -> tuple[Path, Path]:
    """Refuse unusable local arguments before any request is made."""
    if not manifest.exists():
        raise CliError(f"MANIFEST {manifest}: no such file")
    if not manifest.is_file():
        raise CliError(f"MANIFEST {manifest} is not a file: pass the manifest.yml itself")
    model_path = model if model is not None else manifest.parent
    shown = str(model) if model is not None else f"{model_path} (the manifest's directory)"
    if not model_path.exists():
        raise CliError(f"MODEL_DIR {shown}: no such file or directory")
    if model_path.is_file():
        if not zipfile.is_zipfile(model_path):
            raise CliError(
                f"MODEL_DIR|ZIP {shown} is a file but not a zip archive: "
                "pass the directory holding your training code, or a .zip of it"
            )
    else:
        try:
            files = iter_model_files(model_path)
        except LinkLeavesFolder as exc:
            raise CliError(f"MODEL_DIR {shown}: {exc}") from exc
        if not files:
            raise CliError(f"MODEL_DIR {shown} holds no files to upload")
    return manifest, model_path


def describe_submit_error(exc: ApiError, manifest: Path, model: Path) -> str:
    """A refused submission names the file at fault: the model archive or the manifest."""
    if exc.status in (401, 403) or exc.status >= 500:
        return describe_api_error(exc)
    field = exc.field or ""
    detail = exc.detail or exc.code
    if field and field not in detail:
        detail = f"{field}: {detail}"
    about_model = field == "model" or field.startswith("model.") or exc.code == "too_large"
    return f"{model.name if about_model else manifest.name}: {detail}"


@dlaas_command
def list_jobs(
    inv: Invocation,
    every: Annotated[
        bool, typer.Option("--all", help="Every job, fetched page after page.")
    ] = False,
    states: Annotated[
        list[str] | None,
        typer.Option(
            "--state",
            metavar="STATE",
            help="Only jobs in STATE (RUNNING, FAILED, ...); repeat it for several.",
            show_default=False,
        ),
    ] = None,
    limit: Annotated[
        int | None,
        typer.Option(
            "--limit",
            min=1,
            max=1000,
            help="Jobs per page (the server's default: 100).",
            show_default=False,
        ),
    ] = None,
    team: TeamFilter = None,
) -> None:
    """List your teams' jobs, newest first: the first page, or every job with --all."""
    wanted = [state.upper() for state in states or []]
    client = inv.client()
    following: str | None = None
    if every:
        jobs = client.list_jobs(states=wanted, limit=limit, team=team)
    else:
        page = client.jobs_page(states=wanted, limit=limit, team=team)
        jobs = list(page.get("jobs") or [])
        following = page.get("next") or None
    if inv.json:
        print_json({"jobs": jobs, "next": following} if not every else {"jobs": jobs})
    else:
        _print_jobs(jobs, filtered=bool(wanted))
    if following:
        note(more_jobs_hint(len(jobs), wanted))


def more_jobs_hint(shown: int, states: list[str]) -> str:
    flags = "".join(f" --state {state}" for state in states)
    return f"the newest {shown} jobs are shown; `dlaas list --all{flags}` lists every one"


def _print_jobs(jobs: list[dict[str, Any]], *, filtered: bool) -> None:
    if not jobs:
        note(
            "no jobs in those states"
            if filtered
            else "no jobs yet: submit one with `dlaas train manifest.yml MODEL_DIR`"
        )
        return
    print_table(
        ("ID", "NAME", "STATE", "LEARNERS", "CREATED", "REASON"),
        (
            (
                str(job.get("id", "")),
                str(job.get("name") or ""),
                state_text(job.get("state")),
                str(job.get("learners", "")),
                format_time(job.get("created_at")),
                str(job.get("reason") or ""),
            )
            for job in jobs
        ),
        free=("NAME", "REASON"),
    )


@dlaas_command
def show(
    inv: Invocation,
    job_id: JobId,
    events: Annotated[
        int | None,
        typer.Option(
            "--events",
            "-n",
            min=0,
            help="Only the N most recent events other than checkpoints, and the "
            "checkpoints among them (default: every event but checkpoints, which are counted).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Show a job, every change of its state and every restart, and its checkpoints."""
    client = inv.client()
    job = client.get_job(job_id)
    history = client.job_events(job_id)
    checkpoints = [e for e in history if e.get("kind") == CHECKPOINT_EVENT]
    recent = _recent(history, events)
    keep = _checkpoints_kept(job)
    summary = {
        "count": len(checkpoints),
        "kept": min(len(checkpoints), keep),
        "newest": checkpoints[-1] if checkpoints else None,
    }
    if inv.json:
        print_json({"job": job, "events": recent, "checkpoints": summary})
        return
    manifest = _mapping(job.get("manifest"))
    framework = _mapping(manifest.get("framework"))
    rows: list[tuple[str, Any]] = [
        ("id", job.get("id")),
        ("name", job.get("name")),
        ("state", state_text(job.get("state"))),
        ("reason", job.get("reason")),
        ("learners", job.get("learners")),
        ("owner", job.get("owner")),
        ("team", job.get("team")),
        ("created", format_time(job.get("created_at"))),
        ("updated", format_time(job.get("updated_at"))),
        ("framework", " ".join(str(framework.get(k, "")) for k in ("name", "version")).strip()),
        ("command", framework.get("command")),
    ]
    print_fields(
        (label, value if isinstance(value, Text) else str(value))
        for label, value in rows
        if value not in (None, "")
    )
    listed = [event for event in recent if event.get("kind") != CHECKPOINT_EVENT]
    if listed:
        print_plain("")
        print_table(
            ("TIME", "KIND", "FROM", "TO", "REASON"),
            (
                (
                    format_time(event.get("time")),
                    str(event.get("kind") or ""),
                    str(event.get("from_state") or ""),
                    str(event.get("to_state") or ""),
                    str(event.get("reason") or event.get("detail") or ""),
                )
                for event in listed
            ),
            free=("REASON",),
            title="events",
        )
    if checkpoints:
        print_plain("")
        print_plain(checkpoints_line(checkpoints, keep))


def _recent(history: list[dict[str, Any]], events: int | None) -> list[dict[str, Any]]:
    """Every event but checkpoints; or, with `events`, the events from the `events`-th most
    recent that is not a checkpoint on, checkpoints included: a checkpoint every few seconds
    does not push a restart out of sight."""
    if events is None:
        return [e for e in history if e.get("kind") != CHECKPOINT_EVENT]
    others = [i for i, e in enumerate(history) if e.get("kind") != CHECKPOINT_EVENT]
    if events == 0:
        return []
    if len(others) <= events:
        return history
    return history[others[-events] :]


def _checkpoints_kept(job: dict[str, Any]) -> int:
    """How many committed checkpoints the job keeps (`checkpoint.keep`, 2 by default)."""
    keep = _mapping(_mapping(job.get("manifest")).get("checkpoint")).get("keep", 2)
    return keep if isinstance(keep, int) and keep > 0 else 2


def checkpoints_line(checkpoints: list[dict[str, Any]], keep: int) -> str:
    """ "14 checkpoints taken, the 2 newest kept; newest ckpt-... at ...": the events of
    committed checkpoints, oldest first, in one line."""
    newest = checkpoints[-1]
    detail = _mapping(newest.get("detail"))
    name = str(detail.get("name") or "")
    count = len(checkpoints)
    what = f"{count} checkpoint{'s' if count != 1 else ''}"
    if count > keep:
        what += f" taken, the {keep} newest kept;"
    else:
        what += ","
    return f"{what} newest {name or '(unnamed)'} at {format_time(newest.get('time'))}"


@dlaas_command
def wait(
    inv: Invocation,
    job_id: JobId,
    timeout: Annotated[
        float | None, typer.Option("--timeout", min=0, help="Give up after S seconds (exit 2).")
    ] = None,
    interval: Annotated[float, typer.Option("--interval", min=0.05, help="Poll period, s.")] = 2.0,
) -> None:
    """Wait until the job is COMPLETED (exit 0), FAILED or HALTED (exit 1); 2 on timeout."""
    client = inv.client()
    deadline = None if timeout is None else time.monotonic() + timeout
    job: dict[str, Any] = {}
    lost_since: float | None = None
    while True:
        try:
            job = client.get_job(job_id)
            lost_since = None
        except (DlaasConnectionError, ApiError) as exc:
            # An API restarting (unreachable, or 502-504 behind a proxy) is waited out.
            if isinstance(exc, ApiError) and exc.status not in RETRYABLE_STATUSES:
                raise
            nothing_listens = isinstance(exc, DlaasConnectionError) and exc.refused and not job
            lost_since = lost_since or time.monotonic()
            if nothing_listens or time.monotonic() - lost_since > client.retry_for:
                raise
        state = str(job.get("state", ""))
        if state in WAIT_FINAL_STATES:
            break
        if deadline is not None and time.monotonic() >= deadline:
            if inv.json:
                print_json(job)
            error_line(
                f"timed out after {timeout:g}s waiting for {job_id} (still {state}); "
                "wait longer with --timeout"
            )
            raise typer.Exit(2)
        pause = interval if deadline is None else min(interval, deadline - time.monotonic())
        time.sleep(max(pause, 0.0))
    if inv.json:
        print_json(job)
    else:
        print_plain(f"{job_id} {state}")
    if state != "COMPLETED":
        reason = f": {job['reason']}" if job.get("reason") else ""
        error_line(f"job {job_id} ended {state}{reason}")
        raise typer.Exit(1)


@dlaas_command
def halt(inv: Invocation, job_id: JobId) -> None:
    """Stop a job, keeping its checkpoints so `dlaas resume` can continue it."""
    job = inv.client().halt_job(job_id)
    if inv.json:
        print_json(job or {"id": job_id})
    else:
        print_plain(halt_answer(job_id, job))


@dlaas_command
def resume(inv: Invocation, job_id: JobId) -> None:
    """Queue a halted job again; it restarts from its last committed checkpoint."""
    job = inv.client().resume_job(job_id)
    if inv.json:
        print_json(job or {"id": job_id})
    else:
        print_plain(resume_answer(job_id, job))


def halt_answer(job_id: str, job: dict[str, Any]) -> str:
    """What a halt did. The API answers with the job as it stands when the request is
    recorded: the lifecycle manager stops the learners afterwards, so a RUNNING job is still
    RUNNING in the answer and only stopping."""
    state = str(job.get("state") or "")
    if state == "HALTED":
        return f"{job_id} is already HALTED: continue it with `dlaas resume {job_id}`"
    was = f" (was {state})" if state else ""
    return (
        f"halt requested: {job_id} is stopping{was}; "
        f"`dlaas wait {job_id}` returns once it is HALTED"
    )


def resume_answer(job_id: str, job: dict[str, Any]) -> str:
    """What a resume did. A HALTED job is QUEUED at once in the answer; a job whose halt was
    still under way keeps the state it has, its halt called off."""
    state = str(job.get("state") or "")
    if state in ("QUEUED", ""):
        return (
            f"resume requested: {job_id} is QUEUED again and restarts from its last "
            "committed checkpoint"
        )
    return f"resume requested: {job_id} was still stopping; its halt is called off ({state})"


@dlaas_command
def delete(inv: Invocation, job_id: JobId) -> None:
    """Stop a job and delete it with its stored files."""
    body = inv.client().delete_job(job_id)
    if inv.json:
        print_json(body or {"id": job_id, "deleted": True})
    else:
        print_plain(f"deleting {job_id}")


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def register(app: typer.Typer) -> None:
    app.command("train")(train)
    app.command("list")(list_jobs)
    app.command("show")(show)
    app.command("wait")(wait)
    app.command("halt")(halt)
    app.command("resume")(resume)
    app.command("delete")(delete)
