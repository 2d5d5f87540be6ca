"""Pure translations between dlaas's jobs and FfDL's /v1 shapes: no I/O, no state.

```
dlaas state   QUEUED   DEPLOYING  DOWNLOADING  RUNNING     STORING  COMPLETED  FAILED  HALTED
FfDL status   PENDING  DEPLOY     DOWNLOADING  PROCESSING  STORING  COMPLETED  FAILED  HALTED
              (RECOVERING, RESCALING: PROCESSING, their learners are being restarted)
```
FfDL's names are those of its trainer's `Status` (grpc_trainer_v2); its `status_description`
keeps dlaas's own state, so nothing is lost on the way.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any, Literal

import orjson

from api.errors import DlaasError, Invalid
from api.ffdl_v1.schemas import (
    AnyValue,
    Datastore,
    EMetrics,
    Framework,
    LogLine,
    MetaInfo,
    MetricData,
    Model,
    Training,
    TrainingStatus,
)
from api.schemas import JobPublic
from storage.job_states import JobState

S = JobState
FFDL_STATUS: Mapping[JobState, str] = {
    S.QUEUED: "PENDING",
    S.DEPLOYING: "DEPLOY",
    S.DOWNLOADING: "DOWNLOADING",
    S.RUNNING: "PROCESSING",
    S.RECOVERING: "PROCESSING",
    S.RESCALING: "PROCESSING",
    S.STORING: "STORING",
    S.COMPLETED: "COMPLETED",
    S.FAILED: "FAILED",
    S.HALTED: "HALTED",
    # never shown: a deleted job is a 404 on /v1 as on /v2
    S.DELETED: "HALTED",
}
_ENDED = frozenset({S.COMPLETED, S.FAILED})
MODELS_PATH = "/v1/models"


def ffdl_status(state: str) -> str:
    """FfDL's status for a dlaas job state."""
    return FFDL_STATUS[JobState(state)]


def ffdl_time(moment: datetime | None) -> str:
    """FfDL's timestamp format, yyyy-MM-dd'T'HH:mm:ss.SSS'Z' (UTC); "" for none."""
    if moment is None:
        return ""
    utc = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def model_location(job_id: str) -> str:
    return f"{MODELS_PATH}/{job_id}"


def _text(value: object) -> str:
    return "" if value is None else str(value)


def _data_stores(manifest: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    stores = manifest.get("data_stores")
    return [s for s in stores if isinstance(s, Mapping)] if isinstance(stores, list) else []


def _datastore(store: Mapping[str, Any]) -> Datastore:
    connection = store.get("connection")
    fields = connection if isinstance(connection, Mapping) else {}
    return Datastore(
        data_store_id=_text(store.get("id")),
        type=_text(store.get("type")),
        connection={str(k): _text(v) for k, v in fields.items()},
    )


def model_of(job: JobPublic) -> Model:
    """A dlaas job (as /v2 shows it, secrets masked) as FfDL's `Model`."""
    manifest = job.manifest
    framework = manifest.get("framework")
    framework = framework if isinstance(framework, Mapping) else {}
    stores = _data_stores(manifest)
    state = JobState(job.state)
    return Model(
        model_id=job.id,
        location=model_location(job.id),
        name=job.name,
        description=_text(manifest.get("description")),
        framework=Framework(
            name=_text(framework.get("name")), version=_text(framework.get("version"))
        ),
        training=Training(
            command=_text(framework.get("command")),
            cpus=float(manifest.get("cpus", 1.0)),
            gpus=float(manifest.get("gpus", 0)),
            # dlaas keeps bytes; FfDL's default unit is MiB
            memory=round(float(manifest.get("memory", 0)) / 2**20, 3),
            memory_unit="MiB",
            learners=job.learners,
            input_data=[_text(s.get("id")) for s in stores if s.get("training_data")],
            output_data=[_text(s.get("id")) for s in stores if s.get("training_results")],
            training_status=TrainingStatus(
                status=ffdl_status(job.state),
                status_description=job.state,
                submitted=ffdl_time(job.created_at),
                completed=ffdl_time(job.updated_at) if state in _ENDED else "",
                status_message=job.reason,
                error_code="",
            ),
        ),
        data_stores=[_datastore(store) for store in stores],
    )


# --- PATCH /v1/models/{model_id} ---------------------------------------------------------

Action = Literal["halt", "resume"]
_ACTIONS: tuple[Action, ...] = ("halt", "resume")


def patch_action(status: object) -> Action:
    """What a TrainingUpdate's `status` asks for."""
    asked = status.strip().lower() if isinstance(status, str) else None
    for action in _ACTIONS:
        if asked == action:
            return action
    raise Invalid(
        f"status {status!r} is not an action dlaas takes on a model: send "
        '{"status": "halt"} to stop the training (it can be resumed), or '
        '{"status": "resume"} to run a halted one again',
        code="invalid_status",
        field="status",
    )


# --- errors ------------------------------------------------------------------------------


def ffdl_error(status: int, body: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
    """A dlaas error answer (`{"error", "detail", "field"}`) as FfDL's `Error`
    (`{"code", "error", "description"}`) and its status. FfDL answers every refusal of a
    request's content with 400; dlaas's 422 becomes that, every other status stays."""
    v1_status = HTTPStatus.BAD_REQUEST if status == HTTPStatus.UNPROCESSABLE_ENTITY else status
    phrase = HTTPStatus(v1_status).phrase
    detail = _text(body.get("detail")) or phrase
    named = body.get("field")
    if isinstance(named, str) and named and named not in detail:
        detail = f"{named}: {detail}"
    code = body.get("error")
    return int(v1_status), {
        "code": int(v1_status),
        "error": code if isinstance(code, str) and code else phrase,
        "description": detail,
    }


# --- FfDL's gateway identity header ----------------------------------------------------

USERINFO_HEADER = "X-Watson-Userinfo"
GATEWAY_TOKEN_HEADER = "X-Dlaas-Gateway-Token"
# FfDL's REST server takes the user from this key of the header (restapi/middleware/auth.go)
USERINFO_USER_KEY = "bluemix-instance-id"


def userinfo_user(header: str) -> str | None:
    """The user an `X-Watson-Userinfo` header names: `key=value` pairs separated by `;`,
    the user being `bluemix-instance-id`'s value; None when it names none. A pair without
    exactly one `=` is skipped, as FfDL's gateway middleware skips it. A key given twice is
    refused: which one counts would be up to whoever reads the header, and a gateway that
    takes the first while dlaas took the last would let a caller pick their user."""
    keys = [item.split("=", 1)[0].strip() for item in header.split(";") if "=" in item]
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    if repeated:
        raise DlaasError(
            f"{USERINFO_HEADER} gives {', '.join(repr(key) for key in repeated)} more than "
            "once: the gateway must send each key once",
            code="bad_userinfo",
            field=USERINFO_HEADER,
        )
    pairs = dict(
        (parts[0].strip(), parts[1].strip())
        for item in header.split(";")
        if len(parts := item.split("=")) == 2
    )
    return pairs.get(USERINFO_USER_KEY) or None


# --- logs and metrics as FfDL's training-data records ----------------------------------

DEFAULT_PAGE_SIZE = 10  # FfDL's, when pagesize is not given
_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


@dataclass(frozen=True)
class Since:
    """FfDL's `since_time`: from a time (ms since 1970), or the last `lines` records."""

    time_ms: int | None = None
    last: int | None = None


def parse_since(text: str | None) -> Since:
    """`since_time` as FfDL documents it: empty, from the first record; an RFC 3339 time or
    a whole number of milliseconds since 1970, from that time; a negative whole number,
    the last that many records."""
    if text is None or not text.strip():
        return Since()
    text = text.strip()
    if re.fullmatch(r"-?\d{1,18}", text):
        number = int(text)
        return Since(last=-number) if number < 0 else Since(time_ms=number)
    if _RFC3339.match(text):
        moment = datetime.fromisoformat(text.replace("z", "Z").replace("Z", "+00:00"))
        return Since(time_ms=int(moment.timestamp() * 1000))
    raise Invalid(
        f"since_time {text!r} is neither an RFC 3339 time (2026-11-27T12:00:00Z), "
        "milliseconds since 1970, nor a negative number of records to count back",
        field="since_time",
    )


@dataclass(frozen=True)
class Record:
    """A log line or metric point, numbered from 1 in the order dlaas serves them."""

    rindex: int
    time_ms: int | None  # None: dlaas does not know when the line was written
    data: Any


@dataclass
class Window:
    """Which records a query of `pos`, `since_time` and `pagesize` returns, offered one at
    a time in order: `offer` says when no later record can be taken."""

    pagesize: int
    pos: int = 0
    since: Since = field(default_factory=Since)
    _taken: deque[Record] = field(init=False)

    def __post_init__(self) -> None:
        back = self.since.last or (-self.pos if self.pos < 0 else None)
        self._tail = back
        self._taken = deque(maxlen=back)

    def offer(self, record: Record) -> bool:
        """Take `record` if the query wants it; True once the page is full for good."""
        if self._tail is not None:
            self._taken.append(record)  # only the last `back` stay
            return False
        if record.rindex < self.pos:
            return False
        since = self.since.time_ms
        # a line whose time is unknown is never dropped for being too early
        if since is not None and record.time_ms is not None and record.time_ms < since:
            return False
        self._taken.append(record)
        return len(self._taken) >= self.pagesize

    def records(self) -> list[Record]:
        return list(self._taken)[: self.pagesize]


def _meta(job_id: str, user: str, record: Record) -> MetaInfo:
    return MetaInfo(
        training_id=job_id,
        user_id=user,
        time=str(record.time_ms or 0),
        rindex=str(record.rindex),
    )


def log_line(job_id: str, user: str, record: Record) -> LogLine:
    return LogLine(meta=_meta(job_id, user, record), line=str(record.data))


def _typed(value: object) -> AnyValue:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return AnyValue(type="STRING", value=_text(value))
    return AnyValue(type="INT" if isinstance(value, int) else "FLOAT", value=repr(value))


def group_label(point: Mapping[str, Any]) -> str:
    """dlaas's points are grouped by learner: FfDL's group label (test, train, ...) names it."""
    return f"learner-{point.get('learner', 1)}"


def metric_ms(point: Mapping[str, Any]) -> int | None:
    time = point.get("time")
    return int(float(time) * 1000) if isinstance(time, int | float) else None


def emetrics(job_id: str, user: str, record: Record) -> EMetrics:
    """A dlaas metric point (`{"learner", "time", "step", "values"}`) as FfDL's EMetrics."""
    point: Mapping[str, Any] = record.data
    step = point.get("step")
    values = point.get("values")
    return EMetrics(
        meta=_meta(job_id, user, record),
        etimes={} if step is None else {"iteration": _typed(step)},
        grouplabel=group_label(point),
        values={str(k): _typed(v) for k, v in (values or {}).items()},
    )


def metric_data(point: Mapping[str, Any]) -> MetricData:
    """A dlaas metric point as FfDL's MetricData, the records GET .../metrics streams."""
    ms = metric_ms(point)
    moment = None if ms is None else datetime.fromtimestamp(ms / 1000, UTC)
    step = point.get("step")
    return MetricData(
        type=group_label(point),
        timestamp=ffdl_time(moment),
        iteration=int(step) if isinstance(step, int) else 0,
        Values=dict(point.get("values") or {}),
    )


def sse_records(chunk: bytes) -> list[dict[str, Any]]:
    """The data of the log-line events in a chunk of Server-Sent Events that dlaas's log
    services stream (each chunk holds whole events); `end` and other named events are left
    out."""
    found = []
    for event in chunk.split(b"\n\n"):
        fields = dict(line.split(b": ", 1) for line in event.split(b"\n") if b": " in line)
        if b"data" in fields and b"event" not in fields:
            data = orjson.loads(fields[b"data"])
            if isinstance(data, dict):
                found.append(data)
    return found
