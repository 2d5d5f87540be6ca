"""A server-sent events parser (the WHATWG event-stream format) over decoded lines."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class SseEvent:
    event: str
    data: str
    id: str | None
    retry_ms: int | None = None


def parse_sse(lines: Iterable[str]) -> Iterator[SseEvent]:
    """Yield one event per blank-line-terminated block; comments and unknown fields are skipped.

    `id` is the last event id seen so far (it persists across events, as the format says);
    an unterminated block at the end of the stream is dropped, as a browser would.
    """
    event = ""
    data: list[str] = []
    last_id: str | None = None
    retry: int | None = None
    has_data = False
    for raw in lines:
        line = raw.rstrip("\r\n")
        if not line:
            if has_data:
                yield SseEvent(event or "message", "\n".join(data), last_id, retry)
            event, data, has_data, retry = "", [], False, None
            continue
        if line.startswith(":"):
            continue
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            data.append(value)
            has_data = True
        elif name == "event":
            event = value
        elif name == "id":
            if "\0" not in value:
                last_id = value or None
        elif name == "retry" and value.isdigit():
            retry = int(value)
