"""FfDL's /v1 REST API over dlaas's jobs: every operation of FfDL's specification with
FfDL-shaped requests, each answer checked against the specification's schemas
(tests/ffdl_v1), on a real database, Redis and object store."""

from __future__ import annotations

import io
import zipfile

import orjson

from storage import output_keys
from storage.job_states import JobState
from tests.ffdl_v1.spec import check
from tests.integration.api_harness import MODEL_ZIP, Harness
from tests.integration.v1_client import VERSION, new_model, post_model, with_training_data


async def _model(api: Harness, client_token: str, container: str) -> str:
    async with api.client(client_token) as client:
        return await new_model(client, container)


async def test_a_model_posted_as_ffdl_does_is_a_dlaas_job(api: Harness) -> None:
    user = await api.add_user("ffdl")
    async with user.client as client:
        manifest = await with_training_data(client, "tf_training_data")
        created = await post_model(client, manifest)
        assert created.status_code == 201, created.text
        check("BasicNewModel", created.json())
        model_id = created.json()["model_id"]
        assert created.headers["location"] == f"/v1/models/{model_id}"
        assert created.json()["location"] == f"/v1/models/{model_id}"

        shown = await client.get(f"/v1/models/{model_id}", params=VERSION)
        assert shown.status_code == 200, shown.text
        check("Model", shown.json())
        model = shown.json()
        assert model["name"] == "tf_convolutional_network_tutorial"
        assert model["description"] == "Convolutional network model using tensorflow"
        assert model["framework"] == {"name": "tensorflow", "version": "1.5.0-py3"}
        training = model["training"]
        assert training["training_status"]["status"] == "PENDING"
        assert training["training_status"]["status_description"] == "QUEUED"
        assert training["training_status"]["submitted"].endswith("Z")
        assert training["training_status"]["completed"] == ""
        assert (training["cpus"], training["gpus"], training["learners"]) == (0.5, 0, 1)
        assert (training["memory"], training["memory_unit"]) == (953.674, "MiB")  # 1 GB
        assert training["input_data"] == training["output_data"] == ["sl-internal-os"]
        [store] = model["data_stores"]
        assert store["data_store_id"] == "sl-internal-os"
        assert store["connection"]["password"] == "***"  # never shown, as on /v2

        listed = await client.get("/v1/models", params=VERSION)
        check("ModelList", listed.json())
        assert [m["model_id"] for m in listed.json()["models"]] == [model_id]

        # the same job through /v2
        job = (await client.get(f"/v2/jobs/{model_id}")).json()
        assert (job["state"], job["owner"]) == ("QUEUED", user.name)
        assert api.app.state.dlaas.objects.get_bytes(f"jobs/{model_id}/model.zip") == MODEL_ZIP

        definition = await client.get(f"/v1/models/{model_id}/definition", params=VERSION)
        assert definition.status_code == 200
        assert definition.headers["content-type"] == "application/octet-stream"
        assert definition.content == MODEL_ZIP


async def test_status_follows_the_job_through_its_states(api: Harness) -> None:
    user = await api.add_user("states")
    model_id = await _model(api, user.token, "states-data")
    seen = []
    for state in (JobState.DEPLOYING, JobState.RUNNING, JobState.STORING, JobState.COMPLETED):
        await api.move_job(model_id, state)
        shown = (await user.client.get(f"/v1/models/{model_id}")).json()
        check("Model", shown)
        seen.append(shown["training"]["training_status"]["status"])
    assert seen == ["DEPLOY", "PROCESSING", "STORING", "COMPLETED"]
    assert shown["training"]["training_status"]["completed"].endswith("Z")
    await user.client.aclose()


async def test_patch_halts_and_resumes_and_delete_removes(api: Harness) -> None:
    user = await api.add_user("patch")
    model_id = await _model(api, user.token, "patch-data")
    async with user.client as client:
        halted = await client.patch(f"/v1/models/{model_id}", json={"status": "halt"})
        assert halted.status_code == 202, halted.text
        check("BasicModel", halted.json())
        assert halted.json() == {"model_id": model_id}
        assert (await client.get(f"/v2/jobs/{model_id}/events")).json()["events"][-1][
            "kind"
        ] == "halt_requested"
        await api.move_job(model_id, JobState.HALTED)
        status = (await client.get(f"/v1/models/{model_id}")).json()["training"]
        assert status["training_status"]["status"] == "HALTED"

        resumed = await client.patch(f"/v1/models/{model_id}", json={"status": "resume"})
        assert resumed.status_code == 202, resumed.text
        assert (await client.get(f"/v2/jobs/{model_id}")).json()["state"] == "QUEUED"

        bad = await client.patch(f"/v1/models/{model_id}", json={"status": "pause"})
        assert bad.status_code == 400
        check("Error", bad.json())
        assert bad.json()["code"] == 400
        assert "status" in bad.json()["description"]
        assert '"halt"' in bad.json()["description"]

        deleted = await client.delete(f"/v1/models/{model_id}", params=VERSION)
        assert deleted.status_code == 200, deleted.text
        check("BasicModel", deleted.json())
        gone = await client.get(f"/v1/models/{model_id}")
        assert gone.status_code == 404
        check("Error", gone.json())
        assert (await client.get(f"/v2/jobs/{model_id}")).status_code == 404


async def test_trained_model_is_the_results_zipped(api: Harness) -> None:
    user = await api.add_user("trained")
    model_id = await _model(api, user.token, "trained-data")
    async with user.client as client:
        early = await client.get(f"/v1/models/{model_id}/trained_model", params=VERSION)
        assert early.status_code == 404
        check("Error", early.json())
        assert "QUEUED" in early.json()["description"]
        objects = api.app.state.dlaas.objects
        objects.put_bytes(f"jobs/{model_id}/results/model.pt", b"weights")
        objects.put_bytes(f"jobs/{model_id}/results/eval/summary.json", b"{}")
        trained = await client.get(f"/v1/models/{model_id}/trained_model")
        assert trained.status_code == 200
        assert trained.headers["content-type"] == "application/octet-stream"
        with zipfile.ZipFile(io.BytesIO(trained.content)) as archive:
            assert {n: archive.read(n) for n in archive.namelist()} == {
                "model.pt": b"weights",
                "eval/summary.json": b"{}",
            }


async def test_logs_and_metrics_in_ffdl_shapes(api: Harness) -> None:
    user = await api.add_user("logs")
    model_id = await _model(api, user.token, "logs-data")
    objects = api.app.state.dlaas.objects
    lines = [f"step {n} loss 0.{9 - n}" for n in range(6)]
    objects.put_bytes(output_keys.log_key(model_id, 1), "".join(f"{x}\n" for x in lines).encode())
    points = [
        {"learner": 1, "time": 1_700_000_000.0 + n, "step": n, "values": {"loss": 0.9 - n / 10}}
        for n in range(4)
    ]
    objects.put_bytes(
        output_keys.metrics_key(model_id, 1), b"".join(orjson.dumps(p) + b"\n" for p in points)
    )
    async with user.client as client:
        text = await client.get(f"/v1/models/{model_id}/logs", params=VERSION)
        assert text.status_code == 200
        assert text.text.splitlines() == lines
        await api.move_job(model_id, JobState.DEPLOYING, JobState.RUNNING, JobState.COMPLETED)
        # followed, it ends with the training: the lines as text, no event framing
        followed = await client.get(f"/v1/models/{model_id}/logs", params={"follow": "true"})
        assert followed.status_code == 200
        assert followed.text.splitlines() == lines

        page = await client.get(f"/v1/logs/{model_id}/loglines", params={"pagesize": 2, "pos": 3})
        assert page.status_code == 200, page.text
        check("v1LogLinesList", page.json())
        got = page.json()["models"]
        assert [(r["meta"]["rindex"], r["line"]) for r in got] == [("3", lines[2]), ("4", lines[3])]
        assert {r["meta"]["training_id"] for r in got} == {model_id}
        assert {r["meta"]["user_id"] for r in got} == {user.name}
        tail = await client.get(f"/v1/logs/{model_id}/loglines", params={"since_time": "-2"})
        assert [r["line"] for r in tail.json()["models"]] == lines[-2:]
        default = await client.get(f"/v1/logs/{model_id}/loglines", params={"searchType": "TERM"})
        assert len(default.json()["models"]) == len(lines)  # FfDL's page is 10

        metrics = await client.get(f"/v1/models/{model_id}/metrics", params=VERSION)
        assert metrics.status_code == 200
        records = [orjson.loads(line) for line in metrics.content.splitlines()]
        for record in records:
            check("MetricData", record)
        assert [r["iteration"] for r in records] == [0, 1, 2, 3]
        assert records[1]["Values"] == {"loss": 0.8}
        assert records[0]["timestamp"] == "2023-11-14T22:13:20.000Z"
        later = await client.get(
            f"/v1/models/{model_id}/metrics", params={"since_time": "2023-11-14T22:13:22Z"}
        )
        assert [orjson.loads(x)["iteration"] for x in later.content.splitlines()] == [2, 3]

        emetrics = await client.get(f"/v1/logs/{model_id}/emetrics", params={"pos": -1})
        assert emetrics.status_code == 200, emetrics.text
        check("v1EMetricsList", emetrics.json())
        [last] = emetrics.json()["models"]
        assert last["etimes"] == {"iteration": {"type": "INT", "value": "3"}}
        assert last["values"]["loss"]["type"] == "FLOAT"
        assert float(last["values"]["loss"]["value"]) == points[3]["values"]["loss"]
        assert last["meta"]["time"] == "1700000003000"


async def test_event_endpoints_are_an_event_type_dlaas_has_not(api: Harness) -> None:
    user = await api.add_user("events")
    model_id = await _model(api, user.token, "events-data")
    base = f"/v1/models/{model_id}/events/update"
    async with user.client as client:
        for method, path, body in [
            ("GET", base, None),
            ("GET", f"{base}/hook-1", None),
            ("POST", f"{base}/hook-1", {"url": "https://example.com/hook", "type": "update"}),
            ("DELETE", f"{base}/hook-1", None),
        ]:
            answer = await client.request(method, path, json=body)
            assert answer.status_code == 404, (method, path, answer.text)
            check("Error", answer.json())
            assert answer.json()["error"] == "no_event_endpoints"
            assert f"GET /v2/jobs/{model_id}/events" in answer.json()["description"]
        unknown = await client.get("/v1/models/training-nosuchmodel/events/update")
        assert unknown.status_code == 404
        assert "model_id" in unknown.json()["description"]
