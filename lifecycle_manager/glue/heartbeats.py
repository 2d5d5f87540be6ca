"""Hung learners found and failed: the learner rows of running jobs and their heartbeats in
Redis, judged by `decisions.hung_learners`, and every silent one failed (so restarted)."""

from __future__ import annotations

import logging

from lifecycle_manager.decisions.hung_learners import LearnerBeat, silent_learners
from lifecycle_manager.decisions.restart_policy import RestartPolicy
from lifecycle_manager.glue.context import Context
from lifecycle_manager.glue.learner_reports import apply_silence
from storage import jobs as repo
from storage import streams
from storage.job_states import Desired, JobState, LearnerState

log = logging.getLogger(__name__)

# A deploying job may have learners running: those a restart of one learner left alone.
WATCHED_JOBS = (JobState.DEPLOYING, JobState.DOWNLOADING, JobState.RUNNING, JobState.STORING)


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
