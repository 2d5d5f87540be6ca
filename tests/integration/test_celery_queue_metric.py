"""`/metrics` reports how many lifecycle-manager tasks wait in Celery's queue on the real
Redis broker: what the chart's worker autoscaler scales on (helm/dlaas/values.yaml)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from celery import Celery
from kombu import Connection, Queue
from prometheus_client.parser import text_string_to_metric_families

from api.routes import system
from lifecycle_manager.entrypoints.celery_app import app as lifecycle_app
from storage import task_names
from tests.integration.api_harness import Harness, running_api

METRIC = "dlaas_celery_queue_length"


@pytest.fixture
async def api(tmp_path: Path, redis_url: str) -> AsyncIterator[Harness]:
    database_url = f"sqlite+aiosqlite:///{tmp_path / 'api.db'}"
    async with running_api(database_url, redis_url, tmp_path / "objects") as harness:
        yield harness


@pytest.fixture
def broker(redis_url: str) -> Iterator[Celery]:
    """A Celery client on the same broker, as the API's nudges and the beat send tasks."""
    client = Celery("queue-metric-test", broker=redis_url)
    try:
        yield client
    finally:
        client.close()


async def queue_length(api: Harness) -> float:
    async with api.client(None) as anonymous:
        response = await anonymous.get("/metrics")
    assert response.status_code == 200
    [sample] = [
        sample
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
        if sample.name == METRIC
    ]
    assert sample.labels == {"queue": "celery"}
    return sample.value


def kombu_count(redis_url: str) -> int:
    """What Celery's own transport says the queue holds (every priority's list)."""
    with Connection(redis_url) as connection:
        declared = Queue(system.CELERY_QUEUE).bind(connection.default_channel)
        _, count, _ = declared.queue_declare()
        return int(count)


def test_the_gauge_counts_the_queue_the_lifecycle_manager_consumes() -> None:
    assert lifecycle_app.conf.task_default_queue == system.CELERY_QUEUE
    assert not lifecycle_app.conf.task_routes  # every task goes to that one queue


async def test_waiting_tasks_of_every_priority_count_and_a_taken_one_does_not(
    api: Harness, broker: Celery, redis_url: str
) -> None:
    before = await queue_length(api)
    assert before == kombu_count(redis_url)

    for job in ("a", "b", "c"):
        api.app.state.dlaas.nudger.deploy(f"job-{job}")  # what a submission sends
    broker.send_task(task_names.RECONCILE)  # what the beat sends
    broker.send_task(task_names.HALT_JOB, args=["job-d"], priority=9)
    broker.send_task(task_names.RESUME_JOB, args=["job-e"], priority=4)
    assert await queue_length(api) == before + 6 == kombu_count(redis_url)

    # A worker takes one (acknowledged late, so kombu keeps it aside until done): it no
    # longer waits, whichever worker holds it.
    with Connection(redis_url) as connection:
        taken = Queue(system.CELERY_QUEUE).bind(connection.default_channel).get(no_ack=False)
        assert taken is not None
        assert await queue_length(api) == before + 5 == kombu_count(redis_url)
        taken.ack()
    assert await queue_length(api) == before + 5
