"""A lean HTTP load client: processes of keep-alive `http.client` connections, one per thread.

The orchestrating benchmark calls `run_load`; that spawns client processes
(`python -m bench._load_client`), hands each its `LoadSpec` as JSON on stdin, and reads back
one JSON result per process. Request bodies are built once, before the clock starts, so the
client spends its CPU on sending and receiving only. `run_load` reports the client processes'
own CPU time while timed (each measures itself with `getrusage`), and in all (from
`getrusage(RUSAGE_CHILDREN)`), so a reader can tell whether the client kept up.
"""

from __future__ import annotations

import http.client
import json
import os
import resource
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]

# Record of one request: (completion time relative to start_at in s, latency in s, HTTP status;
# 0 when the connection failed).
Record = tuple[float, float, int]


@dataclass
class LoadSpec:
    host: str
    port: int
    method: str
    path: str
    token: str | None = None
    body_path: str | None = None
    content_type: str | None = None
    connections: int = 4
    start_at: float = 0.0
    stop_after_s: float = 10.0
    max_requests: int | None = None  # per connection
    collect_ids: bool = False


@dataclass
class LoadResult:
    records: list[Record] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    error_samples: list[str] = field(default_factory=list)
    client_cpu_s: float = 0.0  # the clients' CPU while timed
    client_total_cpu_s: float = 0.0  # including their interpreter start-up and set-up
    processes: int = 0
    connections: int = 0

    def completed_between(self, start: float, end: float) -> list[Record]:
        return [r for r in self.records if start <= r[0] < end]


def multipart_body(parts: list[tuple[str, str, str, bytes]]) -> tuple[str, bytes]:
    """Content-Type and body of a multipart/form-data request of (field, filename, type, data)."""
    boundary = "dlaas-bench-" + secrets.token_hex(12)
    chunks: list[bytes] = []
    for name, filename, content_type, data in parts:
        chunks.append(
            f"--{boundary}\r\n"
            f'Content-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'
            f"Content-Type: {content_type}\r\n\r\n".encode()
        )
        chunks.append(data)
        chunks.append(b"\r\n")
    chunks.append(f"--{boundary}--\r\n".encode())
    return f"multipart/form-data; boundary={boundary}", b"".join(chunks)


# --- the client process ------------------------------------------------------------------


class _Connection(threading.Thread):
    def __init__(self, spec: LoadSpec, body: bytes | None, headers: dict[str, str]) -> None:
        super().__init__(daemon=True)
        self.spec = spec
        self.body = body
        self.headers = headers
        self.records: list[Record] = []
        self.ids: list[str] = []
        self.errors: list[str] = []

    def run(self) -> None:
        spec = self.spec
        delay = spec.start_at - time.time()
        if delay > 0:
            time.sleep(delay)
        conn: http.client.HTTPConnection | None = None
        sent = 0
        while time.time() - spec.start_at < spec.stop_after_s:
            if spec.max_requests is not None and sent >= spec.max_requests:
                break
            if conn is None:
                conn = http.client.HTTPConnection(spec.host, spec.port, timeout=60)
            sent += 1
            began = time.perf_counter()
            data = b""
            try:
                conn.request(spec.method, spec.path, body=self.body, headers=self.headers)
                response = conn.getresponse()
                data = response.read()
                status = response.status
                if response.will_close:
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException) as error:
                status = 0
                if len(self.errors) < 5:
                    self.errors.append(repr(error))
                if conn is not None:
                    conn.close()
                conn = None
            latency = time.perf_counter() - began
            self.records.append((time.time() - spec.start_at, latency, status))
            if status == 201 and spec.collect_ids:
                answer = json.loads(data)  # /v2's JobSubmitted, or /v1's BasicNewModel
                self.ids.append(str(answer.get("id") or answer["model_id"]))
            elif status not in (0, 200, 201) and len(self.errors) < 5:
                self.errors.append(f"{status}: {data[:300]!r}")
        if conn is not None:
            conn.close()


def _own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _client_main() -> None:
    spec = LoadSpec(**json.load(sys.stdin))
    body = Path(spec.body_path).read_bytes() if spec.body_path else None
    headers = {"Connection": "keep-alive"}
    if spec.token:
        headers["Authorization"] = f"Bearer {spec.token}"
    if spec.content_type:
        headers["Content-Type"] = spec.content_type
    threads = [_Connection(spec, body, headers) for _ in range(spec.connections)]
    for thread in threads:
        thread.start()
    delay = spec.start_at - time.time()
    if delay > 0:
        time.sleep(delay)
    cpu_at_start = _own_cpu_s()
    for thread in threads:
        thread.join()
    result = {
        "cpu_s": _own_cpu_s() - cpu_at_start,
        "records": [r for t in threads for r in t.records],
        "ids": [i for t in threads for i in t.ids],
        "errors": [e for t in threads for e in t.errors][:10],
    }
    json.dump(result, sys.stdout)


# --- the orchestrating side --------------------------------------------------------------


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_load(
    spec: LoadSpec,
    processes: int,
    *,
    start_in_s: float = 1.5,
    on_start: Callable[[], None] | None = None,
) -> LoadResult:
    """Run `processes` client processes of `spec.connections` connections each; wait for all.

    Every process starts its clock at the same `start_at` (now + start_in_s, time enough for
    the processes to import and read their bodies); `on_start` is called then, in this
    process, e.g. to take CPU snapshots of the timed part alone.
    """
    spec.start_at = time.time() + start_in_s
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    cpu_before = _children_cpu_s()
    children = [
        subprocess.Popen(
            [sys.executable, "-m", "bench._load_client"],
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        for _ in range(processes)
    ]
    payload = json.dumps(asdict(spec)).encode()
    for child in children:  # every child gets its spec before any result is read
        assert child.stdin is not None
        child.stdin.write(payload)
        child.stdin.close()
    if on_start is not None:
        time.sleep(max(0.0, spec.start_at - time.time()))
        on_start()
    result = LoadResult(processes=processes, connections=processes * spec.connections)
    for child in children:
        assert child.stdout is not None
        out = child.stdout.read()
        child.stdout.close()
        child.wait()
        if child.returncode != 0:
            raise RuntimeError(f"a load client exited with code {child.returncode}")
        part = json.loads(out)
        result.records.extend((float(t), float(lat), int(st)) for t, lat, st in part["records"])
        result.ids.extend(part["ids"])
        result.error_samples.extend(part["errors"])
        result.client_cpu_s += float(part["cpu_s"])
    result.client_total_cpu_s = _children_cpu_s() - cpu_before
    return result


if __name__ == "__main__":
    _client_main()
