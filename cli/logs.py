"""`dlaas logs`: print a job's log lines, optionally following them live."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from typing import Annotated, Any

import typer
from rich.live import Live
from rich.text import Text

from cli.client import DlaasClient
from cli.context import Invocation, dlaas_command
from cli.errors import CliError
from cli.metric_lines import is_metric_line
from cli.output import (
    STATE_STYLES,
    error_line,
    format_number,
    note,
    print_json_line,
    print_plain,
    stdout_console,
)
from cli.terminal_text import visible


def format_line(event: dict[str, Any], prefixed: bool) -> str:
    text = visible(str(event.get("line", "")))
    learner = event.get("learner")
    if prefixed and learner is not None:
        return f"[{learner}] {text}"
    return text


def stream_logs(
    inv: Invocation,
    job_id: str,
    *,
    follow: bool,
    learner: int | None = None,
    job: dict[str, Any] | None = None,
    raw: bool = False,
) -> str | None:
    """Print the job's logs; return the final state when the stream said so.

    As text, the SDK's metric lines are left out unless `raw` (`dlaas metrics` shows them);
    as JSON, every line is there, as the server sent it."""
    client = inv.client()
    if job is None:
        job = client.get_job(job_id)
    learners = _int(job.get("learners"), 1)
    if learner is not None and not 1 <= learner <= learners:
        raise CliError(f"--learner {learner}: job {job_id} has learners 1..{learners}")
    prefixed = learner is None and learners > 1
    notices = Notices()
    events = client.iter_log_events(
        job_id, follow=follow, learner=learner, on_reconnect=notices.reconnecting
    )
    if inv.json:
        final: str | None = None
        for event in events:
            print_json_line(event)
            if event.get("event") == "end":
                final = _state(event)
        return final
    hidden = HiddenMetrics(enabled=not raw)
    if follow and sys.stdout.isatty():
        final = _follow_live(inv, job_id, job, hidden.filter(events), prefixed, notices)
    else:
        final = _print_plain(hidden.filter(events), prefixed)
    if hidden.count:
        note(
            f"{hidden.count} metric line(s) left out: `dlaas metrics {job_id}` shows them, "
            f"`dlaas logs {job_id} --raw` prints them here"
        )
    return final


class HiddenMetrics:
    """Leaves the SDK's metric lines out of a log stream, counting them."""

    def __init__(self, *, enabled: bool) -> None:
        self.enabled = enabled
        self.count = 0

    def filter(self, events: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for event in events:
            if (
                self.enabled
                and event.get("event") == "line"
                and is_metric_line(str(event.get("line", "")))
            ):
                self.count += 1
                continue
            yield event


class Notices:
    """Remarks made while following: on stderr, or above the live status line when shown."""

    def __init__(self) -> None:
        self.live: Live | None = None

    def reconnecting(self, reason: str) -> None:
        message = f"log stream interrupted ({reason}); reconnecting"
        if self.live is not None:
            self.live.console.print(Text(message, style="dim"), soft_wrap=True)
        else:
            note(message)


def _print_plain(events: Iterator[dict[str, Any]], prefixed: bool) -> str | None:
    for event in events:
        if event.get("event") == "line":
            print_plain(format_line(event, prefixed))
        elif event.get("event") == "end":
            return _state(event)
    return None


def _follow_live(
    inv: Invocation,
    job_id: str,
    job: dict[str, Any],
    events: Iterator[dict[str, Any]],
    prefixed: bool,
    notices: Notices,
) -> str | None:
    status = JobStatus(job_id, str(job.get("state", "")))
    poller = StatusPoller(inv, status)
    console = stdout_console()
    poller.start()
    final: str | None = None
    try:
        with Live(
            get_renderable=status.render,
            console=console,
            refresh_per_second=4,
            transient=True,
            redirect_stdout=False,
            redirect_stderr=False,
        ) as live:
            notices.live = live
            for event in events:
                if event.get("event") == "line":
                    live.console.print(Text(format_line(event, prefixed)), soft_wrap=True)
                elif event.get("event") == "end":
                    final = _state(event)
                    status.state = final or status.state
                    break
    finally:
        notices.live = None
        poller.stop()
    console.print(status.render())
    return final


class JobStatus:
    """The bottom status line of a followed job: state, step, latest metric values."""

    def __init__(self, job_id: str, state: str) -> None:
        self.job_id = job_id
        self.state = state
        self.step: Any = None
        self.values: dict[str, Any] = {}
        self.lock = threading.Lock()

    def update(self, state: str | None, metric: dict[str, Any] | None) -> None:
        with self.lock:
            if state:
                self.state = state
            if metric:
                self.step = metric.get("step", self.step)
                values = metric.get("values")
                if isinstance(values, dict):
                    self.values = values

    def render(self) -> Text:
        with self.lock:
            text = Text.assemble(
                ("● ", STATE_STYLES.get(self.state, "bold")),
                (self.job_id, "bold"),
                " ",
                (self.state or "?", STATE_STYLES.get(self.state, "")),
            )
            if self.step is not None:
                text.append(f"  step {self.step}")
            for name, value in list(self.values.items())[:6]:
                text.append(visible(f"  {name}={format_number(value)}"), style="dim")
        return text


class StatusPoller:
    """Refreshes a `JobStatus` from the API on a background thread; errors are ignored."""

    def __init__(self, inv: Invocation, status: JobStatus, interval: float = 2.0) -> None:
        self._inv = inv
        self._status = status
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dlaas-status", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        try:
            client = DlaasClient(*self._inv.connection(), timeout=10.0)
        except Exception:
            return
        with client:
            polls = 0
            while not self._stop.wait(self._interval if polls else 0.1):
                polls += 1
                state: str | None = None
                metric: dict[str, Any] | None = None
                try:
                    state = str(client.get_job(self._status.job_id).get("state") or "")
                    if polls % 3 == 1:
                        metrics = client.job_metrics(self._status.job_id, last=1)
                        metric = metrics[-1] if metrics else None
                except Exception:
                    continue
                self._status.update(state, metric)


def _state(event: dict[str, Any]) -> str | None:
    state = event.get("state")
    return str(state) if state else None


def _int(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


@dlaas_command
def logs(
    inv: Invocation,
    job_id: Annotated[str, typer.Argument(metavar="ID", help="The job id (training-...).")],
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing until the job ends.")
    ] = False,
    learner: Annotated[
        int | None, typer.Option("--learner", "-l", min=1, help="Only this learner (1-based).")
    ] = None,
    raw: Annotated[
        bool,
        typer.Option(
            "--raw",
            help='Also print the metric lines the SDK writes ({"dlaas_metric": true, ...}), '
            "left out by default: `dlaas metrics ID` shows them as a table.",
        ),
    ] = False,
) -> None:
    """Print a job's log lines, each prefixed by its learner number when there are several.

    Several learners' lines come in time order: by the time each line was sent live, each
    learner's own order kept; a line whose time is no longer known (the live view keeps a
    job's recent lines, and for an hour after it ends) stays right after that learner's line
    before it, so an old job's log reads learner after learner.

    With --follow the exit status is the job's outcome: 0 when it COMPLETED, 1 otherwise.
    With --output json each event is one JSON object per line, metric lines included.
    """
    final = stream_logs(inv, job_id, follow=follow, learner=learner, raw=raw)
    if follow:
        exit_for_outcome(inv, job_id, final)


def exit_for_outcome(inv: Invocation, job_id: str, final: str | None) -> None:
    """After following a job to its end: exit 1 with the reason unless it COMPLETED."""
    if final == "COMPLETED":
        if not inv.json:
            note(f"job {job_id} COMPLETED: fetch its results with `dlaas download {job_id}`")
        return
    if final == "DELETED":
        error_line(f"job {job_id} was deleted; its logs, checkpoints and results are gone")
        raise typer.Exit(1)
    if final == "HALTED":
        error_line(
            f"job {job_id} HALTED; it keeps its checkpoints: `dlaas resume {job_id}` continues it"
        )
        raise typer.Exit(1)
    reason = ""
    try:
        reason = str(inv.client().get_job(job_id).get("reason") or "")
    except Exception:
        reason = ""
    detail = f": {reason}" if reason else ""
    error_line(
        f"job {job_id} ended {final or 'without a final state'}{detail}; see `dlaas show {job_id}`"
    )
    raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("logs")(logs)
