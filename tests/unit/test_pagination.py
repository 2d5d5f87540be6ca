"""Cursors and the decisions behind the API's lists, as plain functions."""

from __future__ import annotations

import string
from datetime import UTC, datetime, timedelta, timezone

import pytest

from api.auth import Principal
from api.errors import Invalid
from api.pagination import (
    decode_cursor,
    encode_cursor,
    event_cursor,
    event_position,
    job_cursor,
    job_position,
    listing_continuation,
    listing_cursor,
    split_page,
)
from api.services.lists import parse_states, visible_team_ids
from storage.job_listing import JobPosition
from storage.job_states import JobState
from storage.roles import Role
from storage.teams import TeamRole


def test_cursors_give_back_the_position_they_hold() -> None:
    moment = datetime(2026, 5, 1, 10, 30, 0, 123456, tzinfo=UTC)
    assert job_position(job_cursor(moment, "training-abc")) == JobPosition(moment, "training-abc")
    assert event_position(event_cursor(12345)) == 12345
    assert listing_continuation(listing_cursor("a/b c/ü")) == "a/b c/ü"


def test_a_job_cursor_holds_its_time_in_utc() -> None:
    naive = datetime(2026, 5, 1, 10, 30)
    assert job_position(job_cursor(naive, "j")).created_at == naive.replace(tzinfo=UTC)
    paris = datetime(2026, 5, 1, 12, 30, tzinfo=timezone(timedelta(hours=2)))
    held = job_position(job_cursor(paris, "j")).created_at
    assert held == paris and held.utcoffset() == timedelta(0)


def test_cursors_are_url_safe() -> None:
    cursor = listing_cursor("?&=/+" * 20)
    assert set(cursor) <= set(string.ascii_letters + string.digits + "-_")


def _refused(cursor: str) -> bool:
    try:
        job_position(cursor)
    except Invalid as refusal:
        assert refusal.field == "cursor"
        assert refusal.status == 422
        return True
    return False


def test_every_single_change_to_a_cursor_is_refused() -> None:
    cursor = job_cursor(datetime(2026, 5, 1, tzinfo=UTC), "training-abcdefghij")
    for at in range(len(cursor)):
        for other in "AgZ-_9":
            if other != cursor[at]:
                assert _refused(cursor[:at] + other + cursor[at + 1 :]), (at, other)
    assert _refused(cursor[:-1])
    assert _refused(cursor + "A")
    assert _refused(cursor + "==")
    assert _refused(" " + cursor)


@pytest.mark.parametrize(
    "cursor",
    [
        "",
        "=",
        "not base64 at all!",
        "ü",
        event_cursor(1),
        listing_cursor("x"),
        encode_cursor("jobs", "2026-05-01T00:00:00+00:00"),
        encode_cursor("jobs", "2026-05-01T00:00:00+00:00", 7),
        encode_cursor("jobs", "not a time", "j"),
        encode_cursor("jobs", "2026-05-01T00:00:00", "j"),
    ],
)
def test_a_cursor_of_another_list_or_shape_is_refused(cursor: str) -> None:
    assert _refused(cursor)


def test_an_event_cursor_wants_an_integer() -> None:
    with pytest.raises(Invalid):
        event_position(encode_cursor("events", "5"))
    with pytest.raises(Invalid):
        decode_cursor("events", encode_cursor("events", 5), bool)


def test_split_page_says_whether_more_follow() -> None:
    assert split_page([1, 2, 3], 2) == ([1, 2], True)
    assert split_page([1, 2], 2) == ([1, 2], False)
    assert split_page([], 2) == ([], False)


def test_parse_states_names_the_field_and_the_states() -> None:
    assert parse_states(["RUNNING", "FAILED"]) == {JobState.RUNNING, JobState.FAILED}
    assert parse_states([]) == frozenset()
    with pytest.raises(Invalid) as refusal:
        parse_states(["RUNNING", "running"])
    assert refusal.value.field == "state"
    assert "'running'" in refusal.value.detail and "QUEUED" in refusal.value.detail


def test_a_user_sees_the_jobs_of_their_teams_and_an_admin_every_teams() -> None:
    teams = (
        TeamRole(1, "ana", Role.TEAM_ADMIN, personal=True),
        TeamRole(7, "vision", Role.VIEWER, personal=False),
    )
    assert visible_team_ids(Principal(1, "ana", is_admin=False, teams=teams)) == {1, 7}
    assert visible_team_ids(Principal(1, "ana", is_admin=False)) == frozenset()
    assert visible_team_ids(Principal(1, "ana", is_admin=True, teams=teams)) is None
