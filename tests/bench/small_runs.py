"""Running a benchmark in its `--small` mode, as the tests of tests/bench do.

Every benchmark module under bench/ (one with a `main`, not a `_private.py` helper) is run by
one of those tests: `BENCHMARKS_RUN` names them by file, and test_small_coverage.py checks
that no benchmark is left out. The modules are split over files so that the two test
processes (`--dist loadfile`) share them.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BENCH_DIR = ROOT / "bench"

# the benchmarks each test module runs
COMPUTING = ("scheduler", "sched_sim", "elastic_sim", "elastic_optimizer", "checkpoint_stall")
SERVICES = ("token_auth", "redis_isolation", "k8s_control", "api_load", "fuzz")
# run small by a test of their own, with more to check (tests/integration/test_bench_*.py)
OWN_TESTS = ("slowloris",)
TORCH_PROCESSES = ("ps", "perf_model")
PLATFORM = ("latency", "soak", "recovery", "log_flood", "dashboard", "isolation")
BENCHMARKS_RUN = COMPUTING + SERVICES + TORCH_PROCESSES + PLATFORM + OWN_TESTS


def benchmark_modules() -> set[str]:
    """The modules of bench/ a user runs: those that define a `main`."""
    return {
        path.stem
        for path in BENCH_DIR.glob("*.py")
        if not path.stem.startswith("_") and "\ndef main(" in path.read_text()
    }


def figures_of(output: str) -> dict[str, Any]:
    """The benchmark's last line, which must be a JSON object holding a numeric figure."""
    lines = output.strip().splitlines()
    assert lines, "the benchmark printed nothing"
    figures = json.loads(lines[-1])
    assert isinstance(figures, dict), lines[-1]
    numbers = [
        key
        for key, value in figures.items()
        if isinstance(value, int | float) and not isinstance(value, bool)
    ]
    assert numbers, f"no numeric figure in {lines[-1][:500]}"
    return figures


def run_small(name: str, timeout_s: float) -> dict[str, Any]:
    """`python -m bench.NAME --small` from the repository root: it exits 0 within
    `timeout_s` and its figures are returned. One that runs past it gets SIGTERM, which a
    benchmark that started a platform answers by stopping it, then SIGKILL."""
    process = subprocess.Popen(
        [sys.executable, "-m", f"bench.{name}", "--small"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.terminate()
        try:
            stdout, stderr = process.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            stdout, stderr = process.communicate()
        raise AssertionError(
            f"bench.{name} --small ran past {timeout_s} s; last output: "
            f"{_tail(stdout)}\n{_tail(stderr)}"
        ) from None
    output = f"{_tail(stdout)}\n{_tail(stderr)}"
    assert process.returncode == 0, f"bench.{name} --small exited {process.returncode}:\n{output}"
    return figures_of(stdout)


def _tail(text: str | bytes | None, chars: int = 3000) -> str:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return (text or "")[-chars:]
