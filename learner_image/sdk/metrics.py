"""`log_metrics`: report metrics to dlaas as metric lines on stdout."""

from __future__ import annotations

import sys

from learner_image.metric_lines import format_metric_line


def log_metrics(step: int | None = None, **values: float) -> None:
    """Print one metric line, e.g. `{"dlaas_metric": true, "step": 12, "loss": 0.31}`.

    The line is flushed at once. Values that are not finite numbers are left out. See
    `learner_image.metric_lines` for the exact format.
    """
    sys.stdout.write(format_metric_line(step, values) + "\n")
    sys.stdout.flush()
