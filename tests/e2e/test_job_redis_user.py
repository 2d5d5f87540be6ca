"""A job's Redis credentials reach only its own job, whoever holds them: taken from a running
learner's runner, they append to and read the job's own streams and heartbeats and nothing
else; an event sent for another job counts for its own; they stop working once the job ends."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
import redis

from storage import streams
from tests.browser.jobs import submit_steady
from tests.platform import Platform

pytestmark = pytest.mark.e2e

REVOKED_WITHIN_S = 5.0


def _runner_redis_url(platform: Platform, job_id: str) -> str:
    """The Redis URL in the job's runner's environment, as its learner's program could find
    it where programs share the runner's uid."""
    [learner] = platform.learners(job_id)
    environ = Path(f"/proc/{learner['pid']}/environ").read_bytes().split(b"\0")
    env = dict(item.decode().split("=", 1) for item in environ if b"=" in item)
    return env["DLAAS_REDIS_URL"]


def _eventually(what: str, check: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen in {timeout} s")
        time.sleep(0.05)


def _refused(url: str) -> bool:
    client = redis.Redis.from_url(url, socket_timeout=5)
    try:
        client.ping()
    except redis.AuthenticationError:
        return True
    finally:
        client.close()
    return False


def _state(platform: Platform, token: str, job: str) -> str:
    with platform.client(token) as api:
        return str(api.get_job(job)["state"])


@dataclass
class Jobs:
    platform: Platform
    victim: str
    own: str
    client: redis.Redis  # signed in with the credentials of `own`'s runner
    tokens: dict[str, str]  # job -> its owner's API token

    def state(self, job: str) -> str:
        return _state(self.platform, self.tokens[job], job)

    def events(self, job: str) -> list[dict[str, Any]]:
        with self.platform.client(self.tokens[job]) as api:
            return list(api.job_events(job))


@pytest.fixture
def jobs(platform: Platform, tmp_path: Path) -> Iterator[Jobs]:
    """Two running jobs of two users, and a client signed in with the second one's Redis
    credentials."""
    tokens = {}
    for name in ("victim", "holder"):
        owner = platform.create_user(f"{name}-{secrets.token_hex(3)}")
        job = submit_steady(platform, tmp_path, name, token=owner.token, steps=10**5, step_s=0.2)
        tokens[job] = owner.token
    victim, own = tokens
    client = None
    try:
        for job, token in tokens.items():
            _eventually(
                f"{job} RUNNING",
                lambda job=job, token=token: _state(platform, token, job) == "RUNNING",
                120,
            )
        client = redis.Redis.from_url(_runner_redis_url(platform, own), socket_timeout=5)
        running = Jobs(platform, victim, own, client, tokens)
        yield running
    finally:
        if client is not None:
            client.close()
        for job, token in tokens.items():
            platform.dlaas("delete", job, "--token", token, check=False)


def test_a_jobs_redis_credentials_reach_only_its_own_keys(platform: Platform, jobs: Jobs) -> None:
    victim, own, client = jobs.victim, jobs.own, jobs.client
    url = urlsplit(_runner_redis_url(platform, own))
    assert unquote(url.username or "") == f"dlaas-job-{own}"
    platform_password = urlsplit(platform.record().redis_url).password
    assert platform_password and platform_password not in url.geturl()

    # its own job's keys: append and read
    assert client.hset(streams.heartbeats_key(own), "7", "1.0") == 1
    assert client.xadd(streams.logs_key(own), {"probe": "1"})
    assert client.xrange(streams.logs_key(own), count=1)

    denied: dict[str, Callable[[], Any]] = {
        "forge an event in the shared stream": lambda: client.xadd(
            streams.LEARNER_EVENTS, {"job": victim, "learner": "1", "attempt": "1"}
        ),
        "write the other job's events": lambda: client.xadd(
            streams.events_key(victim), {"kind": "exit"}
        ),
        "read the other job's log": lambda: client.xrange(streams.logs_key(victim)),
        "fake the other job's heartbeat": lambda: client.hset(
            streams.heartbeats_key(victim), "1", "0"
        ),
        "queue a Celery task": lambda: client.lpush("celery", "x"),
        "list keys": lambda: client.keys("*"),
        "read the configuration": lambda: client.config_get("requirepass"),
        "list users": lambda: client.acl_list(),
        "flush everything": lambda: client.flushall(),
        "run a script": lambda: client.eval("return redis.call('lpush', 'celery', 'x')", 0),
        "publish": lambda: client.publish("celery", "x"),
        "delete its own log": lambda: client.delete(streams.logs_key(own)),
    }
    allowed = {}
    for what, attempt in denied.items():
        try:
            attempt()
        except redis.exceptions.NoPermissionError:
            continue
        allowed[what] = "done"
    assert not allowed, allowed

    token = unquote(url.password or "")
    for user in ("default", f"dlaas-job-{victim}"):
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(url.hostname or "", url.port or 0, username=user, password=token).ping()


def test_an_event_sent_for_another_job_counts_for_the_senders_own(
    platform: Platform, jobs: Jobs
) -> None:
    victim, own, client = jobs.victim, jobs.own, jobs.client
    probe = secrets.token_hex(8)
    forged = {"job": victim, "learner": "1", "attempt": "1", "kind": "exit", "t": "0"}
    client.xadd(streams.events_key(own), {**forged, "exit_code": "1", "probe": probe})
    shared = redis.Redis.from_url(platform.record().redis_url)
    try:

        def relayed() -> list[dict[bytes, bytes]]:
            entries = shared.xrevrange(streams.LEARNER_EVENTS, count=500)
            return [fields for _, fields in entries if fields.get(b"probe") == probe.encode()]

        _eventually("the event relayed", lambda: bool(relayed()))
        [fields] = relayed()
        assert fields[b"job"] == own.encode()
    finally:
        shared.close()
    assert jobs.state(victim) == "RUNNING"
    assert not [event for event in jobs.events(victim) if "exit" in str(event)]


def test_the_credentials_stop_working_when_the_job_ends(platform: Platform, jobs: Jobs) -> None:
    own, client = jobs.own, jobs.client
    url = _runner_redis_url(platform, own)
    assert client.ping()
    platform.dlaas("halt", own, "--token", jobs.tokens[own])
    _eventually("HALTED", lambda: jobs.state(own) == "HALTED", 60)
    halted = time.monotonic()
    _eventually("the job's Redis user revoked", lambda: _refused(url), REVOKED_WITHIN_S)
    assert time.monotonic() - halted < REVOKED_WITHIN_S
    # the connection it held was closed: a new one is refused the same way
    with pytest.raises(redis.AuthenticationError):
        client.ping()
