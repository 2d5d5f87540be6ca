"""/healthz while idle incomplete-header connections hold the API (a slowloris attack).

    .venv/bin/python -m bench.slowloris [--connections 20000] [--processes 4] [--probes 200]
        [--url http://127.0.0.1:8470] [--small]

Without `--url` it starts the API as a real server (`python -m api`, one worker) on SQLite
in a temporary directory and a Redis database of its own, as the deployments run it, and
also reports the server's open files. Then, in the same run:

1. baseline: `--probes` GET /healthz, each on a new connection from 127.0.0.1, one every
   `--probe-interval` s;
2. attack: `--processes` client processes (each raising its own open-file limit, so that
   together they get past one process's) open `--connections` connections from other
   loopback addresses (127.1.x.y, `--per-address` from each: under the API's cap per
   address, as many clients would), each sending an incomplete request head and then a
   header line every few seconds, never the blank line that ends it; a connection the
   server closes is opened again after `--reconnect-pause` s, as an attacker would;
3. once they are held, the same probes again.

The FINAL line is one JSON object: `healthz_p99_ms_under_slowloris` (target 1000),
`baseline_healthz_p99_ms`, `connections_held` (the median, over the probes, of attack
connections open and not closed by the server), `probe_failures` (probes under attack that
got no 200 within `--probe-timeout`), and more (see bench/README.md).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import math
import multiprocessing
import os
import secrets
import sys
import tempfile
import time
from dataclasses import dataclass
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bench._bench_api_server import BenchApiServer, api_env, process_cpu_s
from bench._bench_redis import BenchRedis
from bench._latency_stats import median, ms, percentile, rounded
from bench._small import parse_with_small
from storage.http_server import raise_open_file_limit

PARTIAL_HEAD = b"GET /healthz HTTP/1.1\r\nHost: dlaas\r\nUser-Agent: slowloris\r\n"
TRICKLE = b"X-Slowloris: 1\r\n"
TRICKLE_EVERY_S = 3.0
CONNECT_CONCURRENCY = 256  # connection attempts in flight per client process
TARGET_P99_MS = 1000.0
PLATEAU_S = 5.0


@dataclass(frozen=True)
class Attack:
    host: str
    port: int
    sources: list[str]  # one per connection
    reconnect_pause_s: float


def source_addresses(connections: int, per_address: int) -> list[str]:
    """The loopback address each attack connection comes from: `per_address` from each of
    127.1.0.1, 127.1.0.2, ... (127.0.0.0/8 is loopback on Linux)."""
    addresses = []
    for index in range(connections):
        n = index // per_address + 1
        addresses.append(f"127.1.{n // 250}.{n % 250 + 1}")
    return addresses


async def _hold_one(
    attack: Attack,
    source: str,
    gate: asyncio.Semaphore,
    held: Synchronized[int],
    closed: Synchronized[int],
) -> None:
    while True:
        try:
            async with gate:
                reader, writer = await asyncio.open_connection(
                    attack.host, attack.port, local_addr=(source, 0)
                )
                writer.write(PARTIAL_HEAD)
        except OSError:
            await asyncio.sleep(attack.reconnect_pause_s)
            continue
        held.value += 1
        try:
            while True:
                try:
                    data = await asyncio.wait_for(reader.read(1024), TRICKLE_EVERY_S)
                except TimeoutError:
                    writer.write(TRICKLE)
                    continue
                if not data:
                    break
        except OSError:
            pass
        finally:
            held.value -= 1
            closed.value += 1
            writer.close()
        await asyncio.sleep(attack.reconnect_pause_s)


async def _attack(
    attack: Attack, held: Synchronized[int], closed: Synchronized[int], stop: Event
) -> None:
    gate = asyncio.Semaphore(CONNECT_CONCURRENCY)
    tasks = [
        asyncio.create_task(_hold_one(attack, source, gate, held, closed))
        for source in attack.sources
    ]
    while not stop.is_set():
        await asyncio.sleep(0.2)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def _attacker(
    attack: Attack, held: Synchronized[int], closed: Synchronized[int], stop: Event
) -> None:
    raise_open_file_limit()
    asyncio.run(_attack(attack, held, closed, stop))


def probe(host: str, port: int, timeout_s: float) -> float | None:
    """Seconds for GET /healthz on a new connection answered 200, None if it was not."""
    started = time.monotonic()
    connection = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        connection.request("GET", "/healthz", headers={"Connection": "close"})
        answer = connection.getresponse()
        answer.read()
        return time.monotonic() - started if answer.status == 200 else None
    except OSError:
        return None
    finally:
        connection.close()


def listen_overflows() -> int | None:
    """The machine's count of connections its listening sockets' full accept queues turned
    away (TcpExt ListenOverflows): each such client retries its SYN a second later."""
    with contextlib.suppress(OSError, ValueError, StopIteration):
        lines = Path("/proc/net/netstat").read_text().splitlines()
        names, values = (line.split() for line in lines if line.startswith("TcpExt:"))
        return int(values[names.index("ListenOverflows")])
    return None


def server_open_files(pid: int | None) -> int | None:
    if pid is None:
        return None
    with contextlib.suppress(OSError):
        return len(os.listdir(f"/proc/{pid}/fd"))
    return None


def server_open_file_limit(pid: int | None) -> int | None:
    if pid is None:
        return None
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
            if line.startswith("Max open files"):
                return int(line.split()[3])
    return None


def probes(
    host: str,
    port: int,
    count: int,
    interval_s: float,
    timeout_s: float,
    sample: Any = lambda: None,
) -> tuple[list[float], int, list[Any]]:
    """`count` probes: the latencies of those answered, the failures, and `sample()` taken
    at each."""
    latencies: list[float] = []
    failures = 0
    samples = []
    for _ in range(count):
        latency = probe(host, port, timeout_s)
        if latency is None:
            failures += 1
        else:
            latencies.append(latency)
        samples.append(sample())
        time.sleep(interval_s)
    return latencies, failures, samples


def _ms(seconds: float) -> float | None:
    """Milliseconds for the report; None where nothing was measured."""
    return None if math.isnan(seconds) else ms(seconds)


def ramp_up(held_now: Any, asked: int, timeout_s: float) -> float:
    """Seconds until the attack holds what it asked for, or holds no more than it did
    `PLATEAU_S` before (a server capping its connections, or closing them as fast as they
    come), or the timeout."""
    started = time.monotonic()
    best, best_at = 0, started
    while (now := time.monotonic()) - started < timeout_s:
        held = held_now()
        if held >= asked:
            break
        if held > best:
            best, best_at = held, now
        elif best and now - best_at >= PLATEAU_S:
            break
        time.sleep(0.2)
    return time.monotonic() - started


def measure(args: argparse.Namespace, url: str, server_pid: int | None) -> dict[str, Any]:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    baseline, baseline_failures, _ = probes(
        host, port, args.probes, args.probe_interval, args.probe_timeout
    )
    idle_files = server_open_files(server_pid)
    print(
        f"baseline: p99 {ms(percentile(baseline, 99))} ms, {baseline_failures} failures",
        flush=True,
    )

    sources = source_addresses(args.connections, args.per_address)
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    counters = []
    workers = []
    for n in range(args.processes):
        held, closed = context.Value("i", 0), context.Value("i", 0)
        attack = Attack(host, port, sources[n :: args.processes], args.reconnect_pause)
        worker = context.Process(target=_attacker, args=(attack, held, closed, stop))
        worker.start()
        counters.append((held, closed))
        workers.append(worker)

    def held_now() -> int:
        return sum(held.value for held, _ in counters)

    def closed_now() -> int:
        return sum(closed.value for _, closed in counters)

    try:
        ramp_s = ramp_up(held_now, args.connections, args.ramp_timeout)
        print(f"attack: {held_now()} connections held after {ramp_s:.1f} s", flush=True)
        closed_before = closed_now()
        overflows_before = listen_overflows()
        probing_started = time.monotonic()
        server_cpu_before = process_cpu_s(server_pid) if server_pid else 0.0
        client_cpu_before = sum(process_cpu_s(worker.pid or 0) for worker in workers)
        under, failures, samples = probes(
            host,
            port,
            args.probes,
            args.probe_interval,
            args.probe_timeout,
            lambda: (held_now(), server_open_files(server_pid)),
        )
        closed_during = closed_now() - closed_before
        overflows_after = listen_overflows()
        probing_s = time.monotonic() - probing_started
        server_cores = (
            (process_cpu_s(server_pid) - server_cpu_before) / probing_s if server_pid else None
        )
        client_cores = (
            sum(process_cpu_s(worker.pid or 0) for worker in workers) - client_cpu_before
        ) / probing_s
    finally:
        stop.set()
        for worker in workers:
            worker.join(30)
            if worker.is_alive():
                worker.kill()
                worker.join()
    held_samples = [held for held, _ in samples]
    file_samples = [files for _, files in samples if files is not None]
    return {
        "healthz_p99_ms_under_slowloris": _ms(percentile(under, 99)),
        "healthz_p50_ms_under_slowloris": _ms(median(under)),
        "target_healthz_p99_ms": TARGET_P99_MS,
        "baseline_healthz_p99_ms": _ms(percentile(baseline, 99)),
        "baseline_healthz_p50_ms": _ms(median(baseline)),
        "connections_held": int(median(held_samples)) if held_samples else 0,
        "connections_held_min": min(held_samples, default=0),
        "connections_asked": args.connections,
        "source_addresses": len(set(sources)),
        "client_processes": args.processes,
        "probes": args.probes,
        "probe_failures": failures,
        "baseline_probe_failures": baseline_failures,
        "ramp_s": rounded(ramp_s, 1),
        "server_header_timeout_s": args.header_timeout,
        "attack_connections_closed_by_server_while_probing": closed_during,
        "attack_connections_closed_per_s": rounded(closed_during / probing_s, 1),
        "server_cores_under_slowloris": None if server_cores is None else rounded(server_cores, 2),
        "attack_client_cores": rounded(client_cores, 2),
        "listen_overflows_while_probing": None
        if overflows_before is None or overflows_after is None
        else overflows_after - overflows_before,
        "server_open_files_idle": idle_files,
        "server_open_files_under_slowloris": int(median(file_samples)) if file_samples else None,
        "server_open_file_limit": server_open_file_limit(server_pid),
    }


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.slowloris", description=__doc__)
    parser.add_argument("--url", help="an API already running (default: start one)")
    parser.add_argument("--connections", type=int, default=20_000)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--per-address", type=int, default=100)
    parser.add_argument("--probes", type=int, default=200)
    parser.add_argument("--probe-interval", type=float, default=0.1)
    parser.add_argument("--probe-timeout", type=float, default=5.0)
    parser.add_argument("--reconnect-pause", type=float, default=1.0)
    parser.add_argument("--ramp-timeout", type=float, default=120.0)
    parser.add_argument(
        "--header-timeout",
        type=float,
        help="DLAAS_HTTP_HEADER_TIMEOUT_S of the API started (default: the API's, 10 s)",
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    small = {"connections": 200, "probes": 20, "processes": 2}
    args = parse_with_small(_parser(), small, argv)
    raise_open_file_limit()
    if args.url:
        figures = measure(args, args.url, None)
    else:
        with tempfile.TemporaryDirectory(prefix="dlaas-slowloris-") as tmp, BenchRedis() as redis:
            base = Path(tmp)
            database_url = f"sqlite+aiosqlite:///{base / 'dlaas.db'}"
            env = api_env(base, database_url, redis.url, "dlaas_" + secrets.token_urlsafe(32))
            if args.header_timeout is not None:
                env["DLAAS_HTTP_HEADER_TIMEOUT_S"] = str(args.header_timeout)
            print(f"starting the API (log: {base / 'api.log'}); Redis {redis.where}", flush=True)
            with BenchApiServer(1, env, base / "api.log") as api:
                figures = measure(args, api.url, api.pid)
    print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    sys.exit(main())
