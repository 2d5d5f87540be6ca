"""How a cluster backend runs the `dlaas-ps` sidecar beside a learner.

A learner spec whose environment has `DLAAS_PS_MODE` (set by `learner_specs` from the
manifest's `parameter_server` block) gets a sidecar. Both the learner and the sidecar need
the same `DLAAS_PS_DIR` (on the shared /dev/shm; on the local backend a region the node agent
makes for the learner alone, `make_region`); the sidecar also needs the learner's
`TRAINING_ID`, `LEARNER_ID`/`RANK`, `NUM_LEARNERS`, `GPU_COUNT`, the storage settings (for
its snapshots) and the way to its peers:

- local backend: `DLAAS_PS_PEERS_DIR` (a directory of the job's attempt) and
  `DLAAS_PS_LISTEN=127.0.0.1:0`;
- Kubernetes: `DLAAS_PS_PEERS` = `kubernetes_peers(...)` (the learners' names under the
  job's headless Service) and a container port `PORT`.

The command is `command(interpreter)`, `dlaas-ps` run by an absolute interpreter in
isolated mode (the local backend adds `--supervise`, restarting it as a kubelet restarts a
sidecar container); everything else comes from the environment, which the backend builds
from the learner's platform variables (never the user's environment).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from collections.abc import Mapping
from pathlib import Path

from learner_image.ps.server_config import DEFAULT_PORT

MODULE = "learner_image.ps.server"
PORT = DEFAULT_PORT
SHM = Path("/dev/shm")
SIDECAR_ENV = (
    "TRAINING_ID",
    "LEARNER_ID",
    "RANK",
    "NUM_LEARNERS",
    "GPU_COUNT",
    "DLAAS_CHECKPOINT_INTERVAL",
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "TZ",
    "TMPDIR",
    "LD_LIBRARY_PATH",
    "PYTHONUNBUFFERED",
)


def command(interpreter: str) -> list[str]:
    """`dlaas-ps` as the platform starts it: `interpreter` (absolute) in isolated mode, so no
    PYTHON* variable and nothing on the working directory decides the code it runs."""
    return [interpreter, "-I", "-m", MODULE]


def wanted(env: Mapping[str, str]) -> bool:
    return bool(env.get("DLAAS_PS_MODE"))


def learner_directory(job: str, learner: int, attempt: int) -> Path:
    """The local backend's directory for a learner's region: the node agent's own, made
    anew for the learner (`make_region`), which the learner's uid may only traverse."""
    return SHM / f"dlaas-ps-{job}-{learner}-a{attempt}"


def region_directory(job: str, learner: int, attempt: int) -> Path:
    return learner_directory(job, learner, attempt) / "region"


def kubernetes_peers(job: str, namespace: str, learners: int, port: int = PORT) -> str:
    """`DLAAS_PS_PEERS` for pods named `learner-N` under the headless Service `dlaas-JOB`."""
    return ",".join(
        f"learner-{n}.dlaas-{job}.{namespace}.svc:{port}" for n in range(1, learners + 1)
    )


def sidecar_env(learner_env: Mapping[str, str], placement: Mapping[str, str]) -> dict[str, str]:
    """The sidecar's environment: the learner's parameter-server, storage and identity
    variables, plus the backend's `placement` (region directory, peers, listen address)."""
    env = {
        key: value
        for key, value in learner_env.items()
        if key.startswith("DLAAS_") or key in SIDECAR_ENV
    }
    env.update(placement)
    return env


def local_placement(job: str, learner: int, attempt: int, peers_dir: Path) -> dict[str, str]:
    """What the local backend adds for both the learner and its sidecar."""
    return {
        "DLAAS_PS_DIR": str(region_directory(job, learner, attempt)),
        "DLAAS_PS_PEERS_DIR": str(peers_dir),
        "DLAAS_PS_LISTEN": "127.0.0.1:0",
    }


def make_region(job: str, learner: int, attempt: int, uid: int | None) -> Path:
    """Make the learner's region anew and return it: its `learner_directory` this process's
    own (0711), created exclusively once whatever was at that path is gone (a leftover, or
    a directory someone made there for the learner to adopt), and in it the region (0700),
    `uid`'s when the program has a uid of its own. Raises OSError if that cannot be had."""
    home = learner_directory(job, learner, attempt)
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISDIR(home.lstat().st_mode):
            shutil.rmtree(home)
        else:
            home.unlink()
    home.mkdir(mode=0o711)  # FileExistsError if someone made it again in between
    info = home.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        raise PermissionError(f"{home} is not this node agent's own directory")
    home.chmod(0o711)
    region = home / "region"
    region.mkdir(mode=0o700)
    if uid is not None:
        os.chown(region, uid, uid, follow_symlinks=False)
    return region
