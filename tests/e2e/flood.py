"""A log flood and what must hold of it: every line stored, every metric point served, every
line a live follower missed announced at its place with its true count.

Shared by `tests/e2e/test_log_flood.py`, `tests/integration/test_kubernetes_log_flood.py`
and `bench/log_flood.py`. Each learner runs `flood_job/flood.py`: `lines` metric lines
(`flood.line(learner, i)`, i = 0 .. lines-1, a point each through the manifest's regex), then
`done in S s`. Nothing else may appear in a learner's log, so line n of learner L is
`line(L, n - 1)` for n <= lines and the `done` line is line lines + 1: a checker knows each
line's number from its text alone, independently of the platform's numbering.

- `manifest` / `command`: the job.
- `check_log` / `check_metrics`: a learner's log and metric points as served after the end,
  against what the program wrote.
- `LiveFollow`: one learner's lines as a live follower receives them (line events and gap
  notices, in order), checked as they come; `LiveView`: the Server-Sent Events of
  `GET /v2/jobs/{id}/logs?follow=true`, fed in pieces, into one `LiveFollow` per learner.
- `SseFollower`: a `LiveView` that reads the follow itself in a thread, optionally slowly
  (`pause` between small reads).
- `served_problems`: `GET /logs?learner=n` and `GET /metrics?learner=n` after the end,
  checked; `stored_problems`: the log and metrics objects the runners stored, checked (so
  that what is served after the end is known to come whole from storage, not the stream).
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

from storage import output_keys
from storage.object_store import ObjectStore
from tests.e2e.flood_job.flood import DONE, line, values

FLOOD_JOB = Path(__file__).resolve().parent / "flood_job"
METRIC_REGEX = r"step (?P<step>\d+) loss (?P<loss>[0-9.]+) acc (?P<acc>[0-9.]+)"
GAP_NOTICE = re.compile(
    r"^\[dlaas\] ([0-9,]+) lines skipped in the live view; `dlaas logs` has them$"
)
MAX_PROBLEMS = 20
RESUME_FOR_S = 120.0
RESUME_PAUSE_S = 0.2


def command(
    lines: int,
    block_writes: bool = False,
    start_file: str | None = None,
    pause: tuple[int, str] | None = None,
) -> str:
    """The flood's command line; `pause`: (after how many lines, until which file exists)."""
    words = f"python flood.py --lines {lines}"
    if block_writes:
        words += " --block-writes"
    if start_file:
        words += f" --start-file {start_file}"
    if pause:
        words += f" --pause-after {pause[0]} --resume-file {pause[1]}"
    return words


def manifest(
    name: str,
    lines: int,
    learners: int = 2,
    cpus: float = 1.0,
    block_writes: bool = False,
    start_file: str | None = None,
    pause: tuple[int, str] | None = None,
) -> str:
    """The job's manifest: FfDL's regex extractor names the metrics of every line."""
    regex = METRIC_REGEX.replace("'", "''")
    run = command(lines, block_writes, start_file, pause)
    return (
        f"name: {name}\nlearners: {learners}\ncpus: {cpus}\nmemory: 512Mi\n"
        f"framework:\n  name: python\n  command: {json.dumps(run)}\n"
        "evaluation_metrics:\n  type: regex_extractor\n  groups:\n"
        f"    training:\n      regex: '{regex}'\n"
        "restart_policy:\n  max_restarts: 0\n"
    )


def done_seconds(text: str) -> float | None:
    """The program's own time from its `done in S s` line."""
    if not (text.startswith(DONE) and text.endswith(" s")):
        return None
    try:
        return float(text[len(DONE) : -2])
    except ValueError:
        return None


def line_number(learner: int, lines: int, text: str) -> int | None:
    """Which line of learner `learner`'s log `text` is (1-based), or None if the program
    never wrote it there."""
    if text.startswith("step "):
        try:
            i = int(text.split(" ", 2)[1])
        except ValueError:
            return None
        return i + 1 if 0 <= i < lines and text == line(learner, i) else None
    return lines + 1 if done_seconds(text) is not None else None


# -- after the end ------------------------------------------------------------------------


@dataclass
class LogCheck:
    learner: int
    served_lines: int
    equal: bool
    first_difference: str | None
    seconds: float | None  # the program's own time, from its last line


def check_log(learner: int, lines: int, served: str) -> LogCheck:
    """A learner's log as served (`GET /logs?learner=n`) against what the program wrote."""
    got = served.split("\n")
    if got and got[-1] == "":
        got.pop()
    expected_head = "\n".join(line(learner, i) for i in range(lines))
    head = "\n".join(got[:lines])
    tail = got[lines:]
    seconds = done_seconds(tail[0]) if len(tail) == 1 else None
    equal = head == expected_head and seconds is not None
    difference = None
    if not equal:
        difference = f"{len(got)} lines served, the program wrote {lines + 1}"
        for number, text in enumerate(got, 1):
            if number <= lines and text != line(learner, number - 1):
                wrote = line(learner, number - 1)
                difference = f"line {number} is {text[:120]!r}, the program wrote {wrote!r}"
                break
            if number == lines + 1 and done_seconds(text) is None:
                difference = f"line {number} is {text[:120]!r}, the program wrote its `done`"
                break
            if number > lines + 1:
                difference = f"line {number} is {text[:120]!r}, after the program's last"
                break
    return LogCheck(learner, len(got), equal, difference, seconds)


def check_metrics(learner: int, lines: int, points: Sequence[Mapping[str, Any]]) -> list[str]:
    """A learner's metric points as served (`GET /metrics?learner=n`): one per line written,
    in order, with its step and values. Empty when they are."""
    problems: list[str] = []
    if len(points) != lines:
        problems.append(f"learner {learner}: {len(points)} points served, {lines} written")
    for i, point in enumerate(points[:lines]):
        loss, acc = values(learner, i)
        wanted = {"loss": float(f"{loss:.6f}"), "acc": float(f"{acc:.6f}")}
        got = (point.get("learner"), point.get("step"), point.get("values"))
        if got != (learner, i, wanted):
            problems.append(f"learner {learner}: point {i + 1} is {got}, written {wanted} at {i}")
            if len(problems) >= MAX_PROBLEMS:
                break
    return problems


# -- live ---------------------------------------------------------------------------------


@dataclass
class LiveFollow:
    """One learner's lines as a follower receives them: every line event must be the line
    after the previous one, or, right after a gap notice of N, the line N further on."""

    learner: int
    lines: int
    last: int = 0  # number of the last line received
    received: int = 0  # line events, gap notices left out
    notices: int = 0
    skipped: int = 0  # lines the notices announced
    pending: int | None = None  # a notice not yet followed by a line
    done_received: bool = False
    problems: list[str] = field(default_factory=list)

    def _problem(self, text: str) -> None:
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(f"learner {self.learner}: {text}")

    def gap(self, count: int, text: str) -> None:
        self.notices += 1
        self.skipped += count
        match = GAP_NOTICE.match(text)
        if match is None or int(match.group(1).replace(",", "")) != count:
            self._problem(f"gap notice of {count} reads {text!r}")
        if count <= 0:
            self._problem(f"gap notice of {count} lines after line {self.last}")
        if self.pending is not None:
            self._problem(f"two gap notices in a row after line {self.last}")
            self.pending += count
        else:
            self.pending = count

    def line(self, text: str) -> None:
        self.received += 1
        number = line_number(self.learner, self.lines, text)
        if number is None:
            self._problem(f"after line {self.last}: {text[:120]!r} is no line the program wrote")
            return
        missing = number - self.last - 1
        if self.pending is not None:
            if missing != self.pending:
                self._problem(
                    f"a gap notice after line {self.last} says {self.pending} lines, but the "
                    f"next line is {number}: {missing} missing"
                )
        elif number <= self.last:
            self._problem(f"line {number} after line {self.last}: repeated or out of order")
        elif missing:
            self._problem(f"lines {self.last + 1}..{number - 1} missing without a notice")
        self.pending = None
        self.last = max(self.last, number)
        if number == self.lines + 1:
            self.done_received = True

    def resumed(self) -> None:
        """The follow was broken off and resumed from the last event id: a gap notice not yet
        followed by a line comes again (it carries no id of its own)."""
        if self.pending is not None:
            self.notices -= 1
            self.skipped -= self.pending
            self.pending = None

    def finish(self) -> None:
        """At the `end` event: everything up to the last line received or announced."""
        if self.pending is not None:
            self._problem(f"a gap notice of {self.pending} after line {self.last}, then no line")
        if self.last != self.lines + 1:
            self._problem(
                f"the last line received is {self.last}, the program wrote {self.lines + 1}"
            )


class LiveView:
    """A job's log as a follower receives it over Server-Sent Events, checked as it comes
    (`LiveFollow` per learner). `feed` takes the response's bytes in pieces of any size."""

    def __init__(self, learners: int, lines: int) -> None:
        self.follows = {n: LiveFollow(n, lines) for n in range(1, learners + 1)}
        self.end_state: str | None = None
        self.done_before_end = False
        self.last_id: str | None = None  # for a Last-Event-ID
        self.first_line_at: float | None = None  # time.monotonic() of the first line event
        self.last_line_at: float | None = None
        self.ended_at: float | None = None  # of the end event
        self.problems: list[str] = []
        self._rest = b""

    @property
    def lines_seen(self) -> int:
        return sum(f.received for f in self.follows.values())

    @property
    def gap_notices(self) -> int:
        return sum(f.notices for f in self.follows.values())

    @property
    def lines_skipped(self) -> int:
        return sum(f.skipped for f in self.follows.values())

    def all_problems(self) -> list[str]:
        found = list(self.problems)
        for follow in self.follows.values():
            found += follow.problems
        if self.end_state is None:
            found.append("no end event")
        return found

    def feed(self, data: bytes) -> None:
        """Handle the complete events in what was received so far."""
        blocks = (self._rest + data).split(b"\n\n")
        self._rest = blocks.pop()
        now = time.monotonic()
        for block in blocks:
            if self.end_state is not None:
                self.problems.append(f"an event after the end: {block[:200]!r}")
                return
            self._event(block, now)

    def _event(self, block: bytes, now: float) -> None:
        kind, payload, event_id = "message", b"", None
        for field_line in block.split(b"\n"):
            name, _, value = field_line.partition(b": ")
            if name == b"data":
                payload = value
            elif name == b"event":
                kind = value.decode()
            elif name == b"id":
                event_id = value.decode()
        if not payload:
            return
        event = orjson.loads(payload)
        if kind == "end":
            self.ended_at = now
            self.end_state = str(event.get("state"))
            for each in self.follows.values():
                each.finish()
            self.done_before_end = all(f.done_received for f in self.follows.values())
            return
        if event_id:
            self.last_id = event_id
        follow = self.follows.get(int(event.get("learner", 0)))
        if follow is None:
            self.problems.append(f"an event of no learner of the job: {event}")
        elif "gap" in event:
            follow.gap(int(event["gap"]), str(event.get("line", "")))
        else:
            follow.line(str(event.get("line", "")))
            if self.first_line_at is None:
                self.first_line_at = now
            self.last_line_at = now


Pause = Callable[[], None]


class SseFollower(LiveView):
    """Follows a job's log over Server-Sent Events in a thread, into a `LiveView`. With
    `pause`, the response is read `read_bytes` at a time and `pause()` is called after each
    read: a slow reader, which the server must not serve differently (it waits for the
    reader; the runner's skips are the only gaps). With `nice`, the thread runs that much
    nicer (a benchmark's follower stands for a user's client on another machine: it should
    not take the CPU from the learners). A broken follow is resumed from its last event
    (`Last-Event-ID`), as a client does, for up to `RESUME_FOR_S`."""

    def __init__(
        self,
        url: str,
        token: str,
        job_id: str,
        learners: int,
        lines: int,
        *,
        pause: Pause | None = None,
        read_bytes: int = 64 << 10,
        nice: int = 0,
        name: str = "follower",
    ) -> None:
        super().__init__(learners, lines)
        self.url = url.rstrip("/")
        self.token = token
        self.job_id = job_id
        self.pause = pause
        self.read_bytes = read_bytes
        self.nice = nice
        self.error: BaseException | None = None
        self.reconnects = 0
        self.last_break: str | None = None
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)

    def start(self) -> SseFollower:
        self._thread.start()
        return self

    def join(self, timeout: float) -> bool:
        if self._thread.ident is not None:  # started
            self._thread.join(timeout)
        return not self._thread.is_alive()

    def all_problems(self) -> list[str]:
        found = super().all_problems()
        if self.error is not None:
            found.append(f"the follower failed: {self.error!r}")
        return found

    def _main(self) -> None:
        if self.nice:  # this thread only: Linux schedules threads as tasks of their own
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), self.nice)
        give_up = time.monotonic() + RESUME_FOR_S
        try:
            while self.end_state is None:
                try:
                    self._follow()
                except (httpx.TransportError, httpx.HTTPStatusError) as exc:
                    # A follow the server broke off (e.g. its Redis timed out) is resumed as
                    # a client does; what it then delivers is checked all the same.
                    refused = (
                        isinstance(exc, httpx.HTTPStatusError) and exc.response.is_client_error
                    )
                    if refused or time.monotonic() > give_up:
                        raise
                    self.reconnects += 1
                    self.last_break = repr(exc)
                    threading.Event().wait(RESUME_PAUSE_S)
        except BaseException as exc:
            self.error = exc

    def _follow(self) -> None:
        self._rest = b""  # an event cut by a broken connection comes again
        for follow in self.follows.values():
            follow.resumed()
        headers = {"Authorization": f"Bearer {self.token}"}
        if self.last_id:
            headers["Last-Event-ID"] = self.last_id
        timeout = httpx.Timeout(30.0, read=600.0)
        path = f"{self.url}/v2/jobs/{self.job_id}/logs"
        with (
            httpx.Client(timeout=timeout) as client,
            client.stream("GET", path, params={"follow": "true"}, headers=headers) as response,
        ):
            response.raise_for_status()
            if self.pause is None:
                chunks = response.iter_raw()
            else:
                chunks = response.iter_raw(self.read_bytes)
            for chunk in chunks:
                self.feed(chunk)
                if self.end_state is not None:
                    return
                if self.pause is not None:
                    self.pause()
            raise httpx.RemoteProtocolError("the stream ended before its end event")


def read_log(client: httpx.Client, job_id: str, learner: int | None = None) -> str:
    params = {"learner": str(learner)} if learner is not None else {}
    response = client.get(f"/v2/jobs/{job_id}/logs", params=params)
    response.raise_for_status()
    return response.text


def read_metrics(client: httpx.Client, job_id: str, learner: int) -> list[dict[str, Any]]:
    response = client.get(f"/v2/jobs/{job_id}/metrics", params={"learner": str(learner)})
    response.raise_for_status()
    points: list[dict[str, Any]] = orjson.loads(response.content)["metrics"]
    return points


def served_problems(
    client: httpx.Client, job_id: str, learners: Iterable[int], lines: int
) -> tuple[list[LogCheck], list[str]]:
    """Each learner's log and metric points as served after the end, checked."""
    logs: list[LogCheck] = []
    problems: list[str] = []
    for learner in learners:
        check = check_log(learner, lines, read_log(client, job_id, learner))
        logs.append(check)
        if not check.equal:
            problems.append(f"learner {learner}'s served log: {check.first_difference}")
        problems += check_metrics(learner, lines, read_metrics(client, job_id, learner))
    return logs, problems


def stored_problems(
    objects: ObjectStore, job_id: str, learners: Iterable[int], lines: int
) -> list[str]:
    """Each learner's stored log and metrics objects (`jobs/{id}/logs/learner-n.log`,
    `jobs/{id}/metrics/learner-n.jsonl`), checked."""
    problems: list[str] = []
    for learner in learners:
        stored = objects.get_bytes(output_keys.log_key(job_id, learner)).decode()
        check = check_log(learner, lines, stored)
        if not check.equal:
            problems.append(f"learner {learner}'s stored log: {check.first_difference}")
        raw = objects.get_bytes(output_keys.metrics_key(job_id, learner))
        points = [orjson.loads(point) for point in raw.splitlines() if point.strip()]
        problems += [f"stored: {problem}" for problem in check_metrics(learner, lines, points)]
    return problems
