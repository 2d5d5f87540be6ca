"""Which regexes turn a job's log lines into metrics, read from its stored manifest."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def metric_regexes(manifest: Mapping[str, Any]) -> list[str]:
    """Regex strings that pull metrics out of log lines, in manifest order, without repeats.

    Sources: `evaluation_metrics.groups.*.regex` and `evaluation_metrics.groupDicts.*.regex`
    (FfDL), `evaluation_metrics.regex` (dlaas: one regex or a list), each naming the values
    it captures, e.g. `loss=(?P<loss>[0-9.]+)`.
    """
    em = manifest.get("evaluation_metrics")
    if not isinstance(em, Mapping):
        return []
    found: list[str] = []
    for key in ("groups", "groupDicts"):
        groups = em.get(key)
        if isinstance(groups, Mapping):
            for group in groups.values():
                regex = group.get("regex") if isinstance(group, Mapping) else None
                if isinstance(regex, str):
                    found.append(regex)
    native = em.get("regex")
    if isinstance(native, str):
        found.append(native)
    elif isinstance(native, list):
        found.extend(r for r in native if isinstance(r, str))
    return list(dict.fromkeys(found))
