"""calibration.json: what the microbenchmark writes is what a plan reads back."""

from __future__ import annotations

import json

import pytest

from storage.calibration import Calibration, parse_calibration

MEASURED = Calibration(
    device_flops_s=5.1e10,
    learners=2,
    bandwidth_bytes_s=1.9e9,
    latency_s=4.2e-5,
    torch_version="2.13.0",
    measured={"all_reduce": {"backend": "gloo"}},
)


def test_a_calibration_reads_back_as_written() -> None:
    assert parse_calibration(MEASURED.to_json().encode()) == MEASURED
    alone = Calibration(5e10, 1, None, None, "2.13.0")
    assert parse_calibration(alone.to_json().encode()) == alone


def _with(**changes: object) -> bytes:
    return json.dumps({**json.loads(MEASURED.to_json()), **changes}).encode()


@pytest.mark.parametrize(
    ("raw", "said"),
    [
        (b"{not json", "is not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (_with(format=2), "format: 2"),
        (_with(device_flops_s=0), "device_flops_s: 0 is not above 0"),
        (_with(device_flops_s="fast"), "device_flops_s: 'fast' is not a number"),
        (_with(learners=0), "learners: 0"),
        (_with(learners=True), "learners: True"),
        (_with(latency_s=None), "give both or neither"),
        (_with(bandwidth_bytes_s=-1.0), "bandwidth_bytes_s: -1.0"),
        (b" " * (300 * 1024) + b"{}", "bytes, more than"),
    ],
)
def test_what_is_not_a_calibration_is_refused_saying_why(raw: bytes, said: str) -> None:
    with pytest.raises(ValueError, match=said):
        parse_calibration(raw)
