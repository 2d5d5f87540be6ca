"""`dlaas-calibrate` (`python -m learner_image.calibrate`): a short microbenchmark a job runs
on its own image, so that `dlaas plan --calibration JOB` predicts with measured figures.

Every learner times float32 matmuls on its device (the median of several repetitions: the
device's FLOP/s). With two learners or more they join torch.distributed over gloo (the
MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE dlaas sets) and time all-reduces from 4 KiB to
32 MiB; the ring all-reduce model of `storage.performance_model` is fitted to those timings
for a learner's bandwidth and latency. The chief (rank 0) writes
`$RESULT_DIR/calibration.json` (`storage.calibration`) and prints a summary. It takes a few
seconds.

Torch is imported only here, in `main`: without it the program says so in one line and
exits 2.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from learner_image import sdk
from storage.calibration import CALIBRATION_FILE, Calibration
from storage.performance_model import Exchange, ModelCosts, Network, exchange_s, fit_all_reduce

if TYPE_CHECKING:
    import torch

EXIT_NO_TORCH = 2
EXIT_FAILED = 1
KIB, MIB = 1 << 10, 1 << 20
# 4 KiB to 16 MiB by fours, and 32 MiB: small ones show the latency, large ones the bandwidth
SIZES = (*(4 * KIB << 2 * k for k in range(7)), 32 * MIB)
REPEATS = 5  # timed batches of all-reduces a size, and matmul timings; the median is kept
MATMUL_SECONDS = 0.02  # each timing spans at least this much work
LARGEST_MATRIX = 2048
JOIN_TIMEOUT = timedelta(seconds=120)  # every learner starts within this, or all fail


@dataclass(frozen=True)
class Compute:
    flops_s: float
    matrix: int
    matmuls: int  # a timing's
    device: str
    threads: int


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="dlaas-calibrate", description=(__doc__ or "").splitlines()[0])
    p.add_argument(
        "--max-bytes",
        type=int,
        default=SIZES[-1],
        help="the largest all-reduce timed, in bytes (default 32 MiB)",
    )
    p.add_argument(
        "--output",
        type=Path,
        default=None,
        help=f"where the chief writes the figures (default $RESULT_DIR/{CALIBRATION_FILE})",
    )
    return p.parse_args(argv)


def median_time(run: Callable[[], None], repeats: int, sync: Callable[[], None]) -> float:
    """The median of `repeats` timings of `run`, each ended by `sync`."""
    timings = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        sync()
        timings.append(time.perf_counter() - started)
    return statistics.median(timings)


def measure_compute(torch: Any, device: torch.device) -> Compute:
    """float32 matmul FLOP/s: the matrix grows until one product takes a few ms (or reaches
    LARGEST_MATRIX), then each timing multiplies it enough times to span MATMUL_SECONDS."""

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    size = 128
    while True:
        a = torch.randn(size, size, device=device)
        b = torch.randn(size, size, device=device)
        torch.mm(a, b)  # warm-up: thread pools, kernels
        once = median_time(lambda: torch.mm(a, b), 3, sync)  # noqa: B023
        if once >= MATMUL_SECONDS / 4 or size >= LARGEST_MATRIX:
            break
        size *= 2
    matmuls = max(1, round(MATMUL_SECONDS / once))

    def work() -> None:
        for _ in range(matmuls):
            torch.mm(a, b)

    seconds = median_time(work, REPEATS, sync)
    flops = 2 * size**3 * matmuls / seconds
    return Compute(flops, size, matmuls, str(device), torch.get_num_threads())


def time_all_reduces(torch: Any, dist: Any, sizes: Sequence[int]) -> list[tuple[int, float, int]]:
    """(bytes, median seconds of one all-reduce, all-reduces a timing) for each size. Every
    learner runs the same sequence (a collective needs them all); a barrier starts each
    timing together."""
    found = []
    for size in sizes:
        tensor = torch.ones(size // 4, dtype=torch.float32)
        inner = 10 if size <= MIB else 2
        for _ in range(2):  # warm-up: connections, buffers
            dist.all_reduce(tensor)

        def run(tensor: Any = tensor, inner: int = inner) -> None:
            for _ in range(inner):
                dist.all_reduce(tensor)

        timings = []
        for _ in range(REPEATS):
            dist.barrier()
            started = time.perf_counter()
            run()
            timings.append((time.perf_counter() - started) / inner)
        found.append((size, statistics.median(timings), inner))
    return found


def slowest(gathered: Sequence[list[tuple[int, float, int]]]) -> list[tuple[int, float]]:
    """Per size, the slowest learner's time: an all-reduce ends when its last learner's does."""
    return [
        (size, max(timings[i][1] for timings in gathered))
        for i, (size, _, _) in enumerate(gathered[0])
    ]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        import torch
        import torch.distributed as dist
    except ImportError as exc:
        print(
            f"dlaas-calibrate: PyTorch is not installed ({exc}); run it on the learner image, "
            "or install torch (pip install 'dlaas[train]')",
            file=sys.stderr,
        )
        return EXIT_NO_TORCH
    e = sdk.env()
    sizes = [s for s in SIZES if s <= args.max_bytes] or [SIZES[0]]
    device = torch.device("cuda" if e.gpu_count > 0 and torch.cuda.is_available() else "cpu")
    distributed = e.world_size > 1
    if distributed:
        dist.init_process_group("gloo", rank=e.rank, world_size=e.world_size, timeout=JOIN_TIMEOUT)
    try:
        if distributed:
            dist.barrier()  # the learners compute together, as they will when training
        compute = measure_compute(torch, device)
        print(
            f"calibrate: learner {e.rank + 1} of {e.world_size}: "
            f"{compute.flops_s / 1e9:.3g} GFLOP/s",
            flush=True,
        )
        computes = [compute]
        timings: list[tuple[int, float]] = []
        inner: dict[int, int] = {}
        if distributed:
            mine = time_all_reduces(torch, dist, sizes)
            everyone: list[Any] = [None] * e.world_size
            dist.all_gather_object(everyone, (compute, mine))
            computes = [c for c, _ in everyone]
            timings = slowest([t for _, t in everyone])
            inner = {size: n for size, _, n in mine}
    finally:
        if distributed:
            dist.destroy_process_group()
    if not e.is_chief:
        return 0
    try:
        link = fit_all_reduce(timings, e.world_size) if timings else None
    except ValueError as exc:
        print(f"dlaas-calibrate: cannot fit the all-reduce timings: {exc}", file=sys.stderr)
        return EXIT_FAILED
    calibration = Calibration(
        device_flops_s=min(c.flops_s for c in computes),
        learners=e.world_size,
        bandwidth_bytes_s=link.bandwidth_bytes_s if link is not None else None,
        latency_s=link.latency_s if link is not None else None,
        torch_version=torch.__version__,
        measured=_how(computes, timings, inner, link),
    )
    output = args.output or e.result_dir / CALIBRATION_FILE
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(calibration.to_json() + "\n")
    print(summary(calibration, computes, timings, link), flush=True)
    print(f"calibrate: wrote {output}", flush=True)
    return 0


def _how(
    computes: Sequence[Compute],
    timings: Sequence[tuple[int, float]],
    inner: dict[int, int],
    link: Network | None,
) -> dict[str, Any]:
    first = computes[0]
    how: dict[str, Any] = {
        "compute": {
            "method": f"float32 matmul {first.matrix}x{first.matrix}, {first.matmuls} a "
            f"timing, median of {REPEATS} timings; device_flops_s is the slowest learner's",
            "device": first.device,
            "threads": first.threads,
            "learner_flops_s": [c.flops_s for c in computes],
        }
    }
    if link is not None:
        how["all_reduce"] = {
            "method": f"gloo all-reduce of float32 tensors, median of {REPEATS} timings a "
            "size (the slowest learner's), fitted by relative least squares to "
            "2(n-1)/n * bytes / bandwidth + 2(n-1) * latency",
            "backend": "gloo",
            "timings": [
                {"bytes": size, "seconds": seconds, "all_reduces_a_timing": inner.get(size)}
                for size, seconds in timings
            ],
        }
    return how


def summary(
    calibration: Calibration,
    computes: Sequence[Compute],
    timings: Sequence[tuple[int, float]],
    link: Network | None,
) -> str:
    first = computes[0]
    each = ", ".join(f"{c.flops_s / 1e9:.3g}" for c in computes)
    threads = f"{first.threads} thread{'s' if first.threads != 1 else ''}"
    lines = [
        f"calibration of {calibration.learners} learner"
        f"{'s' if calibration.learners != 1 else ''}, torch {calibration.torch_version}",
        f"compute: {calibration.device_flops_s / 1e9:.3g} GFLOP/s (float32 matmul "
        f"{first.matrix}x{first.matrix} on {first.device}, {threads}; the slowest of "
        f"{each} GFLOP/s)",
    ]
    if link is None:
        lines.append("all-reduce: not timed (one learner); plans keep DLAAS_NETWORK_*")
        return "\n".join(lines)
    lines.append(f"all-reduce (gloo, {calibration.learners} learners):")
    lines.append(f"  {'BYTES':>8}  {'MEASURED':>10}  {'FITTED':>10}")
    for size, seconds in timings:
        fitted = exchange_s(
            ModelCosts(0.0, 0.0, size), link, calibration.learners, Exchange.ALL_REDUCE
        )
        lines.append(f"  {_bytes(size):>8}  {_span(seconds):>10}  {_span(fitted):>10}")
    lines.append(
        f"link: {link.bandwidth_bytes_s / 1e9:.3g} GB/s, {_span(link.latency_s)} latency "
        f"(ring all-reduce fitted over {len(timings)} sizes)"
    )
    return "\n".join(lines)


def _bytes(size: int) -> str:
    return f"{size // MIB} MiB" if size >= MIB else f"{size // KIB} KiB"


def _span(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.3g} us"
    return f"{seconds * 1e3:.3g} ms" if seconds < 1 else f"{seconds:.3g} s"


def console() -> None:
    sys.exit(main())


if __name__ == "__main__":
    console()
