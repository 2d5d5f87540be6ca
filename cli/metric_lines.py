"""The SDK's metric lines, recognised so that `dlaas logs` can leave them out.

A training program reports metrics by printing lines such as

    {"dlaas_metric": true, "step": 12, "loss": 0.31, "accuracy": 0.9}

(`learner_image.sdk.log_metrics` writes them; `learner_image.metric_lines` defines them and
is the rule the runner reads them by). The CLI imports nothing of the platform, so the
rule is restated here, and `tests/unit/test_cli_logs.py` holds the two to the same cases:

- the line, without leading and trailing whitespace, is at most 65536 characters and is a
  JSON object whose `"dlaas_metric"` member is `true`;
- its `"step"`, if present and not null, is a non-negative integer;
- at least one other member is a finite number (not a boolean): a metric.

A line that breaks any of these is not taken as a metric by the runner either, so it stays
in the logs where its author can see it.
"""

from __future__ import annotations

import json
import math
from typing import Any

MARKER = "dlaas_metric"
MAX_LINE_CHARS = 65536


def is_metric_line(line: str) -> bool:
    text = line.strip()
    if not text.startswith("{") or MARKER not in text or len(text) > MAX_LINE_CHARS:
        return False
    try:
        raw = json.loads(text)
    except ValueError:
        return False
    if not isinstance(raw, dict) or raw.get(MARKER) is not True:
        return False
    step = raw.get("step")
    if step is not None and (type(step) is not int or step < 0):
        return False
    return any(name not in (MARKER, "step") and _is_metric(value) for name, value in raw.items())


def _is_metric(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:  # an integer too large for a float
        return False
