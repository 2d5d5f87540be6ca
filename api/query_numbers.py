"""Whole numbers in a query string: digits only, as the API's schema says.

The number parser behind query parameters would also read "+1", " 1" or "1_0"; a client
sending those has a bug worth hearing about, and the schema the API publishes allows none.
`QueryDigits` goes after the `Query(...)` in an `Annotated`: placed before it, the
published schema would lose the parameter's bounds.
"""

from __future__ import annotations

import re

from pydantic import BeforeValidator

_DIGITS = re.compile(r"[0-9]+")


def digits_only(value: object) -> object:
    if isinstance(value, str) and not _DIGITS.fullmatch(value):
        raise ValueError("must be a whole number written in digits, such as 10")
    return value


QueryDigits = BeforeValidator(digits_only)
