"""API load: job submissions per second, GET latency, and whether any accepted job is lost.

Starts its own PostgreSQL database, a Redis database and an object-store directory, and the
API as a real server (`python -m api --workers 2`, no access log). Then:

1. submissions: 16 keep-alive connections (spread over client processes) POST /v2/jobs with a
   small manifest and a ~10 KB zip for a warm-up plus a fixed window; accepted (201) per second
   in the window, errors (anything else), and `lost`: accepted ids missing from the database.
2. GET /v2/jobs/{id} one request at a time (p50/p99), then with 16 in flight (p99).
3. v1 submissions: the same load through FfDL's `POST /v1/models` (`manifest` and
   `model_definition`) on the same server, in 10 s phases alternating with /v2's (v1, v2,
   v2, v1); quoted with its ratio to /v2's beside it (the translation is meant to cost next
   to nothing: target 0.9 or more).
4. baselines in the same run: submissions against a 1-worker server (run first), and
   GET /healthz with 16 in flight on the 2-worker server; quoted with their ratios.

Run from the repository root: `python -m bench.api_load` (about 3 minutes). The last line is
the FINAL line, one JSON object `{"bench": "api_load", ...}`. Figures are measured, never
judged: each target is reported beside its figure.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import secrets
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench._bench_api_server import BenchApiServer, api_env
from bench._bench_postgres import BenchPostgres
from bench._bench_redis import BenchRedis
from bench._cpu_meter import CpuSnapshot, cores_used, snapshot, top_consumers
from bench._latency_stats import median, ms, percentile, rounded
from bench._load_client import LoadResult, LoadSpec, multipart_body, run_load
from bench._py_spy_profile import find_py_spy, hottest_functions, start_recording
from bench._small import parse_with_small

TARGET_SUBMISSIONS_PER_S = 180.0
TARGET_GET_P99_MS = 10.0
TARGET_GET16_P99_MS = 75.0
TARGET_V1_TO_V2_SUBMISSIONS = 0.9

# Processes whose CPU use each phase reports (besides the API's and the clients' own).
SERVICE_PROCESSES = ("postgres", "redis-server")

MANIFEST = b"""\
name: bench-job
description: a job submitted by bench/api_load.py
learners: 1
memory: 1Gb
framework:
  name: pytorch
  version: "2.13"
  command: python train.py
"""


def model_zip(size: int = 10 * 1024) -> bytes:
    """A ~size-byte zip: a training script and incompressible (seeded random) weights."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("train.py", "print('training')\n")
        archive.writestr("weights.bin", random.Random(0).randbytes(size - 400))
    return buffer.getvalue()


@dataclass
class Phase:
    """What one load phase measured inside its window."""

    name: str
    window_s: float
    ok: int
    all_ok: int
    errors: int
    rate_per_s: float
    rate_median_1s: float
    p50_ms: float
    p99_ms: float
    in_flight: float
    client_cpu_s: float
    server_cpu_s: float
    wall_s: float
    connections: int
    error_samples: list[str]
    machine_cores: dict[str, float]
    top_other_processes: list[tuple[str, float]]

    def others_cores(self) -> float:
        """Cores busy with anything but the API, its clients, PostgreSQL and Redis."""
        ours = (self.server_cpu_s + self.client_cpu_s) / self.wall_s
        services = sum(self.machine_cores.get(name, 0.0) for name in SERVICE_PROCESSES)
        return round(self.machine_cores.get("machine", 0.0) - ours - services, 2)

    def report(self) -> dict[str, Any]:
        return {
            "window_s": self.window_s,
            "ok": self.ok,
            "errors": self.errors,
            "rate_per_s": rounded(self.rate_per_s, 1),
            "rate_median_1s_per_s": rounded(self.rate_median_1s, 1),
            "p50_ms": self.p50_ms,
            "p99_ms": self.p99_ms,
            "connections": self.connections,
            "mean_in_flight": self.in_flight,
            "client_cpu_s": round(self.client_cpu_s, 2),
            "client_cores": round(self.client_cpu_s / self.wall_s, 2),
            "server_cpu_s": round(self.server_cpu_s, 2),
            "server_cores": round(self.server_cpu_s / self.wall_s, 2),
            "machine_cores": self.machine_cores,
            "others_cores": self.others_cores(),
            "top_other_processes": self.top_other_processes,
            "error_samples": self.error_samples[:3],
        }


def summarize(
    name: str,
    result: LoadResult,
    ok_status: int,
    warmup_s: float,
    window_s: float,
    server_cpu_s: float,
    wall_s: float,
    machine_cores: dict[str, float],
    top_other_processes: list[tuple[str, float]],
) -> Phase:
    inside = result.completed_between(warmup_s, warmup_s + window_s)
    ok = [r for r in inside if r[2] == ok_status]
    per_second = [0] * max(1, int(window_s))
    for r in ok:
        slot = int(r[0] - warmup_s)
        if slot < len(per_second):
            per_second[slot] += 1
    latencies = [r[1] for r in inside]
    return Phase(
        name=name,
        window_s=window_s,
        ok=len(ok),
        all_ok=sum(1 for r in result.records if r[2] == ok_status),
        errors=sum(1 for r in result.records if r[2] != ok_status),
        rate_per_s=len(ok) / window_s,
        rate_median_1s=median([float(n) for n in per_second]),
        p50_ms=ms(percentile(latencies, 50)),
        p99_ms=ms(percentile(latencies, 99)),
        # Little's law: how many requests were in flight on average (should be `connections`).
        in_flight=round(sum(latencies) / window_s, 1),
        client_cpu_s=result.client_cpu_s,
        server_cpu_s=server_cpu_s,
        wall_s=wall_s,
        connections=result.connections,
        error_samples=result.error_samples,
        machine_cores=machine_cores,
        top_other_processes=top_other_processes,
    )


@dataclass
class Load:
    """How the benchmark drives one phase: client processes and connections per process."""

    processes: int
    connections_per_process: int
    warmup_s: float
    window_s: float


def drive(
    api: BenchApiServer,
    name: str,
    spec: LoadSpec,
    load: Load,
    ok_status: int,
) -> tuple[Phase, LoadResult]:
    spec.connections = load.connections_per_process
    spec.stop_after_s = load.warmup_s + load.window_s
    started: list[tuple[float, CpuSnapshot]] = []
    result = run_load(
        spec, load.processes, on_start=lambda: started.append((api.cpu_s(), snapshot()))
    )
    machine_after = snapshot()
    cpu_before, machine_before = started[0]
    wall = machine_after.taken_at - machine_before.taken_at
    machine = cores_used(machine_before, machine_after, SERVICE_PROCESSES)
    ours = {api.pid, *api.worker_pids()}
    others = [
        (name, cores)
        for name, cores in top_consumers(machine_before, machine_after, ours, count=8)
        if name not in SERVICE_PROCESSES
    ][:5]
    server_cpu = api.cpu_s() - cpu_before
    phase = summarize(
        name, result, ok_status, load.warmup_s, load.window_s, server_cpu, wall, machine, others
    )
    print(f"{name}: {json.dumps(phase.report())}", flush=True)
    return phase, result


def submit_spec(
    api: BenchApiServer, token: str, body_path: Path, content_type: str, path: str = "/v2/jobs"
) -> LoadSpec:
    return LoadSpec(
        host="127.0.0.1",
        port=api.port,
        method="POST",
        path=path,
        token=token,
        body_path=str(body_path),
        content_type=content_type,
        collect_ids=True,
    )


def new_user(api: BenchApiServer, admin_token: str) -> str:
    response = httpx.post(
        api.url + "/v2/users",
        json={"name": "bench-" + secrets.token_hex(3)},
        headers={"Authorization": f"Bearer {admin_token}"},
        timeout=30,
    )
    response.raise_for_status()
    return str(response.json()["token"])


def compare_v1(
    api: BenchApiServer, v2_spec: LoadSpec, v1_spec: LoadSpec, load: Load
) -> tuple[float, float, list[str]]:
    """Submissions per second through /v1 and through /v2, each the mean of two phases run
    in the order v1, v2, v2, v1, so that a load on the machine that grows or fades over
    the four weighs on both alike; and the ids accepted."""
    rates: dict[str, list[float]] = {"v1": [], "v2": []}
    ids: list[str] = []
    for which in ("v1", "v2", "v2", "v1"):
        spec = v1_spec if which == "v1" else v2_spec
        phase, result = drive(api, f"submit through /{which} (beside the other)", spec, load, 201)
        rates[which].append(phase.rate_per_s)
        ids.extend(result.ids)
    return median(rates["v1"]), median(rates["v2"]), ids


def sequential_gets(api: BenchApiServer, token: str, job_id: str, count: int) -> dict[str, Any]:
    """GET one job `count` times, one request at a time, after 100 unmeasured ones."""
    warm = 100
    spec = LoadSpec(
        host="127.0.0.1",
        port=api.port,
        method="GET",
        path=f"/v2/jobs/{job_id}",
        token=token,
        connections=1,
        stop_after_s=300.0,
        max_requests=count + warm,
    )
    cpu_before = api.cpu_s()
    result = run_load(spec, 1, start_in_s=0.8)
    records = sorted(result.records)[warm:]
    latencies = [r[1] for r in records if r[2] == 200]
    report = {
        "requests": len(records),
        "errors": sum(1 for r in records if r[2] != 200),
        "p50_ms": ms(percentile(latencies, 50)),
        "p90_ms": ms(percentile(latencies, 90)),
        "p99_ms": ms(percentile(latencies, 99)),
        "client_cpu_s": round(result.client_cpu_s, 2),
        "server_cpu_s": round(api.cpu_s() - cpu_before, 2),
    }
    print(f"get one at a time: {json.dumps(report)}", flush=True)
    return report


def profile_submissions(
    api: BenchApiServer, args: argparse.Namespace, spec: LoadSpec, load: Load
) -> list[str]:
    """Submission load with py-spy sampling every worker; prints where their time goes."""
    py_spy = find_py_spy(args.py_spy)
    pids, seconds = api.worker_pids(), load.window_s + 1
    recordings = {
        "active": start_recording(py_spy, pids, seconds, args.profile),
        "holding the GIL": start_recording(py_spy, pids, seconds, args.profile, gil_only=True),
    }
    _, result = drive(api, "submit (2 workers, under py-spy)", spec, load, 201)
    for view, running in recordings.items():
        for process, _ in running:
            process.wait(60)
        hot = hottest_functions([path for _, path in running], top=15)
        print(f"py-spy, both workers, samples while {view}: {hot.samples}")
        for title, rows in (
            ("functions by self time", hot.self_pct),
            ("dlaas functions by inclusive time", hot.dlaas_pct),
            ("library calls from dlaas code by inclusive time", hot.library_calls_pct),
        ):
            print(f"  top {title}, % of samples:")
            for name, pct in rows:
                print(f"    {pct:5.1f}  {name}")
    return result.ids


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--window", type=float, default=20.0, help="measured seconds per phase")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--processes", type=int, default=4, help="client processes")
    parser.add_argument("--connections", type=int, default=16, help="connections in all")
    parser.add_argument("--gets", type=int, default=2000, help="sequential GETs to time")
    parser.add_argument("--baseline-window", type=float, default=10.0)
    parser.add_argument(
        "--skip-one-worker", action="store_true", help="skip the 1-worker submission baseline"
    )
    parser.add_argument(
        "--private-postgres", action="store_true", help="use a private cluster, not :5432"
    )
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="after the measured phases, sample the 2 workers with py-spy under submission "
        "load and write the raw stacks to DIR (this phase's figures are not reported)",
    )
    parser.add_argument("--py-spy", help="path of the py-spy binary (default: on PATH)")
    return parse_with_small(
        parser, {"window": 2.0, "warmup": 0.5, "gets": 100, "baseline_window": 1.0}
    )


def main() -> None:
    args = parse_args()
    per_process = max(1, args.connections // args.processes)
    main_load = Load(args.processes, per_process, args.warmup, args.window)
    short_load = Load(args.processes, per_process, 1.0, args.baseline_window)
    admin_token = "dlaas_bench-admin-" + secrets.token_hex(16)
    load_before = os.getloadavg()
    print(f"load average before: {load_before}", flush=True)

    with (
        tempfile.TemporaryDirectory(prefix="dlaas-bench-api-") as tmp,
        BenchPostgres(private=args.private_postgres) as database,
        BenchRedis() as redis_db,
    ):
        base = Path(tmp)
        print(f"database: {database.where} ({database.name}); redis: {redis_db.where}")
        env = api_env(base, database.url, redis_db.url, admin_token)
        # One token sends the whole load: limits it never reaches, so that what they cost
        # each request (a Redis round trip) is measured but nothing is refused.
        for limit in ("RATE_LIMIT", "ADDRESS_RATE_LIMIT"):
            env[f"DLAAS_{limit}_PER_S"] = env[f"DLAAS_{limit}_BURST"] = "1000000"
        archive = model_zip()
        content_type, body = multipart_body(
            [
                ("manifest", "manifest.yml", "application/x-yaml", MANIFEST),
                ("model", "model.zip", "application/zip", archive),
            ]
        )
        body_path = base / "submit.body"
        body_path.write_bytes(body)
        # the same submission as FfDL's CLI sends it to /v1
        v1_content_type, v1_body = multipart_body(
            [
                ("manifest", "manifest.yml", "application/octet-stream", MANIFEST),
                ("model_definition", "model.zip", "application/octet-stream", archive),
            ]
        )
        v1_body_path = base / "submit-v1.body"
        v1_body_path.write_bytes(v1_body)
        accepted: list[str] = []
        figures: dict[str, Any] = {}

        # A 1-worker server goes first: it migrates the fresh database and creates the admin
        # user (two workers starting together on a fresh database race to insert it), and
        # serves the 1-worker baseline.
        one_worker: Phase | None = None
        with BenchApiServer(1, env, base / "api-1-worker.log") as api:
            token = new_user(api, admin_token)
            if not args.skip_one_worker:
                spec = submit_spec(api, token, body_path, content_type)
                one_worker, result = drive(api, "submit (1 worker)", spec, short_load, 201)
                accepted.extend(result.ids)

        with BenchApiServer(2, env, base / "api-2-workers.log") as api:
            spec = submit_spec(api, token, body_path, content_type)
            submit, result = drive(api, "submit (2 workers)", spec, main_load, 201)
            accepted.extend(result.ids)
            job_id = result.ids[0]
            v1_spec = submit_spec(api, token, v1_body_path, v1_content_type, "/v1/models")
            v1_submit, v2_beside, v1_ids = compare_v1(api, spec, v1_spec, short_load)
            accepted.extend(v1_ids)
            one_at_a_time = sequential_gets(api, token, job_id, args.gets)
            get_spec = LoadSpec("127.0.0.1", api.port, "GET", f"/v2/jobs/{job_id}", token)
            get16, _ = drive(api, "get with 16 in flight", get_spec, short_load, 200)
            health_spec = LoadSpec("127.0.0.1", api.port, "GET", "/healthz")
            healthz, _ = drive(api, "healthz with 16 in flight", health_spec, short_load, 200)
            if args.profile is not None:
                accepted.extend(profile_submissions(api, args, spec, short_load))

        stored = database.job_ids()
        lost = len(set(accepted) - stored)
        figures = {
            "bench": "api_load",
            "submissions_per_s": rounded(submit.rate_per_s, 1),
            "target_submissions_per_s": TARGET_SUBMISSIONS_PER_S,
            "submissions_median_1s_per_s": rounded(submit.rate_median_1s, 1),
            "submit_p50_ms": submit.p50_ms,
            "submit_p99_ms": submit.p99_ms,
            "errors": submit.errors,
            "v1_submissions_per_s": rounded(v1_submit, 1),
            "v2_submissions_beside_v1_per_s": rounded(v2_beside, 1),
            "ratio_v1_to_v2_submissions": rounded(v1_submit / v2_beside),
            "target_ratio_v1_to_v2_submissions": TARGET_V1_TO_V2_SUBMISSIONS,
            "lost": lost,
            "accepted_total": len(accepted),
            "accepted_distinct": len(set(accepted)),
            "jobs_in_database": len(stored),
            "get_p50_ms": one_at_a_time["p50_ms"],
            "get_p99_ms": one_at_a_time["p99_ms"],
            "target_get_p99_ms": TARGET_GET_P99_MS,
            "get16_p99_ms": get16.p99_ms,
            "target_get16_p99_ms": TARGET_GET16_P99_MS,
            "get16_per_s": rounded(get16.rate_per_s, 1),
            "get_errors": one_at_a_time["errors"] + get16.errors,
            "baseline_healthz16_per_s": rounded(healthz.rate_per_s, 1),
            "ratio_submissions_to_healthz": rounded(submit.rate_per_s / healthz.rate_per_s),
            "client_cores_submit": round(submit.client_cpu_s / submit.wall_s, 2),
            "server_cores_submit": round(submit.server_cpu_s / submit.wall_s, 2),
            "server_cpu_ms_per_submission": rounded(
                1000 * submit.server_cpu_s / max(1, submit.all_ok), 2
            ),
            "submit_mean_in_flight": submit.in_flight,
            "client_processes": args.processes,
            "connections": main_load.processes * main_load.connections_per_process,
            "window_s": args.window,
            "load_average_before": [round(x, 2) for x in load_before],
        }
        if one_worker is not None:
            figures["baseline_one_worker_submissions_per_s"] = rounded(one_worker.rate_per_s, 1)
            figures["ratio_two_workers_to_one"] = rounded(submit.rate_per_s / one_worker.rate_per_s)
            figures["one_worker_errors"] = one_worker.errors
    print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
