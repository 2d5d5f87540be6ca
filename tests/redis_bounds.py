"""How a deployment's Redis is bounded, read from the `redis-server` command it runs."""

from __future__ import annotations

import shlex

_UNITS = {"kb": 1000, "k": 1000, "mb": 1000**2, "m": 1000**2, "gb": 1000**3, "g": 1000**3}


def redis_bytes(text: str) -> int:
    """A Redis memory figure ("1gb", "512mb", "100000") in bytes, as redis.conf reads it."""
    lowered = text.lower()
    for unit in sorted(_UNITS, key=len, reverse=True):
        if lowered.endswith(unit):
            return int(lowered[: -len(unit)]) * _UNITS[unit]
    return int(lowered)


def maxmemory_of(script: str) -> tuple[int, str]:
    """The `--maxmemory` (bytes) and `--maxmemory-policy` of the script's redis-server."""
    [line] = [line for line in script.splitlines() if "redis-server" in line]
    words = shlex.split(line.split("<<", 1)[0])
    return redis_bytes(words[words.index("--maxmemory") + 1]), words[
        words.index("--maxmemory-policy") + 1
    ]
