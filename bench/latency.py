"""Latency on the embedded platform: how soon a log line reaches a follower, and a job starts.

Starts the embedded default (`cli.embedded.start`) in a temporary DLAAS_HOME, then:

(a) log latency: one job prints a line holding its own `time.time()` every ~50 ms for ~10 s;
    the benchmark follows `GET /v2/jobs/{id}/logs?follow=true` (Server-Sent Events) and, per
    line, latency = time received - time printed. Quoted: p50/p95 (target p95 0.25 s).
(b) start latency: N jobs, one after another, whose command first prints `time.time()`;
    latency = that time - the time just before the POST, less the command's own start-up
    (the same command run locally N times in this run, spawn -> printed time). Quoted: the
    median (target 1.5 s). Each job is waited for until it is final; failures are counted.

Run from the repository root: `python -m bench.latency` (about 1-2 minutes). The last line is
the FINAL line, one JSON object `{"bench": "latency", ...}`. The platform is always stopped.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench._latency_stats import median, percentile, rounded
from bench._small import parse_with_small
from cli import embedded
from cli.sse import parse_sse
from tests.stop_on_signals import unwind_on_stopping_signals

TARGET_LOG_P95_S = 0.25
TARGET_START_P50_S = 1.5
FINISHED = frozenset({"COMPLETED", "FAILED", "HALTED"})

TICK_MARK = "bench-tick"
START_COMMAND = 'python -c "import time; print(repr(time.time()), flush=True)"'


def ticker_command(seconds: float, interval_s: float) -> str:
    count = round(seconds / interval_s)
    program = (
        "import time\n"
        f"for i in range({count}):\n"
        f'    print("{TICK_MARK}", i, repr(time.time()), flush=True)\n'
        f"    time.sleep({interval_s})\n"
    )
    return "python -u -c " + shlex.quote(program)


def manifest(name: str, command: str) -> bytes:
    # JSON strings are YAML strings: the command needs no YAML quoting of its own.
    return (
        f"name: {name}\nlearners: 1\ncpus: 0.5\nmemory: 256Mi\n"
        f"framework:\n  name: python\n  command: {json.dumps(command)}\n"
        "restart_policy:\n  max_restarts: 0\n"
    ).encode()


def model_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("README.txt", "the command is inline in the manifest\n")
    return buffer.getvalue()


@dataclass
class Platform:
    client: httpx.Client
    archive: bytes = field(default_factory=model_zip)

    def submit(self, name: str, command: str) -> tuple[str, float]:
        """Submit a job; return its id and the time just before the POST."""
        files = {
            "manifest": ("manifest.yml", manifest(name, command), "application/x-yaml"),
            "model": ("model.zip", self.archive, "application/zip"),
        }
        began = time.time()
        response = self.client.post("/v2/jobs", files=files)
        if response.status_code != 201:
            raise RuntimeError(f"submit refused: {response.status_code} {response.text}")
        return str(response.json()["id"]), began

    def wait(self, job_id: str, timeout_s: float = 180.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            job: dict[str, Any] = self.client.get(f"/v2/jobs/{job_id}").json()
            if job["state"] in FINISHED or time.monotonic() > deadline:
                return job
            time.sleep(0.1)

    def log_lines(self, job_id: str) -> list[str]:
        return self.client.get(f"/v2/jobs/{job_id}/logs").text.splitlines()


def command_startup(command: str, runs: int) -> list[float]:
    """Seconds from spawning `command` (as a learner's shell would) to the time it prints."""
    venv_bin = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": os.pathsep.join([venv_bin, os.environ.get("PATH", "")])}
    found = []
    for _ in range(runs):
        began = time.time()
        out = subprocess.run(
            ["/bin/sh", "-c", command], env=env, capture_output=True, text=True, check=True
        ).stdout
        found.append(float(out.split()[0]) - began)
    return found


def printed_time(lines: list[str]) -> float | None:
    for line in lines:
        try:
            return float(line.strip())
        except ValueError:
            continue
    return None


def start_latency(platform: Platform, jobs: int, startup_s: float) -> dict[str, Any]:
    raw: list[float] = []
    failures: list[str] = []
    for index in range(jobs):
        job_id, submitted = platform.submit(f"bench-start-{index}", START_COMMAND)
        job = platform.wait(job_id)
        printed = printed_time(platform.log_lines(job_id))
        if job["state"] != "COMPLETED" or printed is None:
            failures.append(f"{job_id}: {job['state']} {job.get('reason', '')!r}")
            continue
        raw.append(printed - submitted)
        print(f"start {index}: {job_id} printed {printed - submitted:.3f} s after submit")
    return {
        "start_p50_s": rounded(median(raw) - startup_s),
        "target_start_p50_s": TARGET_START_P50_S,
        "start_raw_p50_s": rounded(median(raw)),
        "start_raw_max_s": rounded(max(raw, default=float("nan"))),
        "start_raw_s": [round(x, 3) for x in raw],
        "start_jobs": jobs,
        "start_failures": len(failures),
        "start_failure_samples": failures[:3],
        "ratio_start_raw_to_command_startup": rounded(median(raw) / startup_s, 2),
    }


def log_latency(platform: Platform, seconds: float, interval_s: float) -> dict[str, Any]:
    job_id, _ = platform.submit("bench-log-ticker", ticker_command(seconds, interval_s))
    latencies: list[float] = []
    before_follow = 0
    end_state = ""
    timeout = httpx.Timeout(30.0, read=120.0)
    url = f"/v2/jobs/{job_id}/logs"
    with platform.client.stream("GET", url, params={"follow": "true"}, timeout=timeout) as resp:
        resp.raise_for_status()
        following_since = time.time()
        for event in parse_sse(resp.iter_lines()):
            received = time.time()
            data = json.loads(event.data)
            if event.event == "end":
                end_state = str(data.get("state", ""))
                break
            words = str(data.get("line", "")).split()
            if len(words) == 3 and words[0] == TICK_MARK:
                printed = float(words[2])
                if printed < following_since:
                    before_follow += 1
                else:
                    latencies.append(received - printed)
    job = platform.wait(job_id)
    expected = round(seconds / interval_s)
    print(f"log job {job_id}: {len(latencies)} lines timed, ended {end_state}, {job['state']}")
    return {
        "log_p50_s": rounded(percentile(latencies, 50)),
        "log_p95_s": rounded(percentile(latencies, 95)),
        "target_log_p95_s": TARGET_LOG_P95_S,
        "log_p99_s": rounded(percentile(latencies, 99)),
        "log_max_s": rounded(max(latencies, default=float("nan"))),
        "log_lines_timed": len(latencies),
        "log_lines_printed_before_follow": before_follow,
        "log_lines_expected": expected,
        "log_job_state": job["state"],
    }


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10, help="jobs timed for start latency")
    parser.add_argument("--log-seconds", type=float, default=10.0)
    parser.add_argument("--log-interval", type=float, default=0.05)
    parser.add_argument("--keep", action="store_true", help="keep DLAAS_HOME (logs) afterwards")
    return parse_with_small(parser, {"jobs": 2, "log_seconds": 2.0})


def main() -> None:
    unwind_on_stopping_signals()  # killed by a timeout, it still stops its platform
    args = parse_args()
    load_before = os.getloadavg()
    print(f"load average before: {load_before}", flush=True)
    for name in [k for k in os.environ if k.startswith("DLAAS_")]:
        del os.environ[name]
    base = Path(tempfile.mkdtemp(prefix="dlaas-bench-latency-"))
    home = base / "home"
    os.environ["DLAAS_HOME"] = str(home)
    # The benchmark polls far faster than a user may: the API's rate limits are off.
    os.environ["DLAAS_RATE_LIMIT_PER_S"] = os.environ["DLAAS_ADDRESS_RATE_LIMIT_PER_S"] = "0"
    figures: dict[str, Any] = {"bench": "latency"}
    try:
        began = time.monotonic()
        platform_info = embedded.start(home, api_port=embedded.free_port(), on_step=print)
        figures["platform_start_s"] = round(time.monotonic() - began, 2)
        token = json.loads((home / "client.json").read_text())["token"]
        client = httpx.Client(
            base_url=platform_info.url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        )
        with client:
            platform = Platform(client)
            startup = command_startup(START_COMMAND, args.jobs)
            startup_s = median(startup)
            print(f"command start-up, {len(startup)} local runs: median {startup_s:.3f} s")
            figures.update(log_latency(platform, args.log_seconds, args.log_interval))
            figures.update(start_latency(platform, args.jobs, startup_s))
            figures["command_startup_s"] = rounded(startup_s)
            figures["command_startup_max_s"] = rounded(max(startup))
    finally:
        stopped = embedded.stop(home)
        print(f"stopped: {', '.join(stopped)}", flush=True)
        if args.keep:
            print(f"kept {home}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    figures["load_average_before"] = [round(x, 2) for x in load_before]
    print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
