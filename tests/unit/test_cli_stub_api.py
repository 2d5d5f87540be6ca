"""A stub of the dlaas HTTP contract, for the CLI's unit tests only.

It is a real HTTP server (`http.server` on a loopback port, in a thread) that answers the
`/v2` routes with the shapes the REST contract fixes: bearer auth, JSON errors
`{"error", "detail", "field"}`, multipart submission (with Content-Length required, as the
real API does), lists paged by `limit` and `cursor` with `next` in the body, Server-Sent
Events for followed logs with `id:` lines and an `end` event, and streamed results and data
uploads. Tests script its behaviour through its attributes
and read back the requests it saw. The real API is exercised by the end-to-end tests.
"""

from __future__ import annotations

import email.parser
import email.policy
import io
import json
import threading
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

TOKEN = "stub-token"


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes


def make_job(job_id: str, state: str = "QUEUED", learners: int = 1, reason: str = "") -> dict:
    return {
        "id": job_id,
        "name": "mnist",
        "state": state,
        "reason": reason,
        "learners": learners,
        "attempt": 1,
        "restarts": 0,
        "owner": "admin",
        "created_at": "2026-01-02T03:04:05Z",
        "updated_at": "2026-01-02T03:05:05Z",
        "manifest": {"name": "mnist", "framework": {"name": "pytorch", "command": "python t.py"}},
    }


# One SSE "session": the events to send (id, event name, data) and whether to break the
# connection afterwards (an unterminated chunked body, as when a server dies mid-stream).
SseSession = tuple[list[tuple[str | None, str | None, dict[str, Any]]], bool]


@dataclass
class StubState:
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    events: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    metrics: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    results: dict[str, dict[str, bytes]] = field(default_factory=dict)
    result_listing: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    text_logs: dict[str, dict[int | None, str]] = field(default_factory=dict)
    sse_sessions: dict[str, list[SseSession]] = field(default_factory=dict)
    state_sequence: dict[str, list[str]] = field(default_factory=dict)
    data: dict[str, dict[str, bytes]] = field(default_factory=dict)
    submitted: list[dict[str, Any]] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)
    fail_with: tuple[int, dict[str, Any]] | None = None
    fail_times: int | None = None  # how many requests fail_with answers (None: all)
    usage: dict[str, Any] = field(default_factory=dict)
    cluster: dict[str, Any] = field(
        default_factory=lambda: {
            "backend": "local",
            "nodes": [{"name": "node-a", "cpus": 2, "memory_bytes": 1 << 30, "gpus": 0}],
            "active_learners": 1,
        }
    )
    next_id: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def requests(self, method: str, prefix: str = "") -> list[Seen]:
        return [s for s in self.seen if s.method == method and s.path.startswith(prefix)]


class StubHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: StubServer

    def log_message(self, format: str, *args: Any) -> None:
        return

    @property
    def stub(self) -> StubState:
        return self.server.stub

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    # -- plumbing ---------------------------------------------------------------------------

    def _read_body(self) -> bytes:
        length = self.headers.get("Content-Length")
        if length is not None:
            return self.rfile.read(int(length))
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
        return b""

    def _send_json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(raw)

    def _error(self, status: int, code: str, detail: str, field: str | None = None) -> None:
        body: dict[str, Any] = {"error": code, "detail": detail}
        if field:
            body["field"] = field
        self._send_json(status, body)

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        path = unquote(url.path)
        query = parse_qs(url.query)
        body = self._read_body()
        with self.stub.lock:
            self.stub.seen.append(Seen(method, path, query, dict(self.headers.items()), body))
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            self._error(401, "bad_token", "this API token is not known to dlaas")
            return
        if self.stub.fail_with is not None:
            status, payload = self.stub.fail_with
            if self.stub.fail_times is not None:
                self.stub.fail_times -= 1
                if self.stub.fail_times <= 0:
                    self.stub.fail_with = None
            self._send_json(status, payload)
            return
        parts = [p for p in path.split("/") if p][1:] if path.startswith("/v2/") else []
        route = ROUTES.get((method, _shape(parts)))
        if route is None:
            self._error(404, "not_found", f"no route {method} {path}")
            return
        route(self, parts, query, body)

    def _job(self, job_id: str) -> dict[str, Any] | None:
        job = self.stub.jobs.get(job_id)
        if job is None:
            self._error(
                404, "not_found", f"no job {job_id!r} among your jobs; `dlaas list` shows them"
            )
        return job

    # -- routes -----------------------------------------------------------------------------

    def submit(self, parts: list[str], query: dict, body: bytes) -> None:
        if "Content-Length" not in self.headers:
            self._error(411, "length_required", "send the upload with a Content-Length header")
            return
        fields = _multipart(self.headers.get("Content-Type", ""), body)
        if "manifest" not in fields or "model" not in fields:
            self._error(422, "missing_field", "send manifest and model", "manifest")
            return
        manifest = fields["manifest"].decode()
        if "command" not in manifest:
            self._error(
                422,
                "invalid_manifest",
                "invalid manifest: framework.command: Field required; "
                "add framework.command: the shell command that starts training",
                "framework.command",
            )
            return
        names = zipfile.ZipFile(io.BytesIO(fields["model"])).namelist()
        with self.stub.lock:
            self.stub.next_id += 1
            job_id = f"training-stub{self.stub.next_id:05d}"
            learners = 2 if "learners: 2" in manifest else 1
            job = make_job(job_id, learners=learners)
            self.stub.jobs[job_id] = job
            self.stub.submitted.append({"manifest": manifest, "names": names})
        self._send_json(201, job, {"Location": f"/v2/jobs/{job_id}"})

    def _page(self, key: str, items: list[Any], query: dict) -> None:
        """A page of `items` as the API pages its lists: `limit`, `cursor`, `next`."""
        limit = query.get("limit", ["100"])[0]
        if not limit.isdigit() or not 1 <= int(limit) <= 1000:
            self._error(422, "invalid_request", "limit: between 1 and 1000", "limit")
            return
        cursor = query.get("cursor", ["0"])[0]
        if not cursor.isdigit():
            self._error(422, "invalid_cursor", "cursor is not one this list handed out", "cursor")
            return
        start, end = int(cursor), int(cursor) + int(limit)
        following = str(end) if end < len(items) else None
        self._send_json(200, {key: items[start:end], "next": following})

    def list_jobs(self, parts: list[str], query: dict, body: bytes) -> None:
        jobs = list(reversed(self.stub.jobs.values()))
        states = query.get("state", [])
        self._page("jobs", [j for j in jobs if not states or j["state"] in states], query)

    def get_job(self, parts: list[str], query: dict, body: bytes) -> None:
        job = self._job(parts[1])
        if job is None:
            return
        sequence = self.stub.state_sequence.get(parts[1])
        if sequence:
            job["state"] = sequence.pop(0) if len(sequence) > 1 else sequence[0]
        self._send_json(200, job)

    def halt(self, parts: list[str], query: dict, body: bytes) -> None:
        # As the real API: the halt is recorded and the job answered as it stands; the
        # lifecycle manager stops it afterwards.
        job = self._job(parts[1])
        if job is not None:
            self._send_json(202, job)

    def resume(self, parts: list[str], query: dict, body: bytes) -> None:
        job = self._job(parts[1])
        if job is not None:
            job["state"] = "QUEUED"
            self._send_json(202, job)

    def delete(self, parts: list[str], query: dict, body: bytes) -> None:
        if self._job(parts[1]) is not None:
            self._send_json(202, {"id": parts[1], "status": "deleting"})

    def events(self, parts: list[str], query: dict, body: bytes) -> None:
        if self._job(parts[1]) is not None:
            self._page("events", self.stub.events.get(parts[1], []), query)

    def metrics(self, parts: list[str], query: dict, body: bytes) -> None:
        if self._job(parts[1]) is not None:
            self._send_json(200, {"metrics": self.stub.metrics.get(parts[1], [])})

    def results(self, parts: list[str], query: dict, body: bytes) -> None:
        job_id = parts[1]
        if self._job(job_id) is None:
            return
        listing = self.stub.result_listing.get(job_id)
        if listing is None:
            files = self.stub.results.get(job_id, {})
            listing = [{"path": p, "size": len(b)} for p, b in sorted(files.items())]
        self._page("files", listing, query)

    def result_file(self, parts: list[str], query: dict, body: bytes) -> None:
        job_id, path = parts[1], "/".join(parts[3:])
        data = self.stub.results.get(job_id, {}).get(path)
        if data is None:
            self._error(404, "not_found", f"job {job_id} has no result {path!r}", "path")
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def logs(self, parts: list[str], query: dict, body: bytes) -> None:
        job_id = parts[1]
        if self._job(job_id) is None:
            return
        learner = int(query["learner"][0]) if "learner" in query else None
        if query.get("follow") != ["true"]:
            text = self.stub.text_logs.get(job_id, {}).get(learner, "").encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(text)))
            self.end_headers()
            self.wfile.write(text)
            return
        sessions = self.stub.sse_sessions.get(job_id, [])
        events, drop = sessions.pop(0) if sessions else ([], False)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for event_id, name, data in events:
            if learner is not None and data.get("learner") not in (None, learner):
                continue
            block = ""
            if event_id:
                block += f"id: {event_id}\n"
            if name:
                block += f"event: {name}\n"
            block += f"data: {json.dumps(data)}\n\n"
            raw = (": keep-alive\n" + block).encode()
            self.wfile.write(f"{len(raw):x}\r\n".encode() + raw + b"\r\n")
            self.wfile.flush()
        if drop:
            self.wfile.write(b"40\r\npartial")
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(b"0\r\n\r\n")

    def put_data(self, parts: list[str], query: dict, body: bytes) -> None:
        container, path = parts[1], "/".join(parts[2:])
        with self.stub.lock:
            self.stub.data.setdefault(container, {})[path] = body
        self._send_json(201, {"path": path, "size": len(body)})

    def list_data(self, parts: list[str], query: dict, body: bytes) -> None:
        files = self.stub.data.get(parts[1], {})
        listing = [{"path": p, "size": len(b)} for p, b in sorted(files.items())]
        self._page("files", listing, query)

    def cluster(self, parts: list[str], query: dict, body: bytes) -> None:
        self._send_json(200, self.stub.cluster)

    def usage(self, parts: list[str], query: dict, body: bytes) -> None:
        self._send_json(200, self.stub.usage)


def _shape(parts: list[str]) -> tuple[str, ...]:
    """The route pattern of a /v2 path: ids become `*`, a results path `**`."""
    if not parts:
        return ()
    if parts[0] == "jobs":
        if len(parts) >= 4 and parts[2] == "results":
            return ("jobs", "*", "results", "**")
        return ("jobs", *["*" if i == 1 else p for i, p in enumerate(parts[1:], 1)])
    if parts[0] == "data":
        return ("data", "*", "**") if len(parts) > 2 else ("data", "*")
    return tuple(parts)


Route = Callable[[StubHandler, list[str], dict, bytes], None]

ROUTES: dict[tuple[str, tuple[str, ...]], Route] = {
    ("POST", ("jobs",)): StubHandler.submit,
    ("GET", ("jobs",)): StubHandler.list_jobs,
    ("GET", ("jobs", "*")): StubHandler.get_job,
    ("POST", ("jobs", "*", "halt")): StubHandler.halt,
    ("POST", ("jobs", "*", "resume")): StubHandler.resume,
    ("DELETE", ("jobs", "*")): StubHandler.delete,
    ("GET", ("jobs", "*", "events")): StubHandler.events,
    ("GET", ("jobs", "*", "metrics")): StubHandler.metrics,
    ("GET", ("jobs", "*", "results")): StubHandler.results,
    ("GET", ("jobs", "*", "results", "**")): StubHandler.result_file,
    ("GET", ("jobs", "*", "logs")): StubHandler.logs,
    ("PUT", ("data", "*", "**")): StubHandler.put_data,
    ("GET", ("data", "*")): StubHandler.list_data,
    ("GET", ("cluster",)): StubHandler.cluster,
    ("GET", ("usage",)): StubHandler.usage,
}


def _multipart(content_type: str, body: bytes) -> dict[str, bytes]:
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode()
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
    fields: dict[str, bytes] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        if isinstance(name, str) and isinstance(payload, bytes):
            fields[name] = payload
    return fields


class StubServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), StubHandler)
        self.stub = StubState()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@contextmanager
def running_stub() -> Iterator[StubServer]:
    server = StubServer()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def invoke(server: StubServer | None, *args: str, token: str = TOKEN) -> Any:
    """Run `dlaas ARGS` in-process against `server` (or with the environment's config)."""
    from typer.testing import CliRunner

    from cli.main import app

    prefix = ["--url", server.url, "--token", token] if server is not None else []
    return CliRunner().invoke(app, [*prefix, *args])
