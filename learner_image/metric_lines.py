"""Metric lines: how a training program hands metrics to dlaas through its stdout.

A metric line is one line of output holding a JSON object whose `"dlaas_metric"` member is
`true`, e.g.

    {"dlaas_metric": true, "step": 12, "loss": 0.31, "accuracy": 0.9}

- `"step"` is optional: a non-negative integer, or null/absent when the values belong to no step.
- Every other member is a metric: its name is the key, its value a finite JSON number
  (not a boolean). Members with any other value are ignored.
- Leading and trailing whitespace is ignored; the line must be at most 65536 characters.

Anything else (plain text, JSON without `"dlaas_metric": true`, a bad `"step"`, no metric
member left) is not a metric line. `parse_metric_line` returns `{"step": int | None,
name: float, ...}`, the shape the runner puts on the job's metrics stream.
"""

from __future__ import annotations

import json
import math
from typing import Any

MARKER = "dlaas_metric"
MAX_LINE_CHARS = 65536


def _metric_value(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    as_float = float(value)
    return as_float if math.isfinite(as_float) else None


def format_metric_line(step: int | None, values: dict[str, float]) -> str:
    """The metric line (without newline) for `values`; non-finite values are left out."""
    if step is not None and (type(step) is not int or step < 0):
        raise ValueError(f"step must be a non-negative int or None, got {step!r}")
    record: dict[str, Any] = {MARKER: True, "step": step}
    for name, value in values.items():
        if name in (MARKER, "step"):
            raise ValueError(f"{name!r} is reserved and cannot be a metric name")
        checked = _metric_value(value)
        if checked is not None:
            record[name] = checked
    return json.dumps(record, separators=(", ", ": "))


def parse_metric_line(line: str) -> dict[str, Any] | None:
    """`{"step": int | None, name: float, ...}` for a metric line, else None."""
    text = line.strip()
    if not text.startswith("{") or MARKER not in text or len(text) > MAX_LINE_CHARS:
        return None
    try:
        raw = json.loads(text)
    except ValueError:
        return None
    if not isinstance(raw, dict) or raw.get(MARKER) is not True:
        return None
    step = raw.get("step")
    if step is not None and (type(step) is not int or step < 0):
        return None
    result: dict[str, Any] = {"step": step}
    for name, value in raw.items():
        if name in (MARKER, "step"):
            continue
        checked = _metric_value(value)
        if checked is not None:
            result[name] = checked
    return result if len(result) > 1 else None
