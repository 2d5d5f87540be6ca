"""The node agent's guard: the token and the Host header it requires of every request."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from lifecycle_manager.backends.local.agent_learners import LearnerTable
from lifecycle_manager.backends.local.node_agent import allowed_hosts, create_app

TOKEN = "t" * 40


def test_the_agent_answers_to_loopback_its_bind_address_and_the_names_given() -> None:
    assert allowed_hosts("127.0.0.1", 8471) == {
        "127.0.0.1:8471",
        "localhost:8471",
        "[::1]:8471",
    }
    hosts = allowed_hosts("0.0.0.0", 8471, ["agent", " Agent.internal ", "", "lb:80", "fd00::5"])
    assert "0.0.0.0:8471" not in hosts  # a wildcard is no name anyone may use
    assert {"agent:8471", "agent.internal:8471", "lb:80", "[fd00::5]:8471"} <= hosts
    assert "agent" not in hosts and "lb:8471" not in hosts
    assert "10.1.2.3:8471" in allowed_hosts("10.1.2.3", 8471)


@pytest.fixture
def client(tmp_path: Path) -> httpx.AsyncClient:
    table = LearnerTable(tmp_path, lambda _record: True)
    app = create_app(table, token=TOKEN, hosts=allowed_hosts("0.0.0.0", 8471, ["agent"]))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://agent:8471")


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, 401),
        ({"Authorization": f"Bearer {TOKEN[:-1]}"}, 401),
        ({"Authorization": f"Bearer {TOKEN}x"}, 401),
        ({"Authorization": f"bearer {TOKEN}"}, 401),
        ({"Authorization": f"Basic {TOKEN}"}, 401),
        ({"Authorization": f"Bearer {TOKEN}"}, 200),
        ({"Authorization": f"Bearer {TOKEN}", "Host": "agent:8471"}, 200),
        ({"Authorization": f"Bearer {TOKEN}", "Host": "AGENT:8471"}, 200),
        ({"Authorization": f"Bearer {TOKEN}", "Host": "agent:8472"}, 421),
        ({"Authorization": f"Bearer {TOKEN}", "Host": "evil.example:8471"}, 421),
        ({"Authorization": f"Bearer {TOKEN}", "Host": ""}, 421),
    ],
)
async def test_only_the_token_and_a_name_of_the_agent_get_an_answer(
    client: httpx.AsyncClient, headers: dict[str, str], status: int
) -> None:
    async with client:
        answer = await client.get("/learners", headers=headers)
    assert answer.status_code == status, answer.text
    if status == 200:
        assert answer.json() == {"learners": []}


async def test_the_agent_serves_no_openapi_document(client: httpx.AsyncClient) -> None:
    async with client:
        answer = await client.get("/openapi.json", headers={"Authorization": f"Bearer {TOKEN}"})
    assert answer.status_code == 404
