"""An elastic job on the embedded platform (2 CPUs): the autoscaler grows the elastic digits
example from 1 to 2 learners while it trains, shrinks it back to 1 when another job waits
for a CPU, and the job's steps and loss go on across both resizes, none of them a restart."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Platform, Shown, platform_with

pytestmark = pytest.mark.e2e

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "digits"
WAITER = "import time\nprint('waiter runs', flush=True)\ntime.sleep(4)\n"


@pytest.fixture(scope="module")
def two_cpus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    # reconsider sizes 3 s after a start or resize; a resize is taken to cost 1 s until one
    # is measured (the job is long enough for the growth to repay either way)
    yield from platform_with(
        tmp_path_factory,
        DLAAS_LOCAL_CPUS="2",
        DLAAS_LOCAL_MEMORY="16GiB",
        DLAAS_AUTOSCALE_INTERVAL_S="3",
        DLAAS_RESIZE_COST_S="1",
    )


def _resizes(shown: Shown) -> list[dict[str, Any]]:
    return [event for event in shown["events"] if event["kind"] == "resizing"]


def _running_at(learners: int, resizes: int) -> Any:
    def check(shown: Shown) -> bool:
        job = shown["job"]
        return (
            len(_resizes(shown)) >= resizes
            and job["state"] == "RUNNING"
            and job["learners"] == learners
        )

    return check


def _steps_of(platform: Platform, job_id: str) -> list[tuple[float, int, float]]:
    """(time, step, loss) of every training point, in time order."""
    with platform.client() as client:
        answer = client.job_metrics(job_id)
    points = [
        (float(p["time"]), int(p["step"]), float(p["values"]["loss"]))
        for p in answer
        if p.get("learner") == 1 and p.get("step") is not None and "loss" in p.get("values", {})
    ]
    return sorted(points)


def _wait_for_steps_after(
    platform: Platform, job_id: str, moment: float, what: str, step: int = 0
) -> None:
    """Until the chief reported a step past `step` after `moment`."""

    def reported(_: Shown) -> bool:
        return any(t > moment and n > step for t, n, _ in _steps_of(platform, job_id))

    platform.wait_for(job_id, what, reported, 300, poll_s=1.0)


def test_an_elastic_job_grows_and_shrinks_while_it_trains(
    two_cpus: Platform, tmp_path: Path
) -> None:
    platform = two_cpus
    platform.dlaas("data", "upload", "digits-data", str(EXAMPLE / "data" / "digits.npz"))
    text = (EXAMPLE / "manifest-elastic.yml").read_text()
    long_text = (
        text.replace("--epochs 12", "--epochs 300 --step-delay 0.02")
        .replace("samples: 17964", "samples: 449100")
        .replace("interval_s: 3", "interval_s: 1")
    )
    assert "--step-delay" in long_text and "449100" in long_text
    manifest = tmp_path / "elastic.yml"
    manifest.write_text(long_text)
    job = platform.dlaas("train", str(manifest), str(EXAMPLE / "model")).stdout.strip()

    grown = platform.wait_for(job, "the growth to 2 learners", _running_at(2, 1), 240)
    [growth] = _resizes(grown)
    assert "grows from 1 to 2 learners" in growth["reason"], growth
    assert growth["detail"]["to_global_batch"] == 128, growth
    # it runs a while at 2, so the autoscaler measures it there before anything else
    # it trains a while at 2 (long enough to be measured there, and for its loss to fall
    # well below where it began) before another job wants one of its CPUs
    _wait_for_steps_after(platform, job, _last_resize_s(grown) + 8, "steps at 2", step=300)

    waiter_dir = tmp_path / "waiter"
    (waiter_dir / "model").mkdir(parents=True)
    (waiter_dir / "model" / "waiter.py").write_text(WAITER)
    (waiter_dir / "manifest.yml").write_text(
        "name: waiter\nlearners: 1\ncpus: 1\nmemory: 256Mi\n"
        "framework:\n  name: pytorch\n  command: python waiter.py\n"
    )
    waiter = platform.dlaas(
        "train", str(waiter_dir / "manifest.yml"), str(waiter_dir / "model")
    ).stdout.strip()
    shrunk = platform.wait_for(job, "the shrink to 1 learner", _running_at(1, 2), 240)
    shrink = _resizes(shrunk)[1]
    assert "shrinks from 2 to 1 learner " in shrink["reason"], shrink
    waited = platform.dlaas("wait", waiter, "--timeout", "180", timeout=200)
    assert waited.returncode == 0, waited.stdout + waited.stderr

    resumed_at = _last_resize_s(shrunk)
    _wait_for_steps_after(platform, job, resumed_at + 3, "steps after the shrink")
    shown = platform.show(job)
    assert shown["job"]["restarts"] == 0, shown["job"]  # resizes are not restarts
    points = _steps_of(platform, job)
    after_growth = [p for p in points if p[0] > _event_s(growth)]
    after_shrink = [p for p in points if p[0] > resumed_at]
    assert after_growth and after_shrink
    # each attempt goes on from the step the one before stopped at, not from 0
    assert after_growth[0][1] > 10 and after_shrink[0][1] > after_growth[0][1], points[:3]
    assert all(b[1] >= a[1] for a, b in itertools.pairwise(points)), "a step reset"
    # the loss goes on from where it was: a reset would bring it back to where it began
    began = sum(loss for _, _, loss in points[:5]) / 5
    went_on = sum(loss for _, _, loss in after_shrink[:5]) / len(after_shrink[:5])
    assert went_on < 0.7 * began, (points[:5], after_shrink[:5])
    logs = platform.dlaas("logs", job).stdout
    assert "rank 1 of 2 starting" in logs and "digits: resumed from ckpt-" in logs
    platform.dlaas("delete", job)


def _event_s(event: dict[str, Any]) -> float:
    from datetime import datetime

    return datetime.fromisoformat(event["time"]).timestamp()


def _last_resize_s(shown: Shown) -> float:
    return max(_event_s(event) for event in _resizes(shown))
