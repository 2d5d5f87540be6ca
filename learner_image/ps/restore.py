"""Which snapshot a starting sidecar restores, so that the replicas of one job come back alike.

Each sidecar stores its own snapshots (under its rank); the model they hold is a replica of
the job's, and the counters are of the sidecar's own learners. A lone sidecar restores its
newest. Sidecars of one job:

- sync: every sidecar restores the newest version all of them stored (they snapshot after
  the same rounds, so there is one); the replicas, optimizer state included, are then
  identical, as they were at that round.
- otherwise (async and bounded, or sync with no version in common): rank 0's newest
  snapshot chooses the replica. Rank 0 restores it; every other rank restores its own
  counters (and, in async and bounded modes, its own optimizer state and version, which are
  its own there) with rank 0's weights (in sync, with rank 0's whole model).
"""

from __future__ import annotations

import dataclasses
import logging

from learner_image.ps.layout import Mode
from learner_image.ps.server_config import ServerConfig
from learner_image.ps.snapshots import Snapshot, SnapshotStore, agreed_version

log = logging.getLogger("dlaas.ps.restore")


class UnreadableSnapshot(Exception):
    """The snapshot every sidecar agreed on cannot be read here."""


def snapshot_to_restore(config: ServerConfig, store: SnapshotStore) -> Snapshot | None:
    """What this sidecar restores when its region has no model (None: nothing stored)."""
    if not config.distributed:
        return store.latest()
    if config.mode is Mode.SYNC:
        version = agreed_version([store.of_rank(rank) for rank in range(config.world)])
        if version is not None:
            snapshot = store.latest(version)
            if snapshot is None:
                raise UnreadableSnapshot(
                    f"the snapshot of version {version}, which every sidecar stored, is "
                    f"unreadable under {store.prefix}"
                )
            return snapshot
    own = store.latest()
    if config.rank == 0:
        return own
    leader = store.of_rank(0).latest()
    if leader is None or (own is not None and own.layout != leader.layout):
        return own
    log.info("restoring rank 0's replica (its snapshot of version %d)", leader.version)
    return with_replica(own, leader, whole_model=config.mode is Mode.SYNC)


def with_replica(own: Snapshot | None, leader: Snapshot, *, whole_model: bool) -> Snapshot:
    """`own`'s counters (none, if None) with `leader`'s weights; with `whole_model`, also
    its optimizer state, step and version."""
    if own is None:
        slots = len(leader.drained)
        return dataclasses.replace(leader, applied=0, drained=[0] * slots, in_weights=[0] * slots)
    if whole_model:
        return dataclasses.replace(
            own,
            version=leader.version,
            step=leader.step,
            weights=leader.weights,
            states=leader.states,
        )
    return dataclasses.replace(own, weights=leader.weights)
