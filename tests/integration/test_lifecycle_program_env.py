"""A job's `environment` reaches its program and no process of the platform, on the local
backend with a real node agent and the real runner.

The job sets PYTHONPATH to a directory with a `sitecustomize.py`, PATH to one with a fake
`dlaas-learner` (and `python`, `python3`), and LD_PRELOAD to a library that is not there,
as a job that planted them in an earlier attempt would. Each planted file leaves a mark
when it runs; none may: the runner is the agent's interpreter in isolated mode, started
from the platform's environment, and it hands the user's variables to the program alone.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import redis

from lifecycle_manager.glue import learner_specs, operations
from lifecycle_manager.glue.context import Context
from storage import streams
from storage.job_states import JobState
from tests import services
from tests.integration import test_lifecycle_harness as harness
from tests.integration.test_lifecycle_harness import Agent, eventually
from tests.integration.test_lifecycle_operations import _zip, is_state, load, make_job, watch

shared_agent = harness.shared_agent
agent = harness.agent
database_url = harness.database_url
ctx = harness.ctx

# Wherever it runs, a planted file says so in the marker, with its process.
SITECUSTOMIZE = """\
import os, sys
with open({marker!r}, "a") as out:
    out.write(f"sitecustomize.py ran in pid {{os.getpid()}}: {{sys.argv!r}}\\n")
"""
PLANTED_PROGRAM = """\
#!/bin/sh
echo "planted $0 ran in pid $$: $*" >> {marker}
exit 0
"""
# The program shows what it was given, then waits until the test has looked at the
# learner's processes.
PROGRAM = (
    'echo "program PATH=$PATH"; echo "program PYTHONPATH=$PYTHONPATH"; '
    'echo "program LD_PRELOAD=$LD_PRELOAD"; echo $$ > {started}; '
    "while [ ! -e {go} ]; do sleep 0.05; done"
)


def plant(directory: Path, marker: Path) -> dict[str, str]:
    """The planted files, and the environment of a job that points at them."""
    directory.mkdir()
    (directory / "sitecustomize.py").write_text(SITECUSTOMIZE.format(marker=str(marker)))
    for name in ("dlaas-learner", "python", "python3"):
        path = directory / name
        path.write_text(PLANTED_PROGRAM.format(marker=marker))
        path.chmod(0o755)
    return {
        "PYTHONPATH": str(directory),
        "PATH": f"{directory}:/usr/bin:/bin",
        "LD_PRELOAD": str(directory / "preload.so"),
    }


def environ_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    pairs = (item.partition(b"=") for item in raw.split(b"\0") if item)
    return {key.decode(): value.decode(errors="replace") for key, _, value in pairs}


def session_processes(sid: int) -> dict[int, int]:
    """Each live process of session `sid`, and its process group."""
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry.name}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[3] == str(sid) and fields[0] != "Z":
            found[int(entry.name)] = int(fields[2])
    return found


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_the_users_path_pythonpath_and_preload_reach_only_the_program(
    ctx: Context,
    agent: Agent,
    monkeypatch: pytest.MonkeyPatch,
    redis_client: redis.Redis,
    tmp_path: Path,
) -> None:
    monkeypatch.setattr(learner_specs, "RUNNER", "dlaas-learner")
    marker = tmp_path / "planted-code-ran"
    user = plant(tmp_path / "planted", marker)
    started, go = tmp_path / "started", tmp_path / "go"
    job_id = await make_job(ctx, PROGRAM.format(started=started, go=go), environment=user)
    ctx.objects.put_bytes(f"jobs/{job_id}/model.zip", _zip({"notes.txt": b"hello\n"}))
    api = services.start_gateway_api(ctx.settings, tmp_path / "api")  # the runner's objects
    try:
        await operations.deploy_job(ctx, job_id)

        async def program_started() -> bool:
            assert not marker.exists(), marker.read_text()
            return started.exists() and started.read_text().strip().isdigit()

        await eventually(program_started, timeout=40, what="the program to start")
        [learner] = agent.learners(job_id)
        runner = int(str(learner["pid"]))
        processes = session_processes(runner)
        program = int(started.read_text())
        assert processes.get(program) == program  # the program: a process group of its own
        platform = [pid for pid, group in processes.items() if group == runner]
        assert platform == [runner]
        command = Path(f"/proc/{runner}/cmdline").read_bytes().split(b"\0")
        assert [part.decode() for part in command[:4]] == [
            sys.executable, "-I", "-m", "learner_image.runner"
        ]  # fmt: skip
        runner_env = environ_of(runner)
        assert not [value for value in user.values() if value in runner_env.values()]
        program_env = environ_of(program)
        assert {key: program_env[key] for key in user} == user
        go.touch()
        await watch(ctx, is_state(ctx, job_id, JobState.COMPLETED), timeout=40)
    finally:
        go.touch()
        api.stop()
    assert not marker.exists(), marker.read_text()
    lines = [line for _id, batch in streams.read_logs(redis_client, job_id) for line in batch.lines]
    for name, value in user.items():
        assert f"program {name}={value}" in lines
    assert (await load(ctx, job_id)).state == JobState.COMPLETED
