"""How `dlaas queue` says when a job should start: how far ahead, in at most two units."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cli.output import format_from_now

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("ahead", "said"),
    [
        (timedelta(seconds=-30), "now"),
        (timedelta(0), "now"),
        (timedelta(seconds=45), "in 45s"),
        (timedelta(minutes=5, seconds=59), "in 5m"),
        (timedelta(hours=2), "in 2h"),
        (timedelta(hours=2, minutes=10), "in 2h 10m"),
        (timedelta(days=3, hours=4, minutes=5), "in 3d 4h"),
        (timedelta(days=1), "in 1d"),
    ],
)
def test_a_start_reads_as_how_far_ahead_it_is(ahead: timedelta, said: str) -> None:
    assert format_from_now((NOW + ahead).isoformat(), NOW) == said


@pytest.mark.parametrize("value", [None, "", "soon", True])
def test_no_start_reads_as_a_dash(value: object) -> None:
    assert format_from_now(value, NOW) == "-"
