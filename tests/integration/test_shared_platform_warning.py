"""`POST /v2/users` warns when the platform's nodes run every job as one OS user, and the
jobs of users who are not admins are refused there (409 node_not_isolated) unless the
operator accepts them (DLAAS_ALLOW_SHARED_NODES)."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from storage import streams
from tests.integration.api_harness import Harness, running_api, submit

SHARED = json.dumps({"isolated": False, "why": "learners' programs run as the agent's own user"})


@pytest.fixture(params=[False, True], ids=["refused", "accepted"])
async def api(
    request: pytest.FixtureRequest, tmp_path: Path, private_redis_url: str
) -> AsyncIterator[Harness]:
    """The API on a Redis database of its own: the node agents of the run's other
    platforms announce their isolation in the shared one at any moment. Shared nodes
    refused (the default) or accepted."""
    database_url = f"sqlite+aiosqlite:///{tmp_path / 'api.db'}"
    objects = tmp_path / "objects"
    accept = {"allow_shared_nodes": request.param}
    async with running_api(database_url, private_redis_url, objects, **accept) as harness:
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
        assert "node-b" not in warning and "run the platform as root" in warning
        assert "DLAAS_ALLOW_SHARED_NODES=1" in warning
        assert ("refused" in warning) is not api.settings.allow_shared_nodes
    finally:
        await redis.delete(streams.NODE_ISOLATION)


async def test_a_users_job_is_refused_only_where_every_node_runs_jobs_as_one_os_user(
    api: Harness,
) -> None:
    redis = api.app.state.dlaas.redis
    user = await api.add_user("sharer")
    admin = await api.add_user("operator", admin=True)
    try:
        assert (await submit(user.client)).status_code == 201  # no node reported
        await redis.hset(streams.NODE_ISOLATION, "node-a", SHARED)
        shared = await submit(user.client)
        if api.settings.allow_shared_nodes:
            assert shared.status_code == 201, shared.text
        else:
            body = shared.json()
            assert shared.status_code == 409 and body["error"] == "node_not_isolated", body
            assert (
                "on node node-a, learners' programs run as the agent's own user" in body["detail"]
            )
            assert "DLAAS_ALLOW_SHARED_NODES=1" in body["detail"]
        assert (await submit(admin.client)).status_code == 201  # an admin's own risk
        await redis.hset(streams.NODE_ISOLATION, "node-b", json.dumps({"isolated": True}))
        assert (await submit(user.client)).status_code == 201  # a node isolates jobs
    finally:
        await redis.delete(streams.NODE_ISOLATION)
