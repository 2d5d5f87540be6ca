"""The benchmarks that start the embedded platform run in their --small mode and print their
figures."""

from __future__ import annotations

import pytest

from tests.bench.small_runs import PLATFORM, run_small

pytestmark = pytest.mark.e2e

# figures that hold in a small run as in a full one
EXPECTED = {
    # the learners' stop checkpoints commit before `dlaas down` stops the API
    "recovery": {"steps_lost_on_platform_restart": 0, "platform_restart_runs": 1},
}


@pytest.mark.parametrize("name", PLATFORM)
def test_the_benchmark_runs_small(name: str) -> None:
    figures = run_small(name, timeout_s=300)
    assert figures.get("bench", name) == name
    for key, expected in EXPECTED.get(name, {}).items():
        assert figures.get(key) == expected, f"{key} is {figures.get(key)!r}, not {expected!r}"
