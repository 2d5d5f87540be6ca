"""A user's whole path: up, upload data, train the example with 2 learners, follow, download;
on the platform as a new user starts it (as root, its learners' programs then run as uids of
their own, in namespaces of their own)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import Platform, platform_with

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "digits"

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    yield from platform_with(tmp_path_factory, as_a_new_user=True)


def test_the_digits_example_trains_to_completion_through_the_cli(
    platform: Platform, tmp_path: Path
) -> None:
    platform.dlaas("data", "upload", "digits-data", str(EXAMPLE / "data" / "digits.npz"))
    followed = platform.dlaas(
        "train", str(EXAMPLE / "manifest.yml"), str(EXAMPLE / "model"), "--follow", timeout=300
    )
    job_id = followed.stdout.splitlines()[0].strip()
    assert job_id.startswith("training-"), followed.stdout
    assert "final accuracy" in followed.stdout
    assert "[1]" in followed.stdout and "[2]" in followed.stdout

    shown = platform.json("show", job_id, "--events", "100")
    assert isinstance(shown, dict)
    assert shown["job"]["state"] == "COMPLETED", shown
    kinds = [event["kind"] for event in shown["events"]]
    assert "learner_exit" in kinds and "checkpoint" in kinds, kinds

    metrics = platform.json("metrics", job_id)
    assert isinstance(metrics, dict)
    accuracies = [m["values"]["accuracy"] for m in metrics["metrics"] if "accuracy" in m["values"]]
    assert accuracies, metrics

    dest = tmp_path / "results"
    platform.dlaas("download", job_id, "--dest", str(dest))
    assert (dest / "model.pt").stat().st_size > 0
    summary = json.loads((dest / "metrics.json").read_text())
    assert summary["test_accuracy"] >= 0.95, summary

    logs = platform.dlaas("logs", job_id).stdout
    assert "final accuracy" in logs
