"""How `dlaas plan` writes spans, batches and rates."""

from __future__ import annotations

import pytest

from cli.plan import format_batch, format_duration, format_rate, format_seconds


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (None, "-"),
        (5e-5, "50 us"),
        (0.00099995, "1 ms"),  # not "1e+03 us"
        (0.0134, "13.4 ms"),
        (0.9995, "1 s"),
        (5.39, "5.39 s"),
        (59.6, "1m 00s"),
        (750, "12m 30s"),
        (7500, "2h 05m"),
        (3 * 86_400 + 4 * 3600 + 5, "3d 4h"),
    ],
)
def test_spans_read_in_the_unit_that_suits_them(seconds: float | None, shown: str) -> None:
    assert format_seconds(seconds) == shown
    assert format_duration(seconds) == shown


def test_an_uneven_batch_and_a_link_rate_are_shown_short() -> None:
    assert (format_batch(128.0), format_batch(64 / 3)) == ("128", "21.3")
    assert (format_rate(1.25e9), format_rate(5e5), format_rate(None)) == (
        "1.25 GB/s",
        "500 kB/s",
        "-",
    )
