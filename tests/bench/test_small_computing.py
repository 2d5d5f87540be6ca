"""The benchmarks that compute in this process (scheduler, simulations, checkpoints) run in
their --small mode and print their figures."""

from __future__ import annotations

import pytest

from tests.bench.small_runs import COMPUTING, run_small


@pytest.mark.parametrize("name", COMPUTING)
def test_the_benchmark_runs_small(name: str) -> None:
    figures = run_small(name, timeout_s=120)
    assert figures.get("bench", name) == name
