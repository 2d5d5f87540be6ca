"""`POST /v2/plan` on the real API (SQLite and PostgreSQL): the candidates a manifest allows,
each as the performance model predicts it, the recommendation, and every refusal."""

from __future__ import annotations

import pytest

from storage.job_plan import WITHIN
from storage.performance_model import Exchange, ModelCosts, Network, scaling_efficiency, step_s
from tests.integration.api_harness import Harness

FRAMEWORK = b"""
name: planned
framework:
  name: pytorch
  command: python train.py
"""
ELASTIC = (
    FRAMEWORK
    + b"""
learners: 2
elastic:
  min_learners: 1
  max_learners: 4
  min_batch_size: 48
  max_batch_size: 512
  max_learner_batch_size: 128
performance:
  sample_seconds: 0.002
  step_overhead_seconds: 0.01
  model_bytes: 50000000
  samples: 6000000
"""
)
FIXED = (
    FRAMEWORK
    + b"""
learners: 3
performance: {sample_seconds: 0.01, model_bytes: 1000000, batch_size: 64}
"""
)
YAML = {"content-type": "application/yaml"}


def _network(api: Harness) -> Network:
    s = api.settings
    return Network(
        s.network_bandwidth_bytes_s, s.network_latency_s, s.network_server_bandwidth_bytes_s
    )


async def test_an_elastic_job_is_planned_over_its_learners_and_batch_range(api: Harness) -> None:
    answer = await api.admin.post("/v2/plan", content=ELASTIC, headers=YAML)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["name"] == "planned" and body["exchange"] == "allreduce"
    assert body["costs"] == {
        "sample_seconds": 0.002,
        "flops_per_sample": None,
        "step_overhead_seconds": 0.01,
        "model_bytes": 50_000_000,
        "source": "manifest",
    }
    network = _network(api)
    assert body["network"] == {
        "bandwidth_bytes_s": network.bandwidth_bytes_s,
        "latency_s": network.latency_s,
        "server_bandwidth_bytes_s": network.server_bandwidth_bytes_s,
        "source": "settings",
    }
    assert body["calibration"] is None
    assert (body["samples"], body["ranked_by"]) == (6_000_000, "time_to_finish")

    # the ends of 48..512 and the powers of two in it, at most 128 a learner, each
    # rounded down to whole equal shares
    shapes = [(c["learners"], c["global_batch"]) for c in body["candidates"]]
    assert shapes == [
        *((1, b) for b in (48, 64, 128)),
        *((2, b) for b in (48, 64, 128, 256)),
        *((3, b) for b in (48, 63, 126, 255, 384)),
        *((4, b) for b in (48, 64, 128, 256, 512)),
    ]

    costs = ModelCosts(sample_s=0.002, step_overhead_s=0.01, model_bytes=50_000_000)
    (three,) = [c for c in body["candidates"] if (c["learners"], c["global_batch"]) == (3, 384)]
    expected_step = step_s(costs, network, 3, 384, Exchange.ALL_REDUCE)
    assert three["learner_batch"] == 128
    assert three["step_s"] == pytest.approx(expected_step)
    assert three["throughput_samples_s"] == pytest.approx(384 / expected_step)
    assert three["time_to_finish_s"] == pytest.approx(6_000_000 * expected_step / 384)
    assert three["scaling_efficiency"] == pytest.approx(
        scaling_efficiency(costs, network, 3, 384, Exchange.ALL_REDUCE)
    )

    # the fewest learners within 10% of the fastest, the larger batch on a tie
    fastest = min(c["time_to_finish_s"] for c in body["candidates"])
    near = [c for c in body["candidates"] if c["time_to_finish_s"] <= fastest * (1 + WITHIN)]
    best = min(near, key=lambda c: (c["learners"], -c["global_batch"]))
    assert [c for c in body["candidates"] if c["recommended"]] == [best]
    # with these costs more learners still pay: the pick is neither the smallest nor a tie
    assert best["learners"] > 1
    assert best["time_to_finish_s"] < min(c["time_to_finish_s"] for c in body["candidates"][:3])


async def test_a_fixed_batch_is_planned_from_one_learner_to_the_manifests(api: Harness) -> None:
    answer = await api.admin.post("/v2/plan", content=FIXED, headers=YAML)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    shapes = [(c["learners"], c["global_batch"], c["learner_batch"]) for c in body["candidates"]]
    assert shapes == [(1, 64, 64), (2, 64, 32), (3, 64, pytest.approx(64 / 3))]
    # no samples: no time to finish, and the pick goes by throughput
    assert body["samples"] is None and body["ranked_by"] == "throughput"
    assert all(c["time_to_finish_s"] is None for c in body["candidates"])
    best = max(c["throughput_samples_s"] for c in body["candidates"])
    (pick,) = [c for c in body["candidates"] if c["recommended"]]
    assert pick["throughput_samples_s"] >= best / (1 + WITHIN)


async def test_a_parameter_server_job_is_planned_with_its_exchange_and_as_multipart(
    api: Harness,
) -> None:
    manifest = FIXED + b"parameter_server: {mode: sync}\n"
    answer = await api.admin.post(
        "/v2/plan", files={"manifest": ("manifest.yml", manifest, "application/x-yaml")}
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["exchange"] == "parameter_server"
    costs = ModelCosts(sample_s=0.01, step_overhead_s=0.0, model_bytes=1_000_000)
    two = body["candidates"][1]
    assert two["step_s"] == pytest.approx(
        step_s(costs, _network(api), 2, 64, Exchange.PARAMETER_SERVER)
    )
    assert two["step_s"] != pytest.approx(step_s(costs, _network(api), 2, 64, Exchange.ALL_REDUCE))


async def test_any_signed_in_user_may_plan_and_a_retry_gets_the_same_answer(
    api: Harness,
) -> None:
    user = await api.new_user("planner")
    async with user:
        headers = {**YAML, "Idempotency-Key": "plan-1"}
        first = await user.post("/v2/plan", content=FIXED, headers=headers)
        again = await user.post("/v2/plan", content=FIXED, headers=headers)
    assert first.status_code == again.status_code == 200, first.text
    assert again.json() == first.json()
    assert again.headers.get("idempotent-replayed") == "true"


async def test_the_largest_ranges_stay_bounded(api: Harness) -> None:
    widest = FRAMEWORK + (
        b"elastic: {min_learners: 1, max_learners: 64, min_batch_size: 1, "
        b"max_batch_size: 16777216}\n"
        b"performance: {sample_seconds: 0.001, model_bytes: 100000000}\n"
    )
    answer = await api.admin.post("/v2/plan", content=widest, headers=YAML)
    assert answer.status_code == 200, answer.text
    candidates = answer.json()["candidates"]
    assert {c["learners"] for c in candidates} == set(range(1, 65))
    assert len(candidates) <= 64 * 28
    assert sum(c["recommended"] for c in candidates) == 1


@pytest.mark.parametrize(
    ("manifest", "field", "said"),
    [
        (FRAMEWORK, "performance", "sample_seconds: 0.002"),
        (
            FRAMEWORK + b"performance: {sample_seconds: 0.01}\n",
            "performance.batch_size",
            "add performance.batch_size",
        ),
        (
            FRAMEWORK + b"learners: 2\nelastic: {min_learners: 2, max_learners: 4}\n"
            b"performance: {sample_seconds: 0.01}\n",
            "performance.batch_size",
            "min_batch_size and max_batch_size",
        ),
        (
            FRAMEWORK + b"elastic: {min_learners: 8}\nlearners: 8\n"
            b"performance: {sample_seconds: 0.01, batch_size: 4}\n",
            "performance.batch_size",
            "at least 8",
        ),
        (
            FRAMEWORK + b"performance: {sample_seconds: 0, batch_size: 8}\n",
            "performance.sample_seconds",
            "greater than 0",
        ),
        (FRAMEWORK + b"performance: [unclosed\n", "manifest", "not valid YAML"),
        (b"learners: 2\n", "framework", "add a framework block"),
    ],
)
async def test_a_manifest_that_cannot_be_planned_is_refused_naming_the_field(
    api: Harness, manifest: bytes, field: str, said: str
) -> None:
    answer = await api.admin.post("/v2/plan", content=manifest, headers=YAML)
    assert answer.status_code == 422, answer.text
    body = answer.json()
    assert (body["error"], body["field"]) == ("invalid_manifest", field), body
    assert said in body["detail"], body


async def test_a_body_that_is_not_a_manifest_is_refused(api: Harness) -> None:
    as_json = await api.admin.post("/v2/plan", json={"learners": 1})
    assert as_json.status_code == 422
    assert as_json.json()["field"] == "body" and "application/yaml" in as_json.json()["detail"]

    extra = await api.admin.post(
        "/v2/plan",
        files={"manifest": ("m.yml", FIXED, "application/yaml"), "model": ("m.zip", b"PK")},
    )
    assert (extra.status_code, extra.json()["field"]) == (422, "model")

    no_part = await api.admin.post("/v2/plan", files={"other": ("m.yml", FIXED)})
    assert no_part.status_code == 422 and no_part.json()["field"] == "other"
    # a form field of text, not a file part: as a submission, the manifest is a file
    text = await api.admin.post("/v2/plan", files={"manifest": (None, FIXED)})
    assert (text.status_code, text.json()["field"]) == (422, "manifest")
    form = await api.admin.post("/v2/plan", data={"manifest": FIXED.decode()})
    assert (form.status_code, form.json()["field"]) == (422, "body")

    too_big = FIXED + b"# " + b"x" * (64 * 1024) + b"\n"
    large = await api.admin.post("/v2/plan", content=too_big, headers=YAML)
    assert (large.status_code, large.json()["field"]) == (422, "manifest")
    assert "64 KiB" in large.json()["detail"]


async def test_a_plan_needs_a_token(api: Harness) -> None:
    async with api.client(None) as anonymous:
        answer = await anonymous.post("/v2/plan", content=FIXED, headers=YAML)
    assert answer.status_code == 401
    assert answer.json()["error"] and answer.json()["field"] == "Authorization"
    async with api.client("dlaas_not-a-token") as stranger:
        refused = await stranger.post("/v2/plan", content=FIXED, headers=YAML)
    assert refused.status_code == 401


async def test_every_planned_learner_takes_a_whole_share_and_efficiency_only_falls(
    api: Harness,
) -> None:
    manifest = FRAMEWORK + (
        b"elastic: {min_learners: 1, max_learners: 16, min_batch_size: 16, "
        b"max_batch_size: 256}\n"
        b"performance: {sample_seconds: 0.002, step_overhead_seconds: 0.01, "
        b"model_bytes: 50000000, samples: 6000000}\n"
    )
    answer = await api.admin.post("/v2/plan", content=manifest, headers=YAML)
    assert answer.status_code == 200, answer.text
    candidates = answer.json()["candidates"]
    assert all(c["global_batch"] % c["learners"] == 0 for c in candidates)
    assert all(float(c["learner_batch"]).is_integer() for c in candidates)
    # at the largest batch each count may use, more learners never scale better
    largest = {}
    for c in candidates:
        largest[c["learners"]] = c["scaling_efficiency"]
    efficiencies = [largest[n] for n in sorted(largest)]
    assert efficiencies == sorted(efficiencies, reverse=True), efficiencies
