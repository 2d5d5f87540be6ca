"""Nudges the lifecycle manager through Celery, by task name only.

A lost nudge costs latency, not correctness: the lifecycle manager's periodic reconcile
finds every job the database says needs work.
"""

from __future__ import annotations

import logging

from celery import Celery

from storage import task_names

log = logging.getLogger(__name__)


class Nudger:
    def __init__(self, broker_url: str, timeout_s: float = 10.0) -> None:
        self._celery = Celery("dlaas-api", broker=broker_url)
        self._celery.conf.broker_connection_retry_on_startup = False
        self._celery.conf.broker_transport_options = {
            "max_retries": 1,
            "socket_timeout": timeout_s,
            "socket_connect_timeout": timeout_s,
        }

    def send(self, task: str, job_id: str) -> None:
        try:
            self._celery.send_task(task, args=[job_id], retry=False)
        except Exception as error:  # the reconcile will pick the job up
            log.warning("could not nudge %s for %s: %s", task, job_id, error)

    def deploy(self, job_id: str) -> None:
        self.send(task_names.DEPLOY_JOB, job_id)

    def halt(self, job_id: str) -> None:
        self.send(task_names.HALT_JOB, job_id)

    def resume(self, job_id: str) -> None:
        self.send(task_names.RESUME_JOB, job_id)

    def delete(self, job_id: str) -> None:
        self.send(task_names.DELETE_JOB, job_id)
