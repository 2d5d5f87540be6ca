"""A training program that tries to get out of its job, with everything its environment,
filesystem and network give it, and prints what happened as one JSON line:

    {"attacker": {"<attempt>": "blocked: <why>" | "ESCAPED: <what it got>", ...}}

    python attack.py TARGETS_JSON

TARGETS_JSON names what a well-informed attacker would aim at: the platform's home and
its files, another job's id, the Redis and node agent addresses. Standard library only.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

SECRET_SETTINGS = (
    "DLAAS_REDIS_URL",
    "DLAAS_DATABASE_URL",
    "DLAAS_S3_ACCESS_KEY",
    "DLAAS_S3_SECRET_KEY",
    "DLAAS_AGENT_TOKEN",
    "DLAAS_AGENT_TOKEN_FILE",
    "DLAAS_HOME",
    "DLAAS_OBJECTS_DIR",
    "DLAAS_ADMIN_TOKEN",
    "DLAAS_JOB_TOKEN",
)


def read(path: str | Path) -> str:
    return Path(path).read_bytes()[:80].decode(errors="replace")


def ancestors() -> list[int]:
    """This process's ancestors that are not its own (the runner, the agent, ...): a shell
    between it and the runner is its own, and stopping that would only hang itself."""
    found, pid = [], os.getppid()
    while pid > 1:
        if os.stat(f"/proc/{pid}").st_uid != os.getuid():
            found.append(pid)
        stat = Path(f"/proc/{pid}/stat").read_text()
        pid = int(stat[stat.rindex(")") + 2 :].split()[1])
    return found


def redis_command(address: str, command: bytes) -> str:
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as conn:
        conn.sendall(command)
        return conn.recv(200).decode(errors="replace")


def unless_refused(answer: str) -> str | None:
    """What Redis gave, unless it asked for a password first."""
    return None if answer.startswith("-NOAUTH") else answer


def http_get(url: str, headers: dict[str, str] | None = None) -> str:
    request = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(request, timeout=5) as answer:
        return f"{answer.status} {answer.read(80)!r}"


def main() -> None:
    targets = json.loads(sys.argv[1])
    home = Path(targets["home"])
    other = targets["other_job"]
    attempts: dict[str, Callable[[], object]] = {
        "env_holds_platform_secrets": lambda: (
            [k for k in SECRET_SETTINGS if k in os.environ] or None
        ),
        "read_admin_token": lambda: read(home / "client.json"),
        "read_platform_record": lambda: read(home / "platform.json"),
        "read_agent_token": lambda: read(home / "agent-token"),
        "list_platform_home": lambda: os.listdir(home),
        "read_database": lambda: read(home / "dlaas.db"),
        "read_redis_data": lambda: os.listdir(home / "redis"),
        "read_other_jobs_log": lambda: read(
            home / "objects" / "jobs" / other / "logs" / "learner-1.log"
        ),
        "list_other_jobs_objects": lambda: os.listdir(home / "objects" / "jobs" / other),
        "overwrite_other_jobs_model": lambda: (
            home / "objects" / "jobs" / other / "model.zip"
        ).write_bytes(b"owned"),
        "delete_other_jobs_objects": lambda: os.unlink(
            home / "objects" / "jobs" / other / "model.zip"
        ),
        "read_runner_environment": lambda: [read(f"/proc/{pid}/environ") for pid in ancestors()],
        "read_runner_memory_maps": lambda: [read(f"/proc/{pid}/maps") for pid in ancestors()],
        "signal_the_runner": lambda: [os.kill(pid, signal.SIGSTOP) for pid in ancestors()],
        "list_other_jobs_working_directories": lambda: os.listdir(
            Path(os.environ["MODEL_DIR"]).parents[4]
        ),
        "read_other_learners_directory": lambda: os.listdir(targets["other_workdir"]),
        "redis_without_password": lambda: unless_refused(
            redis_command(targets["redis"], b"KEYS *\r\n")
        ),
        "push_celery_task": lambda: unless_refused(
            redis_command(targets["redis"], b"LPUSH celery x\r\n")
        ),
        "node_agent_without_token": lambda: http_get(f"{targets['agent']}/learners"),
        "node_agent_with_a_guessed_token": lambda: http_get(
            f"{targets['agent']}/learners", {"Authorization": "Bearer " + "0" * 64}
        ),
        "api_as_admin_without_token": lambda: http_get(f"{targets['api']}/v2/users/me"),
        "object_gateway_without_the_jobs_token": lambda: http_get(
            f"{targets['api']}/v2/job-objects/jobs/{other}/model.zip"
        ),
    }
    results = {}
    for name, attempt in attempts.items():
        try:
            got = attempt()
        except urllib.error.HTTPError as error:
            results[name] = f"blocked: HTTP {error.code}"
        except (OSError, KeyError, IndexError, ValueError) as error:
            results[name] = f"blocked: {type(error).__name__}: {error}"
        else:
            results[name] = "blocked: nothing there" if got is None else f"ESCAPED: {got!r}"[:300]
    # its own job still works: results and a checkpoint-sized file where they belong
    Path(os.environ["RESULT_DIR"], "own-result.txt").write_text("mine\n")
    print(json.dumps({"attacker": results, "uid": os.getuid()}), flush=True)


if __name__ == "__main__":
    main()
