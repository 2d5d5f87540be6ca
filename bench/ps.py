"""The parameter-server sidecar against its baselines, all measured in this run.

    .venv/bin/python -m bench.ps            # about a minute

1. Ceiling: the best copy bandwidth this machine shows with all its cores (torch's
   multithreaded copy, numpy's single-threaded one, numpy split over threads; the median of
   repeats of each, the best of them). An in-place apply moves the bytes of one copy, so
   `copy_bandwidth / model_bytes` updates per second is the memory-bound ceiling.
2. dlaas-ps, async, 100 MB fp32 model, 2 learners whose gradient is already computed:
   gradients applied per second (the server's applied counter over 2 s windows). The
   server and its learners run for the whole benchmark, the learners parked while anything
   else is measured; each window follows a sample of the ceiling (1.), and the windows come
   in rounds before, between and after the baselines (3., 4.), so the memory bandwidth
   other tenants leave this machine moves the figures and their baselines alike.
   `updates_per_s` is the median window, `fraction_of_ceiling` the median of each window
   over the ceiling sampled just before it. It can pass 1: when both slots are ready the
   server applies the two gradients in one pass over the weights (see `ps.kernels`), which
   moves fewer bytes per gradient than one copy does.
3. torch.distributed gloo all-reduce of the same tensor between 2 processes: one
   all-reduce aggregates 2 gradients.
4. A torch.distributed.rpc parameter server: 2 learners `rpc_sync` their gradient to a
   third process that applies it.
5. Small model (1 MB), one learner: latency of one push-and-apply. `small_push_p99_ms` is
   the median of the p99s of 15 batches of 1000 pushes after a warm-up, so one burst of
   stolen CPU moves one batch, not the figure; the p99 of all pushes pooled is reported too.
6. Between two processes on loopback, 100 MB messages: the sidecars' transport
   (`Link`/`Listener`, from one shared buffer into another), a plain socket
   `sendall`/`recv_into` loop of the same bytes, and gRPC streaming the same tensor in
   4 MiB messages. Their windows take turns, and each ratio is the median over windows of
   the transport's rate against the baseline's window beside it, so a change in load hits
   both sides of every ratio.

`steal_cores` (and per phase) is the CPU time the hypervisor took from this machine, in
cores on average: on a shared host it is the first thing to read when the figures move.

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

from bench import _cpu_meter as cpu_meter
from bench._latency_stats import median, percentile
from bench._small import parse_with_small
from learner_image.ps.region import S_APPLIED, Control, RegionPaths
from learner_image.rendezvous_port import free_rendezvous_port

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


def free_port_block(count: int) -> int:
    """A port p with p .. p + count - 1 all free (for one receiver serving several kinds)."""
    while True:
        port = free_rendezvous_port()
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


class CopyMeter:
    """The machine's copy bandwidth, sampled whenever asked (two model-sized buffers)."""

    def __init__(self, numel: int) -> None:
        self.numel = numel
        self.threads = len(os.sched_getaffinity(0))
        torch.set_num_threads(self.threads)
        self.source, self.target = torch.ones(numel), torch.empty(numel)
        self.target.copy_(self.source)

    def _numpy_threads(self) -> None:
        src, dst = self.source.numpy(), self.target.numpy()
        bounds = [self.numel * i // self.threads for i in range(self.threads + 1)]
        jobs = [
            threading.Thread(target=np.copyto, args=(dst[a:b], src[a:b]))
            for a, b in itertools.pairwise(bounds)
        ]
        for job in jobs:
            job.start()
        for job in jobs:
            job.join()

    def sample(self, repeats: int) -> dict[str, float]:
        """Bytes per second of each copy method now (the median of its repeats)."""
        methods = {
            "torch_copy": lambda: self.target.copy_(self.source),
            "numpy_copy_1_thread": lambda: np.copyto(self.target.numpy(), self.source.numpy()),
            "numpy_copy_threads": self._numpy_threads,
        }
        times: dict[str, list[float]] = {name: [] for name in methods}
        for _ in range(repeats):
            for name, method in methods.items():
                began = time.perf_counter()
                method()
                times[name].append(time.perf_counter() - began)
        return {name: self.numel * 4 / median(values) for name, values in times.items()}


def start_server(
    directory: Path, slots: int, threads: int, mode: str = "async"
) -> subprocess.Popen[bytes]:
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
            mode,
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


class PsLoad:
    """dlaas-ps (async, 2 slots) with 2 learners pushing a 100 MB gradient; the learners park
    between pushes while anything else is measured, so the server is idle then."""

    def __init__(self, base: Path) -> None:
        self.directory = base / "big"
        self.switch = base / "big-learners"
        self.server: subprocess.Popen[bytes] | None = None
        self.learners: list[subprocess.Popen[str]] = []

    def __enter__(self) -> PsLoad:
        self.switch.write_text("run")
        self.server = start_server(self.directory, 2, len(os.sched_getaffinity(0)))
        self.learners = [
            worker(
                "push",
                "--dir",
                str(self.directory),
                "--slot",
                str(i),
                "--numel",
                str(MODEL_FLOATS),
                "--seconds",
                "900",
                "--control",
                str(self.switch),
            )
            for i in range(2)
        ]
        while not (self.directory / "control").exists():
            time.sleep(0.05)
        self.control = Control.open(RegionPaths(self.directory))
        while self.applied < 20:  # warm-up: every page mapped and touched
            time.sleep(0.05)
        self.pause()
        return self

    @property
    def applied(self) -> int:
        return int(self.control.server[S_APPLIED])

    def pause(self) -> None:
        """Park the learners and wait until the server has applied what was in flight."""
        self.switch.write_text("pause")
        last = self.applied
        while True:
            time.sleep(0.1)
            if self.applied == last:
                return
            last = self.applied

    def window(self, seconds: float) -> float:
        """Gradients applied per second over `seconds` of pushing."""
        self.switch.write_text("run")
        start = self.applied
        while self.applied < start + 2:  # both learners going again
            time.sleep(0.001)
        before, began = self.applied, time.perf_counter()
        time.sleep(seconds)
        after, ended = self.applied, time.perf_counter()
        self.pause()
        return (after - before) / (ended - began)

    def __exit__(self, *exc: object) -> None:
        self.switch.write_text("stop")
        try:
            if exc[0] is None:
                for learner in self.learners:
                    result(learner)  # they ran cleanly to the end
        finally:
            processes: list[subprocess.Popen[Any]] = [*self.learners]
            if self.server is not None:
                processes.append(self.server)
            for process in processes:
                stop(process)
            shutil.rmtree(self.directory, ignore_errors=True)


def ps_rounds(
    load: PsLoad, meter: CopyMeter, rounds: int, window_s: float
) -> list[tuple[dict[str, float], float]]:
    """Copy bandwidth (the server idle) then the server's rate, `rounds` times in turn."""
    found = []
    for _ in range(rounds):
        bandwidth = meter.sample(repeats=3)
        found.append((bandwidth, load.window(window_s)))
    return found


def ps_figures(rounds: list[tuple[dict[str, float], float]]) -> dict[str, Any]:
    methods = rounds[0][0].keys()
    by_method = {m: median([b[m] for b, _ in rounds]) for m in methods}
    best = [max(b.values()) for b, _ in rounds]
    rates = [rate for _, rate in rounds]
    ceiling = median(best) / (MODEL_FLOATS * 4)
    return {
        "memcpy_gb_per_s": median(best) / 1e9,
        "memcpy_gb_per_s_rounds": [b / 1e9 for b in best],
        "copy_gb_per_s_by_method": {k: v / 1e9 for k, v in by_method.items()},
        "ceiling_updates_per_s": ceiling,
        "updates_per_s": median(rates),
        "updates_per_s_windows": rates,
        # each window against the ceiling measured just before it
        "fraction_of_ceiling": median(
            [rate / (b / (MODEL_FLOATS * 4)) for b, rate in zip(best, rates, strict=True)]
        ),
    }


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
            "120",
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
        "small_push_p99_batches_ms": [p * 1000 for p in p99s],
        "small_push_p99_pooled_ms": percentile(latencies, 99) * 1000,
        "small_push_p50_ms": median(latencies) * 1000,
        "small_pushes": len(latencies),
    }


def gloo_rate(iterations: int, windows: int) -> float:
    port = str(free_rendezvous_port())
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
    port = str(free_rendezvous_port())
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
    rates = {kind: [out["bytes"] / t / 1e9 for t in ts] for kind, ts in out["windows"].items()}
    for kind, kind_rates in rates.items():
        figures[f"{kind}_transfer_gb_per_s"] = median(kind_rates)
        figures[f"{kind}_transfer_windows_gb_per_s"] = kind_rates
    # each transport window against the baseline windows right beside it
    for baseline in ("socket", "grpc"):
        pairs = zip(rates["ps"], rates[baseline], strict=True)
        figures[f"transport_ratio_vs_{baseline}"] = median([ps / other for ps, other in pairs])
    return figures


def stolen_since(before: cpu_meter.CpuSnapshot) -> float:
    """Cores the hypervisor took from this machine since `before`, on average: time in which
    every figure here, baselines included, ran slower."""
    return cpu_meter.cores_used(before, cpu_meter.snapshot(), ())["steal"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--windows", type=int, default=5, help="baseline windows per measure")
    p.add_argument(
        "--rounds", type=int, default=3, help="dlaas-ps rounds before, between, after baselines"
    )
    p.add_argument("--window-s", type=float, default=2.0, help="seconds of a dlaas-ps window")
    p.add_argument("--rpc-s", type=float, default=8.0, help="seconds the rpc baseline runs")
    args = parse_with_small(p, {"windows": 1, "rounds": 1, "window_s": 0.5, "rpc_s": 1.0})
    load_before = os.getloadavg()
    run_began = cpu_meter.snapshot()
    base = Path(tempfile.mkdtemp(prefix="dlaas-bench-ps-", dir="/dev/shm"))
    figures: dict[str, Any] = {"model_bytes": MODEL_FLOATS * 4, "cores": os.cpu_count()}
    try:
        meter = CopyMeter(MODEL_FLOATS)
        with PsLoad(base) as load:
            rounds = ps_rounds(load, meter, args.rounds, args.window_s)
            figures["gloo_gradients_per_s"] = gloo_rate(iterations=4, windows=args.windows)
            print(f"gloo all-reduce: {figures['gloo_gradients_per_s']:.1f} gradients/s")
            rounds += ps_rounds(load, meter, args.rounds, args.window_s)
            figures["rpc_gradients_per_s"] = rpc_rate(seconds=args.rpc_s)
            print(f"torch rpc PS: {figures['rpc_gradients_per_s']:.2f} gradients/s", flush=True)
            rounds += ps_rounds(load, meter, args.rounds, args.window_s)
        del meter
        figures.update(ps_figures(rounds))
        print(
            "dlaas-ps async: {updates_per_s:.1f} gradients/s; copy {memcpy_gb_per_s:.1f} GB/s; "
            "{fraction_of_ceiling:.2f} of the ceiling".format(**figures),
            flush=True,
        )

        before = cpu_meter.snapshot()
        figures.update(small_latency(base, batches=3 * args.windows, per_batch=1000))
        figures["small_push_steal_cores"] = stolen_since(before)
        print(f"1 MB push p99 {figures['small_push_p99_ms']:.3f} ms", flush=True)

        before = cpu_meter.snapshot()
        figures.update(transfer_rates(base, messages=3, windows=4 * args.windows + 1))
        figures["transfer_steal_cores"] = stolen_since(before)
        print(
            "transfer GB/s: transport {ps_transfer_gb_per_s:.2f}, socket "
            "{socket_transfer_gb_per_s:.2f}, gRPC {grpc_transfer_gb_per_s:.2f}".format(**figures),
            flush=True,
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)

    figures["ratio_vs_gloo"] = figures["updates_per_s"] / figures["gloo_gradients_per_s"]
    figures["ratio_vs_rpc"] = figures["updates_per_s"] / figures["rpc_gradients_per_s"]
    figures.update({f"target_{k}": v for k, v in TARGETS.items()})
    figures["load_average_before"] = [round(x, 2) for x in load_before]
    figures["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    figures["steal_cores"] = stolen_since(run_began)
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
