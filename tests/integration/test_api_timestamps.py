"""Every time the API returns carries its offset, on every database: SQLite keeps none and
hands back naive values, which must not reach an answer without one (RFC 3339 `date-time`)."""

from __future__ import annotations

import re
from typing import Any

from tests.integration.api_harness import Harness, submit

RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")
TIME_FIELDS = ("created_at", "updated_at", "last_used_at", "expires_at", "submitted_at", "at")


def _times(value: Any) -> list[str]:
    """Every value of a time field anywhere in an answer."""
    if isinstance(value, dict):
        found = [v for k, v in value.items() if k in TIME_FIELDS and isinstance(v, str)]
        return found + [t for v in value.values() for t in _times(v)]
    if isinstance(value, list):
        return [t for v in value for t in _times(v)]
    return []


async def test_every_time_in_an_answer_has_its_offset(api: Harness) -> None:
    user = await api.add_user("timely")
    await api.add_team("clocks", {user: "member"})
    job = (await submit(user.client)).json()
    answers = [
        await user.client.get(f"/v2/jobs/{job['id']}"),
        await user.client.get("/v2/jobs"),
        await user.client.get(f"/v2/jobs/{job['id']}/events"),
        await user.client.get("/v2/queue"),
        await user.client.get("/v2/tokens"),
        await user.client.get("/v2/teams"),
        await api.admin.get("/v2/users"),
        await api.admin.get(f"/v2/users/{user.name}/tokens"),
    ]
    times = []
    for answer in answers:
        assert answer.status_code == 200, answer.text
        times += _times(answer.json())
    assert len(times) >= 8
    assert [t for t in times if not RFC3339.match(t)] == []
