"""Turn a line of training output into a metric record, or None.

Two sources of metrics, tried in this order:

- JSON metric lines written by the SDK (`{"dlaas_metric": true, ...}`), decoded by
  `learner_image.metric_lines.parse_metric_line`;
- the job's regexes (env `DLAAS_METRIC_PATTERNS`, a JSON list of regex strings with named
  groups). Every named group whose text is a number becomes a value; a group named `step`,
  `iteration` or `iter` becomes the step instead. Several patterns may match one line; their
  values are merged.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from math import isfinite
from typing import Any, NamedTuple

STEP_GROUPS = ("step", "iteration", "iter")


class MetricRecord(NamedTuple):
    """A point parsed from a line (a tuple: the runner makes one per line of a flood)."""

    step: int | None
    values: dict[str, float]


class GroupPlan(NamedTuple):
    """A pattern and what to make of each of its named groups: (position in
    `match.groups()`, name, whether it is the step), worked out once rather than per line."""

    pattern: re.Pattern[str]
    groups: tuple[tuple[int, str, bool], ...]


def plan_groups(pattern: re.Pattern[str]) -> GroupPlan:
    named = sorted(pattern.groupindex.items(), key=lambda item: item[1])
    return GroupPlan(
        pattern, tuple((index - 1, name, name in STEP_GROUPS) for name, index in named)
    )


@dataclass(frozen=True)
class Patterns:
    compiled: tuple[re.Pattern[str], ...]
    problems: tuple[str, ...] = ()

    @cached_property
    def plans(self) -> tuple[GroupPlan, ...]:
        return tuple(plan_groups(pattern) for pattern in self.compiled)


def compile_patterns(raw: str | None) -> Patterns:
    """Compile `DLAAS_METRIC_PATTERNS`; a bad entry is skipped and described in `problems`."""
    if raw is None or not raw.strip():
        return Patterns(())
    try:
        items = json.loads(raw)
    except ValueError as exc:
        return Patterns((), (f"DLAAS_METRIC_PATTERNS is not a JSON list of strings: {exc}",))
    if isinstance(items, str):
        items = [items]
    if not isinstance(items, list):
        return Patterns((), ("DLAAS_METRIC_PATTERNS must be a JSON list of regex strings",))
    compiled: list[re.Pattern[str]] = []
    problems: list[str] = []
    for i, item in enumerate(items):
        if not isinstance(item, str):
            problems.append(f"metric pattern #{i + 1} is not a string; skipped")
            continue
        try:
            pattern = re.compile(item)
        except re.error as exc:
            problems.append(
                f"metric pattern #{i + 1} {item!r} is not a valid regex ({exc}); skipped"
            )
            continue
        if not pattern.groupindex:
            problems.append(
                f"metric pattern #{i + 1} {item!r} has no named groups "
                "such as (?P<loss>[0-9.eE+-]+); skipped"
            )
            continue
        compiled.append(pattern)
    return Patterns(tuple(compiled), tuple(problems))


def to_number(text: str | None) -> float | None:
    """A finite float from the text of a group, or None."""
    if text is None:
        return None
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def to_step(value: Any) -> int | None:
    """An integral step from a group's text or a JSON value, or None."""
    number: float | None = None
    if isinstance(value, str):
        # The common case, without a float on the way; longer runs of digits go through
        # float like the rest (int() refuses over 4300 digits, and \u00b2 is a "digit").
        if len(value) <= 18 and value.isascii() and value.isdigit():
            return int(value)
        number = to_number(value)
    elif isinstance(value, bool):
        return None
    elif isinstance(value, int):
        return value
    elif isinstance(value, float) and math.isfinite(value):
        number = value
    if number is None or not number.is_integer():
        return None
    return int(number)


def match_patterns(line: str, patterns: Patterns) -> MetricRecord | None:
    """Values of every pattern that matches `line` (search, not full match), merged: a later
    pattern's value of a name wins, the first step found stays. The runner calls this for
    every line of output, so the per-group work is inlined."""
    step: int | None = None
    values: dict[str, float] = {}
    for pattern, groups in patterns.plans:
        match = pattern.search(line)
        if match is None:
            continue
        texts = match.groups()
        for index, name, is_step in groups:
            text = texts[index]
            if text is None:
                continue
            if is_step:
                if step is None:
                    step = to_step(text)
                continue
            try:
                value = float(text)  # surrounding whitespace is allowed, as in to_number
            except ValueError:
                continue
            if isfinite(value):
                values[name] = value
    if not values:
        return None
    return MetricRecord(step, values)


def from_metric_dict(data: Mapping[str, Any]) -> MetricRecord | None:
    """A record from the `{"step": n, name: value, ...}` dict of `parse_metric_line`."""
    step = to_step(data.get("step"))
    values: dict[str, float] = {}
    for name, value in data.items():
        if name in ("step", "dlaas_metric"):
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if math.isfinite(value):
            values[str(name)] = float(value)
    if not values:
        return None
    return MetricRecord(step, values)


MetricLineParser = Callable[[str], "dict[str, Any] | None"]


class MetricsParser:
    """Parse lines with the SDK's JSON metric lines first, then the job's regexes."""

    def __init__(self, patterns: Patterns, json_parser: MetricLineParser | None = None) -> None:
        self.patterns = patterns
        self.json_parser = json_parser

    def parse(self, line: str) -> MetricRecord | None:
        if self.json_parser is not None and "dlaas_metric" in line:
            data = self.json_parser(line)
            if data is not None:
                return from_metric_dict(data)
        if self.patterns.compiled:
            return match_patterns(line, self.patterns)
        return None
