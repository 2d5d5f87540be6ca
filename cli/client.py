"""`DlaasClient`: the dlaas REST API (`/v2`) over a synchronous httpx client.

Every method returns the parsed JSON of one endpoint; a method that returns a list follows
the pages of its endpoint to the last (`jobs_page` gives one page). A 4xx/5xx answer raises
`ApiError` with the server's `{"error", "detail"}`; an unreachable server raises
`DlaasConnectionError`. Uploads and downloads stream in chunks and report progress as byte
increments.

Every POST carries an `Idempotency-Key` of its own, so it is retried safely while the
server restarts or is briefly unavailable (`retry_for` seconds): the server answers a retry
of a request it already carried out with its first answer. A followed log reconnects for as
long, resuming after the last event it got.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO
from urllib.parse import quote

import httpx

from cli.sse import parse_sse
from cli.tenancy_client import TenancyCalls

ProgressCallback = Callable[[int], None]

CHUNK_SIZE = 1 << 20
# Answers that say the request was not carried out and may be sent again as it is.
RETRYABLE_STATUSES = frozenset({502, 503, 504})
RETRYABLE_CODES = frozenset({"request_in_progress"})


class ApiError(Exception):
    """The server answered with an error status; `detail` is its human explanation."""

    def __init__(
        self,
        status: int,
        code: str,
        detail: str,
        *,
        field: str | None = None,
        method: str = "",
        path: str = "",
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{status} {code}: {detail}")
        self.status = status
        self.code = code
        self.detail = detail
        self.field = field
        self.method = method
        self.path = path
        self.retry_after = retry_after  # seconds, from a Retry-After header


class DlaasConnectionError(Exception):
    """The server could not be reached or the connection broke."""

    def __init__(self, url: str, reason: str, *, refused: bool = False) -> None:
        super().__init__(f"{url}: {reason}")
        self.url = url
        self.reason = reason
        self.refused = refused


class DlaasClient(TenancyCalls):
    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
        reconnect_delay: float = 0.5,
        retry_for: float = 90.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url.rstrip("/")
        headers = {"Accept": "application/json", "User-Agent": "dlaas-cli"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.Client(
            base_url=self.url,
            headers=headers,
            timeout=httpx.Timeout(timeout, connect=10.0),
            transport=transport,
        )
        self.reconnect_delay = reconnect_delay
        self.retry_for = retry_for
        self._sleep = sleep
        self._clock = clock

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> DlaasClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- jobs -------------------------------------------------------------------------------

    def submit_job(
        self,
        manifest: Path,
        model_zip: Path,
        progress: ProgressCallback | None = None,
        team: str | None = None,
    ) -> dict[str, Any]:
        """`POST /v2/jobs` multipart (`manifest` YAML, `model` zip, the `team` if named),
        streaming the archive."""
        data = {"team": team} if team is not None else None
        with manifest.open("rb") as mf, model_zip.open("rb") as zf:
            files = {
                "manifest": (manifest.name, mf, "application/x-yaml"),
                "model": (model_zip.name, ProgressReader(zf, progress), "application/zip"),
            }
            return self._json("POST", "/v2/jobs", files=files, data=data, timeout=_upload_timeout())

    def plan(self, manifest: Path, calibration: str | None = None) -> dict[str, Any]:
        """`POST /v2/plan` with the manifest as a submission sends it (multipart `manifest`),
        with the figures of the calibration job `calibration` if given."""
        params = {"calibration": calibration} if calibration is not None else None
        with manifest.open("rb") as mf:
            files = {"manifest": (manifest.name, mf, "application/x-yaml")}
            return self._json("POST", "/v2/plan", files=files, params=params)

    def jobs_page(
        self,
        *,
        states: Sequence[str] = (),
        limit: int | None = None,
        cursor: str | None = None,
        team: str | None = None,
    ) -> dict[str, Any]:
        """One page of `GET /v2/jobs`, newest first: `{"jobs": [...], "next": cursor|None}`."""
        params = _job_filters(states, limit, team)
        if cursor is not None:
            params["cursor"] = cursor
        return self._json("GET", "/v2/jobs", params=params)

    def list_jobs(
        self, *, states: Sequence[str] = (), limit: int | None = None, team: str | None = None
    ) -> list[dict[str, Any]]:
        """Every job (in `states`, of `team`, if given), newest first, `limit` per request."""
        return self._every("/v2/jobs", "jobs", _job_filters(states, limit, team))

    def get_job(self, job_id: str) -> dict[str, Any]:
        return self._json("GET", _job(job_id))

    def job_events(self, job_id: str) -> list[dict[str, Any]]:
        """Every event of the job, oldest first."""
        return self._every(f"{_job(job_id)}/events", "events")

    def halt_job(self, job_id: str) -> dict[str, Any]:
        return self._json("POST", f"{_job(job_id)}/halt")

    def resume_job(self, job_id: str) -> dict[str, Any]:
        return self._json("POST", f"{_job(job_id)}/resume")

    def delete_job(self, job_id: str) -> dict[str, Any]:
        return self._json("DELETE", _job(job_id))

    def job_metrics(self, job_id: str, last: int | None = None) -> list[dict[str, Any]]:
        """The job's metric points; with `last`, only each learner's last `last` points."""
        params = {"last": str(last)} if last is not None else None
        return list(self._json("GET", f"{_job(job_id)}/metrics", params=params).get("metrics", []))

    def job_results(self, job_id: str) -> list[dict[str, Any]]:
        """Every result file of the job: `{"path", "size"}` each."""
        return self._every(f"{_job(job_id)}/results", "files")

    def download_result(
        self, job_id: str, path: str, target: Path, progress: ProgressCallback | None = None
    ) -> int:
        """Stream `GET /v2/jobs/{id}/results/{path}` into `target` (temp file, then rename)."""
        url = f"{_job(job_id)}/results/{quote(path, safe='/')}"
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(
            prefix=f".{target.name}.", suffix=".part", dir=target.parent
        )
        written = 0
        try:
            with (
                os.fdopen(fd, "wb") as out,
                self._stream("GET", url, timeout=_stream_timeout()) as resp,
            ):
                for chunk in resp.iter_bytes(CHUNK_SIZE):
                    out.write(chunk)
                    written += len(chunk)
                    if progress is not None:
                        progress(len(chunk))
            os.replace(tmp_name, target)
        except BaseException:
            Path(tmp_name).unlink(missing_ok=True)
            raise
        return written

    # -- data -------------------------------------------------------------------------------

    def upload_data(
        self,
        container: str,
        path: str,
        source: Path,
        progress: ProgressCallback | None = None,
    ) -> dict[str, Any]:
        """`PUT /v2/data/{container}/{path}` with the file streamed as the raw body."""
        size = source.stat().st_size
        url = f"/v2/data/{quote(container, safe='')}/{quote(path, safe='/')}"
        return self._json(
            "PUT",
            url,
            content=_file_chunks(source, progress),
            headers={"Content-Length": str(size), "Content-Type": "application/octet-stream"},
            timeout=_upload_timeout(),
        )

    def list_data(self, container: str) -> list[dict[str, Any]]:
        """Every file of the data container: `{"path", "size"}` each."""
        return self._every(f"/v2/data/{quote(container, safe='')}", "files")

    # -- platform ---------------------------------------------------------------------------

    def cluster(self) -> dict[str, Any]:
        return self._json("GET", "/v2/cluster")

    def usage(self) -> dict[str, Any]:
        return self._json("GET", "/v2/usage")

    def queue(self, team: str | None = None) -> dict[str, Any]:
        """The waiting jobs of your teams (of `team`), every page: `{"at", "jobs"}`."""
        pages = list(self._pages("/v2/queue", {"team": team} if team is not None else None))
        return {
            "at": pages[0].get("at"),
            "jobs": [job for page in pages for job in page.get("jobs") or []],
        }

    def health(self) -> dict[str, Any]:
        return self._json("GET", "/healthz")

    # -- logs -------------------------------------------------------------------------------

    def iter_log_events(
        self,
        job_id: str,
        follow: bool = False,
        learner: int | None = None,
        on_reconnect: Callable[[str], None] | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Yield the job's log events from `GET /v2/jobs/{id}/logs`.

        A line is `{"event": "line", "learner": n, "line": text, "time": t}`; the last event
        of a followed stream is `{"event": "end", "state": ...}`. Other server events pass
        through as `{"event": name, ...data}`. A dropped connection is reopened with the
        `Last-Event-ID` of the last event received, so no line is lost or repeated. A plain
        text answer (from a server that sends no events without follow) is yielded line by
        line, `learner` being the one asked for (None when all learners' lines come mixed).
        `on_reconnect` hears why the stream is being reopened. Without `follow` the server
        sends the log so far as events too, several learners' lines in time order; a dropped
        connection then fails (there is no place to resume).
        """
        params: dict[str, str] = {"follow": "true" if follow else "false"}
        if learner is not None:
            params["learner"] = str(learner)
        path = f"{_job(job_id)}/logs"
        last_id: str | None = None
        failures = 0
        lost_since: float | None = None
        connected = False
        plain = False
        while True:
            headers = {"Accept": "text/event-stream"}
            if last_id is not None:
                headers["Last-Event-ID"] = last_id
            try:
                with self._stream(
                    "GET", path, params=params, headers=headers, timeout=_stream_timeout()
                ) as resp:
                    connected = True
                    if "text/event-stream" not in resp.headers.get("content-type", ""):
                        plain = True
                        for text in resp.iter_lines():
                            failures, lost_since = 0, None
                            yield {"event": "line", "learner": learner, "line": text, "time": None}
                        return
                    for sse in parse_sse(resp.iter_lines()):
                        failures, lost_since = 0, None
                        if sse.id is not None:
                            last_id = sse.id
                        event = _decode_event(sse.event, sse.data)
                        yield event
                        if event["event"] == "end":
                            return
                if not follow:
                    return
                reason = "the log stream closed before the job ended"
            except DlaasConnectionError as exc:
                if not connected or plain or not follow:
                    raise
                reason = exc.reason
            failures += 1
            lost_since = self._clock() if lost_since is None else lost_since
            if self._clock() - lost_since >= self.retry_for:
                raise DlaasConnectionError(
                    self.url,
                    f"log stream lost for {self.retry_for:g} s, {failures} tries ({reason})",
                )
            if on_reconnect is not None:
                on_reconnect(reason)
            self._sleep(min(self.reconnect_delay * 2 ** (failures - 1), 10.0))

    # -- plumbing ---------------------------------------------------------------------------

    def _json(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        resp = self._send(method, path, **kwargs)
        if not resp.content:
            return {}
        try:
            body = resp.json()
        except ValueError as exc:
            raise ApiError(
                resp.status_code,
                "bad_response",
                f"the server answered {method} {path} with something that is not JSON",
                method=method,
                path=path,
            ) from exc
        return body if isinstance(body, dict) else {"items": body}

    def _every(
        self, path: str, key: str, params: dict[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        """The items under `key` of every page of a list, following each page's `next`."""
        return [item for body in self._pages(path, params) for item in body.get(key) or []]

    def _pages(self, path: str, params: dict[str, Any] | None = None) -> Iterator[dict[str, Any]]:
        """Every page of a list, following each page's `next`."""
        cursor: str | None = None
        while True:
            page_params = dict(params or {})
            if cursor is not None:
                page_params["cursor"] = cursor
            body = self._json("GET", path, params=page_params)
            yield body
            following = body.get("next")
            if not following:
                return
            if following == cursor:
                raise ApiError(
                    200,
                    "bad_response",
                    f"the server answered GET {path} with the same page again",
                    method="GET",
                    path=path,
                )
            cursor = str(following)

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One request, sent again while that is safe and useful: a POST (with its
        idempotency key) while the API is away or restarting, any request the API asked to
        come back later (429), all within `retry_for` seconds. A streamed body (a data
        upload) cannot be sent twice and is not."""
        if method == "POST":
            kwargs["headers"] = {
                **(kwargs.get("headers") or {}),
                "Idempotency-Key": secrets.token_urlsafe(24),
            }
        resendable = method != "PUT"
        deadline = self._clock() + self.retry_for
        attempt = 0
        while True:
            attempt += 1
            _rewind(kwargs.get("files"))
            try:
                return self._send_once(method, path, **kwargs)
            except DlaasConnectionError as exc:
                if method != "POST" or (exc.refused and attempt == 1):
                    raise  # (a first refusal: nothing listens there, say so at once)
                error: Exception = exc
                pause = self.reconnect_delay * 2 ** (attempt - 1)
            except ApiError as exc:
                if exc.status == 429 and resendable:
                    pause = exc.retry_after or 1.0
                elif method == "POST" and (
                    exc.status in RETRYABLE_STATUSES or exc.code in RETRYABLE_CODES
                ):
                    pause = exc.retry_after or self.reconnect_delay * 2 ** (attempt - 1)
                else:
                    raise
                error = exc
            if self._clock() + min(pause, 5.0) > deadline:
                raise error
            self._sleep(min(pause, 5.0))

    def _send_once(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            resp = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise self._connection_error(exc) from exc
        if resp.status_code >= 400:
            raise _api_error(resp, method, path)
        return resp

    def _stream(self, method: str, path: str, **kwargs: Any) -> _StreamContext:
        return _StreamContext(self, method, path, kwargs)

    def _connection_error(self, exc: httpx.TransportError) -> DlaasConnectionError:
        if isinstance(exc, httpx.ConnectError):
            return DlaasConnectionError(self.url, str(exc) or "connection refused", refused=True)
        if isinstance(exc, httpx.TimeoutException):
            return DlaasConnectionError(self.url, "the server did not answer in time")
        if isinstance(exc, httpx.UnsupportedProtocol | httpx.InvalidURL):
            return DlaasConnectionError(self.url, f"invalid URL ({exc})")
        return DlaasConnectionError(self.url, f"connection broken ({type(exc).__name__}: {exc})")


class _StreamContext:
    """`with client._stream(...) as resp`: maps transport errors and error statuses."""

    def __init__(self, client: DlaasClient, method: str, path: str, kwargs: dict[str, Any]):
        self._client = client
        self._method = method
        self._path = path
        self._kwargs = kwargs
        self._cm: Any = None

    def __enter__(self) -> _Response:
        try:
            self._cm = self._client._http.stream(self._method, self._path, **self._kwargs)
            resp = self._cm.__enter__()
        except httpx.TransportError as exc:
            raise self._client._connection_error(exc) from exc
        if resp.status_code >= 400:
            with contextlib.suppress(httpx.TransportError):
                resp.read()
            error = _api_error(resp, self._method, self._path)
            self._cm.__exit__(None, None, None)
            raise error
        return _Response(resp, self._client)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with contextlib.suppress(httpx.TransportError):
            self._cm.__exit__(exc_type, exc, tb)


class _Response:
    """A streaming response whose iterators raise `DlaasConnectionError` when the link drops."""

    def __init__(self, resp: httpx.Response, client: DlaasClient) -> None:
        self._resp = resp
        self._client = client
        self.headers = resp.headers
        self.status_code = resp.status_code

    def iter_bytes(self, chunk_size: int) -> Iterator[bytes]:
        try:
            yield from self._resp.iter_bytes(chunk_size)
        except httpx.TransportError as exc:
            raise self._client._connection_error(exc) from exc

    def iter_lines(self) -> Iterator[str]:
        try:
            yield from self._resp.iter_lines()
        except httpx.TransportError as exc:
            raise self._client._connection_error(exc) from exc


class ProgressReader:
    """A binary file wrapper whose reads report newly read bytes to `progress`."""

    def __init__(self, file: BinaryIO, progress: ProgressCallback | None) -> None:
        self._file = file
        self._progress = progress
        self._reported = 0

    def read(self, size: int = -1) -> bytes:
        chunk = self._file.read(size)
        position = self._file.tell()
        if self._progress is not None and position > self._reported:
            self._progress(position - self._reported)
            self._reported = position
        return chunk

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        return self._file.seek(offset, whence)

    def tell(self) -> int:
        return self._file.tell()

    def fileno(self) -> int:
        return self._file.fileno()


def _rewind(files: dict[str, tuple[str, Any, str]] | None) -> None:
    """Put the files of a multipart upload back at their start, for a retry."""
    for _name, file, _type in (files or {}).values():
        file.seek(0)


def _file_chunks(path: Path, progress: ProgressCallback | None) -> Iterator[bytes]:
    with path.open("rb") as f:
        while chunk := f.read(CHUNK_SIZE):
            if progress is not None:
                progress(len(chunk))
            yield chunk


def _decode_event(name: str, data: str) -> dict[str, Any]:
    try:
        payload = json.loads(data) if data else {}
    except json.JSONDecodeError:
        payload = {"line": data}
    if not isinstance(payload, dict):
        payload = {"value": payload}
    kind = "line" if name in ("message", "log", "line") else name
    return {"event": kind, **payload}


def _api_error(resp: httpx.Response, method: str, path: str) -> ApiError:
    code = f"http_{resp.status_code}"
    detail = ""
    field: str | None = None
    try:
        body = resp.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        code = str(body.get("error") or code)
        detail = _detail_text(body.get("detail"))
        raw_field = body.get("field")
        field = str(raw_field) if raw_field else None
    elif resp.text:
        detail = resp.text.strip().splitlines()[0][:300] if resp.text.strip() else ""
    retry_after = resp.headers.get("retry-after", "")
    return ApiError(
        resp.status_code,
        code,
        detail,
        field=field,
        method=method,
        path=path,
        retry_after=float(retry_after) if retry_after.isdigit() else None,
    )


def _detail_text(detail: Any) -> str:
    """The server's detail as one line; FastAPI validation lists become `field: message`."""
    if detail is None:
        return ""
    if isinstance(detail, str):
        return detail
    if isinstance(detail, list):
        parts = []
        for item in detail:
            if isinstance(item, dict):
                loc = ".".join(str(p) for p in item.get("loc", []) if p not in ("body", "query"))
                msg = str(item.get("msg", ""))
                parts.append(f"{loc}: {msg}" if loc else msg)
            else:
                parts.append(str(item))
        return "; ".join(parts)
    return json.dumps(detail)


def _job_filters(
    states: Sequence[str], limit: int | None, team: str | None = None
) -> dict[str, Any]:
    params: dict[str, Any] = {}
    if team is not None:
        params["team"] = team
    if states:
        params["state"] = list(states)
    if limit is not None:
        params["limit"] = str(limit)
    return params


def _job(job_id: str) -> str:
    return f"/v2/jobs/{quote(job_id, safe='')}"


def _upload_timeout() -> httpx.Timeout:
    return httpx.Timeout(300.0, connect=10.0)


def _stream_timeout() -> httpx.Timeout:
    return httpx.Timeout(None, connect=10.0)
