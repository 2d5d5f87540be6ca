"""`dlaas-ps` configuration: command-line flags, each falling back to the environment.

    dlaas-ps [--dir DIR] [--slots N] [--mode async|sync|bounded] [--staleness S]
             [--threads T] [--snapshot-interval S] [--snapshot-dir DIR]
             [--rank R] [--world W] [--listen HOST:PORT]
             [--peers H:P,H:P,... | --peers-dir DIR] [--peer-timeout S] [--job JOB]
             [--supervise]

Flag, environment, default:
- `--dir` (or `--region`), `DLAAS_PS_DIR`: `/dev/shm/dlaas-ps-$TRAINING_ID-$LEARNER_ID`
- `--slots`, `DLAAS_PS_SLOTS`: `GPU_COUNT`, at least 1 (one learner per GPU)
- `--mode`, `--staleness`, `DLAAS_PS_MODE`, `DLAAS_PS_STALENESS`: async, with the bound of
  `layout.default_staleness`
- `--threads`, `DLAAS_PS_THREADS`: every core the process may use
- `--snapshot-interval`, `DLAAS_PS_SNAPSHOT_INTERVAL` else `DLAAS_CHECKPOINT_INTERVAL`: 30 s;
  0 = never
- `--snapshot-dir`, `DLAAS_PS_SNAPSHOT_DIR`: none; snapshots go to the object store the
  `DLAAS_*` storage settings name
- `--rank`, `--world`, `RANK` (else `LEARNER_ID` - 1), `NUM_LEARNERS`: 0, 1 (one sidecar)
- `--listen`, `DLAAS_PS_LISTEN`: `0.0.0.0:7070` (port 0 = any free one, with `--peers-dir`)
- `--peers`, `DLAAS_PS_PEERS`: every sidecar's address in rank order (on Kubernetes, the
  learners' names under the job's headless Service, `learner-N.dlaas-JOB.NS.svc:7070`)
- `--peers-dir`, `DLAAS_PS_PEERS_DIR`: a directory where sidecars on one machine leave
  their address (the local backend's)
- `--peer-timeout`, `DLAAS_PS_PEER_TIMEOUT`: 300 s; how long a sidecar waits for a peer
  sidecar (for the initial weights at the first start; in sync mode, for the peer's part
  of each round, its learners' step included; in every mode, for a peer it cannot dial to
  come back) before it fails, naming the peer
- `--job`, `TRAINING_ID`: names the snapshots in the object store

`DLAAS_JOB_TOKEN` (no flag: a secret stays off command lines) keys the greetings between
the job's sidecars (`transport.job_tag`); every sidecar of a job must have the same.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from learner_image.ps.layout import Mode, default_staleness

DEFAULT_PORT = 7070
DEFAULT_SNAPSHOT_INTERVAL_S = 30.0
DEFAULT_PEER_TIMEOUT_S = 300.0
SECRET_ENV = "DLAAS_JOB_TOKEN"


@dataclass(frozen=True)
class ServerConfig:
    directory: Path
    slots: int
    mode: Mode
    staleness: int
    threads: int
    snapshot_interval_s: float
    snapshot_dir: Path | None
    job: str
    rank: int
    world: int
    listen: tuple[str, int]
    peers: tuple[str, ...] = ()
    peers_dir: Path | None = None
    supervise: bool = False
    peer_timeout_s: float = DEFAULT_PEER_TIMEOUT_S
    # What the job's sidecars key their greetings with (`transport.job_tag`): its token.
    secret: str = field(default="", repr=False)

    @property
    def distributed(self) -> bool:
        return self.world > 1


def default_directory(environ: Mapping[str, str]) -> Path:
    job = environ.get("TRAINING_ID", "local") or "local"
    learner = environ.get("LEARNER_ID", "1") or "1"
    return Path("/dev/shm") / f"dlaas-ps-{job}-{learner}"


def _address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: give HOST:PORT, e.g. 0.0.0.0:7070")
    return host or "0.0.0.0", int(port)


def parse_config(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> ServerConfig:
    e = os.environ if environ is None else environ
    p = argparse.ArgumentParser(prog="dlaas-ps", description="dlaas parameter-server sidecar")
    p.add_argument(
        "--dir", "--region", type=Path, default=e.get("DLAAS_PS_DIR") or default_directory(e)
    )
    p.add_argument("--job", default=e.get("TRAINING_ID") or "local")
    gpus = int(e.get("GPU_COUNT", "0") or 0)
    p.add_argument("--slots", type=int, default=int(e.get("DLAAS_PS_SLOTS") or max(1, gpus)))
    p.add_argument(
        "--mode", choices=[m.value for m in Mode], default=e.get("DLAAS_PS_MODE") or "async"
    )
    staleness = e.get("DLAAS_PS_STALENESS")
    p.add_argument("--staleness", type=int, default=int(staleness) if staleness else None)
    p.add_argument(
        "--threads",
        type=int,
        default=int(e.get("DLAAS_PS_THREADS") or len(os.sched_getaffinity(0))),
    )
    interval = e.get("DLAAS_PS_SNAPSHOT_INTERVAL") or e.get("DLAAS_CHECKPOINT_INTERVAL")
    p.add_argument(
        "--snapshot-interval",
        type=float,
        default=float(interval) if interval else DEFAULT_SNAPSHOT_INTERVAL_S,
    )
    snapshot_dir = e.get("DLAAS_PS_SNAPSHOT_DIR")
    p.add_argument(
        "--snapshot-dir", type=Path, default=Path(snapshot_dir) if snapshot_dir else None
    )
    learner = int(e.get("LEARNER_ID", "1") or 1)
    p.add_argument("--rank", type=int, default=int(e.get("RANK") or learner - 1))
    p.add_argument("--world", type=int, default=int(e.get("NUM_LEARNERS") or 1))
    p.add_argument(
        "--listen",
        type=_address,
        default=_address(e.get("DLAAS_PS_LISTEN") or f"0.0.0.0:{DEFAULT_PORT}"),
    )
    p.add_argument("--peers", default=e.get("DLAAS_PS_PEERS", ""))
    peers_dir = e.get("DLAAS_PS_PEERS_DIR")
    p.add_argument("--peers-dir", type=Path, default=Path(peers_dir) if peers_dir else None)
    peer_timeout = e.get("DLAAS_PS_PEER_TIMEOUT")
    p.add_argument(
        "--peer-timeout",
        type=float,
        default=float(peer_timeout) if peer_timeout else DEFAULT_PEER_TIMEOUT_S,
    )
    p.add_argument("--supervise", action="store_true", help="restart the server if it dies")
    a = p.parse_args(list(argv))
    mode = Mode(a.mode)
    if a.slots < 1:
        p.error("--slots must be at least 1")
    if a.world < 1 or not 0 <= a.rank < a.world:
        p.error(f"--rank {a.rank} must be in [0, --world {a.world})")
    if mode is Mode.BOUNDED and a.staleness is None:
        p.error("--mode bounded needs --staleness (how many steps a learner may run ahead)")
    if a.staleness is not None and a.staleness < 0:
        p.error("--staleness must be 0 or more")
    if mode is Mode.SYNC and a.staleness:
        p.error("--mode sync has no staleness: every step waits for every learner")
    peers = tuple(x.strip() for x in a.peers.split(",") if x.strip())
    if peers and len(peers) != a.world:
        p.error(f"--peers lists {len(peers)} addresses for --world {a.world}")
    if a.peer_timeout <= 0:
        p.error("--peer-timeout must be more than 0 seconds")
    if a.world > 1 and not (peers or a.peers_dir):
        p.error("--world > 1 needs --peers or --peers-dir to find the other sidecars")
    staleness_bound = (
        a.staleness if a.staleness is not None else default_staleness(mode, a.slots * a.world)
    )
    return ServerConfig(
        directory=a.dir,
        slots=a.slots,
        mode=mode,
        staleness=staleness_bound,
        threads=max(1, a.threads),
        snapshot_interval_s=max(0.0, a.snapshot_interval),
        snapshot_dir=a.snapshot_dir,
        job=a.job,
        rank=a.rank,
        world=a.world,
        listen=a.listen,
        peers=peers,
        peers_dir=a.peers_dir,
        supervise=a.supervise,
        peer_timeout_s=a.peer_timeout,
        secret=e.get(SECRET_ENV, ""),
    )
