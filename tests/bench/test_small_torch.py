"""The benchmarks that start torch processes (the parameter server's, the performance model's
learners) run in their --small mode and print their figures."""

from __future__ import annotations

import pytest

from tests.bench.small_runs import TORCH_PROCESSES, run_small


@pytest.mark.parametrize("name", TORCH_PROCESSES)
def test_the_benchmark_runs_small(name: str) -> None:
    figures = run_small(name, timeout_s=300)
    assert figures.get("bench", name) == name
