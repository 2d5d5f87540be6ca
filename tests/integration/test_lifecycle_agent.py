"""The node agent as a real process starting real processes, reporting to the real Redis."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from lifecycle_manager.backends.base import BackendUnavailable, learner_name
from lifecycle_manager.backends.local.agent_learners import LEARNER_NICENESS, group_is_running
from lifecycle_manager.backends.local.client import LocalBackend
from storage import streams
from storage.exit_reports import ExitReport
from tests import services
from tests.integration import test_lifecycle_harness as harness
from tests.integration.test_lifecycle_harness import AGENT_GRACE_S, Agent, start_agent

shared_agent = harness.shared_agent
agent = harness.agent

PY = sys.executable


def new_job() -> str:
    return f"training-{secrets.token_hex(5)}"


def put(
    agent: Agent, job: str, learner: int, command: list[str], attempt: int = 1, **extra: Any
) -> httpx.Response:
    body = {
        "job": job,
        "learner": learner,
        "attempt": attempt,
        "num_learners": extra.pop("num_learners", 1),
        "command": command,
        **extra,
    }
    name = learner_name(job, learner, attempt)
    return httpx.put(f"{agent.url}/learners/{name}", json=body, headers=agent.headers, timeout=10)


def stream_end(client: redis.Redis) -> str:
    last: Any = client.xrevrange(streams.LEARNER_EVENTS, count=1)
    return str(last[0][0].decode()) if last else "0-0"


def exits_of(
    client: redis.Redis, job: str, after: str, count: int, timeout: float = 10.0
) -> list[tuple[str, streams.LearnerEvent]]:
    """The next `count` exit events of `job` after stream id `after`."""
    found: list[tuple[str, streams.LearnerEvent]] = []
    deadline = time.monotonic() + timeout
    while len(found) < count and time.monotonic() < deadline:
        answer: Any = client.xread({streams.LEARNER_EVENTS: after}, block=200, count=100)
        for _stream, entries in answer or []:
            for entry_id, fields in entries:
                after = entry_id.decode()
                event = streams.decode_learner_event(fields)
                if event.job == job and event.kind == streams.EXIT:
                    found.append((after, event))
    assert len(found) >= count, f"only {len(found)} of {count} exit events of {job}"
    return found


def gone(pgid: int) -> bool:
    return not group_is_running(pgid)


def test_create_is_idempotent(agent: Agent) -> None:
    job = new_job()
    first = put(agent, job, 1, ["sleep", "30"])
    again = put(agent, job, 1, ["sleep", "30"])
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["pid"] == again.json()["pid"]
    learners = agent.learners(job)
    assert [item["name"] for item in learners] == [learner_name(job, 1, 1)]
    assert learners[0]["phase"] == "Running"


def test_a_name_that_does_not_match_the_body_is_refused(agent: Agent) -> None:
    body = {"job": "j", "learner": 1, "attempt": 1, "num_learners": 1, "command": ["true"]}
    answer = httpx.put(
        f"{agent.url}/learners/dlaas-other-learner-1-a1", json=body, headers=agent.headers
    )
    assert answer.status_code == 422
    assert "dlaas-j-learner-1-a1" in answer.json()["detail"]


def test_exits_are_reported_at_once_with_code_and_signal(
    agent: Agent, redis_client: redis.Redis
) -> None:
    job = new_job()
    after = stream_end(redis_client)
    stamp = "open('exit-time', 'w').write(repr(time.time()))"
    put(agent, job, 1, [PY, "-c", f"import os, time; {stamp}; os._exit(3)"], num_learners=2)
    put(
        agent,
        job,
        2,
        [PY, "-c", f"import os, time; {stamp}; os.kill(os.getpid(), 9)"],
        num_learners=2,
    )
    events = dict(
        (event.learner, (entry_id, event))
        for entry_id, event in exits_of(redis_client, job, after, 2)
    )
    for learner, (entry_id, event) in events.items():
        workdir = agent.root / "jobs" / job / f"learner-{learner}" / "a1"
        exited = float((workdir / "exit-time").read_text())
        reported = int(entry_id.split("-")[0]) / 1000  # Redis' clock at XADD, in ms
        assert reported - exited < 0.1, f"learner {learner} reported {reported - exited:.3f} s late"
        assert event.fields["source"] == "agent"
        assert event.fields["deleted"] == "0"
    first, second = events[1][1], events[2][1]
    assert (first.fields["exit_code"], first.fields["signal"]) == ("3", "")
    assert first.fields["reason"] == "exit code 3"
    assert (second.fields["exit_code"], second.fields["signal"]) == ("", "SIGKILL")
    assert second.fields["reason"] == "killed by SIGKILL"
    phases = {item["learner"]: (item["phase"], item["exit_code"]) for item in agent.learners(job)}
    assert phases == {1: ("Failed", 3), 2: ("Failed", None)}


def test_exit_zero_succeeds_and_a_missing_command_fails(agent: Agent) -> None:
    job = new_job()
    put(agent, job, 1, ["true"], num_learners=2)
    put(agent, job, 2, ["no-such-command-dlaas"], num_learners=2)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        phases = {item["learner"]: item for item in agent.learners(job)}
        if phases[1]["phase"] != "Running":
            break
        time.sleep(0.05)
    assert phases[1]["phase"] == "Succeeded"
    assert phases[2]["phase"] == "Failed"
    assert phases[2]["reason"] == "command not found: no-such-command-dlaas"


def test_learners_yield_the_cpu_to_the_platforms_own_processes(agent: Agent) -> None:
    started = put(agent, new_job(), 1, ["sleep", "30"]).json()
    wanted = min(os.getpriority(os.PRIO_PROCESS, agent.process.pid) + LEARNER_NICENESS, 19)
    wait_for(
        lambda: os.getpriority(os.PRIO_PROCESS, started["pid"]) == wanted,
        f"the learner to run at niceness {wanted}",
    )
    autogroup = Path(f"/proc/{started['pid']}/autogroup")
    if autogroup.exists():  # sessions are scheduled as groups: the learner's is lowered too
        wait_for(
            lambda: autogroup.read_text().split()[-1] == str(wanted),
            f"the learner's session to run at niceness {wanted}",
        )


def test_the_learner_gets_its_directories_and_environment(agent: Agent) -> None:
    job = new_job()
    dump = "import json, os; json.dump(dict(os.environ), open('env.json', 'w'))"
    for learner in (1, 2):
        answer = put(
            agent,
            job,
            learner,
            [PY, "-c", dump],
            num_learners=2,
            env={"TRAINING_ID": job, "LEARNER_ID": str(learner), "USER_VAR": "x"},
            resources={"cpus": 1, "memory_bytes": 1 << 30},
        )
        assert answer.status_code == 201
    envs = {}
    for learner in (1, 2):
        workdir = agent.root / "jobs" / job / f"learner-{learner}" / "a1"
        deadline = time.monotonic() + 5
        while not (workdir / "env.json").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        envs[learner] = json.loads((workdir / "env.json").read_text())
        env = envs[learner]
        for name, sub in {
            "MODEL_DIR": "program/model",
            "DATA_DIR": "program/data",
            "RESULT_DIR": "program/result",
            "LOG_DIR": "program/logs",
            "CHECKPOINT_DIR": "program/checkpoints",
        }.items():
            assert env[name] == str(workdir / sub)
            assert Path(env[name]).is_dir()
        assert env["MASTER_ADDR"] == "127.0.0.1"
        assert env["USER_VAR"] == "x"
        assert env["LEARNER_ID"] == str(learner)
        assert env["OMP_NUM_THREADS"] == "1"
        assert "DLAAS_PROBE_SECRET" not in env  # nothing of the agent's own environment leaks
        assert str(Path(PY).parent) in env["PATH"].split(os.pathsep)
    assert envs[1]["MASTER_PORT"] == envs[2]["MASTER_PORT"]
    assert 0 < int(envs[1]["MASTER_PORT"]) < 65536


def test_delete_stops_the_whole_process_group(agent: Agent, redis_client: redis.Redis) -> None:
    job = new_job()
    after = stream_end(redis_client)
    pid = put(agent, job, 1, ["/bin/sh", "-c", "sleep 60 & sleep 60; wait"]).json()["pid"]
    time.sleep(0.2)
    assert not gone(pid)
    answer = agent.http.delete(f"/jobs/{job}", params={"wait": 5}).json()
    assert answer == {"deleted": [learner_name(job, 1, 1)], "gone": True}
    assert gone(pid)
    assert agent.learners(job) == []
    assert not (agent.root / "jobs" / job).exists()
    (_, event), *_ = exits_of(redis_client, job, after, 1)
    assert event.fields["deleted"] == "1"
    assert event.fields["reason"] == "killed by SIGTERM (deleted)"


def test_a_delete_up_to_an_attempt_spares_the_newer_ones(agent: Agent) -> None:
    job = new_job()
    for learner, attempt in ((1, 1), (2, 1), (1, 2), (2, 3)):
        put(agent, job, learner, ["sleep", "60"], attempt, num_learners=2)
    older = {"wait": 5, "up_to_attempt": 1}
    answer = agent.http.delete(f"/jobs/{job}", params=older).json()
    assert sorted(answer["deleted"]) == [learner_name(job, 1, 1), learner_name(job, 2, 1)]
    assert answer["gone"]
    one = agent.http.delete(
        f"/jobs/{job}/learners/2", params={"wait": 5, "up_to_attempt": 2}
    ).json()
    assert one == {"deleted": [], "gone": True}  # learner 2 runs attempt 3 now
    left = sorted((item["learner"], item["attempt"]) for item in agent.learners(job))
    assert left == [(1, 2), (2, 3)]


def test_delete_kills_after_the_grace_what_ignores_sigterm(
    agent: Agent, redis_client: redis.Redis, tmp_path: Path
) -> None:
    job = new_job()
    after = stream_end(redis_client)
    ignoring = tmp_path / "ignoring"
    stubborn = (
        "import pathlib, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "pathlib.Path(sys.argv[1]).touch(); time.sleep(60)"
    )
    pid = put(agent, job, 1, [PY, "-c", stubborn, str(ignoring)]).json()["pid"]
    wait_for(ignoring.exists, "the program to ignore SIGTERM")
    started = time.monotonic()
    answer = agent.http.delete(f"/jobs/{job}", params={"wait": 10}, timeout=15).json()
    assert answer["gone"] is True
    assert time.monotonic() - started >= AGENT_GRACE_S - 0.1
    assert gone(pid)
    (_, event), *_ = exits_of(redis_client, job, after, 1)
    assert event.fields["reason"] == "killed by SIGKILL (deleted)"


def test_a_learner_that_dies_takes_the_other_groups_of_its_session_along(agent: Agent) -> None:
    # As a runner does: the command in a process group of its own, under a shell.
    spawn = (
        "import subprocess, sys, time; "
        "subprocess.Popen(['/bin/sh', '-c', 'sleep 60'], process_group=0); "
        "time.sleep(60)"
    )
    job = new_job()
    pid = put(agent, job, 1, [PY, "-c", spawn]).json()["pid"]
    deadline = time.monotonic() + 10
    while not (sleepers := _sleepers_of_session(pid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sleepers, "the learner's command did not start"
    assert {os.getpgid(sleeper) for sleeper in sleepers} != {pid}
    os.kill(pid, signal.SIGKILL)  # the runner dies outright; its command must not outlive it
    deadline = time.monotonic() + 10
    while _sleepers_of_session(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _sleepers_of_session(pid)


def _sleepers_of_session(sid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            if "(sleep)" in stat and fields[3] == str(sid) and fields[0] != "Z":
                found.append(int(entry.name))
    return found


def wait_for(check: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_restarted_agent_re_adopts_live_learners_and_reads_what_ended_meanwhile(
    agent: Agent, redis_url: str, redis_client: redis.Redis
) -> None:
    job = new_job()
    told_to_stop = ExitReport(
        143, "SIGTERM", "stopped by SIGTERM", stopped=True, last_line="step 9"
    )
    leave_report = f"printf '%s' '{told_to_stop.to_json()}' > \"$DLAAS_EXIT_REPORT\"; exit 143"
    survivor = put(agent, job, 1, ["sleep", "60"], num_learners=4).json()
    put(agent, job, 2, ["true"], num_learners=4)
    silent = put(agent, job, 3, ["sleep", "0.5"], num_learners=4).json()
    reporting = put(agent, job, 4, ["sh", "-c", f"sleep 0.5; {leave_report}"], num_learners=4)
    wait_for(lambda: agent.learners(job)[1]["phase"] == "Succeeded", "learner 2 to end")
    agent.process.stop()
    # Learners 3 and 4 end while no agent watches them; 4 leaves its runner's exit report.
    wait_for(lambda: gone(silent["pid"]) and gone(reporting.json()["pid"]), "learners 3 and 4")
    assert not gone(survivor["pid"])
    after = stream_end(redis_client)
    port = int(agent.url.rsplit(":", 1)[1])
    agent.process = start_agent(agent.root, redis_url, port=port, token=agent.token).process
    learners = {item["learner"]: item for item in agent.learners(job)}
    assert learners[1]["phase"] == "Running"
    assert learners[1]["pid"] == survivor["pid"]
    assert learners[2]["phase"] == "Succeeded"
    assert learners[3]["phase"] == "Failed"
    assert learners[3]["reason"] == "vanished while the node agent was down"
    assert (learners[4]["phase"], learners[4]["exit_code"]) == ("Failed", 143)
    assert (learners[4]["stopped"], learners[4]["last_line"]) == (True, "step 9")
    lost, reported = sorted((e for _, e in exits_of(redis_client, job, after, 2)), key=_learner)
    assert (lost.learner, lost.fields["exit_code"]) == (3, "")
    assert (reported.learner, reported.fields["exit_code"]) == (4, "143")
    assert (reported.fields["stopped"], reported.fields["last_line"]) == ("1", "step 9")
    after = stream_end(redis_client)
    os.kill(survivor["pid"], signal.SIGTERM)  # it ends on its own: the agent notices
    (_, ended), *_ = exits_of(redis_client, job, after, 1)
    assert ended.learner == 1
    assert ended.fields["exit_code"] == ""
    assert "re-adopted" in ended.fields["reason"]


def _learner(event: streams.LearnerEvent) -> int:
    return event.learner


@pytest.mark.parametrize("path", ["/healthz", "/learners"])
def test_read_endpoints_answer(agent: Agent, path: str) -> None:
    assert httpx.get(f"{agent.url}{path}", headers=agent.headers).status_code == 200


# -- who may drive the agent ---------------------------------------------------------------

ROUTES = [
    ("GET", "/healthz"),
    ("GET", "/learners"),
    ("PUT", "/learners/dlaas-j-learner-1-a1"),
    ("DELETE", "/learners/dlaas-j-learner-1-a1"),
    ("DELETE", "/jobs/j"),
    ("DELETE", "/jobs/j/learners/1"),
    ("GET", "/docs"),
    ("GET", "/no-such-route"),
]
PUT_BODY = {"job": "j", "learner": 1, "attempt": 1, "num_learners": 1, "command": ["touch", "x"]}


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_every_request_without_the_agents_token_is_refused(
    agent: Agent, method: str, path: str
) -> None:
    wrong = "x" * len(agent.token)  # as long as the right one: only the bytes differ
    for headers in ({}, {"Authorization": f"Bearer {wrong}"}, {"Authorization": agent.token}):
        answer = httpx.request(method, f"{agent.url}{path}", json=PUT_BODY, headers=headers)
        assert answer.status_code == 401, (headers, answer.text)
        assert answer.headers["WWW-Authenticate"] == "Bearer"
    assert agent.learners() == []  # nothing was started
    assert not (agent.root / "jobs" / "j").exists()


@pytest.mark.parametrize(
    "host", ["attacker.example", "127.0.0.1.nip.io", "agent", "localhost:1", "10.0.0.1"]
)
def test_a_request_naming_another_host_is_refused_even_with_the_token(
    agent: Agent, host: str
) -> None:
    """What a page that rebinds its DNS name to 127.0.0.1 sends: its own name as Host."""
    port = agent.url.rsplit(":", 1)[1]
    for named in (host, f"{host}:{port}") if ":" not in host else (host,):
        headers = {**agent.headers, "Host": named}
        answer = httpx.put(
            f"{agent.url}/learners/dlaas-j-learner-1-a1", json=PUT_BODY, headers=headers
        )
        assert answer.status_code == 421, (named, answer.text)
        assert "DLAAS_AGENT_ALLOWED_HOSTS" in answer.json()["detail"]
    assert agent.learners() == []


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "LocalHost"])
def test_the_agents_own_loopback_names_are_answered(agent: Agent, host: str) -> None:
    port = agent.url.rsplit(":", 1)[1]
    headers = {**agent.headers, "Host": f"{host}:{port}"}
    assert httpx.get(f"{agent.url}/healthz", headers=headers).status_code == 200


def test_the_lifecycle_manager_with_a_wrong_token_is_told_which_setting_to_fix(
    agent: Agent,
) -> None:
    async def listed() -> None:
        backend = LocalBackend(agent.url, token="y" * 43)
        try:
            await backend.list_learners()
        finally:
            await backend.aclose()

    with pytest.raises(BackendUnavailable, match="DLAAS_AGENT_TOKEN"):
        asyncio.run(listed())


def _listening_addresses(port: int) -> set[str]:
    """The local addresses of sockets listening on TCP `port` (IPv4, from /proc/net/tcp)."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, local_port = local.split(":")
        if int(local_port, 16) == port and state == "0A":  # LISTEN
            found.add(socket.inet_ntoa(bytes.fromhex(address)[::-1]))
    return found


def _agent_env(home: Path, redis_url: str, **extra: str) -> dict[str, str]:
    """Only what the agent needs: no database, no object store, no S3 key."""
    return {"PATH": os.environ["PATH"], "HOME": str(home), "DLAAS_REDIS_URL": redis_url, **extra}


def test_the_agent_binds_loopback_and_needs_nothing_but_redis_and_its_token(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis
) -> None:
    port, token = services.free_port(), secrets.token_hex(32)
    argv = [
        PY,
        "-m",
        "lifecycle_manager.backends.local.node_agent",
        "--port",
        str(port),
        "--root",
        "root",
    ]
    env = _agent_env(tmp_path, redis_url, DLAAS_AGENT_TOKEN=token)
    process = services.start_process("agent", argv, tmp_path, env=env)
    agent = Agent(f"http://127.0.0.1:{port}", tmp_path / "root", process, token)
    try:
        services.wait_until(lambda: agent.http.get("/healthz").is_success, process, 30, "up")
        assert _listening_addresses(port) == {"127.0.0.1"}
        job, after = new_job(), stream_end(redis_client)
        assert put(agent, job, 1, ["true"]).status_code == 201
        (_, event), *_ = exits_of(redis_client, job, after, 1)
        assert event.fields["exit_code"] == "0"
        assert not (tmp_path / ".dlaas").exists()  # no database, no objects of its own
    finally:
        agent.delete_all()
        process.stop()
        agent.http.close()


@pytest.mark.parametrize(
    ("extra", "refusal"),
    [
        ({}, "requires a token"),
        ({"DLAAS_AGENT_TOKEN": "short-token"}, "shorter than 32 characters"),
        ({"DLAAS_AGENT_TOKEN_FILE": "/nonexistent/agent-token"}, "cannot read"),
    ],
    ids=["none", "short", "unreadable"],
)
def test_the_agent_refuses_to_start_without_a_strong_token(
    tmp_path: Path, redis_url: str, extra: dict[str, str], refusal: str
) -> None:
    argv = [
        PY,
        "-m",
        "lifecycle_manager.backends.local.node_agent",
        "--port",
        "1",
        "--root",
        str(tmp_path),
    ]
    env = _agent_env(tmp_path, redis_url, **extra)
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert refusal in done.stderr
    assert "openssl rand -hex 32" in done.stderr or "DLAAS_AGENT_TOKEN_FILE" in done.stderr


def test_an_agent_told_to_stops_its_learners_on_exit_before_it_exits(
    tmp_path: Path, redis_url: str
) -> None:
    """Where the agent's end is the node's (a compose container), its learners get their
    SIGTERM, and the time to checkpoint, before it goes."""
    port, token = services.free_port(), secrets.token_hex(32)
    argv = [PY, "-m", "lifecycle_manager.backends.local.node_agent", "--port", str(port)]
    argv += ["--root", "root", "--grace", "20"]
    env = _agent_env(
        tmp_path, redis_url, DLAAS_AGENT_TOKEN=token, DLAAS_AGENT_STOP_LEARNERS_ON_EXIT="true"
    )
    process = services.start_process("agent", argv, tmp_path, env=env)
    agent = Agent(f"http://127.0.0.1:{port}", tmp_path / "root", process, token)
    marker = tmp_path / "checkpointed"
    trap = f"trap 'sleep 0.5; echo done > {marker}; exit 143' TERM; while :; do sleep 0.1; done"
    try:
        services.wait_until(lambda: agent.http.get("/healthz").is_success, process, 30, "up")
        learner = put(agent, new_job(), 1, ["sh", "-c", trap]).json()
        wait_for(lambda: agent.learners()[0]["phase"] == "Running", "the learner to run")
        process.proc.send_signal(signal.SIGTERM)  # the agent alone, as a container stop does
        process.proc.wait(30)  # uvicorn ends by the signal it stopped on
        assert marker.read_text() == "done\n"
        assert gone(learner["pid"])
    finally:
        process.stop()
        agent.http.close()


def test_the_agent_closes_a_connection_that_sends_no_whole_head_in_time(
    tmp_path: Path, redis_url: str
) -> None:
    port, token = services.free_port(), secrets.token_hex(32)
    argv = [PY, "-m", "lifecycle_manager.backends.local.node_agent", "--port", str(port)]
    env = _agent_env(
        tmp_path, redis_url, DLAAS_AGENT_TOKEN=token, DLAAS_HTTP_HEADER_TIMEOUT_S="1.5"
    )
    process = services.start_process("agent", [*argv, "--root", "root"], tmp_path, env=env)
    agent = Agent(f"http://127.0.0.1:{port}", tmp_path / "root", process, token)
    try:
        services.wait_until(lambda: agent.http.get("/healthz").is_success, process, 30, "up")
        with socket.create_connection(("127.0.0.1", port), timeout=15) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            started = time.monotonic()
            with contextlib.suppress(ConnectionResetError):
                assert sock.recv(1024) == b""
            assert 1.3 <= time.monotonic() - started < 15
        assert agent.http.get("/healthz").is_success
    finally:
        process.stop()
        agent.http.close()
