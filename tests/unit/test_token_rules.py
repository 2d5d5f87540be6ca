"""Token rules that need no database: how long a token's principal is trusted, when a use
is worth writing down, and which team a submission goes to."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest

from api.auth import CACHE_TTL_S, Principal, TokenCache
from api.errors import Forbidden, Invalid
from api.services.team_choice import choose_team
from storage.api_tokens import LAST_USED_RESOLUTION, use_worth_noting
from storage.roles import Role
from storage.teams import TeamRole


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


ANA = Principal(1, "ana", is_admin=False)


def test_a_cached_token_is_trusted_for_at_most_a_second() -> None:
    assert CACHE_TTL_S <= 1.0
    clock = FakeClock()
    cache = TokenCache(clock=clock)
    cache.put("h", ANA)
    assert cache.get("h") == ANA
    clock.now += CACHE_TTL_S - 0.01
    assert cache.get("h") == ANA
    clock.now += 0.02
    assert cache.get("h") is None, "a revoked token would still count"


def test_a_token_is_never_trusted_past_its_expiry() -> None:
    clock = FakeClock()
    cache = TokenCache(clock=clock)
    cache.put("soon", ANA, expires_in_s=0.1)
    clock.now += 0.11
    assert cache.get("soon") is None
    cache.put("gone", ANA, expires_in_s=-5)
    assert cache.get("gone") is None


def test_a_use_is_written_down_at_most_once_a_minute() -> None:
    now = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
    assert use_worth_noting(None, now)
    assert not use_worth_noting(now - LAST_USED_RESOLUTION + timedelta(seconds=1), now)
    assert use_worth_noting(now - LAST_USED_RESOLUTION, now)
    # SQLite hands times back without their zone: they are UTC
    assert not use_worth_noting((now - timedelta(seconds=5)).replace(tzinfo=None), now)


def _user(*teams: tuple[int, str, Role, bool], admin: bool = False) -> Principal:
    return Principal(1, "ana", admin, tuple(TeamRole(*team) for team in teams))


NO_SESSION = cast(Any, None)  # choosing without a named team reads no database


async def test_a_submission_goes_to_the_users_own_team_by_default() -> None:
    user = _user((1, "ana", Role.TEAM_ADMIN, True), (2, "vision", Role.MEMBER, False))
    chosen = await choose_team(NO_SESSION, user, None)
    assert (chosen.id, chosen.name) == (1, "ana")


async def test_without_an_own_team_the_one_team_that_takes_jobs_is_chosen() -> None:
    user = _user((2, "vision", Role.MEMBER, False), (3, "audio", Role.VIEWER, False))
    assert (await choose_team(NO_SESSION, user, None)).name == "vision"


async def test_several_teams_and_no_own_one_is_ambiguous_and_says_so() -> None:
    user = _user((2, "vision", Role.MEMBER, False), (3, "audio", Role.TEAM_ADMIN, False))
    with pytest.raises(Invalid) as refusal:
        await choose_team(NO_SESSION, user, None)
    assert refusal.value.field == "team" and "audio, vision" in refusal.value.detail


async def test_a_viewer_only_may_submit_nowhere() -> None:
    with pytest.raises(Forbidden) as refusal:
        await choose_team(NO_SESSION, _user((3, "audio", Role.VIEWER, False)), None)
    assert refusal.value.field == "team"
