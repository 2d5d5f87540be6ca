"""What the API serves for the dashboard: the page shell under a strict policy, its assets,
and the routes the pages lean on (who a token is, a job's checkpoint files, node use)."""

from __future__ import annotations

from pathlib import Path

import httpx

from api.dashboard.routes import STATIC_DIR
from storage import jobs as repo
from storage.db import make_engine, make_sessionmaker
from storage.job_states import JobState
from storage.models import Learner
from tests.integration.api_harness import Harness, submit


def _shell(response: httpx.Response) -> None:
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    policy = response.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe-eval" not in policy
    assert "frame-ancestors 'none'" in policy
    assert '<script type="module" src="/ui/static/js/main.js">' in response.text


async def test_every_dashboard_path_is_the_page_shell_and_the_root_leads_there(
    api: Harness,
) -> None:
    anonymous = api.client(None)
    async with anonymous:
        for path in ("/ui/", "/ui/jobs/training-abc", "/ui/compare?jobs=a,b", "/ui/cluster"):
            _shell(await anonymous.get(path))
        for path in ("/", "/ui"):
            moved = await anonymous.get(path)
            assert moved.status_code == 307 and moved.headers["location"] == "/ui/"


async def test_the_assets_are_served_as_their_types_and_never_sniffed(api: Harness) -> None:
    async with api.client(None) as anonymous:
        script = await anonymous.get("/ui/static/js/main.js")
        assert script.status_code == 200
        assert script.headers["content-type"].startswith("text/javascript")
        assert script.headers["x-content-type-options"] == "nosniff"
        assert script.content == (STATIC_DIR / "js" / "main.js").read_bytes()
        assert (await anonymous.get("/ui/static/vendor/uPlot.iife.min.js")).status_code == 200
        escape = await anonymous.get("/ui/static/../routes.py")
        assert escape.status_code == 404 or "STATIC_DIR" not in escape.text


def test_every_module_the_shell_loads_is_in_the_package() -> None:
    shell = (STATIC_DIR / "index.html").read_text()
    for asset in ("vendor/uPlot.iife.min.js", "vendor/fflate.min.js", "dashboard.css"):
        assert f"/ui/static/{asset}" in shell
        assert (STATIC_DIR / asset).is_file()
    main = (STATIC_DIR / "js" / "main.js").read_text()
    for module in ("jobs", "submit", "job", "compare", "cluster"):
        assert f'import("./{module}.js")' in main
        assert Path(STATIC_DIR / "js" / f"{module}.js").is_file()


async def test_a_token_says_whose_it_is(api: Harness) -> None:
    me = await api.admin.get("/v2/users/me")
    own_team = {"team": "admin", "role": "team_admin", "personal": True}
    assert me.status_code == 200
    assert me.json() == {"name": "admin", "admin": True, "teams": [own_team]}
    async with await api.new_user("carol") as carol:
        mine = (await carol.get("/v2/users/me")).json()
        assert mine["name"].startswith("carol-") and mine["admin"] is False
        assert mine["teams"] == [{"team": mine["name"], "role": "team_admin", "personal": True}]
    async with api.client("dlaas_nobody-has-this-token") as stranger:
        refused = await stranger.get("/v2/users/me")
        assert refused.status_code == 401 and refused.json()["field"] == "Authorization"


async def test_a_jobs_checkpoint_files_are_listed_and_downloaded_by_its_owner_only(
    api: Harness,
) -> None:
    async with await api.new_user("alice") as alice, await api.new_user("bob") as bob:
        job_id = (await submit(alice)).json()["id"]
        objects = api.app.state.dlaas.objects
        objects.put_bytes(f"jobs/{job_id}/checkpoints/ckpt-000000000010/state.pt", b"state")
        objects.put_bytes(f"jobs/{job_id}/checkpoints/ckpt-000000000010/COMMITTED", b"{}")
        listed = (await alice.get(f"/v2/jobs/{job_id}/checkpoints")).json()
        assert listed == {
            "files": [
                {"path": "ckpt-000000000010/COMMITTED", "size": 2},
                {"path": "ckpt-000000000010/state.pt", "size": 5},
            ],
            "next": None,
        }
        paged = (await alice.get(f"/v2/jobs/{job_id}/checkpoints", params={"limit": 1})).json()
        assert len(paged["files"]) == 1 and paged["next"]
        got = await alice.get(f"/v2/jobs/{job_id}/checkpoints/ckpt-000000000010/state.pt")
        assert got.status_code == 200 and got.content == b"state"
        for path in ("ckpt-000000000010/nope", "../results/x", "ckpt-000000000010/../../x"):
            missing = await alice.get(f"/v2/jobs/{job_id}/checkpoints/{path}")
            assert missing.status_code == 404, path
            assert missing.json()["field"] in ("path", "job_id")
        for path in ("checkpoints", "checkpoints/ckpt-000000000010/state.pt"):
            hidden = await bob.get(f"/v2/jobs/{job_id}/{path}")
            assert hidden.status_code == 404
            assert b"state" not in hidden.content


async def test_the_cluster_reports_what_active_learners_hold_of_the_node(api: Harness) -> None:
    before = (await api.admin.get("/v2/cluster")).json()["nodes"][0]
    job_id = (await submit(api.admin)).json()["id"]  # 2 learners, 1 CPU and 1 GB each
    engine = make_engine(api.settings.database_url)
    try:
        async with make_sessionmaker(engine)() as session:
            for state in (JobState.DEPLOYING, JobState.RUNNING):
                assert (await repo.transition(session, job_id, state, "test")).changed
            session.add_all(
                [Learner(job_id=job_id, index=n, attempt=1, state="RUNNING") for n in (1, 2)]
            )
            await session.commit()
        cluster = (await api.admin.get("/v2/cluster")).json()
        assert cluster["backend"] == "local"
        (node,) = cluster["nodes"]
        assert node["learners"] == before["learners"] + 2
        assert node["cpus_used"] == before["cpus_used"] + 2
        assert node["memory_bytes_used"] == before["memory_bytes_used"] + 2 * 1000**3
        assert node["cpus"] >= 1 and node["memory_bytes"] > 0
        assert cluster["active_learners"] == node["learners"]
        async with make_sessionmaker(engine)() as session:
            await repo.transition(session, job_id, JobState.FAILED, "test ends it")
            await session.commit()
    finally:
        await engine.dispose()
