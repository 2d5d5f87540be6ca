"""Learner events as the lifecycle manager reads them from `dlaas:learner-events`.

Records are flat string maps: `job`, `learner`, `attempt`, `kind` (`status` with `state`;
`exit` with `exit_code` (empty when unknown), `signal` (empty when none), `reason`,
`source`; `checkpoint` with `name`). The node agent adds `deleted=1` to the exits of
learners it stopped on request.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

LEARNER_EVENTS_STREAM = "dlaas:learner-events"
CONSUMER_GROUP = "lifecycle"


@dataclass(frozen=True)
class LearnerEvent:
    job: str
    learner: int
    attempt: int
    kind: str
    state: str = ""
    exit_code: int | None = None
    signal: str | None = None
    reason: str = ""
    source: str = ""
    deleted: bool = False
    name: str = ""


def _text(value: bytes | str | None) -> str:
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else value


def parse_event(fields: Mapping[bytes, bytes] | Mapping[str, str]) -> LearnerEvent | None:
    """The event a stream record holds, or None for a record that is not one."""
    data = {_text(k): _text(v) for k, v in fields.items()}
    try:
        code = data.get("exit_code", "")
        return LearnerEvent(
            job=data["job"],
            learner=int(data["learner"]),
            attempt=int(data["attempt"]),
            kind=data["kind"],
            state=data.get("state", ""),
            exit_code=int(code) if code not in ("", "None") else None,
            signal=data.get("signal") or None,
            reason=data.get("reason", ""),
            source=data.get("source", ""),
            deleted=data.get("deleted") == "1",
            name=data.get("name", ""),
        )
    except (KeyError, ValueError):
        return None


def exit_event_fields(
    *,
    job: str,
    learner: int,
    attempt: int,
    exit_code: int | None,
    signal: str | None,
    reason: str,
    source: str,
    deleted: bool = False,
) -> dict[str, str]:
    return {
        "job": job,
        "learner": str(learner),
        "attempt": str(attempt),
        "kind": "exit",
        "exit_code": "" if exit_code is None else str(exit_code),
        "signal": signal or "",
        "reason": reason,
        "source": source,
        "deleted": "1" if deleted else "0",
    }
