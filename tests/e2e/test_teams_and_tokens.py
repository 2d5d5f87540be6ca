"""Teams and tokens on the embedded platform (`dlaas up`), with one API worker and with
two: a member of team B gets a 404 for team A's job while team A's viewer reads it but may
not halt it, and a revoked token stops working within a second on every worker."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.platform import Platform, User

pytestmark = pytest.mark.e2e

MANIFEST = """\
name: idle
learners: 1
memory: 256Mb
framework:
  name: pytorch
  command: python idle.py
"""
IDLE = (
    "import time\nfor step in range(600):\n    print('step', step, flush=True)\n    time.sleep(1)\n"
)


@pytest.fixture(scope="module", params=[1, 2], ids=["1-api-worker", "2-api-workers"])
def deployment(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Platform]:
    if request.param == 1:
        yield request.getfixturevalue("platform")
        return
    running = Platform.up(tmp_path_factory.mktemp("dlaas-home"), {"DLAAS_API_WORKERS": "2"})
    try:
        assert len(_children(running.record().pids["api"])) >= 2, "the API runs one worker"
        yield running
    finally:
        running.down()


def _children(pid: int) -> list[int]:
    """The processes `pid` started (uvicorn's workers), from /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # it ended meanwhile
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _unique(name: str) -> str:
    return f"{name}-{secrets.token_hex(3)}"


def _as(user: User, *args: str) -> list[str]:
    return [*args, "--token", user.token]


def _status(platform: Platform, token: str, path: str, method: str = "GET") -> int:
    """One request on a connection of its own, so that it may land on any API worker."""
    headers = {"Authorization": f"Bearer {token}"}
    return httpx.request(method, platform.url + path, headers=headers, timeout=10).status_code


def test_another_teams_member_gets_a_404_and_a_viewer_reads_but_may_not_halt(
    deployment: Platform, tmp_path: Path
) -> None:
    alice, bob, vera = (deployment.create_user(_unique(n)) for n in ("alice", "bob", "vera"))
    team_a, team_b = _unique("team-a"), _unique("team-b")
    deployment.dlaas("team", "create", team_a)
    deployment.dlaas("team", "create", team_b)
    deployment.dlaas("team", "add-member", team_a, alice.name, "--role", "member")
    deployment.dlaas("team", "add-member", team_a, vera.name, "--role", "viewer")
    deployment.dlaas("team", "add-member", team_b, bob.name)
    (tmp_path / "manifest.yml").write_text(MANIFEST)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "idle.py").write_text(IDLE)

    submitted = deployment.dlaas(
        *_as(
            alice,
            "train",
            str(tmp_path / "manifest.yml"),
            str(tmp_path / "model"),
            "--team",
            team_a,
        )
    )
    job = submitted.stdout.strip()
    try:
        assert _status(deployment, bob.token, f"/v2/jobs/{job}") == 404
        shown = deployment.dlaas(*_as(bob, "show", job), check=False)
        assert shown.returncode == 1 and f"no job {job}" in shown.stderr
        assert job not in deployment.dlaas(*_as(bob, "list")).stdout

        seen = deployment.json(*_as(vera, "show", job))
        assert isinstance(seen, dict) and seen["job"]["team"] == team_a
        refused = deployment.dlaas(*_as(vera, "halt", job), check=False)
        assert refused.returncode == 1
        assert f"you are a viewer of team {team_a}" in refused.stderr
        assert _status(deployment, vera.token, f"/v2/jobs/{job}/halt", "POST") == 403

        assert deployment.dlaas(*_as(alice, "halt", job)).returncode == 0
    finally:
        deployment.dlaas("delete", job, check=False)


def test_a_revoked_token_stops_working_within_a_second_on_every_worker(
    deployment: Platform, tmp_path: Path
) -> None:
    alice = deployment.create_user(_unique("alice"))
    token_file = tmp_path / "ci.token"
    deployment.dlaas(*_as(alice, "token", "create", "--name", "ci", "--out", str(token_file)))
    assert token_file.stat().st_mode & 0o777 == 0o600
    ci = token_file.read_text().strip()
    # Every worker that answers one of these caches what the token stands for.
    assert {_status(deployment, ci, "/v2/users/me") for _ in range(20)} == {200}

    listed = deployment.json(*_as(alice, "token", "list"))
    ci_id = next(t["id"] for t in listed["tokens"] if t["name"] == "ci")  # type: ignore[index]
    answer = httpx.delete(
        f"{deployment.url}/v2/tokens/{ci_id}",
        headers={"Authorization": f"Bearer {alice.token}"},
        timeout=10,
    )
    assert answer.status_code == 200, answer.text
    revoked_at = time.monotonic()
    last_served = None
    refusals_in_a_row = 0
    while refusals_in_a_row < 20 and time.monotonic() - revoked_at < 10:
        if _status(deployment, ci, "/v2/users/me") == 200:
            last_served, refusals_in_a_row = time.monotonic(), 0
        else:
            refusals_in_a_row += 1
    assert refusals_in_a_row == 20, "the revoked token is still served"
    served_for = 0.0 if last_served is None else last_served - revoked_at
    assert served_for < 1.0, f"a revoked token was served {served_for:.2f} s after revocation"

    refused = deployment.dlaas("user", "me", "--token", ci, check=False)
    assert refused.returncode == 1 and "was revoked at" in refused.stderr

    deployment.dlaas(*_as(alice, "token", "create", "--name", "spare"))
    deployment.dlaas(*_as(alice, "token", "revoke", "spare"))
    names = [t["name"] for t in deployment.json(*_as(alice, "token", "list"))["tokens"]]  # type: ignore[index]
    assert names == ["default"]
