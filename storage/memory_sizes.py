"""Memory sizes as people write them ("16GiB", "512Mi", "100MB", or a number of bytes).

The manifest's `memory` and the `DLAAS_LOCAL_MEMORY` setting read them alike; the machine's
own memory is the local node's default.
"""

from __future__ import annotations

import os
import re

MAX_MEMORY_BYTES = 1024**5

_MEMORY_RE = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([A-Za-z]*)\s*\Z")
_MEMORY_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "ki": 1024,
    "kib": 1024,
    "mi": 1024**2,
    "mib": 1024**2,
    "gi": 1024**3,
    "gib": 1024**3,
    "ti": 1024**4,
    "tib": 1024**4,
}
MEMORY_FORMS = (
    "a whole number of bytes, or a number with a unit: 512Mi, 1000MiB, 1.5GiB (1024-based) "
    "or 100MB, 1Gb, 2G (1000-based)"
)


def parse_memory(value: object) -> int:
    """'1Gb' -> 10**9, '512Mi' -> 512 * 2**20, 2048 -> 2048. ValueError on anything else.

    The result lies between 1 byte and MAX_MEMORY_BYTES (1 PiB).
    """
    amount: float
    if isinstance(value, bool):
        raise ValueError(f"must be {MEMORY_FORMS}")
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        amount = value
    elif isinstance(value, str):
        match = _MEMORY_RE.match(value)
        unit = _MEMORY_UNITS.get(match.group(2).lower()) if match else None
        if match is None or unit is None:
            raise ValueError(f"{shown(value)} is not understood; use {MEMORY_FORMS}")
        amount = float(match.group(1)) * unit  # a string of many digits gives inf
    else:
        raise ValueError(f"must be {MEMORY_FORMS}")
    if not amount <= MAX_MEMORY_BYTES:
        raise ValueError(
            f"{shown(value)} is above the limit of 1 PiB ({MAX_MEMORY_BYTES} bytes); "
            "ask for at most 1024Ti"
        )
    result = round(amount)
    if result <= 0:
        raise ValueError(f"must be more than 0 bytes; use {MEMORY_FORMS}")
    return result


def shown(value: object, limit: int = 60) -> str:
    """A refused value as a message quotes it: its repr, cut to `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def machine_memory() -> int:
    """This machine's physical memory in bytes (0 where the system does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 0
