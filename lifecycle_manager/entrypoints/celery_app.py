"""The lifecycle manager's Celery app: tasks by name (`storage.task_names`), on Redis.

Tasks acknowledge late and are requeued if their worker dies, so a crash re-runs them;
every task is idempotent and keyed by its job id. A failed task retries with backoff, and
the beat schedule runs the reconcile every few seconds for whatever a lost message missed.
"""

from __future__ import annotations

from typing import Any

from celery import Celery, Task
from celery.signals import worker_shutdown

from lifecycle_manager.entrypoints.runtime import runtime
from lifecycle_manager.glue import garbage, operations
from lifecycle_manager.glue.reconcile import reconcile
from storage import task_names
from storage.settings import Settings

RECONCILE_EVERY_S = 5.0
COLLECT_GARBAGE_EVERY_S = 600.0
MAX_RETRY_DELAY_S = 60.0


def configure(app: Celery, settings: Settings) -> None:
    app.conf.update(
        broker_url=settings.redis_url,
        result_backend=settings.redis_url,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        result_expires=3600,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        beat_schedule_filename=str(settings.home / "celerybeat-schedule"),
        beat_schedule={
            "reconcile": {
                "task": task_names.RECONCILE,
                "schedule": RECONCILE_EVERY_S,
                # A sweep nobody ran in time is replaced by the next one.
                "options": {"expires": RECONCILE_EVERY_S * 2},
            },
            "collect-garbage": {
                "task": task_names.COLLECT_GARBAGE,
                "schedule": COLLECT_GARBAGE_EVERY_S,
                "options": {"expires": COLLECT_GARBAGE_EVERY_S},
            },
        },
    )


app = Celery("dlaas")


@app.on_configure.connect
def _configure_from_settings(sender: Celery, **_: Any) -> None:
    configure(sender, Settings())


@worker_shutdown.connect
def _close_runtime(**_: Any) -> None:
    runtime.close()


def _finish(task: Task, outcome: operations.Outcome) -> str:
    if outcome.retry_after is not None:
        delay = min(outcome.retry_after * 2**task.request.retries, MAX_RETRY_DELAY_S)
        raise task.retry(countdown=delay, max_retries=None)
    return outcome.message


_RETRYING: dict[str, Any] = {
    "bind": True,
    "autoretry_for": (Exception,),
    "retry_backoff": True,
    "retry_backoff_max": int(MAX_RETRY_DELAY_S),
    "max_retries": 20,
}


@app.task(name=task_names.DEPLOY_JOB, **_RETRYING)
def deploy_job(self: Task, job_id: str) -> str:
    return _finish(self, runtime.run(lambda ctx: operations.deploy_job(ctx, job_id)))


@app.task(name=task_names.HALT_JOB, **_RETRYING)
def halt_job(self: Task, job_id: str) -> str:
    return _finish(self, runtime.run(lambda ctx: operations.halt_job(ctx, job_id)))


@app.task(name=task_names.RESUME_JOB, **_RETRYING)
def resume_job(self: Task, job_id: str) -> str:
    return _finish(self, runtime.run(lambda ctx: operations.resume_job(ctx, job_id)))


@app.task(name=task_names.DELETE_JOB, **_RETRYING)
def delete_job(self: Task, job_id: str) -> str:
    return _finish(self, runtime.run(lambda ctx: operations.delete_job(ctx, job_id)))


@app.task(name=task_names.RECOVER_JOB, **_RETRYING)
def recover_job(self: Task, job_id: str) -> str:
    return _finish(self, runtime.run(lambda ctx: operations.recover_job(ctx, job_id)))


@app.task(name=task_names.SCHEDULE)
def schedule_jobs() -> str:
    return runtime.run(lambda ctx: operations.schedule_jobs(ctx)).message


@app.task(name=task_names.RECONCILE)
def reconcile_all() -> str:
    report = runtime.run(reconcile)
    return str(report) if report else "in step"


@app.task(name=task_names.COLLECT_GARBAGE)
def collect_garbage() -> str:
    return str(runtime.run(garbage.collect))
