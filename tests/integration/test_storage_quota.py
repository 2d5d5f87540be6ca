"""The storage quota: data uploads and new jobs refused past it, results counted, usage shown."""

from __future__ import annotations

from typing import Any

from api.state import ApiState
from lifecycle_manager.glue.learner_reports import count_results
from tests.integration.api_harness import Harness, submit


def configure(api: Harness, **settings: Any) -> None:
    state: ApiState = api.app.state.dlaas
    state.settings = state.settings.model_copy(update=settings)


async def test_uploads_count_and_stop_at_the_quota(api: Harness) -> None:
    configure(api, storage_quota_bytes=1000)
    async with await api.new_user("saver") as alice:
        assert (await alice.put("/v2/data/c/a.bin", content=b"x" * 600)).status_code == 201
        usage = (await alice.get("/v2/usage")).json()
        assert usage == {
            "data_bytes": 600,
            "results_bytes": 0,
            "used_bytes": 600,
            "quota_bytes": 1000,
            "left_bytes": 400,
        }
        refused = await alice.put("/v2/data/c/b.bin", content=b"y" * 500)
        assert refused.status_code == 413
        assert (refused.json()["error"], refused.json()["field"]) == ("quota_exceeded", "quota")
        assert "600 B of your 1000 B" in refused.json()["detail"]
        # Replacing a file counts the difference: 600 -> 900 fits.
        assert (await alice.put("/v2/data/c/a.bin", content=b"z" * 900)).status_code == 201
        assert (await alice.get("/v2/usage")).json()["data_bytes"] == 900
        # A submission still fits (the archive is the platform's, not the user's data).
        assert (await submit(alice)).status_code == 201


async def test_a_user_past_the_quota_may_not_submit_and_sees_why(api: Harness) -> None:
    configure(api, storage_quota_bytes=100)
    async with await api.new_user("full") as alice:
        configure(api, storage_quota_bytes=0)  # no limit while the data goes in
        assert (await alice.put("/v2/data/c/a.bin", content=b"x" * 300)).status_code == 201
        configure(api, storage_quota_bytes=100)
        refused = await submit(alice)
        assert refused.status_code == 413
        assert refused.json()["field"] == "quota"
        assert "a new job is refused" in refused.json()["detail"]
        assert (await alice.get("/v2/usage")).json()["left_bytes"] == 0


async def test_a_final_jobs_results_count_until_it_is_deleted(api: Harness) -> None:
    configure(api, storage_quota_bytes=0)
    async with await api.new_user("results") as alice:
        job_id = (await submit(alice)).json()["id"]
        state: ApiState = api.app.state.dlaas
        state.objects.put_bytes(f"jobs/{job_id}/results/model.pt", b"m" * 700)
        state.objects.put_bytes(f"jobs/{job_id}/results/learner-2/log.txt", b"l" * 50)
        await count_results(state, job_id)  # type: ignore[arg-type]  # what it reads of a context
        usage = (await alice.get("/v2/usage")).json()
        assert (usage["results_bytes"], usage["quota_bytes"], usage["left_bytes"]) == (
            750,
            None,
            None,
        )
        assert (await alice.delete(f"/v2/jobs/{job_id}")).status_code == 202
        assert (await alice.get("/v2/usage")).json()["results_bytes"] == 0
