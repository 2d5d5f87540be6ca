"""The environment attack (tests/e2e/environment_attack_job) on a running embedded platform:
a manifest's `environment` points the platform's own processes (the runner the node agent
starts as root, its helpers) at code of the job's: in its archive, or planted in /tmp,
/var/tmp and /dev/shm by an earlier job of another user. Each payload leaves a marker in a
root-only directory when a process of the platform runs it; an attempt whose marker never
appears is blocked. Names reserved for dlaas (`DLAAS_PROGRAM_UID=0`) must be refused at
submission. Used by bench/isolation.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests.e2e.isolated_jobs import manifest, report, wait_state
from tests.platform import Platform, User

JOB = Path(__file__).with_name("environment_attack_job")
PLANTED = {
    "tmp": "/tmp/dlaas-plant",
    "var-tmp": "/var/tmp/dlaas-plant",
    "shm": "/dev/shm/dlaas-plant",
}
# The runner's working directory is its learner's; the program's model directory is in it.
FROM_RUNNER = "program/model"
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
FAKE_PROGRAMS = ("dlaas-learner", "python", "python3", "sh")


def _environments(preload: bool) -> dict[str, dict[str, str]]:
    """Each attack job's `environment`, by the place its payloads are in."""
    archive = {
        "PYTHONPATH": f".:{FROM_RUNNER}:model",
        "PYTHONUSERBASE": f"{FROM_RUNNER}/userbase",
        "PATH": f"bin:{FROM_RUNNER}/bin:model/bin:{SYSTEM_PATH}",
        "BASH_ENV": f"{FROM_RUNNER}/bash_env.sh",
    }
    tmp = {"PYTHONPATH": PLANTED["tmp"], "PATH": f"{PLANTED['tmp']}/bin:{SYSTEM_PATH}"}
    if preload:
        archive["LD_PRELOAD"] = f"{FROM_RUNNER}/preload.so"
        tmp["LD_PRELOAD"] = f"{PLANTED['tmp']}/preload.so"
    return {
        "archive": archive,
        "tmp": tmp,
        "var-tmp": {"PYTHONPATH": PLANTED["var-tmp"]},
        "shm": {"PYTHONPATH": PLANTED["shm"]},
    }


def _attempts(preload: bool) -> dict[str, str]:
    """Each attempt, by the marker its payload leaves where it runs in the platform."""
    attempts = {
        "PYTHONPATH to a sitecustomize.py in the job's archive": "sitecustomize-archive",
        "PYTHONUSERBASE to a usercustomize.py in the job's archive": "usercustomize-archive",
        "BASH_ENV to a script in the job's archive": "bash-env-archive",
        **{
            f"PATH to a {name} in the job's archive": f"path-{name}-archive"
            for name in FAKE_PROGRAMS
        },
        "PATH to a dlaas-learner an earlier job planted in /tmp": "path-dlaas-learner-tmp",
        **{
            f"PYTHONPATH to a sitecustomize.py an earlier job planted in {PLANTED[place]}": (
                f"sitecustomize-{place}"
            )
            for place in PLANTED
        },
    }
    if preload:
        attempts["LD_PRELOAD of a library in the job's archive"] = "preload-archive"
        attempts["LD_PRELOAD of a library an earlier job planted in /tmp"] = "preload-tmp"
    return attempts


# What dlaas tells the runner, set in the manifest: refused at submission.
RESERVED = {
    "the manifest sets DLAAS_PROGRAM_UID=0 (run the program as root)": {"DLAAS_PROGRAM_UID": "0"},
    "the manifest sets DLAAS_PROGRAM_MOUNTS (no namespace of its own)": {
        "DLAAS_PROGRAM_MOUNTS": "none"
    },
}


def build(directory: Path, markers: Path) -> tuple[Path, bool]:
    """The attack job's model directory, its payloads naming `markers`; and whether it
    holds a preload library (it needs a C compiler)."""
    model = directory / "environment-attack"
    model.mkdir(parents=True)
    shutil.copy(JOB / "attack.py", model)
    payload = (JOB / "payload.py").read_text().replace("@MARKERS@", str(markers))
    (model / "sitecustomize.py").write_text(payload)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    user_site = model / "userbase" / "lib" / version / "site-packages"
    user_site.mkdir(parents=True)
    (user_site / "usercustomize.py").write_text(payload)
    real = {
        "dlaas-learner": str(Path(sys.executable).with_name("dlaas-learner")),
        "python": sys.executable,
        "python3": sys.executable,
        "sh": "/bin/sh",
    }
    (model / "bin").mkdir()
    script = (JOB / "payload.sh").read_text().replace("@MARKERS@", str(markers))
    for name in FAKE_PROGRAMS:
        fake = model / "bin" / name
        fake.write_text(script.replace("@NAME@", name).replace("@REAL@", real[name]))
        fake.chmod(0o755)
    bash_env = (JOB / "bash_env.sh").read_text().replace("@MARKERS@", str(markers))
    (model / "bash_env.sh").write_text(bash_env)
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        return model, False
    source = model / "preload.c"
    source.write_text((JOB / "preload.c").read_text().replace("@MARKERS@", str(markers)))
    built = subprocess.run(
        [compiler, "-shared", "-fPIC", "-o", str(model / "preload.so"), str(source)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    source.unlink()
    return model, built.returncode == 0


def _submit(
    platform: Platform, user: User, directory: Path, model: Path, mode: str, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    command = f"{sys.executable} attack.py {mode}"
    path = manifest(directory, f"environment-{mode}", command)
    if env:
        with path.open("a") as out:
            out.write(f"environment: {json.dumps(env)}\n")
    return platform.dlaas("train", str(path), str(model), "--token", user.token, check=False)


@dataclass
class Outcome:
    results: dict[str, str]  # attempt: "blocked: ..." or "ESCAPED: ..."
    own_environment_reached: bool  # the program itself got its PYTHONPATH


def run(platform: Platform, directory: Path) -> Outcome:
    """Plant, attack, and read the markers."""
    markers = Path(tempfile.mkdtemp(prefix="dlaas-escape-markers-"))  # root's, 0700
    try:
        model, preload = build(directory, markers)
        planter = platform.create_user("environment-planter")
        planting = _submit(platform, planter, directory, model, "plant", {})
        planted = planting.stdout.strip()
        assert planting.returncode == 0, planting.stderr
        report(platform, planter, planted, "environment_attack")
        wait_state(platform, planter, planted, ("COMPLETED",))
        attacker = platform.create_user("environment-attacker")
        results: dict[str, str] = {}
        for attempt, env in RESERVED.items():
            answer = _submit(platform, attacker, directory, model, "report", env)
            refused = answer.returncode != 0
            results[attempt] = (
                f"blocked: refused: {answer.stderr.strip()[:200]}"
                if refused
                else f"ESCAPED: accepted as {answer.stdout.strip()}"
            )
        jobs = {}
        for place, env in _environments(preload).items():
            submitted = _submit(platform, attacker, directory, model, "report", env)
            assert submitted.returncode == 0, submitted.stderr
            jobs[place] = submitted.stdout.strip()
        reports = {
            place: report(platform, attacker, job, "environment_attack")
            for place, job in jobs.items()
        }
        for job in jobs.values():
            wait_state(platform, attacker, job, ("COMPLETED",))
        left = {path.name: path.read_text()[:200] for path in markers.iterdir()}
        for attempt, label in _attempts(preload).items():
            found = [text for name, text in left.items() if name.startswith(label + "-")]
            results[attempt] = f"ESCAPED: {found[0]}" if found else "blocked: never ran"
        loaded = reports["archive"]["environment_attack"]["loaded"]["sitecustomize"] or ""
        return Outcome(results, loaded.endswith("sitecustomize.py"))
    finally:
        shutil.rmtree(markers, ignore_errors=True)
