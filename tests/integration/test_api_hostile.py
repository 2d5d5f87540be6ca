"""Requests that are wrong in their very shape get a 4xx naming where, never a 500."""

from __future__ import annotations

import pytest

from tests.integration.api_harness import Harness


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/v2/jobs/%00", "job_id"),
        ("/v2/jobs/training-1%00/events", "job_id"),
        ("/v2/jobs?name=a%00b", "name"),
        ("/v2/jobs?cursor=%00", "cursor"),
    ],
)
async def test_a_nul_character_is_refused_naming_where(api: Harness, path: str, field: str) -> None:
    async with await api.new_user("nul") as alice:
        answer = await alice.get(path)
    assert answer.status_code == 422, answer.text
    assert answer.json()["field"] == field


async def test_refusals_of_credentials_and_methods_name_the_field(api: Harness) -> None:
    async with api.client(None) as anonymous:
        missing = await anonymous.get("/v2/jobs")
    async with api.client("not-a-token") as stranger:
        unknown = await stranger.get("/v2/jobs")
    assert (missing.status_code, missing.json()["field"]) == (401, "Authorization")
    assert (unknown.status_code, unknown.json()["field"]) == (401, "Authorization")
    async with await api.new_user("plain") as plain:
        forbidden = await plain.post("/v2/users", json={"name": "someone"})
        wrong_method = await plain.patch("/v2/jobs", json={})
        no_route = await plain.get("/v2/nothing-here")
    assert (forbidden.status_code, forbidden.json()["field"]) == (403, "Authorization")
    assert (wrong_method.status_code, wrong_method.json()["field"]) == (405, "method")
    assert wrong_method.headers["allow"]
    assert (no_route.status_code, no_route.json()["field"]) == (404, "path")
