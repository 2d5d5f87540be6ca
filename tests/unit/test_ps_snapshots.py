"""Snapshot names, epochs and the version sidecars agree on, over a local object store."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from learner_image.ps.layout import SGD, ModelLayout
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
