"""Fixtures of the integration tests that drive the API.

api            -> Harness   the API on SQLite, then on PostgreSQL (one test run per
                            database), with Redis and a local object store
cli            -> CliOnApi  `api` served over a socket, and the `dlaas` command run against it
api_on_stores  -> Harness   the API on PostgreSQL with a local object store, then with
                            S3 (SeaweedFS)
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from storage.settings import Settings
from tests.integration.api_harness import CliOnApi, Harness, running_api, served

_S3_FIELDS = frozenset(
    {"object_store", "s3_endpoint_url", "s3_bucket", "s3_access_key", "s3_secret_key", "s3_region"}
)


@pytest.fixture(params=["sqlite", "postgres"])
async def api(
    request: pytest.FixtureRequest, tmp_path: Path, redis_url: str
) -> AsyncIterator[Harness]:
    database_url = request.getfixturevalue(f"{request.param}_url")
    if request.param == "sqlite":
        database_url = f"sqlite+aiosqlite:///{tmp_path / 'api.db'}"
    async with running_api(database_url, redis_url, tmp_path / "objects") as harness:
        yield harness


@pytest.fixture
async def cli(
    api: Harness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[CliOnApi]:
    monkeypatch.setenv("DLAAS_HOME", str(tmp_path / "home"))
    async with served(api.app) as port:
        yield CliOnApi(api, f"http://127.0.0.1:{port}")


@pytest.fixture(params=["local", "s3"])
async def api_on_stores(
    request: pytest.FixtureRequest, tmp_path: Path, redis_url: str, postgres_url: str
) -> AsyncIterator[Harness]:
    store = {}
    if request.param == "s3":
        s3_settings: Settings = request.getfixturevalue("s3_settings")
        store = s3_settings.model_dump(include=_S3_FIELDS)
    async with running_api(postgres_url, redis_url, tmp_path / "objects", **store) as harness:
        assert (
            type(harness.app.state.dlaas.objects).__name__
            == {
                "local": "LocalObjectStore",
                "s3": "S3ObjectStore",
            }[request.param]
        )
        yield harness
