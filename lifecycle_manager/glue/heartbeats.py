"""Hung learners: running learners whose runner stopped sending heartbeats.

A learner that hangs without exiting (stopped, deadlocked, its node frozen) is a failure
too, found after the job's `restart_policy.heartbeat_timeout_s` of silence. The runner
beats every 2 s; a learner that never beat is timed from its row's last change. No learner
can be heard while Redis is down, so silence is counted at the earliest from when the
monitor last failed to reach Redis (`listening_since`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lifecycle_manager.decisions.restart_policy import RestartPolicy
from lifecycle_manager.glue.context import Context
from lifecycle_manager.glue.learner_reports import apply_silence
from storage import jobs as repo
from storage import streams
from storage.job_states import LEARNER_BEATING, Desired, JobState, LearnerState

log = logging.getLogger(__name__)

# A deploying job may have learners running: those a restart of one learner left alone.
WATCHED_JOBS = (JobState.DEPLOYING, JobState.DOWNLOADING, JobState.RUNNING, JobState.STORING)


@dataclass(frozen=True)
class LearnerBeat:
    index: int
    state: LearnerState
    changed_at: float  # unix time of the row's last change


def silent_learners(
    learners: Sequence[LearnerBeat],
    beats: Mapping[int, float],
    *,
    now: float,
    timeout_s: float,
    listening_since: float = 0.0,
) -> dict[int, float]:
    """Learners silent longer than `timeout_s`, with how long each has been silent."""
    silent = {}
    for learner in learners:
        if learner.state not in LEARNER_BEATING:
            continue
        last = max(beats.get(learner.index, 0.0), learner.changed_at, listening_since)
        if now - last > timeout_s:
            silent[learner.index] = now - last
    return silent


async def check_heartbeats(ctx: Context, listening_since: float = 0.0) -> list[str]:
    """Fail (and so restart) every hung learner of a running job; returns the jobs touched.

    `listening_since`: unix time since when the caller has heard Redis without a break.
    """
    async with ctx.sessions() as session:
        jobs = [
            job
            for job in await repo.jobs_in_states(session, WATCHED_JOBS)
            if job.desired == Desired.RUN and job.deleted_at is None
        ]
        learners = await repo.learners_of_jobs(session, [job.id for job in jobs])
        now = ctx.clock().timestamp()
        watched = []
        for job in jobs:
            rows = learners[job.id]
            beats = [
                LearnerBeat(row.index, LearnerState(row.state), now - ctx.age(row.updated_at))
                for row in rows
            ]
            timeout = RestartPolicy.from_manifest(job.manifest).heartbeat_timeout_s
            attempts = {row.index: row.attempt for row in rows}
            watched.append((job.id, beats, timeout, attempts))
    touched = []
    heard_of = await streams.aget_heartbeats_of(ctx.redis, [job_id for job_id, *_ in watched])
    for job_id, beats, timeout, attempts in watched:
        heard = heard_of[job_id]
        silent = silent_learners(
            beats, heard, now=now, timeout_s=timeout, listening_since=listening_since
        )
        if silent:
            log.warning("job %s: no heartbeat from learner(s) %s", job_id, sorted(silent))
            await apply_silence(ctx, job_id, silent, attempts)
            touched.append(job_id)
    return touched
