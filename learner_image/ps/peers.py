"""Where the other sidecars of a job are: a fixed list, or a directory on one machine.

On Kubernetes the list is the learners' names under the job's headless Service
(`learner-N.dlaas-JOB.NS.svc:PORT`, resolved again at every dial). The local backend gives
its sidecars a directory instead: each one listens on a free port and leaves
`rank-R` (`host:port`) there, and its peers read the file again whenever they dial, so a
sidecar that restarts on another port is found.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from learner_image.ps.server_config import ServerConfig


def parse_address(text: str) -> tuple[str, int]:
    host, _, port = text.strip().rpartition(":")
    return host, int(port)


def publish(peers_dir: Path, rank: int, address: tuple[str, int]) -> None:
    peers_dir.mkdir(parents=True, exist_ok=True)
    temp = peers_dir / f".rank-{rank}.{os.getpid()}.tmp"
    temp.write_text(f"{address[0]}:{address[1]}\n")
    os.replace(temp, peers_dir / f"rank-{rank}")


def resolver(config: ServerConfig, peer: int) -> Callable[[], tuple[str, int]]:
    """A function giving the peer's current address (raising OSError until it is known)."""
    if config.peers:
        fixed = parse_address(config.peers[peer])
        return lambda: fixed
    peers_dir = config.peers_dir
    if peers_dir is None:
        raise ValueError("no --peers and no --peers-dir: the other sidecars cannot be found")

    def from_directory() -> tuple[str, int]:
        try:
            return parse_address((peers_dir / f"rank-{peer}").read_text())
        except (FileNotFoundError, ValueError) as error:
            raise OSError(f"peer {peer} has not published its address yet") from error

    return from_directory
