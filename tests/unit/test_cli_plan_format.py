"""How `dlaas plan` writes spans, batches and rates."""

from __future__ import annotations

import pytest

from cli.plan import (
    describe_inputs,
    format_batch,
    format_duration,
    format_rate,
    format_seconds,
)


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


def test_the_inputs_say_which_figures_a_calibration_gave() -> None:
    configured = {
        "exchange": "parameter_server",
        "network": {"bandwidth_bytes_s": 1.25e9, "latency_s": 5e-5, "source": "settings"},
        "costs": {"sample_seconds": 0.002, "source": "manifest"},
        "calibration": None,
    }
    assert describe_inputs(configured) == [
        "a parameter server over links of 1.25 GB/s and 50 us latency"
    ]
    one_learner = {
        **configured,
        "exchange": "allreduce",
        "costs": {"sample_seconds": 0.0125, "flops_per_sample": 5e8, "source": "calibration"},
        "calibration": {"job_id": "training-abc", "device_flops_s": 4e10},
    }
    assert describe_inputs(one_learner) == [
        "all-reduce over links of 1.25 GB/s and 50 us latency",
        "12.5 ms a sample: 5e+08 FLOPs at 40 GFLOP/s (measured by calibration training-abc)",
        "calibration training-abc timed no link (one learner): the links are DLAAS_NETWORK_*'s",
    ]
