"""A flood of output keeps every line: on the embedded platform, 2 learners print metric lines
as fast as they can (`tests/e2e/flood.py`) while a deliberately slow client follows the
log. After the end the served log and metric points, and the objects stored for them, are
exactly what the programs wrote; live, every line the runner skipped is announced where it
was skipped with its true count, no line comes twice or goes missing unannounced, and the
programs' last lines arrive before the `end` event.

The second test makes the live view skip for sure: the platform's Redis is frozen (SIGSTOP)
from before the programs start until their last lines are in the learners' log files, which
then hold more than the live view may fall behind (4 MB) beyond what the runner could hand
the frozen stream: either an offer to the stream failed, or the runner skips ahead.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from storage.job_states import FINAL_STATES, JobState
from storage.object_store import open_object_store
from storage.settings import Settings
from tests.e2e.conftest import Platform, Shown
from tests.e2e.flood import (
    FLOOD_JOB,
    SseFollower,
    manifest,
    served_problems,
    stored_problems,
)
from tests.e2e.flood_job.flood import line as flood_line

pytestmark = pytest.mark.e2e

LEARNERS = 2
LINES = 100_000  # per learner: 200,000 lines and metric points in all
# Per learner, about 7.7 MB of log: more than the 4 MB the live view keeps behind, plus what
# the runner can hand a frozen stream before an offer fails (the batches of 32 KiB its sender
# takes and queues: at most 33) and the read of 1 MiB it offers them from.
FROZEN_LINES = 200_000
START_FILE = "start-flood"
RESUME_FILE = "resume-flood"
SLOW_READ_BYTES = 8 << 10
SLOW_PAUSE_S = 0.002
TIMEOUT_S = 300.0  # bounds a wait; nothing here depends on how long anything takes


def slow_pause() -> None:
    """A slow reader: a small pause after each small read."""
    threading.Event().wait(SLOW_PAUSE_S)


def final(shown: Shown) -> bool:
    return str(shown["job"]["state"]) in FINAL_STATES


def running(shown: Shown) -> bool:
    return str(shown["job"]["state"]) in {JobState.RUNNING, *FINAL_STATES}


def follower(platform: Platform, job_id: str, lines: int) -> SseFollower:
    config = json.loads((platform.home / "client.json").read_text())
    return SseFollower(
        config["url"],
        config["token"],
        job_id,
        LEARNERS,
        lines,
        pause=slow_pause,
        read_bytes=SLOW_READ_BYTES,
        name="slow-follower",
    )


def submit(
    platform: Platform,
    tmp_path: Path,
    name: str,
    lines: int,
    start: bool,
    pause: tuple[int, str] | None = None,
) -> str:
    path = tmp_path / f"{name}.yml"
    start_file = START_FILE if start else None
    path.write_text(manifest(name, lines, LEARNERS, start_file=start_file, pause=pause))
    return platform.submit(path, FLOOD_JOB)


def check_after_the_end(platform: Platform, job_id: str, lines: int, live: SseFollower) -> None:
    shown = platform.wait_for(job_id, "the flood job to end", final, timeout=TIMEOUT_S)
    assert shown["job"]["state"] == JobState.COMPLETED, shown
    assert live.join(TIMEOUT_S), "the follower never got the end event"
    config = json.loads((platform.home / "client.json").read_text())
    headers = {"Authorization": f"Bearer {config['token']}"}
    learners = range(1, LEARNERS + 1)
    with httpx.Client(base_url=config["url"], headers=headers, timeout=120) as client:
        logs, problems = served_problems(client, job_id, learners, lines)
    assert not problems, problems
    local = Settings(
        home=platform.home, object_store="local", objects_dir=platform.home / "objects"
    )
    stored = stored_problems(open_object_store(local), job_id, learners, lines)
    assert not stored, stored  # whole in storage: what was served came from there
    assert all(check.seconds is not None for check in logs)
    assert live.end_state == JobState.COMPLETED
    assert not live.all_problems(), live.all_problems()
    assert live.done_before_end, "a program's last line did not reach the follower before the end"
    print(
        f"{job_id}: live {live.lines_seen:,} lines, {live.gap_notices} gap notices "
        f"({live.lines_skipped:,} lines); programs took {[c.seconds for c in logs]} s"
    )


def test_a_flood_reaches_a_slow_follower_and_is_stored_line_for_line(
    platform: Platform, tmp_path: Path
) -> None:
    job_id = submit(platform, tmp_path, "flood", LINES, start=False)
    live = follower(platform, job_id, LINES).start()
    check_after_the_end(platform, job_id, LINES, live)


@contextlib.contextmanager
def frozen(pid: int) -> Iterator[None]:
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def wait_until_written(log_files: dict[int, Path], last_line: int, timeout: float) -> None:
    """Until each learner's log file ends with its program's line `last_line`."""
    deadline = time.monotonic() + timeout
    waiting = dict(log_files)
    while waiting:
        for learner, path in list(waiting.items()):
            with contextlib.suppress(FileNotFoundError), open(path, "rb") as log:
                log.seek(max(0, path.stat().st_size - 200))
                tail = log.read().decode(errors="replace").rstrip("\n").rsplit("\n", 1)[-1]
                if tail == flood_line(learner, last_line):
                    del waiting[learner]
        assert time.monotonic() < deadline, f"the programs did not get there: {waiting}"
        threading.Event().wait(0.01)


def test_lines_the_live_view_skips_are_announced_where_and_as_many_as_they_are(
    platform: Platform, tmp_path: Path
) -> None:
    # The programs write all but the last lines while Redis is frozen (far more than the
    # live view holds back), then, Redis back, the rest: those flow live past the gap.
    frozen_part = FROZEN_LINES - 5_000
    job_id = submit(
        platform,
        tmp_path,
        "flood-frozen",
        FROZEN_LINES,
        start=True,
        pause=(frozen_part, RESUME_FILE),
    )
    platform.wait_for(job_id, "the flood job to run", running, timeout=TIMEOUT_S)
    learners = platform.learners(job_id)
    assert len(learners) == LEARNERS, learners
    workdirs = {int(record["learner"]): Path(record["workdir"]) for record in learners}
    live = follower(platform, job_id, FROZEN_LINES).start()
    with frozen(platform.record().pids["redis"]):
        for workdir in workdirs.values():
            (workdir / "program" / "model" / START_FILE).touch()
        logs = {n: workdirs[n] / "program" / "logs" / f"learner-{n}.log" for n in workdirs}
        wait_until_written(logs, frozen_part - 1, TIMEOUT_S)
    for workdir in workdirs.values():
        (workdir / "program" / "model" / RESUME_FILE).touch()
    check_after_the_end(platform, job_id, FROZEN_LINES, live)
    skipped = {n: follow.notices for n, follow in live.follows.items()}
    assert all(skipped.values()), f"gap notices per learner: {skipped}"
