"""The API under hostile input: no 5xx, refusals that name the field, a quiet client unhurt.

Starts PostgreSQL and Redis (as `bench/api_load.py` does) and the API as a real server with
2 workers, its per-token rate limits as shipped and its per-address limit off (every client
here comes from 127.0.0.1, which stands for many hosts). Then:

1. `worst_parse_ms`: each hostile manifest under 64 KiB (`bench/_hostile_requests.py`) is
   parsed in this process, 3 times; the slowest median.
2. Quiet: a well-behaved client (its own token, one keep-alive connection, a GET of its job
   every 100 ms) for `--quiet-s`: `api_p99_ms_quiet`.
3. Attacked: `--attackers` processes, each with its own token and job, send every hostile
   case over and over, as fast as they can, for `--attack-s`, while the well-behaved client
   measures again: `api_p99_ms_while_attacked`. The attackers run at niceness 10: they stand
   for clients on other machines, whose CPU is not the server's.
4. Retries: `--retries` submissions each sent three times with one Idempotency-Key (twice
   in a row, then once more beside a concurrent copy), and the jobs counted in the database.

Prints progress lines, then one JSON line with the figures.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import secrets
import socket
import statistics
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg

from api.errors import DlaasError
from api.manifest import MAX_MANIFEST_BYTES, parse_manifest
from bench._bench_api_server import BenchApiServer, api_env
from bench._bench_postgres import BenchPostgres
from bench._bench_redis import BenchRedis
from bench._hostile_requests import MODEL, Case, cases, hostile_manifests
from bench._latency_stats import percentile, rounded
from bench._small import parse_with_small

TARGETS = {
    "requests": 20_000,
    "server_errors": 0,
    "refusals_naming_field": 0.95,
    "worst_parse_ms": 50.0,
    "attacked_p99_ratio": 3.0,
    "duplicate_jobs_on_retry": 0,
}
MANIFEST = b"name: fuzz\nframework: {command: python train.py}\n"
# uvicorn's answer to bytes that are not HTTP (a control character in a header, bad chunks)
PROTOCOL_REFUSAL = b"Invalid HTTP request received."


# --- raw HTTP -------------------------------------------------------------------------------


@dataclass
class Answer:
    status: int  # 0: no answer (connection closed or timed out)
    body: bytes = b""
    timed_out: bool = False


def _read_answer(sock: socket.socket) -> Answer:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return Answer(0)
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1])
    length = None
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    limit = 1 << 20 if length is None else min(length, 1 << 20)
    while len(body) < limit:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return Answer(status, body[:limit])


def send_raw(port: int, case: Case, timeout_s: float = 10.0) -> Answer:
    raw = case.raw.replace(b"\r\n", b"\r\nHost: 127.0.0.1\r\n", 1)
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        with contextlib.suppress(OSError):  # refused before all was sent: the answer stands
            sock.sendall(raw)
        if not case.expects_answer:
            return Answer(0)
        try:
            return _read_answer(sock)
        except TimeoutError:
            return Answer(0, timed_out=True)
        except OSError:
            return Answer(0)


# --- attackers ------------------------------------------------------------------------------


@dataclass
class AttackResult:
    statuses: dict[int, int] = field(default_factory=dict)
    refusals: int = 0  # 4xx other than 429
    refusals_with_field: int = 0
    server_error_samples: list[str] = field(default_factory=list)
    no_field_samples: list[str] = field(default_factory=list)
    timeouts: int = 0
    sent: int = 0
    cut_short: int = 0  # requests whose body stopped early, the connection closed: no answer
    protocol_refusals: int = 0  # 400s of the HTTP server's parser, before dlaas saw anything


def _attack(port: int, token: str, job_id: str, seconds: float, out: Any) -> None:
    os.nice(10)
    catalogue = list(cases(token, job_id))
    result = AttackResult()
    statuses: Counter[int] = Counter()
    deadline = time.monotonic() + seconds
    i = 0
    while time.monotonic() < deadline:
        case = catalogue[i % len(catalogue)]
        i += 1
        try:
            answer = send_raw(port, case)
        except OSError:
            answer = Answer(0)
        result.sent += 1
        if not case.expects_answer:
            result.cut_short += 1
            continue
        statuses[answer.status] += 1
        result.timeouts += answer.timed_out
        if answer.status >= 500 and len(result.server_error_samples) < 10:
            result.server_error_samples.append(f"{case.name}: {answer.body[:300]!r}")
        if answer.status == 400 and answer.body.startswith(PROTOCOL_REFUSAL):
            result.protocol_refusals += 1
        elif 400 <= answer.status < 500 and answer.status != 429:
            result.refusals += 1
            try:
                named = bool(json.loads(answer.body).get("field"))
            except (ValueError, AttributeError):
                named = False
            result.refusals_with_field += named
            if not named and len(result.no_field_samples) < 20:
                sample = f"{case.name} {answer.status}: {answer.body[:160]!r}"
                if sample not in result.no_field_samples:
                    result.no_field_samples.append(sample)
    result.statuses = dict(statuses)
    out.put(json.dumps(result.__dict__))


# --- the well-behaved client ----------------------------------------------------------------


def polite_latencies(url: str, token: str, job_id: str, seconds: float) -> tuple[list[float], int]:
    """Latencies of GET /v2/jobs/{id} every 100 ms for `seconds`, and the answers not 200."""
    latencies: list[float] = []
    failures = 0
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}) as client:
        deadline = time.monotonic() + seconds
        next_at = time.monotonic()
        while time.monotonic() < deadline:
            start = time.perf_counter()
            try:
                ok = client.get(f"/v2/jobs/{job_id}", timeout=30).status_code == 200
            except httpx.HTTPError:
                ok = False
            latencies.append(time.perf_counter() - start)
            failures += not ok
            next_at += 0.1
            time.sleep(max(0.0, next_at - time.monotonic()))
    return latencies, failures


# --- phases ---------------------------------------------------------------------------------


def worst_parse_ms() -> tuple[float, str]:
    worst, which = 0.0, ""
    for name, manifest in hostile_manifests().items():
        if len(manifest) >= MAX_MANIFEST_BYTES:
            continue
        times = []
        for _ in range(3):
            start = time.perf_counter()
            with contextlib.suppress(DlaasError):
                parse_manifest(manifest)
            times.append(time.perf_counter() - start)
        took = statistics.median(times) * 1000
        if took > worst:
            worst, which = took, name
    return worst, which


def new_user(url: str, admin: str, name: str) -> str:
    answer = httpx.post(
        f"{url}/v2/users",
        json={"name": f"{name}-{secrets.token_hex(3)}"},
        headers={"Authorization": f"Bearer {admin}"},
        timeout=30,
    )
    answer.raise_for_status()
    return str(answer.json()["token"])


def submit(url: str, token: str, manifest: bytes, key: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"}
    if key is not None:
        headers["Idempotency-Key"] = key
    files = {
        "manifest": ("manifest.yml", manifest, "application/x-yaml"),
        "model": ("model.zip", MODEL, "application/zip"),
    }
    return httpx.post(f"{url}/v2/jobs", headers=headers, files=files, timeout=60)


def retried_submissions(url: str, token: str, count: int) -> tuple[int, int, int]:
    """(submissions, distinct job ids answered, answers that were not 201)."""
    ids: set[str] = set()
    bad = 0
    for n in range(count):
        manifest = f"name: retry-{n}\nframework: {{command: python train.py}}\n".encode()
        key = secrets.token_urlsafe(16)
        answers = [submit(url, token, manifest, key), submit(url, token, manifest, key)]
        with ThreadPoolExecutor(2) as pool:
            concurrent = list(pool.map(lambda _: submit(url, token, manifest, key), range(2)))  # noqa: B023
        for answer in answers + concurrent:
            if answer.status_code == 201:
                ids.add(answer.json()["id"])
            elif answer.status_code != 409:  # 409: the first of two concurrent copies runs
                bad += 1
    return count, len(ids), bad


def jobs_named_like(database_url: str, pattern: str) -> int:
    with psycopg.connect(database_url.replace("+asyncpg", "")) as connection:
        row = connection.execute(
            "SELECT count(*) FROM jobs WHERE name LIKE %s", (pattern,)
        ).fetchone()
    return int(row[0]) if row else 0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quiet-s", type=float, default=30.0)
    parser.add_argument("--attack-s", type=float, default=60.0)
    parser.add_argument("--attackers", type=int, default=4)
    parser.add_argument("--retries", type=int, default=30)
    return parse_with_small(parser, {"quiet_s": 2.0, "attack_s": 3.0, "attackers": 2, "retries": 3})


def main() -> None:
    args = parse_args()
    figures: dict[str, Any] = {"bench": "fuzz"}
    worst, which = worst_parse_ms()
    figures["worst_parse_ms"], figures["worst_parse_case"] = rounded(worst, 2), which
    print(f"worst manifest parse: {worst:.2f} ms ({which})", flush=True)
    admin = "dlaas_bench-admin-" + secrets.token_hex(16)
    with (
        tempfile.TemporaryDirectory(prefix="dlaas-bench-fuzz-") as tmp,
        BenchPostgres() as database,
        BenchRedis() as redis_db,
    ):
        base = Path(tmp)
        env = api_env(base, database.url, redis_db.url, admin)
        # Every client here is 127.0.0.1, standing for many hosts: per-address limits off.
        env["DLAAS_ADDRESS_RATE_LIMIT_PER_S"] = "0"
        with BenchApiServer(1, env, base / "api-first.log"):
            pass  # migrates and creates the admin alone: two workers would race to
        with BenchApiServer(2, env, base / "api.log") as api:
            polite = new_user(api.url, admin, "polite")
            polite_job = submit(api.url, polite, MANIFEST).json()["id"]
            attackers = []
            for n in range(args.attackers):
                token = new_user(api.url, admin, f"attacker{n}")
                attackers.append((token, submit(api.url, token, MANIFEST).json()["id"]))

            quiet, quiet_failures = polite_latencies(api.url, polite, polite_job, args.quiet_s)
            figures["api_p99_ms_quiet"] = rounded(percentile(quiet, 99) * 1000, 2)
            print(f"quiet: {len(quiet)} GETs, p99 {figures['api_p99_ms_quiet']} ms", flush=True)

            results: multiprocessing.Queue[str] = multiprocessing.Queue()
            processes = [
                multiprocessing.Process(
                    target=_attack, args=(api.port, token, job, args.attack_s, results)
                )
                for token, job in attackers
            ]
            for process in processes:
                process.start()
            attacked, attacked_failures = polite_latencies(
                api.url, polite, polite_job, args.attack_s - 2
            )
            reports = [AttackResult(**json.loads(results.get(timeout=120))) for _ in processes]
            for process in processes:
                process.join(30)
            figures["api_p99_ms_while_attacked"] = rounded(percentile(attacked, 99) * 1000, 2)
            figures["attacked_p99_ratio"] = rounded(
                percentile(attacked, 99) / percentile(quiet, 99), 2
            )
            figures["polite_requests_failed"] = quiet_failures + attacked_failures
            print(
                f"attacked: {len(attacked)} GETs, p99 {figures['api_p99_ms_while_attacked']} ms",
                flush=True,
            )

            statuses: Counter[int] = Counter()
            for report in reports:
                statuses.update({int(k): v for k, v in report.statuses.items()})
            refusals = sum(r.refusals for r in reports)
            figures["requests"] = sum(r.sent for r in reports)
            figures["requests_by_status"] = dict(sorted(statuses.items()))
            figures["requests_not_throttled"] = figures["requests"] - statuses[429]
            figures["server_errors"] = sum(v for k, v in statuses.items() if k >= 500)
            figures["server_error_samples"] = [s for r in reports for s in r.server_error_samples]
            figures["no_answer_timeouts"] = sum(r.timeouts for r in reports)
            figures["requests_cut_short"] = sum(r.cut_short for r in reports)
            figures["protocol_refusals"] = sum(r.protocol_refusals for r in reports)
            figures["refusals"] = refusals
            figures["refusals_naming_field"] = rounded(
                sum(r.refusals_with_field for r in reports) / max(refusals, 1), 3
            )
            figures["refusals_without_field"] = sorted(
                {s for r in reports for s in r.no_field_samples}
            )[:20]
            figures["hostile_cases"] = len(list(cases("t", "j")))

            made, answered_ids, bad = retried_submissions(api.url, polite, args.retries)
            stored = jobs_named_like(database.url, "retry-%")
            figures["retried_submissions"] = made
            figures["duplicate_jobs_on_retry"] = stored - made
            figures["retry_answers_not_201"] = bad
            figures["retry_distinct_ids_answered"] = answered_ids
    figures["contract_failures"] = None  # the schemathesis run is part of `make test`
    figures["targets"] = TARGETS
    print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
