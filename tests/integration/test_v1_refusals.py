"""What /v1 refuses, and how: FfDL's Error shape (`code`, `error`, `description`) with a
status from FfDL's specification and a description that names the field and the fix; who
may sign in (a bearer token, or FfDL's gateway header only when the operator trusts the
gateway); and a job submitted through /v1 as /v2 and the `dlaas` command see it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from storage import job_credentials
from tests.ffdl_v1.spec import check
from tests.integration.api_harness import (
    ADMIN_TOKEN,
    MODEL_ZIP,
    CliOnApi,
    Harness,
    make_zip,
    running_api,
)
from tests.integration.v1_client import new_model, post_model, with_training_data

GATEWAY_TOKEN = "gateway-secret-0123456789abcdef"


def _refusal(answer: object, status: int, *named: str) -> dict[str, object]:
    assert answer.status_code == status, answer.text  # type: ignore[attr-defined]
    body: dict[str, object] = answer.json()  # type: ignore[attr-defined]
    check("Error", body)
    assert body["code"] == status
    for name in named:
        assert name in str(body["description"]), body
    return body


async def test_submissions_missing_a_part_or_with_a_bad_one_are_400(api: Harness) -> None:
    user = await api.add_user("bad")
    async with user.client as client:
        manifest = await with_training_data(client, "bad-data")
        _refusal(await post_model(client, None), 400, "manifest", "manifest=@FILE")
        _refusal(await post_model(client, manifest, None), 400, "model_definition")
        not_zip = _refusal(await post_model(client, manifest, b"not a zip"), 400)
        assert "zip" in str(not_zip["description"])
        _refusal(await post_model(client, b"learners: [", MODEL_ZIP), 400, "manifest")
        no_data = manifest.replace(b"container: bad-data", b"container: nothing-here")
        _refusal(await post_model(client, no_data), 400, "data_stores[0].training_data.container")
        extra = await client.post(
            "/v1/models",
            files={
                "manifest": ("manifest.yml", manifest),
                "model_definition": ("model.zip", MODEL_ZIP),
                "model": ("model.zip", MODEL_ZIP),
            },
        )
        _refusal(extra, 400, "'model'")
        not_form = await client.post("/v1/models", content=b"{}", headers={"content-type": "a/b"})
        _refusal(not_form, 400, "multipart/form-data")
        assert (await client.get("/v1/models")).json() == {"models": []}


async def test_unknown_models_are_404_in_ffdl_shape(api: Harness) -> None:
    async with await api.new_user("nobody") as client:
        for method, path in [
            ("GET", "/v1/models/training-nosuchmodel"),
            ("PATCH", "/v1/models/training-nosuchmodel"),
            ("DELETE", "/v1/models/training-nosuchmodel"),
            ("GET", "/v1/models/training-nosuchmodel/definition"),
            ("GET", "/v1/models/training-nosuchmodel/trained_model"),
            ("GET", "/v1/models/training-nosuchmodel/logs"),
            ("GET", "/v1/models/training-nosuchmodel/metrics"),
            ("GET", "/v1/logs/training-nosuchmodel/loglines"),
            ("GET", "/v1/logs/training-nosuchmodel/emetrics"),
            ("GET", "/v1/models/Not%20An%20Id"),
        ]:
            body = {"status": "halt"} if method == "PATCH" else None
            answer = await client.request(method, path, json=body)
            _refusal(answer, 404, "model_id")
        _refusal(await client.get("/v1/nothing"), 404)


async def test_another_users_model_is_404_and_a_viewer_may_not_halt(api: Harness) -> None:
    alice, bob, carol = [await api.add_user(n) for n in ("alice", "bob", "carol")]
    team = await api.add_team("vision", {alice: "member", carol: "viewer"})
    async with alice.client as client:
        manifest = await with_training_data(client, "team-data")
        answer = await client.post(
            "/v2/jobs",
            files={"manifest": ("m.yml", manifest), "model": ("m.zip", MODEL_ZIP)},
            data={"team": team},
        )
        model_id = answer.json()["id"]
    async with bob.client as client:
        _refusal(await client.get(f"/v1/models/{model_id}"), 404, "model_id")
        assert (await client.get("/v1/models")).json() == {"models": []}
    async with carol.client as client:
        assert (await client.get(f"/v1/models/{model_id}")).status_code == 200
        halt = await client.patch(f"/v1/models/{model_id}", json={"status": "halt"})
        _refusal(halt, 403, "viewer", "member")


async def test_a_halted_or_ended_model_says_what_can_be_done(api: Harness) -> None:
    user = await api.add_user("ended")
    async with user.client as client:
        manifest = await with_training_data(client, "ended-data")
        model_id = (await post_model(client, manifest)).json()["model_id"]
        resume = await client.patch(f"/v1/models/{model_id}", json={"status": "resume"})
        _refusal(resume, 409, "not HALTED")
        _refusal(await client.patch(f"/v1/models/{model_id}", json={}), 400, "status")
        _refusal(await client.patch(f"/v1/models/{model_id}", content=b"{"), 400)


@pytest.mark.parametrize("header", [{}, {"Authorization": "Bearer nope"}])
async def test_without_a_valid_token_it_is_401(api: Harness, header: dict[str, str]) -> None:
    async with api.client(None) as anonymous:
        _refusal(await anonymous.get("/v1/models", headers=header), 401, "DLAAS_TOKEN")


async def test_the_userinfo_header_is_ignored_unless_the_gateway_is_trusted(
    api: Harness,
) -> None:
    user = await api.add_user("gw")
    info = {"X-Watson-Userinfo": f"bluemix-user-id=x;bluemix-instance-id={user.name}"}
    async with api.client(None) as anonymous:
        for headers in (info, {**info, "X-Dlaas-Gateway-Token": GATEWAY_TOKEN}):
            _refusal(await anonymous.get("/v1/models", headers=headers), 401, "Authorization")
    await user.client.aclose()


@pytest.fixture
async def trusting(tmp_path: Path, redis_url: str, postgres_url: str) -> AsyncIterator[Harness]:
    async with running_api(
        postgres_url,
        redis_url,
        tmp_path / "objects",
        v1_trusted_userinfo=True,
        v1_gateway_token=GATEWAY_TOKEN,
    ) as harness:
        yield harness


def _userinfo(name: str, secret: str | None = GATEWAY_TOKEN) -> dict[str, str]:
    headers = {"X-Watson-Userinfo": f"bluemix-user-id=someone;bluemix-instance-id={name}"}
    if secret is not None:
        headers["X-Dlaas-Gateway-Token"] = secret
    return headers


async def test_a_trusted_gateway_names_the_user(trusting: Harness) -> None:
    user = await trusting.add_user("gw")
    model_id = await new_model(user.client, "gw-data")
    async with trusting.client(None) as gateway:
        listed = await gateway.get("/v1/models", headers=_userinfo(user.name))
        assert listed.status_code == 200, listed.text
        assert [m["model_id"] for m in listed.json()["models"]] == [model_id]
        shown = await gateway.get(f"/v1/models/{model_id}", headers=_userinfo(user.name))
        assert shown.status_code == 200
        # what /v2 would not give the user, /v1 does not either
        gone = await gateway.get(f"/v1/models/{model_id}", headers=_userinfo("admin"))
        assert gone.status_code == 200  # the admin sees every job, on /v2 as well
        _refusal(await gateway.get("/v1/models", headers=_userinfo("nobody-here")), 401, "not")
        _refusal(await gateway.get("/v1/models", headers=_userinfo(user.name, None)), 401)
        _refusal(await gateway.get("/v1/models", headers=_userinfo(user.name, "guess")), 401)
        empty = {"X-Watson-Userinfo": "bluemix-user-id=x", "X-Dlaas-Gateway-Token": GATEWAY_TOKEN}
        _refusal(await gateway.get("/v1/models", headers=empty), 401, "bluemix-instance-id")
    await user.client.aclose()


async def test_a_gateway_header_that_names_a_user_twice_is_refused(trusting: Harness) -> None:
    user = await trusting.add_user("gwtwice")
    async with trusting.client(None) as gateway:
        twice = {
            "X-Watson-Userinfo": f"bluemix-instance-id={user.name};bluemix-instance-id=admin",
            "X-Dlaas-Gateway-Token": GATEWAY_TOKEN,
        }
        refused = await gateway.get("/v1/models", headers=twice)
        _refusal(refused, 400, "'bluemix-instance-id' more than once")
        repeated = [
            ("X-Watson-Userinfo", f"bluemix-instance-id={user.name}"),
            ("X-Watson-Userinfo", "bluemix-instance-id=admin"),
            ("X-Dlaas-Gateway-Token", GATEWAY_TOKEN),
        ]
        _refusal(await gateway.get("/v1/models", headers=repeated), 400, "sent 2 times")
        secrets = [repeated[0], repeated[2], ("X-Dlaas-Gateway-Token", "another")]
        _refusal(await gateway.get("/v1/models", headers=secrets), 400, "sent 2 times")
        once = await gateway.get("/v1/models", headers=_userinfo(user.name))
        assert once.status_code == 200, once.text
    await user.client.aclose()


async def test_a_gateways_retry_gets_the_first_answer(trusting: Harness) -> None:
    user = await trusting.add_user("gwretry")
    async with user.client as client:
        manifest = await with_training_data(client, "gwretry-data")
    async with trusting.client(None) as gateway:
        headers = {**_userinfo(user.name), "Idempotency-Key": "gw-1"}
        first = await post_model(gateway, manifest, headers=headers)
        again = await post_model(gateway, manifest, headers=headers)
        assert first.status_code == again.status_code == 201, first.text
        assert again.headers["idempotent-replayed"] == "true"
        assert again.json() == first.json()
        listed = await gateway.get("/v1/models", headers=_userinfo(user.name))
        assert len(listed.json()["models"]) == 1


async def test_a_jobs_token_gains_nothing_from_the_header(trusting: Harness) -> None:
    user = await trusting.add_user("jobcode")
    model_id = await new_model(user.client, "gw-data")
    async with trusting.app.state.dlaas.sessions() as session:
        job_token = await job_credentials.mint(session, model_id)
        await session.commit()
    async with trusting.client(job_token) as job_code:
        _refusal(await job_code.get("/v1/models"), 401, "job's token")
        with_header = await job_code.get("/v1/models", headers=_userinfo("admin", None))
        _refusal(with_header, 401, "job's token")
        # even with the gateway's secret, a bearer token is what counts, and it is a job's
        _refusal(await job_code.get("/v1/models", headers=_userinfo("admin")), 401)
    await user.client.aclose()


async def test_a_retry_with_the_same_idempotency_key_gets_the_same_model(api: Harness) -> None:
    user = await api.add_user("retry")
    async with user.client as client:
        manifest = await with_training_data(client, "retry-data")
        key = {"Idempotency-Key": "v1-submit-1"}
        first = await post_model(client, manifest, headers=key)
        again = await post_model(client, manifest, headers=key)
        assert first.status_code == again.status_code == 201
        assert again.headers["idempotent-replayed"] == "true"
        assert again.json() == first.json()
        assert again.headers["location"] == first.headers["location"]
        assert len((await client.get("/v1/models")).json()["models"]) == 1


async def test_a_v1_model_is_a_job_the_cli_lists_and_shows(cli: CliOnApi) -> None:
    async with cli.api.client(ADMIN_TOKEN) as admin:
        manifest = await with_training_data(admin, "cli-data")
        model_id = (await post_model(admin, manifest)).json()["model_id"]
    listed = await cli.dlaas(ADMIN_TOKEN, "list", "--output", "json")
    assert listed.exit_code == 0, listed.output
    assert model_id in [job["id"] for job in json.loads(listed.stdout)["jobs"]]
    shown = await cli.dlaas(ADMIN_TOKEN, "show", model_id, "--output", "json")
    assert shown.exit_code == 0, shown.output
    job = json.loads(shown.stdout)["job"]
    assert (job["id"], job["name"]) == (model_id, "tf_convolutional_network_tutorial")


async def test_a_big_model_definition_is_refused_naming_it(api: Harness) -> None:
    api.app.state.dlaas.archive_limits = type(api.app.state.dlaas.archive_limits)(
        **{**api.app.state.dlaas.archive_limits.__dict__, "max_bytes": 1024}
    )
    user = await api.add_user("big")
    async with user.client as client:
        manifest = await with_training_data(client, "big-data")
        big = make_zip({"weights.bin": bytes(range(256)) * 2048})
        _refusal(await post_model(client, manifest, big), 413, "model_definition")


async def test_one_follow_too_many_is_a_429_before_the_stream(
    tmp_path: Path, redis_url: str
) -> None:
    database = f"sqlite+aiosqlite:///{tmp_path / 'api.db'}"
    async with running_api(
        database, redis_url, tmp_path / "objects", max_follows_per_user=0
    ) as api:
        user = await api.add_user("follower")
        async with user.client as client:
            model_id = await new_model(client, "follow-data")
            answer = await client.get(f"/v1/models/{model_id}/logs", params={"follow": "true"})
            _refusal(answer, 429, "follow")
