"""The benchmarks that start the embedded platform run in their --small mode and print their
figures."""

from __future__ import annotations

import pytest

from tests.bench.small_runs import PLATFORM, run_small

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("name", PLATFORM)
def test_the_benchmark_runs_small(name: str) -> None:
    figures = run_small(name, timeout_s=300)
    assert figures.get("bench", name) == name
