"""Cursor pagination shared by every list of the API: `limit` and `cursor` in the query,
`next` in the body (null on the last page).

A cursor is opaque to clients: url-safe base64 of a checksum and a JSON array naming the
list it belongs to and where its page ended (a job's creation time and id, an event id,
an object store's continuation). It holds a position, never a permission: whatever a
request's other parameters say still applies to the page it asks for. The checksum makes
an altered or truncated cursor a 422 rather than some other position; it needs no secret,
as a forged cursor could only name a position in a list its sender may read anyway.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Query, Request

from api.errors import Invalid
from api.query_numbers import QueryDigits
from storage.job_listing import JobPosition

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
MAX_CURSOR_LENGTH = 2048
_CHECKSUM_BYTES = 8

Limit = Annotated[
    int,
    Query(ge=1, le=MAX_LIMIT, description=f"Items per page (1-{MAX_LIMIT})."),
    QueryDigits,
]
Cursor = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=MAX_CURSOR_LENGTH,
        description="The `next` of the page before; leave it out for the first page.",
    ),
]

T = TypeVar("T")


@dataclass(frozen=True)
class PageRequest:
    """Which page of a list a request asks for."""

    limit: int
    cursor: str | None


def page_request(
    request: Request, limit: Limit = DEFAULT_LIMIT, cursor: Cursor = None
) -> PageRequest:
    # A repeated parameter would otherwise count by its last value alone.
    for name in ("limit", "cursor"):
        if len(request.query_params.getlist(name)) > 1:
            raise Invalid(f"give {name} once: it was given several times", field=name)
    return PageRequest(limit, cursor)


PageQuery = Annotated[PageRequest, Depends(page_request)]


def split_page(rows: Sequence[T], limit: int) -> tuple[Sequence[T], bool]:
    """A page from `limit + 1` rows fetched: its items, and whether more follow."""
    return rows[:limit], len(rows) > limit


def encode_cursor(kind: str, *values: str | int) -> str:
    payload = json.dumps([kind, *values], separators=(",", ":")).encode()
    checksum = hashlib.sha256(payload).digest()[:_CHECKSUM_BYTES]
    return base64.urlsafe_b64encode(checksum + payload).rstrip(b"=").decode()


def decode_cursor(kind: str, cursor: str, *shape: type) -> list[Any]:
    """The values `encode_cursor(kind, ...)` put in `cursor`, of the types `shape` lists;
    `Invalid` naming `cursor` for anything else (mangled, altered, from another list)."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        checksum, payload = raw[:_CHECKSUM_BYTES], raw[_CHECKSUM_BYTES:]
        # Decoding overlooks stray characters and a last character's unused bits: only
        # the one spelling `encode_cursor` gives is taken.
        canonical = base64.urlsafe_b64encode(raw).rstrip(b"=").decode() == cursor
        intact = canonical and hashlib.sha256(payload).digest()[:_CHECKSUM_BYTES] == checksum
        decoded = json.loads(payload) if intact else None
    except (binascii.Error, ValueError, RecursionError):
        decoded = None
    if (
        not isinstance(decoded, list)
        or len(decoded) != len(shape) + 1
        or decoded[0] != kind
        or not all(type(v) is t for v, t in zip(decoded[1:], shape, strict=True))
    ):
        raise bad_cursor()
    return decoded[1:]


def bad_cursor() -> Invalid:
    return Invalid(
        "cursor is not one this list handed out: pass the `next` of the page before "
        "unchanged, or leave cursor out to start from the first page",
        code="invalid_cursor",
        field="cursor",
    )


def job_cursor(created_at: datetime, job_id: str) -> str:
    moment = created_at if created_at.tzinfo is not None else created_at.replace(tzinfo=UTC)
    return encode_cursor("jobs", moment.astimezone(UTC).isoformat(), job_id)


def job_position(cursor: str) -> JobPosition:
    created_at, job_id = decode_cursor("jobs", cursor, str, str)
    try:
        moment = datetime.fromisoformat(created_at)
    except ValueError:
        raise bad_cursor() from None
    if moment.tzinfo is None:
        raise bad_cursor()
    return JobPosition(created_at=moment, job_id=job_id)


def event_cursor(event_id: int) -> str:
    return id_cursor("events", event_id)


def event_position(cursor: str) -> int:
    return id_position("events", cursor)


def listing_cursor(continuation: str) -> str:
    return encode_cursor("objects", continuation)


def listing_continuation(cursor: str) -> str:
    [continuation] = decode_cursor("objects", cursor, str)
    return str(continuation)


@dataclass(frozen=True)
class MetricPosition:
    """Where a page of a job's metric points ended: the learner, the byte of its stored
    points where reading goes on and the points before that byte, and the last point served.
    """

    learner: int
    offset: int = 0
    points_before: int = 0
    served: int = 0


def metric_cursor(at: MetricPosition) -> str:
    return encode_cursor("metrics", at.learner, at.offset, at.points_before, at.served)


def metric_position(cursor: str) -> MetricPosition:
    learner, offset, before, served = decode_cursor("metrics", cursor, int, int, int, int)
    if min(learner - 1, offset, before, served - before) < 0:
        raise bad_cursor()
    return MetricPosition(learner, offset, before, served)


def name_cursor(kind: str, name: str) -> str:
    """Where a page of a list by name (teams, members, users) ended."""
    return encode_cursor(kind, name)


def name_position(kind: str, cursor: str) -> str:
    [name] = decode_cursor(kind, cursor, str)
    return str(name)


def id_cursor(kind: str, row_id: int) -> str:
    """Where a page of a list by id (tokens) ended."""
    return encode_cursor(kind, row_id)


def id_position(kind: str, cursor: str) -> int:
    [row_id] = decode_cursor(kind, cursor, int)
    return int(row_id)
