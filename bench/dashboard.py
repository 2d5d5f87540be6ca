"""The dashboard in a real browser: how soon its pages are usable, on the embedded platform.

Starts the embedded default (`cli.embedded.start`) in a temporary DLAAS_HOME and drives the
dashboard (`/ui/...`) in headless Chromium through Playwright, signing in as a user does, by
opening `/ui/#token=...`:

(a) `jobs_in_database`: 10,000 jobs of the admin, finished, failed and halted (states the
    lifecycle manager leaves alone), each with its events, are written straight into the
    platform's SQLite database through the storage layer's models, then counted back.
(b) `jobs_page_interactive_s`: the jobs page, `--loads` cold loads (a new browser context
    each: no cache, no local storage), from navigation start to the page's
    `dlaas:interactive` mark (its first page of jobs drawn); the median. Baseline: the API's
    `GET /v2/jobs?limit=50` alone, timed by httpx on a new connection each time. The
    page's resource timings show where its time went (assets, `/v2/users/me`, the list).
(c) `chart_100k_draw_s`: a COMPLETED job whose stored metrics object
    (`jobs/{id}/metrics/learner-1.jsonl`, written into the object store in the runner's
    format) holds 100,000 points of one metric; its page's `dlaas:chart:<metric>` measure
    (the data's arrival to uPlot's draw hook), median over `--chart-loads` loads, and the
    time from navigation to that chart drawn.
(d) `log_line_visible_p95_s`: a real job (submitted through the API) waits for trigger files
    in a directory, polling every 5 ms, and prints `marker N` for each. Its page is open;
    a MutationObserver stamps `Date.now()` when each marker's line enters the log view;
    the benchmark creates the trigger files one at a time (`--markers`) and compares with
    the wall time it created each. Baseline: an httpx reader of
    `GET /v2/jobs/{id}/logs?follow=true` (Server-Sent Events) open at the same time, stamped
    with `time.time()` on the same machine's clock.
(e) `assets_kb_gz`: the dashboard's own JavaScript and CSS (what index.html loads, vendor
    libraries included, plus every module under static/js), each gzip-compressed at level 9,
    summed; and the raw size.

Run from the repository root: `python -m bench.dashboard` (about a minute). The last line is
the FINAL line, one JSON object `{"bench": "dashboard", ...}` with each figure, its baseline
and ratio, `targets` and `targets_met`. The platform is always stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import math
import os
import re
import shlex
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import httpx
from playwright.sync_api import Browser, Page, sync_playwright
from sqlalchemy import func, insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from api.dashboard.routes import STATIC_DIR
from api.manifest import parse_manifest
from bench._cpu_meter import CpuSnapshot, cores_used, snapshot, top_consumers
from bench._latency_stats import median, percentile, rounded
from bench._small import parse_with_small
from bench.latency import model_zip
from cli import embedded
from cli.sse import parse_sse
from storage import jobs as repo
from storage import output_keys, streams
from storage.db import make_engine, make_sessionmaker
from storage.job_states import Desired, JobState
from storage.models import Job, JobEvent, User
from storage.object_store import open_object_store
from storage.settings import Settings
from storage.teams import personal_team_id
from storage.users import user_by_token
from tests.browser.dashboard import CHROMIUM, CHROMIUM_ARGS
from tests.stop_on_signals import unwind_on_stopping_signals

TARGETS = {
    "jobs_page_interactive_s": 1.0,
    "log_line_visible_p95_s": 1.0,
    "chart_100k_draw_s": 0.5,
    "assets_kb_gz": 200.0,
}
FINISHED = frozenset({"COMPLETED", "FAILED", "HALTED"})
CHART_METRIC = "loss"
READY = "bench-ready"
MARKER = re.compile(r"(?:^|\s)marker (\d+)$")
PAGE_WAIT_MS = 60_000


def phase_cpu(before: CpuSnapshot) -> dict[str, Any]:
    """How busy the machine was since `before`, and who besides this process kept it busy."""
    after = snapshot()
    return {
        "machine_cores": cores_used(before, after, ())["machine"],
        "top_processes": top_consumers(before, after, {os.getpid()}, 4),
    }


def seconds(ms: float | None) -> float:
    return math.nan if ms is None else ms / 1000.0


# -- (a) jobs in the database ---------------------------------------------------------------

SEED_MANIFESTS = [
    (
        "resnet-sweep",
        "name: resnet-sweep\nlearners: 2\ncpus: 2\nmemory: 4Gi\n"
        "framework:\n  name: pytorch\n  version: '2.13'\n  command: python train.py --lr 0.1\n"
        "checkpoint:\n  interval_s: 60\n  keep: 3\nrestart_policy:\n  max_restarts: 3\n",
    ),
    (
        "digits",
        "name: digits\nlearners: 1\ncpus: 1\nmemory: 1Gi\n"
        "framework:\n  name: python\n  command: python train.py --epochs 12\n",
    ),
    (
        "bert-finetune",
        "name: bert-finetune\nlearners: 4\ngpus: 1\ncpus: 4\nmemory: 16Gi\n"
        "framework:\n  name: pytorch\n  command: python finetune.py\n"
        "environment:\n  BATCH_SIZE: '32'\n",
    ),
]
# (state, share of the jobs): all states the lifecycle manager leaves as they are
SEED_STATES = [(JobState.COMPLETED, 6), (JobState.FAILED, 3), (JobState.HALTED, 1)]


def job_rows(
    job_id: str,
    owner_id: int,
    team_id: int,
    name: str,
    manifest: dict[str, Any],
    state: JobState,
    created: datetime,
    ran_s: float,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A job row and its events as the lifecycle manager would have left them."""
    moments = [created + timedelta(seconds=s) for s in (0.0, 1.0, 3.0, 8.0, 8.0 + ran_s)]
    path = [JobState.QUEUED, JobState.DEPLOYING, JobState.DOWNLOADING, JobState.RUNNING]
    reasons = ["job submitted", "deploying learners", "learners fetch the model", "training"]
    if state is JobState.COMPLETED:
        path += [JobState.STORING, JobState.COMPLETED]
        reasons += ["storing results", "all learners exited 0"]
        moments.append(moments[-1] + timedelta(seconds=2))
    elif state is JobState.FAILED:
        path.append(JobState.FAILED)
        reasons.append("learner 1 exited with code 1; no restarts left")
    else:
        path.append(JobState.HALTED)
        reasons.append("halted by user")
    events: list[dict[str, Any]] = [
        {
            "job_id": job_id,
            "time": moment,
            "kind": "submitted" if index == 0 else "state",
            "from_state": None if index == 0 else str(path[index - 1]),
            "to_state": str(to),
            "reason": reason,
            "detail": {},
        }
        for index, (moment, to, reason) in enumerate(zip(moments, path, reasons, strict=True))
    ]
    row = {
        "id": job_id,
        "owner_id": owner_id,
        "team_id": team_id,
        "name": name,
        "state": str(state),
        "reason": reasons[-1],
        "desired": str(Desired.HALT if state is JobState.HALTED else Desired.RUN),
        "learners": int(manifest.get("learners", 1)),
        "attempt": 1,
        "restarts": 0,
        "manifest": manifest,
        "created_at": created,
        "updated_at": moments[-1],
        "deleted_at": None,
        "results_bytes": 0,
    }
    return row, events


async def admin_and_team(session: AsyncSession, token: str) -> tuple[User, int]:
    """The user `token` names and the team of their own, which their jobs belong to."""
    admin = await user_by_token(session, token)
    if admin is None:
        raise RuntimeError("the admin's token names no user in the database")
    team_id = await personal_team_id(session, admin.id)
    if team_id is None:
        raise RuntimeError(f"user {admin.name} has no team of their own")
    return admin, team_id


@dataclass
class Seeded:
    jobs_counted: int
    events_counted: int
    jobs_total: int
    seconds: float


async def seed_jobs(settings: Settings, token: str, count: int) -> Seeded:
    """`count` of the admin's jobs, newest a minute old, about 4 minutes apart, in one
    transaction; then count them (and all jobs) back from the database."""
    manifests = [(name, parse_manifest(text).normalized()) for name, text in SEED_MANIFESTS]
    began = time.monotonic()
    engine = make_engine(settings.database_url)
    sessions = make_sessionmaker(engine)
    try:
        async with sessions() as session, session.begin():
            admin, team_id = await admin_and_team(session, token)
            now = datetime.now(UTC)
            weights = [state for state, share in SEED_STATES for _ in range(share)]
            jobs: list[dict[str, Any]] = []
            events: list[dict[str, Any]] = []
            for index in range(count):
                name, manifest = manifests[index % len(manifests)]
                created = now - timedelta(seconds=60 + 240 * index)
                row, its_events = job_rows(
                    repo.new_job_id(),
                    admin.id,
                    team_id,
                    f"{name}-{index:05d}",
                    manifest,
                    weights[(index * 7) % len(weights)],
                    created,
                    ran_s=60.0 + (index * 7919) % 3600,
                )
                jobs.append(row)
                events.extend(its_events)
            await session.execute(insert(Job), jobs)
            await session.execute(insert(JobEvent), events)
        elapsed = time.monotonic() - began
        ids = [row["id"] for row in jobs]
        async with sessions() as session:
            found = events_found = 0
            for start in range(0, len(ids), 500):
                part = ids[start : start + 500]
                found += int(
                    (
                        await session.execute(
                            select(func.count()).select_from(Job).where(Job.id.in_(part))
                        )
                    ).scalar_one()
                )
                events_found += int(
                    (
                        await session.execute(
                            select(func.count())
                            .select_from(JobEvent)
                            .where(JobEvent.job_id.in_(part))
                        )
                    ).scalar_one()
                )
            total = await repo.count_jobs(session)
    finally:
        await engine.dispose()
    return Seeded(found, events_found, total, elapsed)


async def chart_job(settings: Settings, token: str, points: int) -> str:
    """A COMPLETED job of one learner whose stored metrics hold `points` points of one
    metric, one a step, written where and as the runner writes them."""
    manifest = parse_manifest(SEED_MANIFESTS[1][1]).normalized()
    job_id = repo.new_job_id()
    now = datetime.now(UTC)
    started = now.timestamp() - points * 0.05
    lines = []
    for step in range(points):
        loss = 2.0 * math.exp(-step / 20_000) + 0.05 * math.sin(step / 40) + 0.01
        lines.append(streams.metric_line(1, started + step * 0.05, step, {CHART_METRIC: loss}))
    data = ("\n".join(lines) + "\n").encode()
    open_object_store(settings).put_bytes(output_keys.metrics_key(job_id, 1), data)
    engine = make_engine(settings.database_url)
    try:
        async with make_sessionmaker(engine)() as session, session.begin():
            admin, team_id = await admin_and_team(session, token)
            row, events = job_rows(
                job_id,
                admin.id,
                team_id,
                f"bench-chart-{points}",
                manifest,
                JobState.COMPLETED,
                now - timedelta(seconds=points * 0.05 + 10),
                ran_s=points * 0.05,
            )
            await session.execute(insert(Job), [row])
            await session.execute(insert(JobEvent), events)
    finally:
        await engine.dispose()
    print(f"chart job {job_id}: {points} points, {len(data) / 1e6:.1f} MB of metrics stored")
    return job_id


# -- the browser ----------------------------------------------------------------------------


@dataclass
class Dashboard:
    browser: Browser
    url: str
    token: str

    def signed_in_link(self, path: str) -> str:
        return f"{self.url}{path}#token={quote(self.token, safe='')}"

    @contextmanager
    def cold_page(self) -> Iterator[Page]:
        """A page in a new browser context: nothing cached, nothing stored."""
        context = self.browser.new_context(viewport={"width": 1280, "height": 900})
        try:
            yield context.new_page()
        finally:
            context.close()


RESOURCES_JS = """() => performance.getEntriesByType("resource").map((e) => ({
  name: e.name, start: e.startTime, responseStart: e.responseStart, end: e.responseEnd,
  transfer: e.transferSize, body: e.decodedBodySize,
}))"""

JOBS_PAGE_JS = """() => {
  const marks = performance.getEntriesByName("dlaas:interactive");
  const nav = performance.getEntriesByType("navigation")[0];
  return {
    interactive: marks.length ? marks[0].startTime : null,
    marks: marks.length,
    responseEnd: nav.responseEnd,
    domContentLoaded: nav.domContentLoadedEventEnd,
    rows: document.querySelectorAll("table.jobs tbody tr[data-job]").length,
    alert: document.querySelector(".alert")?.textContent || null,
  };
}"""

CHART_MEASURES_JS = """() => performance.getEntriesByType("measure")
  .filter((e) => e.name.startsWith("dlaas:chart:"))
  .map((e) => ({ name: e.name, start: e.startTime, duration: e.duration,
                 points: e.detail ? e.detail.points : null }))"""

# Stamps the wall time each `marker N` line enters the log view (the callback runs as a
# microtask right after the view appends the lines).
OBSERVE_MARKERS_JS = """() => {
  const seen = (window.__benchMarkers = {});
  const log = document.querySelector("pre.log");
  new MutationObserver((records) => {
    const now = Date.now();
    for (const record of records) {
      for (const node of record.addedNodes) {
        const found = /(?:^|\\s)marker (\\d+)$/.exec(node.textContent || "");
        if (found && !(found[1] in seen)) seen[found[1]] = now;
      }
    }
  }).observe(log, { childList: true });
}"""


def path_of(url: str) -> str:
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


def first_resource(resources: list[dict[str, Any]], prefix: str) -> dict[str, Any] | None:
    return next((r for r in resources if path_of(r["name"]).startswith(prefix)), None)


# -- (b) the jobs page ----------------------------------------------------------------------


def jobs_page_load(dashboard: Dashboard) -> dict[str, Any]:
    with dashboard.cold_page() as page:
        page.goto(dashboard.signed_in_link("/ui/"), wait_until="commit")
        page.wait_for_function(
            "() => performance.getEntriesByName('dlaas:interactive').length > 0",
            timeout=PAGE_WAIT_MS,
        )
        found: dict[str, Any] = page.evaluate(JOBS_PAGE_JS)
        resources: list[dict[str, Any]] = page.evaluate(RESOURCES_JS)
    if found["alert"] or found["rows"] == 0:
        raise RuntimeError(f"the jobs page drew no jobs: {found}")
    statics = [r for r in resources if path_of(r["name"]).startswith("/ui/static/")]
    me = first_resource(resources, "/v2/users/me")
    listing = first_resource(resources, "/v2/jobs?")
    return {
        "interactive_s": seconds(found["interactive"]),
        "rows": found["rows"],
        "marks": found["marks"],
        "html_received_s": seconds(found["responseEnd"]),
        "dom_content_loaded_s": seconds(found["domContentLoaded"]),
        "assets_received_s": seconds(max((r["end"] for r in statics), default=None)),
        "assets_transfer_kb": sum(r["transfer"] for r in statics) / 1024,
        "users_me_start_s": seconds(me["start"] if me else None),
        "users_me_s": seconds(me["end"] - me["start"] if me else None),
        "jobs_api_start_s": seconds(listing["start"] if listing else None),
        "jobs_api_in_page_s": seconds(listing["end"] - listing["start"] if listing else None),
        "jobs_api_end_to_interactive_s": seconds(
            found["interactive"] - listing["end"] if listing else None
        ),
    }


def jobs_api_alone(url: str, token: str, runs: int) -> list[float]:
    """`GET /v2/jobs?limit=50` as the page asks it, each on a new connection."""
    found = []
    for _ in range(runs):
        began = time.perf_counter()
        answer = httpx.get(
            f"{url}/v2/jobs",
            params={"limit": 50},
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )
        answer.raise_for_status()
        jobs = answer.json()["jobs"]
        found.append(time.perf_counter() - began)
        if len(jobs) != 50:
            raise RuntimeError(f"GET /v2/jobs?limit=50 gave {len(jobs)} jobs")
    return found


def jobs_page(dashboard: Dashboard, loads: int, api_runs: int) -> dict[str, Any]:
    before = snapshot()
    samples = []
    for index in range(loads):
        sample = jobs_page_load(dashboard)
        samples.append(sample)
        print(
            f"jobs page load {index + 1}: interactive {sample['interactive_s']:.3f} s "
            f"(html {sample['html_received_s']:.3f}, assets {sample['assets_received_s']:.3f}, "
            f"/v2/users/me from {sample['users_me_start_s']:.3f} for {sample['users_me_s']:.3f}, "
            f"/v2/jobs from {sample['jobs_api_start_s']:.3f} for "
            f"{sample['jobs_api_in_page_s']:.3f}, drawn "
            f"{sample['jobs_api_end_to_interactive_s']:.3f} after; {sample['rows']} rows)",
            flush=True,
        )
    cpu = phase_cpu(before)
    api = jobs_api_alone(dashboard.url, dashboard.token, api_runs)
    interactive = median([s["interactive_s"] for s in samples])
    api_s = median(api)
    print(
        f"jobs page: median {interactive:.3f} s to interactive over {loads} cold loads; "
        f"GET /v2/jobs?limit=50 alone: median {api_s * 1000:.1f} ms over {api_runs}"
    )
    breakdown = {
        key: rounded(median([s[key] for s in samples]))
        for key in samples[0]
        if key not in ("interactive_s", "rows", "marks")
    }
    return {
        "jobs_page_interactive_s": rounded(interactive),
        "jobs_page_interactive_samples_s": [rounded(s["interactive_s"]) for s in samples],
        "jobs_page_loads": loads,
        "jobs_page_rows": samples[0]["rows"],
        "jobs_page_breakdown_median": breakdown,
        "baseline_jobs_api_s": rounded(api_s, 4),
        "baseline_jobs_api_p95_s": rounded(percentile(api, 95), 4),
        "ratio_jobs_page_to_api": rounded(interactive / api_s, 1),
        "jobs_page_cpu": cpu,
    }


# -- (c) a chart of 100,000 points ----------------------------------------------------------


def chart_load(dashboard: Dashboard, job_id: str, points: int) -> dict[str, Any]:
    name = f"dlaas:chart:{CHART_METRIC}"
    with dashboard.cold_page() as page:
        page.goto(dashboard.signed_in_link(f"/ui/jobs/{job_id}"), wait_until="commit")
        page.wait_for_function(
            "(name) => performance.getEntriesByName(name).length > 0",
            arg=name,
            timeout=PAGE_WAIT_MS,
        )
        page.wait_for_timeout(200)  # any other chart drawn from the same data
        measures: list[dict[str, Any]] = page.evaluate(CHART_MEASURES_JS)
        resources: list[dict[str, Any]] = page.evaluate(RESOURCES_JS)
        shown = page.get_attribute(f'figure[data-metric="{CHART_METRIC}"]', "data-points")
    chart = next(m for m in measures if m["name"] == name)
    if chart["points"] != points or shown != str(points):
        raise RuntimeError(f"the {CHART_METRIC} chart drew {chart['points']} points, not {points}")
    metrics = first_resource(resources, f"/v2/jobs/{job_id}/metrics")
    return {
        "draw_s": seconds(chart["duration"]),
        "navigation_to_drawn_s": seconds(chart["start"] + chart["duration"]),
        "metrics_request_start_s": seconds(metrics["start"] if metrics else None),
        "metrics_received_s": seconds(metrics["end"] if metrics else None),
        "metrics_mb": (metrics["body"] / 1e6) if metrics else math.nan,
        "received_to_draw_start_s": seconds(chart["start"] - metrics["end"] if metrics else None),
        "other_charts": {
            m["name"].removeprefix("dlaas:chart:"): {
                "draw_s": rounded(seconds(m["duration"])),
                "points": m["points"],
            }
            for m in measures
            if m["name"] != name
        },
    }


def metrics_api_alone(url: str, token: str, job_id: str, runs: int) -> list[float]:
    """The page's `GET /v2/jobs/{id}/metrics`, whole body read and parsed, each on a new
    connection: what the API alone takes to serve the points."""
    found = []
    for _ in range(runs):
        began = time.perf_counter()
        answer = httpx.get(
            f"{url}/v2/jobs/{job_id}/metrics",
            headers={"Authorization": f"Bearer {token}"},
            timeout=120,
        )
        answer.raise_for_status()
        answer.json()
        found.append(time.perf_counter() - began)
    return found


def chart(dashboard: Dashboard, job_id: str, points: int, loads: int) -> dict[str, Any]:
    before = snapshot()
    samples = []
    for index in range(loads):
        sample = chart_load(dashboard, job_id, points)
        samples.append(sample)
        print(
            f"chart load {index + 1}: {CHART_METRIC} ({points} points) drawn in "
            f"{sample['draw_s']:.3f} s; navigation to drawn "
            f"{sample['navigation_to_drawn_s']:.3f} s "
            f"(metrics asked at {sample['metrics_request_start_s']:.3f}, "
            f"{sample['metrics_mb']:.1f} MB received at {sample['metrics_received_s']:.3f}, "
            f"drawing began {sample['received_to_draw_start_s']:.3f} s after); other charts: "
            f"{sample['other_charts']}",
            flush=True,
        )
    draw = median([s["draw_s"] for s in samples])
    whole = median([s["navigation_to_drawn_s"] for s in samples])
    cpu = phase_cpu(before)
    alone = metrics_api_alone(dashboard.url, dashboard.token, job_id, max(3, loads // 2))
    print(
        f"chart: median draw {draw:.3f} s, navigation to drawn {whole:.3f} s; "
        f"GET /v2/jobs/{job_id}/metrics alone: median {median(alone):.3f} s"
    )
    return {
        "chart_100k_draw_s": rounded(draw),
        "chart_100k_draw_samples_s": [rounded(s["draw_s"]) for s in samples],
        "chart_points": points,
        "chart_loads": loads,
        "chart_navigation_to_drawn_s": rounded(whole),
        "chart_breakdown_median_s": {
            "metrics_request_start_s": rounded(
                median([s["metrics_request_start_s"] for s in samples])
            ),
            "metrics_received_s": rounded(median([s["metrics_received_s"] for s in samples])),
            "received_to_draw_start_s": rounded(
                median([s["received_to_draw_start_s"] for s in samples])
            ),
            "draw_s": rounded(draw),
        },
        "chart_metrics_mb": rounded(samples[0]["metrics_mb"], 1),
        "chart_other_charts": samples[0]["other_charts"],
        "baseline_chart_metrics_api_s": rounded(median(alone)),
        "ratio_chart_navigation_to_metrics_api": rounded(whole / median(alone), 2),
        "chart_cpu": cpu,
    }


# -- (d) a log line, from the program to the page -------------------------------------------


def trigger_program() -> str:
    program = (
        "import os, time\n"
        "folder = os.environ['BENCH_TRIGGER_DIR']\n"
        f"print('{READY}', flush=True)\n"
        "n = 0\n"
        "while not os.path.exists(os.path.join(folder, 'stop')):\n"
        "    if os.path.exists(os.path.join(folder, f'trigger-{n}')):\n"
        "        print(f'marker {n}', flush=True)\n"
        "        n += 1\n"
        "        continue\n"
        "    time.sleep(0.005)\n"
        "print('bench-done', flush=True)\n"
    )
    return "python -u -c " + shlex.quote(program)


def trigger_manifest(folder: Path) -> bytes:
    # JSON strings are YAML strings: neither value needs YAML quoting of its own
    return (
        "name: bench-dashboard-log\nlearners: 1\ncpus: 0.5\nmemory: 256Mi\n"
        f"framework:\n  name: python\n  command: {json.dumps(trigger_program())}\n"
        f"environment:\n  BENCH_TRIGGER_DIR: {json.dumps(str(folder))}\n"
        "restart_policy:\n  max_restarts: 0\n"
    ).encode()


@dataclass
class SseReader:
    """Follows a job's log as a plain client does, stamping each marker's arrival."""

    client: httpx.Client
    job_id: str
    seen: dict[int, float] = field(default_factory=dict)
    ready: threading.Event = field(default_factory=threading.Event)
    ended: str = ""
    error: str = ""
    thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._read, name="sse-reader", daemon=True)
        self.thread.start()

    def _read(self) -> None:
        url = f"/v2/jobs/{self.job_id}/logs"
        timeout = httpx.Timeout(30.0, read=300.0)
        try:
            with self.client.stream(
                "GET", url, params={"follow": "true"}, timeout=timeout
            ) as answer:
                answer.raise_for_status()
                for event in parse_sse(answer.iter_lines()):
                    received = time.time()
                    data = json.loads(event.data)
                    if event.event == "end":
                        self.ended = str(data.get("state", ""))
                        return
                    line = str(data.get("line", "")).rstrip()
                    if line == READY:
                        self.ready.set()
                    found = MARKER.search(line)
                    if found and int(found.group(1)) not in self.seen:
                        self.seen[int(found.group(1))] = received
        except Exception as error:  # reported in the figures
            self.error = repr(error)
            self.ready.set()


def clock_offset_s(page: Page) -> tuple[float, float]:
    """The page's `Date.now()` less this process's `time.time()`, and the uncertainty (half
    the round trip of the best of a few tries)."""
    best = (math.nan, math.inf)
    for _ in range(5):
        before = time.time()
        theirs = float(page.evaluate("Date.now()")) / 1000.0
        after = time.time()
        if (after - before) / 2 < best[1]:
            best = (theirs - (before + after) / 2, (after - before) / 2)
    return best


def wait_job(client: httpx.Client, job_id: str, states: frozenset[str], timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while True:
        state = str(client.get(f"/v2/jobs/{job_id}").json()["state"])
        if state in states or time.monotonic() > deadline:
            return state
        time.sleep(0.1)


def log_latency(
    dashboard: Dashboard, client: httpx.Client, folder: Path, markers: int
) -> dict[str, Any]:
    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "manifest": ("manifest.yml", trigger_manifest(folder), "application/x-yaml"),
        "model": ("model.zip", model_zip(), "application/zip"),
    }
    answer = client.post("/v2/jobs", files=files)
    if answer.status_code != 201:
        raise RuntimeError(f"submit refused: {answer.status_code} {answer.text}")
    job_id = str(answer.json()["id"])
    reader = SseReader(client, job_id)
    reader.start()
    if not reader.ready.wait(120) or reader.error:
        raise RuntimeError(f"log job {job_id} never printed {READY!r}: {reader.error}")
    print(f"log job {job_id}: running; opening its page")
    page_seen: dict[str, float] = {}
    sse_missing: list[int] = []
    page_missing: list[int] = []
    created: list[float] = []
    with dashboard.cold_page() as page:
        page.goto(dashboard.signed_in_link(f"/ui/jobs/{job_id}"), wait_until="commit")
        page.wait_for_selector("pre.log", timeout=PAGE_WAIT_MS)
        page.evaluate(OBSERVE_MARKERS_JS)
        page.wait_for_function(
            "(ready) => document.querySelector('pre.log').textContent.includes(ready)",
            arg=READY,
            timeout=PAGE_WAIT_MS,
        )
        offset, uncertainty = clock_offset_s(page)
        before = snapshot()
        for n in range(markers):
            created.append(time.time())
            (folder / f"trigger-{n}").touch()
            try:
                page.wait_for_function(
                    "(n) => window.__benchMarkers[n] !== undefined", arg=str(n), timeout=10_000
                )
            except Exception:
                page_missing.append(n)
            deadline = time.monotonic() + 10
            while n not in reader.seen and time.monotonic() < deadline:
                time.sleep(0.002)
            if n not in reader.seen:
                sse_missing.append(n)
            time.sleep(0.1 + 0.1 * ((n * 37) % 10) / 10)  # not in step with any timer
        cpu = phase_cpu(before)
        page_seen = page.evaluate("window.__benchMarkers")
        (folder / "stop").touch()
        state = wait_job(client, job_id, FINISHED, 60)
    if reader.thread is not None:
        reader.thread.join(30)
    page_lat = [
        page_seen[str(n)] / 1000.0 - created[n] for n in range(markers) if str(n) in page_seen
    ]
    sse_lat = [reader.seen[n] - created[n] for n in range(markers) if n in reader.seen]
    figures = {
        "log_line_visible_p50_s": rounded(percentile(page_lat, 50)),
        "log_line_visible_p95_s": rounded(percentile(page_lat, 95)),
        "log_line_visible_max_s": rounded(max(page_lat, default=math.nan)),
        "baseline_log_sse_p50_s": rounded(percentile(sse_lat, 50)),
        "baseline_log_sse_p95_s": rounded(percentile(sse_lat, 95)),
        "baseline_log_sse_max_s": rounded(max(sse_lat, default=math.nan)),
        "ratio_log_p50_page_to_sse": rounded(percentile(page_lat, 50) / percentile(sse_lat, 50), 2),
        "ratio_log_p95_page_to_sse": rounded(percentile(page_lat, 95) / percentile(sse_lat, 95), 2),
        "log_markers": markers,
        "log_markers_missed_page": len(page_missing),
        "log_markers_missed_sse": len(sse_missing),
        "log_page_clock_offset_ms": rounded(offset * 1000, 2),
        "log_page_clock_uncertainty_ms": rounded(uncertainty * 1000, 2),
        "log_job_state": state,
        "log_sse_end": reader.ended,
        "log_sse_error": reader.error,
        "log_cpu": cpu,
    }
    print(
        f"log job {job_id}: {len(page_lat)}/{markers} markers seen in the page, p50 "
        f"{figures['log_line_visible_p50_s']} s p95 {figures['log_line_visible_p95_s']} s; "
        f"{len(sse_lat)} by the SSE reader, p50 {figures['baseline_log_sse_p50_s']} s p95 "
        f"{figures['baseline_log_sse_p95_s']} s; job {state}; page clock offset "
        f"{offset * 1000:.2f} ± {uncertainty * 1000:.2f} ms"
    )
    return figures


# -- (e) the assets -------------------------------------------------------------------------


def asset_files() -> list[Path]:
    """What index.html loads from /ui/static, and every module under static/js."""
    html = (STATIC_DIR / "index.html").read_text()
    loaded = [
        STATIC_DIR / ref.removeprefix("/ui/static/")
        for ref in re.findall(r'(?:src|href)="(/ui/static/[^"]+)"', html)
    ]
    modules = sorted((STATIC_DIR / "js").rglob("*.js"))
    files = list(dict.fromkeys([*loaded, *modules]))
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise RuntimeError(f"index.html loads files that do not exist: {missing}")
    return files


def assets() -> dict[str, Any]:
    sizes = {}
    for path in asset_files():
        data = path.read_bytes()
        packed = gzip.compress(data, compresslevel=9, mtime=0)
        sizes[str(path.relative_to(STATIC_DIR))] = (len(data), len(packed))
    raw = sum(r for r, _ in sizes.values()) / 1024
    packed_kb = sum(g for _, g in sizes.values()) / 1024
    largest = sorted(sizes.items(), key=lambda item: item[1][1], reverse=True)[:4]
    print(
        f"assets: {len(sizes)} files, {raw:.1f} KB raw, {packed_kb:.1f} KB gzip -9; largest "
        + ", ".join(f"{name} {g / 1024:.1f} KB" for name, (_, g) in largest)
    )
    return {
        "assets_kb_gz": round(packed_kb, 1),
        "assets_kb_raw": round(raw, 1),
        "assets_files": len(sizes),
        "assets_kb_gz_by_file": {name: round(g / 1024, 1) for name, (_, g) in sizes.items()},
    }


# -- the run --------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs put in the database")
    parser.add_argument("--loads", type=int, default=7, help="cold loads of the jobs page")
    parser.add_argument("--api-runs", type=int, default=21, help="GET /v2/jobs timed alone")
    parser.add_argument("--chart-points", type=int, default=100_000)
    parser.add_argument("--chart-loads", type=int, default=5)
    parser.add_argument("--markers", type=int, default=40, help="log lines timed")
    parser.add_argument("--keep", action="store_true", help="keep DLAAS_HOME (logs) afterwards")
    return parse_with_small(
        parser,
        {
            "jobs": 200,
            "loads": 1,
            "api_runs": 3,
            "chart_points": 2_000,
            "chart_loads": 1,
            "markers": 3,
        },
    )


def verdicts(figures: dict[str, Any]) -> dict[str, bool | None]:
    return {
        key: None if figures.get(key) is None else bool(figures[key] < limit)
        for key, limit in TARGETS.items()
    }


def main() -> None:
    unwind_on_stopping_signals()  # killed by a timeout, it still stops its platform
    args = parse_args()
    load_before = os.getloadavg()
    print(f"load average before: {load_before}; {os.cpu_count()} cores", flush=True)
    figures: dict[str, Any] = {"bench": "dashboard"}
    figures.update(assets())
    for name in [k for k in os.environ if k.startswith("DLAAS_")]:
        del os.environ[name]
    base = Path(tempfile.mkdtemp(prefix="dlaas-bench-dashboard-"))
    home = base / "home"
    os.environ["DLAAS_HOME"] = str(home)
    # The pages poll every 2 s and the benchmark reloads them: the API's rate limits are off.
    os.environ["DLAAS_RATE_LIMIT_PER_S"] = os.environ["DLAAS_ADDRESS_RATE_LIMIT_PER_S"] = "0"
    try:
        began = time.monotonic()
        platform = embedded.start(home, api_port=embedded.free_port(), on_step=print)
        figures["platform_start_s"] = round(time.monotonic() - began, 2)
        token = json.loads((home / "client.json").read_text())["token"]
        settings = Settings()

        seeded = asyncio.run(seed_jobs(settings, token, args.jobs))
        print(
            f"database: {seeded.jobs_counted} jobs and {seeded.events_counted} events written "
            f"in {seeded.seconds:.1f} s and counted back; {seeded.jobs_total} jobs in all"
        )
        figures["jobs_in_database"] = seeded.jobs_counted
        figures["jobs_total_in_database"] = seeded.jobs_total
        figures["job_events_in_database"] = seeded.events_counted
        figures["seed_s"] = round(seeded.seconds, 2)
        # before the browser: Playwright's synchronous API holds this thread's event loop
        chart_id = asyncio.run(chart_job(settings, token, args.chart_points))

        headers = {"Authorization": f"Bearer {token}"}
        with (
            httpx.Client(base_url=platform.url, headers=headers, timeout=30) as client,
            sync_playwright() as playwright,
        ):
            browser = playwright.chromium.launch(
                executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
            )
            try:
                figures["chromium"] = browser.version
                dashboard = Dashboard(browser, platform.url, token)
                figures.update(jobs_page(dashboard, args.loads, args.api_runs))
                figures.update(chart(dashboard, chart_id, args.chart_points, args.chart_loads))
                figures.update(log_latency(dashboard, client, base / "triggers", args.markers))
            finally:
                browser.close()
    finally:
        stopped = embedded.stop(home)
        print(f"stopped: {', '.join(stopped)}", flush=True)
        if args.keep:
            print(f"kept {home}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    figures["targets"] = TARGETS
    figures["targets_met"] = verdicts(figures)
    figures["load_average_before"] = [round(x, 2) for x in load_before]
    figures["cores"] = os.cpu_count()
    print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
