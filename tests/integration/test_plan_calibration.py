"""`POST /v2/plan?calibration=JOB_ID`: a calibration job's measured figures in a plan, and
every refusal of a job that cannot give them (on SQLite and PostgreSQL)."""

from __future__ import annotations

import httpx
import pytest

from storage.calibration import Calibration
from storage.job_states import JobState
from storage.performance_model import Exchange, ModelCosts, Network, step_s
from tests.integration.api_harness import MODEL_ZIP, Harness, calibration_job

YAML = {"content-type": "application/yaml"}
FRAMEWORK = b"""
name: planned
learners: 2
framework:
  name: pytorch
  command: python train.py
"""
FLOPS = (
    FRAMEWORK + b"performance: {flops_per_sample: 4.0e+8, model_bytes: 1000000, batch_size: 64}\n"
)
SECONDS = FRAMEWORK + b"performance: {sample_seconds: 0.01, model_bytes: 1000000, batch_size: 64}\n"
MEASURED = Calibration(
    device_flops_s=2e10,
    learners=2,
    bandwidth_bytes_s=3e8,
    latency_s=2e-4,
    torch_version="2.13.0",
    measured={"all_reduce": {"backend": "gloo"}},
)


async def _plan(client: httpx.AsyncClient, manifest: bytes, job_id: str) -> httpx.Response:
    return await client.post(
        "/v2/plan", params={"calibration": job_id}, content=manifest, headers=YAML
    )


async def test_flops_and_the_link_come_from_the_calibration(api: Harness) -> None:
    job_id = await calibration_job(api, api.admin, MEASURED.to_json().encode())
    answer = await _plan(api.admin, FLOPS, job_id)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    # 4e8 FLOPs a sample at 2e10 FLOP/s
    assert body["costs"]["sample_seconds"] == pytest.approx(0.02)
    assert body["costs"]["flops_per_sample"] == 4e8
    assert body["costs"]["source"] == "calibration"
    assert body["network"] == {
        "bandwidth_bytes_s": 3e8,
        "latency_s": 2e-4,
        "server_bandwidth_bytes_s": api.settings.network_server_bandwidth_bytes_s,
        "source": "calibration",
    }
    assert body["calibration"] == {
        "job_id": job_id,
        "learners": 2,
        "device_flops_s": 2e10,
        "bandwidth_bytes_s": 3e8,
        "latency_s": 2e-4,
        "torch_version": "2.13.0",
        "used": ["sample_seconds", "network"],
    }
    two = body["candidates"][1]
    measured_link = Network(3e8, 2e-4)
    costs = ModelCosts(sample_s=0.02, step_overhead_s=0.0, model_bytes=1_000_000)
    assert two["step_s"] == pytest.approx(step_s(costs, measured_link, 2, 64, Exchange.ALL_REDUCE))
    # the configured link (1.25 GB/s by default) would predict another step
    configured = Network(api.settings.network_bandwidth_bytes_s, api.settings.network_latency_s)
    assert two["step_s"] != pytest.approx(step_s(costs, configured, 2, 64, Exchange.ALL_REDUCE))


async def test_measured_seconds_are_kept_and_a_lone_learner_leaves_the_link(
    api: Harness,
) -> None:
    job_id = await calibration_job(api, api.admin, MEASURED.to_json().encode())
    body = (await _plan(api.admin, SECONDS, job_id)).json()
    assert (body["costs"]["sample_seconds"], body["costs"]["source"]) == (0.01, "manifest")
    assert body["network"]["source"] == "calibration"
    assert body["calibration"]["used"] == ["network"]

    alone = Calibration(2e10, 1, None, None, "2.13.0")
    lone_id = await calibration_job(api, api.admin, alone.to_json().encode())
    body = (await _plan(api.admin, FLOPS, lone_id)).json()
    assert body["network"]["source"] == "settings"
    assert body["network"]["bandwidth_bytes_s"] == api.settings.network_bandwidth_bytes_s
    assert body["calibration"]["used"] == ["sample_seconds"]

    without = await api.admin.post("/v2/plan", content=SECONDS, headers=YAML)
    assert without.json()["calibration"] is None
    assert without.json()["network"]["source"] == "settings"


async def test_a_calibration_of_the_team_serves_its_viewers_and_no_one_else(
    api: Harness,
) -> None:
    owner = await api.add_user("owner")
    viewer = await api.add_user("viewer")
    stranger = await api.add_user("stranger")
    team = await api.add_team("measured", {owner: "member", viewer: "viewer"})
    async with owner.client, viewer.client, stranger.client:
        made = await owner.client.post(
            "/v2/jobs",
            files={
                "manifest": ("manifest.yml", FRAMEWORK, "application/x-yaml"),
                "model": ("model.zip", MODEL_ZIP, "application/zip"),
            },
            data={"team": team},
        )
        assert made.status_code == 201, made.text
        job_id = made.json()["id"]
        await api.move_job(job_id, JobState.DEPLOYING, JobState.RUNNING, JobState.COMPLETED)
        api.app.state.dlaas.objects.put_bytes(
            f"jobs/{job_id}/results/calibration.json", MEASURED.to_json().encode()
        )
        seen = await _plan(viewer.client, FLOPS, job_id)
        assert seen.status_code == 200, seen.text
        assert seen.json()["calibration"]["job_id"] == job_id

        hidden = await _plan(stranger.client, FLOPS, job_id)
        unknown = await _plan(stranger.client, FLOPS, "training-nosuchjob")
        for refused, asked in ((hidden, job_id), (unknown, "training-nosuchjob")):
            assert refused.status_code == 404, refused.text
            assert refused.json()["field"] == "calibration"
            assert f"no job {asked!r} among your teams' jobs" in refused.json()["detail"]


@pytest.mark.parametrize(
    ("written", "said"),
    [
        (None, "has no calibration.json"),
        (b"{not json", "calibration.json is not JSON"),
        (b'{"format": 1, "learners": 2, "device_flops_s": -1}', "device_flops_s: -1"),
    ],
)
async def test_a_job_that_left_no_calibration_is_refused(
    api: Harness, written: bytes | None, said: str
) -> None:
    job_id = await calibration_job(api, api.admin, written)
    refused = await _plan(api.admin, FLOPS, job_id)
    assert refused.status_code == 422, refused.text
    body = refused.json()
    assert (body["error"], body["field"]) == ("not_a_calibration", "calibration")
    assert said in body["detail"] and "examples/calibrate/manifest.yml" in body["detail"]


async def test_a_calibration_still_running_deleted_or_misnamed_is_refused(api: Harness) -> None:
    running = await calibration_job(api, api.admin, None, finished=False)
    refused = await _plan(api.admin, FLOPS, running)
    assert refused.status_code == 409, refused.text
    assert refused.json()["field"] == "calibration"
    assert "is QUEUED, not COMPLETED" in refused.json()["detail"]
    assert f"dlaas wait {running}" in refused.json()["detail"]

    deleted = await calibration_job(api, api.admin, MEASURED.to_json().encode())
    assert (await api.admin.delete(f"/v2/jobs/{deleted}")).status_code in (200, 202, 204)
    gone = await _plan(api.admin, FLOPS, deleted)
    assert (gone.status_code, gone.json()["field"]) == (404, "calibration")
    assert "was deleted" in gone.json()["detail"]

    misnamed = await _plan(api.admin, FLOPS, "Not A Job!")
    assert (misnamed.status_code, misnamed.json()["field"]) == (422, "calibration")


async def test_flops_without_a_calibration_say_how_to_get_one(api: Harness) -> None:
    refused = await api.admin.post("/v2/plan", content=FLOPS, headers=YAML)
    assert refused.status_code == 422, refused.text
    body = refused.json()
    assert (body["error"], body["field"]) == ("calibration_needed", "calibration")
    assert "--calibration JOB_ID" in body["detail"] and "sample_seconds" in body["detail"]


async def test_a_retry_naming_another_calibration_is_another_request(api: Harness) -> None:
    first_job = await calibration_job(api, api.admin, MEASURED.to_json().encode())
    other_job = await calibration_job(api, api.admin, MEASURED.to_json().encode())
    key = {**YAML, "Idempotency-Key": "plan-calibrated"}
    first = await api.admin.post(
        "/v2/plan", params={"calibration": first_job}, content=FLOPS, headers=key
    )
    again = await api.admin.post(
        "/v2/plan", params={"calibration": first_job}, content=FLOPS, headers=key
    )
    assert again.headers.get("idempotent-replayed") == "true"
    assert again.json() == first.json()
    other = await api.admin.post(
        "/v2/plan", params={"calibration": other_job}, content=FLOPS, headers=key
    )
    assert other.status_code == 422, other.text
    assert other.json()["error"] == "idempotency_key_reused"
