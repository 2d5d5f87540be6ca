"""What a hostile job tries on a node of the embedded platform, in one mode of isolation (as a
new user starts it, or with `DLAAS_AGENT_ISOLATION=on`), with another user's job running
beside it: the attacker job's ways out (tests/e2e/attacker_job: the platform's home, tokens,
database and Redis, the runner's environment and signals, other jobs' files and objects, the
node agent and the API without credentials), the sandbox probe's (another job's runner log,
other uids' /proc, what an earlier job of another user left in /tmp, /var/tmp and /dev/shm
under the uid the probe now holds, another job's service on loopback) and the environment
attack's (tests/e2e/environment_attacks.py: the manifest's `environment` aimed at the
platform's own processes). Each attempt ends "blocked: ..." or "ESCAPED: ..."; the jobs of
the attackers must still complete.
"""

from __future__ import annotations

import secrets
import sys
from dataclasses import dataclass
from pathlib import Path

from cli import embedded
from tests.browser.jobs import STEADY_JOB
from tests.e2e import environment_attacks
from tests.e2e.isolated_jobs import attack, probe, report, submit, wait_gone, wait_state
from tests.platform import Platform

PYTHON = sys.executable  # dlaas's own, which the node must show the programs' uids


@dataclass
class NodeRun:
    mode: str
    isolation: str  # what `dlaas up` says of its jobs (`jobs:`)
    results: dict[str, str]
    uid_reused: bool  # the finder held the uid the planter had: the case the attempt is for
    own_environment_reached: bool


def _probe_results(platform: Platform, directory: Path, victim: str) -> tuple[dict[str, str], bool]:
    results: dict[str, str] = {}
    [learner] = platform.learners(victim)
    runner_log = Path(learner["workdir"]) / "runner.log"
    reader = platform.create_user(f"reader-{secrets.token_hex(3)}")
    looked = {"read": [str(runner_log)], "proc": True}
    results |= report(platform, reader, probe(platform, reader, directory, looked, python=PYTHON))[
        "probe"
    ]
    # The planter gets the lowest free uid, and so, once it is gone, the finder.
    for job in {str(item["job"]) for item in platform.learners()} - {victim}:
        wait_gone(platform, job)
    secret = {"name": f"dlaas-left-{secrets.token_hex(4)}", "text": "the first team's secret"}
    first = platform.create_user(f"planter-{secrets.token_hex(3)}")
    planter = probe(platform, first, directory, {"plant": secret}, python=PYTHON)
    planted = report(platform, first, planter)
    wait_state(platform, first, planter, ("COMPLETED",))
    wait_gone(platform, planter)
    second = platform.create_user(f"finder-{secrets.token_hex(3)}")
    found = report(
        platform, second, probe(platform, second, directory, {"find": secret}, python=PYTHON)
    )
    results |= {f"under a reused uid, {name}": got for name, got in found["probe"].items()}
    owner = platform.create_user(f"server-{secrets.token_hex(3)}")
    serving = probe(platform, owner, directory, {"listen": True, "hold": 300}, python=PYTHON)
    port = report(platform, owner, serving)["listening"]
    caller = platform.create_user(f"caller-{secrets.token_hex(3)}")
    connect = {"connect": [f"127.0.0.1:{port}"]}
    results |= report(platform, caller, probe(platform, caller, directory, connect, python=PYTHON))[
        "probe"
    ]
    platform.dlaas("delete", serving, "--token", owner.token)
    return results, found["uid"] == planted["uid"]


def node_escapes(work: Path, mode: str, settings: dict[str, str]) -> NodeRun:
    """Start a platform in `work` with `settings` (nothing else a new user would not set),
    try every attempt, stop it."""
    platform = Platform.up(work / "home", settings, as_a_new_user=True)
    try:
        isolation = embedded.job_isolation(platform.record())
        print(f"[{mode}] jobs: {isolation}", flush=True)
        results: dict[str, str] = {}
        owner = platform.create_user(f"victim-{secrets.token_hex(3)}")
        steady = f"{PYTHON} train.py --steps 100000 --step-s 0.2"
        victim = submit(platform, owner, work, steady, STEADY_JOB)
        wait_state(platform, owner, victim, ("RUNNING",))
        attacker = platform.create_user(f"attacker-{secrets.token_hex(3)}")
        _job, line = attack(platform, attacker, work, victim, python=PYTHON)
        results |= {f"attacker: {name}": got for name, got in line["attacker"].items()}
        print(f"[{mode}] attacker job: {len(line['attacker'])} attempts", flush=True)
        probed, uid_reused = _probe_results(platform, work, victim)
        results |= {f"probe: {name}": got for name, got in probed.items()}
        print(f"[{mode}] probe jobs: {len(probed)} attempts", flush=True)
        outcome = environment_attacks.run(platform, work)
        results |= {f"environment: {name}": got for name, got in outcome.results.items()}
        print(f"[{mode}] environment attack: {len(outcome.results)} attempts", flush=True)
        platform.dlaas("delete", victim, "--token", owner.token)
        return NodeRun(mode, isolation, results, uid_reused, outcome.own_environment_reached)
    finally:
        platform.down()
