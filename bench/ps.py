"""The parameter-server sidecar against its baselines, all measured in this run.

    .venv/bin/python -m bench.ps            # about 3 minutes

1. Ceiling: the best copy bandwidth this machine shows with all its cores (torch's
   multithreaded copy, numpy's single-threaded one, numpy split over threads; the median of
   repeats of each, the best of them). An in-place apply moves the bytes of one copy, so
   `copy_bandwidth / model_bytes` updates per second is the memory-bound ceiling.
2. dlaas-ps, async, 100 MB fp32 model, 2 learners whose gradient is already computed:
   gradients applied per second (the server's applied counter over windows; median).
3. torch.distributed gloo all-reduce of the same tensor between 2 processes: one
   all-reduce aggregates 2 gradients.
4. A torch.distributed.rpc parameter server: 2 learners `rpc_sync` their gradient to a
   third process that applies it.
5. Small model (1 MB), one learner: latency of one push-and-apply (p99 of each batch after
   a warm-up; the median of the batches).
6. Between two processes on loopback, 100 MB messages: the sidecars' transport
   (`Link`/`Listener`, from one shared buffer into another), a plain socket
   `sendall`/`recv_into` loop of the same bytes, and gRPC streaming the same tensor in
   4 MiB messages; their windows take turns, so a change in load hits all three.

The last line is JSON: every figure, its target and the ratios.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench._latency_stats import median, percentile
from learner_image.ps.region import S_APPLIED, Control, RegionPaths

ROOT = Path(__file__).resolve().parents[1]
MODEL_FLOATS = 25_000_000  # 100 MB
SMALL_FLOATS = 262_144  # 1 MiB
TARGETS = {
    "ratio_vs_gloo": 3.0,
    "ratio_vs_rpc": 10.0,
    "fraction_of_ceiling": 0.7,
    "small_push_p99_ms": 1.0,
    "transport_ratio_vs_socket": 0.9,
    "transport_ratio_vs_grpc": 3.0,
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def free_port_block(count: int) -> int:
    """A port p with p .. p + count - 1 all free (for one receiver serving several kinds)."""
    while True:
        port = free_port()
        socks = []
        try:
            for offset in range(count):
                sock = socket.socket()
                socks.append(sock)
                sock.bind(("127.0.0.1", port + offset))
            return port
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()


def worker(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "bench._ps_workers", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )


def result(process: subprocess.Popen[str], timeout: float = 180.0) -> dict[str, Any]:
    out, _ = process.communicate(timeout=timeout)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if process.returncode != 0 or not lines:
        raise RuntimeError(f"worker failed ({process.returncode}): {out[-2000:]}")
    parsed: dict[str, Any] = json.loads(lines[-1])
    return parsed


def copy_bandwidth(numel: int, repeats: int) -> dict[str, float]:
    """Bytes per second of the best copy method (median of its repeats)."""
    threads = len(os.sched_getaffinity(0))
    torch.set_num_threads(threads)
    source, target = torch.ones(numel), torch.empty(numel)
    src, dst = source.numpy(), target.numpy()
    target.copy_(source)

    bounds = [numel * i // threads for i in range(threads + 1)]

    def numpy_threads() -> None:
        jobs = [
            threading.Thread(target=np.copyto, args=(dst[a:b], src[a:b]))
            for a, b in itertools.pairwise(bounds)
        ]
        for job in jobs:
            job.start()
        for job in jobs:
            job.join()

    methods = {
        "torch_copy": lambda: target.copy_(source),
        "numpy_copy_1_thread": lambda: np.copyto(dst, src),
        "numpy_copy_threads": numpy_threads,
    }
    times: dict[str, list[float]] = {name: [] for name in methods}
    for _ in range(repeats):
        for name, method in methods.items():
            began = time.perf_counter()
            method()
            times[name].append(time.perf_counter() - began)
    return {name: numel * 4 / median(values) for name, values in times.items()}


def start_server(directory: Path, slots: int, threads: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "learner_image.ps.server",
            "--dir",
            str(directory),
            "--slots",
            str(slots),
            "--mode",
            "async",
            "--threads",
            str(threads),
            "--snapshot-interval",
            "0",
        ],
        cwd=ROOT,
        stderr=subprocess.DEVNULL,
    )


def stop(process: subprocess.Popen[Any]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def ps_throughput(base: Path, windows: int, window_s: float) -> dict[str, Any]:
    directory = base / "big"
    server = start_server(directory, 2, len(os.sched_getaffinity(0)))
    seconds = 6.0 + windows * window_s
    learners = [
        worker(
            "push",
            "--dir",
            str(directory),
            "--slot",
            str(i),
            "--numel",
            str(MODEL_FLOATS),
            "--seconds",
            str(seconds),
        )
        for i in range(2)
    ]
    try:
        while not (directory / "control").exists():
            time.sleep(0.05)
        control = Control.open(RegionPaths(directory))
        while int(control.server[S_APPLIED]) < 20:  # warm-up: every page mapped and touched
            time.sleep(0.05)
        rates = []
        for _ in range(windows):
            before, began = int(control.server[S_APPLIED]), time.perf_counter()
            time.sleep(window_s)
            after, ended = int(control.server[S_APPLIED]), time.perf_counter()
            rates.append((after - before) / (ended - began))
        for learner in learners:
            result(learner)
    finally:
        for process in [*learners, server]:
            stop(process)
        shutil.rmtree(directory, ignore_errors=True)
    return {"updates_per_s": median(rates), "updates_per_s_windows": rates}


def small_latency(base: Path, batches: int, per_batch: int, warm_up: int = 500) -> dict[str, Any]:
    directory = base / "small"
    server = start_server(directory, 1, 1)
    try:
        learner = worker(
            "push",
            "--dir",
            str(directory),
            "--numel",
            str(SMALL_FLOATS),
            "--seconds",
            "60",
            "--count",
            str(warm_up + batches * per_batch),
            "--latency",
        )
        latencies = result(learner)["latencies"][warm_up:]
    finally:
        stop(server)
        shutil.rmtree(directory, ignore_errors=True)
    p99s = [
        percentile(latencies[i : i + per_batch], 99)
        for i in range(0, len(latencies) - per_batch + 1, per_batch)
    ]
    return {
        "small_push_p99_ms": median(p99s) * 1000,
        "small_push_p50_ms": median(latencies) * 1000,
        "small_pushes": len(latencies),
    }


def gloo_rate(iterations: int, windows: int) -> float:
    port = str(free_port())
    ranks = [
        worker(
            "gloo",
            "--rank",
            str(r),
            "--port",
            port,
            "--numel",
            str(MODEL_FLOATS),
            "--iterations",
            str(iterations),
            "--windows",
            str(windows),
        )
        for r in range(2)
    ]
    outs = [result(p) for p in ranks]
    per_window = [max(w) for w in zip(*(o["windows"] for o in outs), strict=True)]
    return median([2 * iterations / t for t in per_window])


def rpc_rate(seconds: float) -> float:
    port = str(free_port())
    ranks = [
        worker(
            "rpc",
            "--rank",
            str(r),
            "--port",
            port,
            "--numel",
            str(MODEL_FLOATS),
            "--seconds",
            str(seconds),
        )
        for r in range(3)
    ]
    outs = [result(p) for p in ranks]
    return sum(o["pushes"] / o["seconds"] for o in outs if "pushes" in o)


def transfer_rates(base: Path, messages: int, windows: int) -> dict[str, Any]:
    """GB/s of each kind, their windows taking turns so load changes hit all of them."""
    port = free_port_block(3)
    ready = base / "ready-transfer"
    receiver = worker(
        "recv", "--port", str(port), "--numel", str(MODEL_FLOATS), "--ready", str(ready)
    )
    try:
        while not ready.exists():
            if receiver.poll() is not None:
                raise RuntimeError("the transfer receiver ended early")
            time.sleep(0.05)
        sender = worker(
            "send",
            "--port",
            str(port),
            "--numel",
            str(MODEL_FLOATS),
            "--messages",
            str(messages),
            "--windows",
            str(windows),
        )
        out = result(sender)
    finally:
        stop(receiver)
    figures: dict[str, Any] = {}
    for kind, times in out["windows"].items():
        rates = [out["bytes"] / t / 1e9 for t in times]
        figures[f"{kind}_transfer_gb_per_s"] = median(rates)
        figures[f"{kind}_transfer_windows_gb_per_s"] = rates
    return figures


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--windows", type=int, default=5, help="throughput windows per measure")
    args = p.parse_args()
    load_before = os.getloadavg()
    base = Path(tempfile.mkdtemp(prefix="dlaas-bench-ps-", dir="/dev/shm"))
    figures: dict[str, Any] = {"model_bytes": MODEL_FLOATS * 4, "cores": os.cpu_count()}
    try:
        bandwidth = copy_bandwidth(MODEL_FLOATS, repeats=9)
        best = max(bandwidth.values())
        figures["memcpy_gb_per_s"] = best / 1e9
        figures["copy_gb_per_s_by_method"] = {k: v / 1e9 for k, v in bandwidth.items()}
        figures["ceiling_updates_per_s"] = best / (MODEL_FLOATS * 4)
        print(f"copy bandwidth {figures['copy_gb_per_s_by_method']} GB/s", flush=True)

        figures.update(ps_throughput(base, args.windows, 2.0))
        print(f"dlaas-ps async: {figures['updates_per_s']:.1f} gradients/s", flush=True)
        figures["gloo_gradients_per_s"] = gloo_rate(iterations=4, windows=args.windows)
        print(f"gloo all-reduce: {figures['gloo_gradients_per_s']:.1f} gradients/s", flush=True)
        figures["rpc_gradients_per_s"] = rpc_rate(seconds=8.0)
        print(f"torch rpc PS: {figures['rpc_gradients_per_s']:.2f} gradients/s", flush=True)

        figures.update(small_latency(base, batches=args.windows, per_batch=1000))
        print(f"1 MB push p99 {figures['small_push_p99_ms']:.3f} ms", flush=True)

        figures.update(transfer_rates(base, messages=3, windows=2 * args.windows + 1))
        print(
            "transfer GB/s: transport {ps_transfer_gb_per_s:.2f}, socket "
            "{socket_transfer_gb_per_s:.2f}, gRPC {grpc_transfer_gb_per_s:.2f}".format(**figures),
            flush=True,
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)

    figures["ratio_vs_gloo"] = figures["updates_per_s"] / figures["gloo_gradients_per_s"]
    figures["ratio_vs_rpc"] = figures["updates_per_s"] / figures["rpc_gradients_per_s"]
    figures["fraction_of_ceiling"] = figures["updates_per_s"] / figures["ceiling_updates_per_s"]
    figures["transport_ratio_vs_socket"] = (
        figures["ps_transfer_gb_per_s"] / figures["socket_transfer_gb_per_s"]
    )
    figures["transport_ratio_vs_grpc"] = (
        figures["ps_transfer_gb_per_s"] / figures["grpc_transfer_gb_per_s"]
    )
    figures.update({f"target_{k}": v for k, v in TARGETS.items()})
    figures["load_average_before"] = [round(x, 2) for x in load_before]
    figures["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(_rounded(figures)), flush=True)


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


if __name__ == "__main__":
    main()
