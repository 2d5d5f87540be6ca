"""A calibration: what a short microbenchmark measured of the machines a job runs on, for the
performance model (`storage.performance_model`) to predict with measured figures instead of
configured ones.

`learner_image.calibrate` writes it, as `calibration.json` in the job's results; the API
reads it back when a plan names the calibration job. Both sides go through this module, so
the file has one definition:

    {"format": 1,
     "device_flops_s": 5.1e10,       # the slowest learner's float32 matmul speed
     "bandwidth_bytes_s": 1.9e9,     # a learner's link, fitted to timed all-reduces;
     "latency_s": 4.2e-5,            #   both null when the job had one learner
     "learners": 2,
     "torch_version": "2.13.0",
     "measured": {...}}              # how: sizes, repetitions, every timing
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

CALIBRATION_FILE = "calibration.json"
FORMAT = 1
MAX_BYTES = 256 * 1024  # a calibration is a few KiB; anything far larger is not one


@dataclass(frozen=True, slots=True)
class Calibration:
    device_flops_s: float
    learners: int
    bandwidth_bytes_s: float | None  # None: one learner, nothing exchanged to time
    latency_s: float | None
    torch_version: str
    measured: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(
            {
                "format": FORMAT,
                "device_flops_s": self.device_flops_s,
                "bandwidth_bytes_s": self.bandwidth_bytes_s,
                "latency_s": self.latency_s,
                "learners": self.learners,
                "torch_version": self.torch_version,
                "measured": self.measured,
            },
            indent=2,
        )


def _positive(data: dict[str, Any], key: str, *, zero: bool = False) -> float:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{key}: {value!r} is not a number")
    if value < 0 or (value == 0 and not zero):
        raise ValueError(f"{key}: {value!r} is not {'0 or more' if zero else 'above 0'}")
    return float(value)


def parse_calibration(raw: bytes) -> Calibration:
    """The calibration a `calibration.json` holds. Raises ValueError saying what is wrong."""
    if len(raw) > MAX_BYTES:
        raise ValueError(f"is {len(raw)} bytes, more than a calibration's {MAX_BYTES}")
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"is not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError("is not a JSON object")
    if data.get("format") != FORMAT:
        raise ValueError(f"format: {data.get('format')!r}, not {FORMAT}")
    learners = data.get("learners")
    if isinstance(learners, bool) or not isinstance(learners, int) or learners < 1:
        raise ValueError(f"learners: {learners!r} is not a whole number above 0")
    if (data.get("bandwidth_bytes_s") is None) != (data.get("latency_s") is None):
        raise ValueError("bandwidth_bytes_s and latency_s: give both or neither")
    measured_link = data.get("bandwidth_bytes_s") is not None
    measured = data.get("measured", {})
    return Calibration(
        device_flops_s=_positive(data, "device_flops_s"),
        learners=learners,
        bandwidth_bytes_s=_positive(data, "bandwidth_bytes_s") if measured_link else None,
        latency_s=_positive(data, "latency_s", zero=True) if measured_link else None,
        torch_version=str(data.get("torch_version", "")),
        measured=measured if isinstance(measured, dict) else {},
    )
