"""The embedded platform as a new user starts it (`dlaas up` as root, no isolation setting,
dlaas's own Python in a directory other uids cannot enter, as a pyenv or a venv under root's
home is): a user's job still runs as a uid of its own, with dlaas's Python and its packages
shown to it, and reads nothing of the platform's home nor of the platform's processes."""

from __future__ import annotations

import json
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from learner_image import program_sandbox
from tests.e2e.conftest import platform_with
from tests.e2e.isolated_jobs import PROBE, ROOT_ONLY, escapes, report, submit, wait_state
from tests.platform import Platform, User

# dlaas's own interpreter, the first `python` on a program's PATH, with its packages
VERSION = "python -c 'import sys, torch; print(\"python %d.%d\" % sys.version_info[:2])'"

pytestmark = [pytest.mark.e2e, ROOT_ONLY]


@pytest.fixture(scope="module")
def default(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    yield from platform_with(tmp_path_factory, as_a_new_user=True)


def dlaas_python_probe(
    platform: Platform, user: User, directory: Path, plan: dict[str, Any]
) -> str:
    command = f"{VERSION} && python probe.py {json.dumps(json.dumps(plan))}"
    return submit(platform, user, directory, command, PROBE)


def test_a_users_job_runs_as_its_own_uid_with_dlaas_python_and_reaches_no_secret(
    default: Platform, tmp_path: Path
) -> None:
    user = default.create_user("newcomer")
    held = sorted(str(path) for path in default.home.iterdir() if path.is_file())
    assert any(path.endswith("client.json") for path in held), held
    plan = {"read": [*held, "/proc/1/environ"], "proc": True, "names": True}
    job = dlaas_python_probe(default, user, tmp_path, plan)
    found = report(default, user, job)
    assert found["uid"] != 0, found
    assert not escapes(found), found
    # in its job's own network, with no resolver, the loopback addresses still have names
    assert set(found["names"].values()) == {"localhost"}, found["names"]
    assert wait_state(default, user, job, ("COMPLETED",)) == "COMPLETED"
    logs = default.dlaas("logs", job, "--token", user.token).stdout
    assert f"python {sys.version_info.major}.{sys.version_info.minor}" in logs, logs[-2000:]


def test_the_closed_directory_above_dlaas_python_shows_nothing_else(
    default: Platform, tmp_path: Path
) -> None:
    reveal = program_sandbox.revealed(program_sandbox.interpreter_paths())
    assert reveal is not None
    if not reveal:
        pytest.skip("dlaas's Python lies where every uid may run it: nothing to show")
    [(closed, _shown), *_] = reveal
    # Readable by all: only the closed directory above it keeps it from other uids.
    planted = closed / f"dlaas-beside-python-{secrets.token_hex(4)}"
    planted.write_text("what the closed directory keeps")
    planted.chmod(0o644)
    try:
        user = default.create_user("looker")
        plan = {"read": [str(planted)]}
        found = report(default, user, dlaas_python_probe(default, user, tmp_path, plan))
    finally:
        planted.unlink()
    assert not escapes(found), found
    assert "FileNotFoundError" in found["probe"][f"read {planted}"], found
