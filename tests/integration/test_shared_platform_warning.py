"""`POST /v2/users` warns when the platform's nodes run every job as one OS user."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from storage import streams
from tests.integration.api_harness import Harness, running_api


@pytest.fixture
async def api(tmp_path: Path, private_redis_url: str) -> AsyncIterator[Harness]:
    """The API on a Redis database of its own: the node agents of the run's other
    platforms announce their isolation in the shared one at any moment."""
    database_url = f"sqlite+aiosqlite:///{tmp_path / 'api.db'}"
    async with running_api(database_url, private_redis_url, tmp_path / "objects") as harness:
        yield harness


async def test_a_new_user_is_warned_when_a_node_runs_every_job_as_one_os_user(
    api: Harness,
) -> None:
    redis = api.app.state.dlaas.redis
    try:
        quiet = await api.admin.post("/v2/users", json={"name": f"u{secrets.token_hex(4)}"})
        assert quiet.status_code == 201 and quiet.json()["warning"] is None
        why = "learners' programs run as root: other users cannot run /opt/python"
        await redis.hset(
            streams.NODE_ISOLATION, "node-a", json.dumps({"isolated": False, "why": why})
        )
        await redis.hset(streams.NODE_ISOLATION, "node-b", json.dumps({"isolated": True}))
        warned = await api.admin.post("/v2/users", json={"name": f"u{secrets.token_hex(4)}"})
        warning = warned.json()["warning"]
        assert "one OS user" in warning and f"on node node-a, {why}" in warning
        assert "node-b" not in warning and "DLAAS_AGENT_ISOLATION=on" in warning
    finally:
        await redis.delete(streams.NODE_ISOLATION)
