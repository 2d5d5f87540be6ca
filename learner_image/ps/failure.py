"""A region that serves its learners no more, and why: they fail with the reason.

A sidecar of a multi-pod job that restarts while its peers run on cannot rejoin them: its
weights are behind theirs, and a replica restored from a snapshot is older still. So it
does not serve; it records why in the region (`failed`, then the server word `S_FAILED`)
and wakes the learners, whose next wait raises `ServerFailed`: the learner process exits
non-zero and the platform restarts the job as a gang, every rank from the one agreed
snapshot (`learner_image.ps.restore`). A sidecar whose peer restarted or vanished records
the same way why it stopped. The first reason recorded stands.
"""

from __future__ import annotations

import os

from learner_image.ps.region import S_FAILED, Control, RegionPaths
from learner_image.ps.shm import open_region_file

GANG = "the job restarts as a gang from the agreed snapshot"


class ServerFailed(Exception):
    """The parameter server serves this region no more; the message says why."""


def restarted(rank: int) -> str:
    return f"parameter-server sidecar rank {rank} restarted while its peers ran on; {GANG}"


def reason(paths: RegionPaths, control: Control) -> str | None:
    """Why the region serves no more; None while it serves."""
    if not int(control.server[S_FAILED]):
        return None
    try:
        return paths.failed.read_text()
    except FileNotFoundError:
        return "the parameter server failed"


def check(paths: RegionPaths, control: Control) -> None:
    """Raise `ServerFailed` if the region serves no more."""
    why = reason(paths, control)
    if why is not None:
        raise ServerFailed(why)


def mark(paths: RegionPaths, control: Control, why: str) -> str:
    """Record `why` (unless a reason stands already) and wake the learners; the reason
    that stands."""
    standing = reason(paths, control)
    if standing is not None:
        return standing
    temp = paths.root / f".failed.{os.getpid()}.tmp"
    with os.fdopen(open_region_file(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), "w") as out:
        out.write(why)
    os.replace(temp, paths.failed)
    control.server[S_FAILED] = 1
    for slot in control.slots:
        slot.bell.post()
    control.bell.post()
    return why
