"""Percentiles and summaries of measured times, the one way every benchmark quotes them."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) with linear interpolation; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


def ms(seconds: float) -> float:
    """Seconds as milliseconds rounded for a report."""
    return round(seconds * 1000.0, 2)


def rounded(value: float, digits: int = 3) -> float | None:
    """A figure for JSON: rounded, and None where nothing was measured (NaN)."""
    return None if math.isnan(value) else round(value, digits)
