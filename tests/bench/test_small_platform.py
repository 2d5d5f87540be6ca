"""The benchmarks that start the embedded platform run in their --small mode and print their
figures."""

from __future__ import annotations

import json
import os

import pytest

from tests.bench.small_runs import PLATFORM, run_small

pytestmark = pytest.mark.e2e

# figures that hold in a small run as in a full one
EXPECTED = {
    # the learners' stop checkpoints commit before `dlaas down` stops the API
    "recovery": {"steps_lost_on_platform_restart": 0, "platform_restart_runs": 1},
    # no hostile job's attempt gets out, on the object store or on the node
    "isolation": {"escapes": 0, "own_access_ok": True},
}


@pytest.mark.parametrize("name", PLATFORM)
def test_the_benchmark_runs_small(name: str) -> None:
    figures = run_small(name, timeout_s=300)
    assert figures.get("bench", name) == name
    for key, expected in EXPECTED.get(name, {}).items():
        assert figures.get(key) == expected, (
            f"{key} is {figures.get(key)!r}, not {expected!r}: {json.dumps(figures)}"
        )
    if name == "isolation" and os.geteuid() == 0:
        # the node's attempts ran, in the cases they are for
        node = figures["node_modes"]["default"]
        assert figures["escape_attempts"] >= 60 and node["attempts"] >= 40, figures
        assert node["uid_reused"] and node["own_environment_reached"], node
        assert "uids of their own" in node["jobs"], node
