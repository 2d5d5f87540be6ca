"""A dependency that does not answer makes a 503 naming it, in bounded time, never a hang.

The dependency is a real socket that accepts connections and never answers (a server that
hangs), or one that refuses them.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from api.app import create_app
from api.state import ApiState
from storage.db import make_engine, make_sessionmaker
from storage.settings import Settings
from tests.integration.api_harness import ADMIN_TOKEN, running_api


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A port whose connections are accepted by the kernel and never answered."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    try:
        yield int(listener.getsockname()[1])
    finally:
        listener.close()


def _client(app: object, token: str | None = ADMIN_TOKEN) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.AsyncClient(
        # The app re-raises after its 503 is sent, as under a server, which logs it.
        transport=httpx.ASGITransport(app=app, raise_app_exceptions=False),  # type: ignore[arg-type]
        base_url="http://dlaas",
        headers=headers,
    )


async def test_a_silent_redis_is_a_503_naming_redis_within_its_timeout(
    tmp_path: Path, silent_server: int
) -> None:
    settings = Settings(
        home=tmp_path,
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'api.db'}",
        redis_url=f"redis://127.0.0.1:{silent_server}/0",
        objects_dir=tmp_path / "objects",
        admin_token=ADMIN_TOKEN,
        redis_timeout_s=0.5,
    )
    app = create_app(settings)
    async with app.router.lifespan_context(app), _client(app) as client:
        started = time.monotonic()
        answer = await client.get("/healthz")
        took = time.monotonic() - started
    assert answer.status_code == 503
    assert answer.json()["field"] == "redis"
    assert answer.headers["retry-after"] == "5"
    # The rate limit's draw and the health check's ping, each one timeout and a reconnect.
    assert took < 10, took


async def test_a_silent_database_is_a_503_naming_the_database(
    tmp_path: Path, redis_url: str, postgres_url: str, silent_server: int
) -> None:
    async with running_api(postgres_url, redis_url, tmp_path / "objects") as api:
        state: ApiState = api.app.state.dlaas
        silent = make_engine(
            f"postgresql+asyncpg://dlaas@127.0.0.1:{silent_server}/dlaas", timeout_s=0.5
        )
        state.sessions = make_sessionmaker(silent)
        try:
            async with _client(api.app, "a-token-not-in-any-cache") as client:
                started = time.monotonic()
                answer = await client.get("/v2/jobs")
                took = time.monotonic() - started
        finally:
            await silent.dispose()
    assert answer.status_code == 503, answer.text
    assert answer.json() == {
        "error": "unavailable",
        "detail": "the database did not answer in time or refused the connection; retry shortly",
        "field": "database",
    }
    assert took < 10, took


async def test_a_refused_database_connection_is_a_503_too(
    tmp_path: Path, redis_url: str, postgres_url: str
) -> None:
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there now
    async with running_api(postgres_url, redis_url, tmp_path / "objects") as api:
        state: ApiState = api.app.state.dlaas
        refused = make_engine(f"postgresql+asyncpg://dlaas@127.0.0.1:{port}/dlaas", timeout_s=0.5)
        state.sessions = make_sessionmaker(refused)
        try:
            async with _client(api.app, "another-token-not-in-any-cache") as client:
                answer = await client.get("/v2/jobs")
        finally:
            await refused.dispose()
    assert answer.status_code == 503
    assert answer.json()["field"] == "database"
