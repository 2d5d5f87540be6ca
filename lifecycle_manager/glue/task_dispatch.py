"""Hands a job's restart to the Celery workers, after its backoff, by task name."""

from __future__ import annotations

import asyncio
import logging

from celery import Celery

from storage import task_names

log = logging.getLogger(__name__)


class RecoveryDispatcher:
    def __init__(self, broker_url: str) -> None:
        self._celery = Celery("dlaas-monitor", broker=broker_url)

    async def __call__(self, job_id: str, delay_s: float) -> None:
        try:
            await asyncio.to_thread(
                self._celery.send_task,
                task_names.RECOVER_JOB,
                args=[job_id],
                countdown=max(delay_s, 0.0),
            )
        except Exception as error:  # the reconcile recovers the job all the same
            log.warning("job %s: could not schedule its restart: %s", job_id, error)
