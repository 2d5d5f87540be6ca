"""The pure translations between dlaas's jobs and FfDL's /v1 shapes."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

from api.errors import DlaasError, Invalid
from api.ffdl_v1.mapping import (
    FFDL_STATUS,
    Record,
    Since,
    Window,
    ffdl_error,
    ffdl_status,
    ffdl_time,
    parse_since,
    patch_action,
    sse_records,
    userinfo_user,
)
from storage.job_states import JobState
from storage.settings import Settings

# FfDL's trainer statuses (trainer/trainer/grpc_trainer_v2/trainer.proto, `Status`)
FFDL_STATUSES = {
    "NOT_STARTED",
    "PENDING",
    "HALTED",
    "FAILED",
    "DEPLOY",
    "DOWNLOADING",
    "PROCESSING",
    "STORING",
    "COMPLETED",
    "QUEUED",
}


def test_every_dlaas_state_has_an_ffdl_status() -> None:
    assert set(FFDL_STATUS) == set(JobState)
    assert set(FFDL_STATUS.values()) <= FFDL_STATUSES


@pytest.mark.parametrize(
    ("state", "status"),
    [
        ("QUEUED", "PENDING"),
        ("DEPLOYING", "DEPLOY"),
        ("DOWNLOADING", "DOWNLOADING"),
        ("RUNNING", "PROCESSING"),
        ("RECOVERING", "PROCESSING"),
        ("RESCALING", "PROCESSING"),
        ("STORING", "STORING"),
        ("COMPLETED", "COMPLETED"),
        ("FAILED", "FAILED"),
        ("HALTED", "HALTED"),
    ],
)
def test_states_map_onto_ffdls_statuses(state: str, status: str) -> None:
    assert ffdl_status(state) == status


def test_times_are_in_ffdls_format() -> None:
    assert ffdl_time(datetime(2026, 11, 27, 9, 5, 3, 123456, tzinfo=UTC)) == (
        "2026-11-27T09:05:03.123Z"
    )
    assert ffdl_time(datetime(2026, 11, 27, 9, 5, 3)) == "2026-11-27T09:05:03.000Z"  # UTC
    assert ffdl_time(None) == ""


@pytest.mark.parametrize(
    ("given", "action"), [("halt", "halt"), ("resume", "resume"), (" HALT ", "halt")]
)
def test_patch_takes_halt_and_resume(given: str, action: str) -> None:
    assert patch_action(given) == action


@pytest.mark.parametrize("given", ["pause", "", None, 1, ["halt"]])
def test_any_other_status_is_refused_naming_the_field_and_the_values(given: object) -> None:
    with pytest.raises(Invalid) as refused:
        patch_action(given)
    assert refused.value.field == "status"
    assert '"halt"' in refused.value.detail and '"resume"' in refused.value.detail


def test_errors_take_ffdls_shape_with_422_as_400() -> None:
    status, body = ffdl_error(422, {"error": "missing_field", "detail": "no x", "field": "x"})
    assert (status, body) == (400, {"code": 400, "error": "missing_field", "description": "no x"})
    status, body = ffdl_error(404, {"error": "not_found", "detail": "gone", "field": "model_id"})
    assert (status, body["description"]) == (404, "model_id: gone")
    assert ffdl_error(500, {}) == (
        500,
        {"code": 500, "error": "Internal Server Error", "description": "Internal Server Error"},
    )


@pytest.mark.parametrize(
    ("header", "user"),
    [
        ("bluemix-user-id=alice;bluemix-instance-id=alice-ml", "alice-ml"),
        ("bluemix-instance-id=bob", "bob"),
        (" bluemix-instance-id = bob ; x=y", "bob"),
        ("bluemix-user-id=alice", None),
        ("bluemix-instance-id=a=b", None),  # not a pair: FfDL skips it
        ("bluemix-instance-id=", None),
        ("", None),
    ],
)
def test_the_gateway_header_names_the_instance_as_ffdl_reads_it(
    header: str, user: str | None
) -> None:
    assert userinfo_user(header) == user


@pytest.mark.parametrize(
    ("header", "repeated"),
    [
        ("bluemix-instance-id=alice;bluemix-instance-id=admin", "'bluemix-instance-id'"),
        ("bluemix-instance-id=a=b; bluemix-instance-id =admin", "'bluemix-instance-id'"),
        ("x=1;bluemix-instance-id=bob;x=2", "'x'"),
    ],
)
def test_a_key_given_twice_in_the_gateway_header_is_refused_naming_it(
    header: str, repeated: str
) -> None:
    with pytest.raises(DlaasError) as refused:
        userinfo_user(header)
    assert refused.value.status == 400 and refused.value.field == "X-Watson-Userinfo"
    assert f"gives {repeated} more than once" in refused.value.detail


def test_since_time_as_ffdl_documents_it() -> None:
    assert parse_since(None) == parse_since("") == Since()
    assert parse_since("-5") == Since(last=5)
    assert parse_since("1700000000000") == Since(time_ms=1_700_000_000_000)
    assert parse_since("2023-11-14T22:13:20Z") == Since(time_ms=1_700_000_000_000)
    assert parse_since("2023-11-14T23:13:20.5+01:00") == Since(time_ms=1_700_000_000_500)
    with pytest.raises(Invalid) as refused:
        parse_since("yesterday")
    assert refused.value.field == "since_time"


def _records(count: int, times: bool = True) -> list[Record]:
    return [Record(n, n * 1000 if times else None, f"line {n}") for n in range(1, count + 1)]


def _window(records: list[Record], window: Window) -> list[int]:
    for record in records:
        if window.offer(record):
            break
    return [r.rindex for r in window.records()]


def test_a_window_pages_from_pos_or_back_from_the_end() -> None:
    assert _window(_records(30), Window(10)) == list(range(1, 11))
    assert _window(_records(30), Window(3, pos=5)) == [5, 6, 7]
    assert _window(_records(30), Window(10, pos=-4)) == [27, 28, 29, 30]
    assert _window(_records(30), Window(2, pos=-4)) == [27, 28]
    assert _window(_records(30), Window(10, since=Since(last=2))) == [29, 30]
    assert _window(_records(30), Window(3, since=Since(time_ms=20_500))) == [21, 22, 23]
    # a line whose time dlaas does not know is not dropped by a time
    assert _window(_records(5, times=False), Window(10, since=Since(time_ms=9e12))) == [
        1,
        2,
        3,
        4,
        5,
    ]


def test_a_full_page_stops_the_reading() -> None:
    window = Window(2)
    assert [window.offer(r) for r in _records(2)] == [False, True]


def test_log_line_events_are_read_from_server_sent_events() -> None:
    chunk = (
        b'id: a\ndata: {"learner":1,"line":"one","time":null}\n\n'
        b'data: {"learner":2,"line":"two","time":1.5}\n\n'
        b'event: end\ndata: {"state":"COMPLETED"}\n\n'
    )
    assert [d["line"] for d in sse_records(chunk)] == ["one", "two"]


def test_trusting_the_gateway_header_takes_the_gateways_secret(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="DLAAS_V1_GATEWAY_TOKEN"):
        Settings(home=tmp_path, v1_trusted_userinfo=True)
    trusting = Settings(home=tmp_path, v1_trusted_userinfo=True, v1_gateway_token="s" * 32)
    assert trusting.v1_trusted_userinfo
    assert not Settings(home=tmp_path).v1_trusted_userinfo  # off unless turned on
