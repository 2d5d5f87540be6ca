"""The connection bookkeeping of an HTTP server process: caps per address and in all."""

from __future__ import annotations

import resource

import pytest

from storage.connection_caps import Admission, ConnectionTable, total_connection_cap
from storage.http_server import HttpLimits, raise_open_file_limit
from storage.settings import Settings


def test_connections_of_one_address_past_its_cap_are_refused_others_are_not() -> None:
    table: ConnectionTable[str] = ConnectionTable(per_address=2, total=10)
    assert table.admit("a1", "10.0.0.1") == Admission(admitted=True)
    assert table.admit("a2", "10.0.0.1").admitted
    assert table.admit("a3", "10.0.0.1") == Admission(admitted=False, refused="address")
    assert table.admit("b1", "10.0.0.2").admitted
    assert (len(table), table.count("10.0.0.1"), table.count("10.0.0.2")) == (3, 2, 1)


def test_a_released_connection_gives_its_place_back_once() -> None:
    table: ConnectionTable[str] = ConnectionTable(per_address=1, total=10)
    table.admit("a1", "10.0.0.1")
    table.release("a1")
    table.release("a1")
    table.release("never-admitted")
    assert (len(table), table.count("10.0.0.1")) == (0, 0)
    assert table.admit("a2", "10.0.0.1").admitted


def test_at_the_total_cap_the_longest_waiting_for_a_head_is_evicted() -> None:
    table: ConnectionTable[str] = ConnectionTable(per_address=10, total=3)
    for key in ("old", "middle", "new"):
        table.admit(key, "10.0.0.1")
    admission = table.admit("newest", "10.0.0.2")
    assert admission == Admission(admitted=True, evicted="old")
    assert (len(table), table.count("10.0.0.1"), table.awaiting_head()) == (3, 2, 3)


def test_connections_inside_a_request_are_never_evicted() -> None:
    table: ConnectionTable[str] = ConnectionTable(per_address=10, total=2)
    table.admit("busy", "10.0.0.1")
    table.admit("idle", "10.0.0.1")
    table.request_started("busy")
    assert table.admit("new", "10.0.0.2").evicted == "idle"
    table.request_started("new")
    assert table.admit("refused", "10.0.0.3") == Admission(admitted=False, refused="total")
    assert len(table) == 2


def test_a_connection_back_between_requests_waits_at_the_end_of_the_queue() -> None:
    table: ConnectionTable[str] = ConnectionTable(per_address=10, total=2)
    table.admit("first", "10.0.0.1")
    table.admit("second", "10.0.0.1")
    table.request_started("first")
    table.request_finished("first")  # now newer in the queue than "second"
    assert table.admit("third", "10.0.0.1").evicted == "second"


def test_a_finished_request_of_a_released_connection_is_not_counted() -> None:
    table: ConnectionTable[str] = ConnectionTable(per_address=10, total=2)
    table.admit("gone", "10.0.0.1")
    table.release("gone")
    table.request_finished("gone")
    assert (len(table), table.awaiting_head()) == (0, 0)


def test_a_key_admitted_twice_is_a_programming_error() -> None:
    table: ConnectionTable[str] = ConnectionTable(per_address=10, total=2)
    table.admit("a", "10.0.0.1")
    with pytest.raises(ValueError, match="already admitted"):
        table.admit("a", "10.0.0.1")


@pytest.mark.parametrize(
    ("fd_limit", "headroom", "asked", "cap"),
    [
        (1_048_576, 512, 0, 1_048_064),
        (20_000, 512, 0, 19_488),
        (20_000, 512, 5_000, 5_000),
        (20_000, 512, 50_000, 19_488),  # never past the limit, whatever is asked
        (1024, 512, 0, 512),
        (800, 512, 0, 400),  # a small limit keeps half for the rest
        (1, 512, 0, 1),
    ],
)
def test_the_total_cap_keeps_files_for_the_rest_of_the_process(
    fd_limit: int, headroom: int, asked: int, cap: int
) -> None:
    assert total_connection_cap(fd_limit, headroom, asked) == cap


def test_caps_below_one_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        ConnectionTable(per_address=0, total=1)


def test_a_process_raises_its_open_file_limit_to_the_hard_limit_and_caps_below_it() -> None:
    soft = raise_open_file_limit()
    now_soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert now_soft == soft
    assert hard == resource.RLIM_INFINITY or soft == hard
    limits = HttpLimits.of_process(
        Settings(http_fd_headroom=100, http_max_connections_per_address=7)
    )
    assert limits.total == total_connection_cap(soft, 100) < soft
    assert limits.per_address == 7
