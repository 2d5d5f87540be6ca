"""Hands work to the Celery workers by task name: a job's restart after its backoff, and a
scheduling pass when a job stopped holding resources (the room it leaves is given at once,
not at the next sweep)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from celery import Celery

from storage import task_names

log = logging.getLogger(__name__)


class TaskDispatcher:
    def __init__(self, broker_url: str) -> None:
        self._celery = Celery("dlaas-monitor", broker=broker_url)

    async def _send(self, task: str, args: list[Any], countdown: float = 0.0) -> bool:
        try:
            await asyncio.to_thread(
                self._celery.send_task, task, args=args, countdown=max(countdown, 0.0)
            )
        except Exception as error:  # the reconcile does it all the same, a little later
            log.warning("could not send %s%s: %s", task, args, error)
            return False
        return True

    async def recover(self, job_id: str, delay_s: float) -> None:
        await self._send(task_names.RECOVER_JOB, [job_id], delay_s)

    async def schedule(self) -> None:
        await self._send(task_names.SCHEDULE, [])
