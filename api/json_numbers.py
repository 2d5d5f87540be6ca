"""Numbers as JSON Schema reads them, for request bodies validated strictly."""

from __future__ import annotations


def whole_number(value: object) -> object:
    """JSON's 30.0 is the integer 30 (JSON Schema says so); 30.5 and "30" stay refused."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value
