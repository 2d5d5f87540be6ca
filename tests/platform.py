"""The embedded platform, started the way a user starts it: `dlaas up --detach`.

Shared by the end-to-end, chaos and browser tests (each folder's conftest makes it a session
fixture of its own). `Platform.dlaas` runs the CLI as a user would; the polling helpers
(`show`, `wait_for`) use the CLI's client library in-process, which asks the same API without
a process per poll. `url` and `token` are the API's address and the admin token `dlaas up`
saved in the home's client.json; `create_user` adds another user (with a token of its own)
through `POST /v2/users`. `learners` lists what the node agent runs;
`stop_service`/`start_service` crash, stop and start one service of the platform (its pids
and addresses are re-read from `platform.json` each time, since a restart changes them).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from cli import embedded
from cli.client import DlaasClient, DlaasConnectionError
from tests.services import free_ports

DLAAS = str(Path(sys.executable).with_name("dlaas"))

# Most tests are of the platform's mechanics (its programs' files and logs where the agent
# keeps them for its own user): their jobs run as the node agent's user, and users' jobs are
# accepted so. Isolation has tests of its own (tests/e2e/test_job_isolation.py and
# test_job_sandbox.py with DLAAS_AGENT_ISOLATION=on, test_default_isolation.py as a new user).
JOBS_AS_THE_AGENTS_USER = {"DLAAS_AGENT_ISOLATION": "off", "DLAAS_ALLOW_SHARED_NODES": "1"}
# Each platform's program uids: PROGRAM_UIDS of them from PROGRAM_UIDS_FROM + its API port
# times PROGRAM_UIDS (below 2**32 for every port).
PROGRAM_UIDS_FROM, PROGRAM_UIDS = 100_000_000, 1000

Shown = dict[str, Any]  # {"job": {...}, "events": [...]}, as `dlaas show --output json` prints


@dataclass(frozen=True)
class User:
    """A user of the platform and the bearer token that acts as them."""

    name: str
    token: str
    admin: bool = False


@dataclass
class Platform:
    home: Path
    env: dict[str, str]
    # `dlaas up`'s port options: free ports of this platform's own, never the defaults, which
    # another platform of the run (another xdist worker's) may hold or be about to take
    ports: tuple[str, ...] = ()

    @classmethod
    def up(
        cls, home: Path, settings: Mapping[str, str] | None = None, *, as_a_new_user: bool = False
    ) -> Platform:
        """`dlaas up --detach` with its state in `home`, on free ports, and none of this
        process's `DLAAS_*` settings; stop it with `down`. Its rate limits are off: the
        burst test polls a hundred jobs from one token five times a second, far past what a
        token may (the limits have tests of their own, tests/integration/test_api_limits.py).
        Its jobs run as the node agent's user unless `settings` say otherwise, or unless
        `as_a_new_user`, which keeps the isolation a new user gets."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("DLAAS_")}
        env["DLAAS_HOME"] = str(home)
        env["DLAAS_RATE_LIMIT_PER_S"] = env["DLAAS_ADDRESS_RATE_LIMIT_PER_S"] = "0"
        env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
        if not as_a_new_user:
            env.update(JOBS_AS_THE_AGENTS_USER)
        env.update(settings or {})
        api, agent, redis = free_ports(3)
        # The run's platforms share this machine, and a node agent that frees a program uid
        # kills that uid's processes and removes its files: each gets uids of its own (its API
        # port picks them), or one platform's agent kills another's learners.
        env.setdefault("DLAAS_AGENT_PROGRAM_UID_BASE", str(PROGRAM_UIDS_FROM + api * PROGRAM_UIDS))
        env.setdefault("DLAAS_AGENT_PROGRAM_UIDS", str(PROGRAM_UIDS))
        ports = ("--port", str(api), "--agent-port", str(agent), "--redis-port", str(redis))
        running = cls(home=home, env=env, ports=ports)
        running.up_again()
        return running

    def up_again(self) -> None:
        """`dlaas up --detach` on the ports it had (after `down`, or to start what stopped)."""
        self.dlaas("up", "--detach", *self.ports, timeout=120)

    def down(self) -> None:
        self.dlaas("down", check=False, timeout=60)

    def dlaas(
        self, *args: str, timeout: float = 180, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        # Under the usual umask, with which a file written without a mode would be 0644.
        result = subprocess.run(
            [DLAAS, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            umask=0o022,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"dlaas {' '.join(args)} exited {result.returncode}\n"
                f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}\n{self.service_logs()}"
            )
        return result

    def follow(self, job_id: str) -> subprocess.Popen[str]:
        """`dlaas logs JOB --follow` running in the background, its output piped."""
        return subprocess.Popen(
            [DLAAS, "logs", job_id, "--follow"],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def json(self, *args: str, timeout: float = 180) -> object:
        return json.loads(self.dlaas(*args, "--output", "json", timeout=timeout).stdout)

    def service_logs(self) -> str:
        logs = []
        for path in sorted((self.home / "logs").glob("*.log")):
            logs.append(f"--- {path.name} ---\n{path.read_text(errors='replace')[-3000:]}")
        return "\n".join(logs)

    # -- jobs ----------------------------------------------------------------------------

    def submit(self, manifest: Path, model: Path) -> str:
        """`dlaas train MANIFEST MODEL`; the new job's id."""
        return self.dlaas("train", str(manifest), str(model)).stdout.strip()

    def client(self, token: str | None = None) -> DlaasClient:
        """The CLI's client on this platform, as the admin or as the owner of `token`."""
        return DlaasClient(self.url, token or self.token)

    # -- the API and its users -----------------------------------------------------------

    def _client_config(self) -> dict[str, str]:
        return dict(json.loads((self.home / "client.json").read_text()))

    @property
    def url(self) -> str:
        """The API's base URL (`http://127.0.0.1:PORT`), as `dlaas up` saved it."""
        return self._client_config()["url"].rstrip("/")

    @property
    def token(self) -> str:
        """The admin's bearer token, as `dlaas up` saved it."""
        return self._client_config()["token"]

    def create_user(self, name: str, *, admin: bool = False) -> User:
        """A new user made by the admin through `POST /v2/users`; its token is its own."""
        answer = httpx.post(
            f"{self.url}/v2/users",
            json={"name": name, "admin": admin},
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=30,
        )
        if answer.status_code != 201:
            raise AssertionError(f"POST /v2/users {name!r}: {answer.status_code} {answer.text}")
        created = answer.json()
        return User(name=created["name"], token=created["token"], admin=created["admin"])

    def show(self, job_id: str) -> Shown:
        with self.client() as client:
            return {"job": client.get_job(job_id), "events": client.job_events(job_id)}

    def wait_for(
        self,
        job_id: str,
        what: str,
        check: Callable[[Shown], bool],
        timeout: float,
        poll_s: float = 0.25,
    ) -> Shown:
        """Poll the job (and its events) until `check` holds; fail with what was seen."""
        deadline = time.monotonic() + timeout
        shown: Shown = {}
        while time.monotonic() < deadline:
            try:
                shown = self.show(job_id)
            except (httpx.HTTPError, OSError, DlaasConnectionError) as error:  # restarting
                shown = {"error": repr(error)}
            else:
                if check(shown):
                    return shown
            time.sleep(poll_s)
        raise AssertionError(
            f"{what} did not happen in {timeout} s: {shown}\n{self.service_logs()}"
        )

    # -- the machine ---------------------------------------------------------------------

    def record(self) -> embedded.Platform:
        """The platform's record as `dlaas up` (or the last service restart) left it."""
        record = embedded.Platform.load(self.home)
        assert record is not None, f"no platform.json in {self.home}"
        return record

    def learners(self, job_id: str | None = None) -> list[dict[str, Any]]:
        """What the node agent runs (each with the runner's `pid`), optionally of one job."""
        params = {"job": job_id} if job_id else {}
        record = self.record()
        answer = httpx.get(
            f"{record.agent_url}/learners",
            params=params,
            headers=record.agent_headers(),
            timeout=10,
        )
        answer.raise_for_status()
        return list(answer.json()["learners"])

    def stop_service(self, name: str, *, kill: bool = False) -> None:
        embedded.stop_service(self.home, name, kill=kill)

    def start_service(self, name: str) -> int:
        return embedded.start_service(self.home, name, environ=self.env)
