"""Snapshot names, epochs, and what the sidecars of a job restore, over a local object store."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from learner_image.ps.layout import SGD, ModelLayout
from learner_image.ps.restore import snapshot_to_restore
from learner_image.ps.server_config import ServerConfig, parse_config
from learner_image.ps.snapshots import Snapshot, SnapshotStore, agreed_version
from storage.object_store.local import LocalObjectStore

NUMEL = 16


def snapshot(version: int) -> Snapshot:
    return Snapshot(
        version=version,
        applied=version,
        drained=[version],
        in_weights=[version],
        layout=ModelLayout.of([("w", (NUMEL,))]).to_json(),
        optimizer=SGD().to_json(),
        step=float(version),
        weights=np.full(NUMEL, float(version), np.float32),
        states=np.empty((0, NUMEL), np.float32),
    )


def test_epochs_count_partial_snapshots_and_a_version_can_be_asked_for(tmp_path: Path) -> None:
    store = SnapshotStore(LocalObjectStore(tmp_path), "j", 0, keep=3)
    assert store.newest_epoch() == 0 and store.latest() is None
    store.save(snapshot(4), epoch=1)
    store.save(snapshot(9), epoch=2)
    partial = tmp_path / "jobs/j/ps/0/snap-000000000012-e5"  # its upload never finished
    partial.mkdir(parents=True)
    (partial / "data").write_bytes(b"\0" * 8)
    assert store.newest_epoch() == 5
    assert store.versions() == {4, 9}
    older = store.latest(4)
    assert older is not None and older.version == 4 and np.all(older.weights == 4.0)
    assert store.latest(7) is None


def test_sidecars_agree_on_the_newest_version_all_of_them_stored(tmp_path: Path) -> None:
    objects = LocalObjectStore(tmp_path)
    ranks = [SnapshotStore(objects, "j", rank, keep=3) for rank in range(3)]
    assert agreed_version(ranks) is None
    for version, stored_by in [(10, (0, 1, 2)), (20, (0, 1, 2)), (30, (0, 2))]:
        for rank in stored_by:
            ranks[rank].save(snapshot(version), epoch=1)
    assert agreed_version(ranks) == 20
    assert agreed_version([ranks[0], ranks[0].of_rank(2)]) == 30
    assert agreed_version([ranks[1].of_rank(1), SnapshotStore(objects, "j", 3)]) is None


def sidecar_config(mode: str, rank: int) -> ServerConfig:
    args = ["--mode", mode, "--rank", str(rank), "--world", "2", "--peers", "a:1,b:2"]
    return parse_config([*args, "--staleness", "2"] if mode == "bounded" else args, {})


def test_sync_sidecars_restore_the_version_all_stored_else_rank_0s_model(tmp_path: Path) -> None:
    objects = LocalObjectStore(tmp_path)
    ranks = [SnapshotStore(objects, "j", rank) for rank in range(2)]
    ranks[0].save(snapshot(20), epoch=1)
    ranks[1].save(snapshot(10), epoch=1)
    restored = snapshot_to_restore(sidecar_config("sync", 1), ranks[1])
    assert restored is not None  # nothing in common: rank 0's model, rank 1's counters
    assert (restored.version, restored.step, restored.applied) == (20, 20.0, 10)
    assert np.all(restored.weights == 20.0)
    ranks[0].save(snapshot(10), epoch=2)
    for rank in range(2):
        restored = snapshot_to_restore(sidecar_config("sync", rank), ranks[rank])
        assert restored is not None and restored.version == 10 and np.all(restored.weights == 10)


@pytest.mark.parametrize("mode", ["async", "bounded"])
def test_other_modes_restore_rank_0s_weights_with_their_own_counters(
    tmp_path: Path, mode: str
) -> None:
    objects = LocalObjectStore(tmp_path)
    ranks = [SnapshotStore(objects, "j", rank) for rank in range(2)]
    ranks[0].save(snapshot(20), epoch=1)
    fresh = snapshot_to_restore(sidecar_config(mode, 1), ranks[1])
    assert fresh is not None and fresh.version == 20 and fresh.in_weights == [0]
    ranks[1].save(snapshot(10), epoch=1)
    restored = snapshot_to_restore(sidecar_config(mode, 1), ranks[1])
    assert restored is not None
    assert (restored.version, restored.applied, restored.in_weights) == (10, 10, [10])
    assert np.all(restored.weights == 20.0)
    leader = snapshot_to_restore(sidecar_config(mode, 0), ranks[0])
    assert leader is not None and leader.version == 20
