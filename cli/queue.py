"""`dlaas queue`: the waiting jobs in the order they will start, and why each waits."""

from __future__ import annotations

from typing import Any

import typer

from cli.context import Invocation, dlaas_command
from cli.jobs import TeamFilter
from cli.output import format_from_now, format_time, note, print_json, print_table


@dlaas_command
def queue(
    inv: Invocation,
    team: TeamFilter = None,
) -> None:
    """List your teams' waiting jobs, next to start first, with why each waits."""
    view = inv.client().queue(team=team)
    if inv.json:
        print_json(view)
        return
    jobs: list[dict[str, Any]] = view["jobs"]
    if view["at"] is None:
        note("no queue yet: the scheduler has not published one")
        return
    if not jobs:
        note(f"no jobs waiting (queue as of {format_time(view['at'])})")
        return
    print_table(
        ("POSITION", "JOB", "NAME", "TEAM", "WAITING FOR", "ESTIMATED START"),
        (
            (
                str(job.get("position", "")),
                str(job.get("id", "")),
                str(job.get("name") or ""),
                str(job.get("team") or ""),
                str(job.get("reason") or ""),
                format_from_now(job.get("estimated_start")),
            )
            for job in jobs
        ),
        free=("NAME", "WAITING FOR"),
    )
    note(f"queue as of {format_time(view['at'])}")


def register(app: typer.Typer) -> None:
    app.command("queue")(queue)
