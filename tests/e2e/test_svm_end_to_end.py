"""Classical ML as a first-class job: the cascade SVM example with 2 learners, through the CLI
on the embedded platform, to COMPLETED with its model and its accuracy beside a single fit."""

from __future__ import annotations

import json
from pathlib import Path

import joblib
import pytest

from tests.e2e.conftest import Platform

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

pytestmark = pytest.mark.e2e


def test_the_svm_example_runs_to_completed_with_two_learners(
    platform: Platform, tmp_path: Path
) -> None:
    platform.dlaas(
        "data", "upload", "digits-data", str(EXAMPLES / "digits" / "data" / "digits.npz")
    )
    followed = platform.dlaas(
        "train",
        str(EXAMPLES / "svm" / "manifest.yml"),
        str(EXAMPLES / "svm" / "model"),
        "--follow",
        timeout=300,
    )
    job_id = followed.stdout.splitlines()[0].strip()
    assert job_id.startswith("training-"), followed.stdout
    assert "final accuracy" in followed.stdout
    assert "[1]" in followed.stdout and "[2]" in followed.stdout

    shown = platform.json("show", job_id, "--events", "100")
    assert isinstance(shown, dict)
    assert shown["job"]["state"] == "COMPLETED", shown
    assert "checkpoint" in [event["kind"] for event in shown["events"]]

    metrics = platform.json("metrics", job_id)
    assert isinstance(metrics, dict)
    survivors = [m["values"]["survivors"] for m in metrics["metrics"] if "survivors" in m["values"]]
    assert survivors, metrics

    dest = tmp_path / "results"
    platform.dlaas("download", job_id, "--dest", str(dest))
    summary = json.loads((dest / "metrics.json").read_text())
    assert summary["world_size"] == 2, summary
    assert summary["test_accuracy"] >= summary["single_process_accuracy"] - 0.01, summary
    assert hasattr(joblib.load(dest / "model.joblib"), "predict")
