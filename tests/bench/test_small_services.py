"""The benchmarks that start Redis, PostgreSQL, the API or the Kubernetes emulator run in their
--small mode and print their figures."""

from __future__ import annotations

import pytest

from tests.bench.small_runs import SERVICES, run_small


@pytest.mark.parametrize("name", SERVICES)
def test_the_benchmark_runs_small(name: str) -> None:
    figures = run_small(name, timeout_s=180)
    assert figures.get("bench", name) == name
