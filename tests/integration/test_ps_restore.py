"""A parameter server restoring its snapshot: learners that attach meanwhile get the restored
model, snapshot names never repeat across starts, and sidecars agree on what to restore."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from learner_image.ps.client import ParameterServer
from learner_image.ps.layout import SGD, ModelLayout
from learner_image.ps.model_file import read_model
from learner_image.ps.region import S_APPLIED, S_EPOCH, V_IN_WEIGHTS, RegionPaths
from learner_image.ps.server import Server
from learner_image.ps.server_config import parse_config
from learner_image.ps.snapshots import Snapshot, SnapshotStore
from storage.object_store.local import LocalObjectStore
from tests.integration import ps_harness
from tests.integration.ps_harness import ThreadServer, wait_for

base = ps_harness.base

NUMEL = 4096
LAYOUT = ModelLayout.of([("w", (NUMEL,))])
JOB = "restore-test"


def stored_snapshot(version: int) -> Snapshot:
    return Snapshot(
        version=version,
        applied=version,
        drained=[version],
        in_weights=[version],
        layout=LAYOUT.to_json(),
        optimizer=SGD(lr=1.0).to_json(),
        step=float(version),
        weights=np.full(NUMEL, float(version), np.float32),
        states=np.empty((0, NUMEL), np.float32),
    )


class GatedStore(SnapshotStore):
    """A snapshot store whose restore waits until the test lets it go on."""

    def __init__(self, root: Path) -> None:
        super().__init__(LocalObjectStore(root), JOB, 0)
        self.entered = threading.Event()
        self.proceed = threading.Event()

    def latest(self, version: int | None = None) -> Snapshot | None:
        self.entered.set()
        assert self.proceed.wait(30)
        return super().latest(version)


def server_args(region: Path, snapshots: Path, *extra: str) -> list[str]:
    return [
        "--dir",
        str(region),
        "--slots",
        "1",
        "--threads",
        "1",
        "--job",
        JOB,
        "--snapshot-dir",
        str(snapshots),
        "--snapshot-interval",
        "60",
        *extra,
    ]


def test_a_learner_attaching_during_a_restore_gets_the_restored_model(base: Path) -> None:
    region, snapshots = base / "region", base / "snapshots"
    SnapshotStore(LocalObjectStore(snapshots), JOB, 0).save(stored_snapshot(7), epoch=1)
    store = GatedStore(snapshots)
    server = Server(parse_config(server_args(region, snapshots), {}), store)
    stop = threading.Event()

    def serve() -> None:
        server.open()
        server.run(stop)

    serving = threading.Thread(target=serve, daemon=True)
    serving.start()
    clients: list[ParameterServer] = []

    def attach() -> None:  # a fresh learner, offering zeros as the initial weights
        client = ParameterServer(region, 0, timeout=30)
        client.attach(LAYOUT, SGD(lr=1.0), np.zeros(NUMEL, np.float32))
        clients.append(client)

    learner = threading.Thread(target=attach, daemon=True)
    try:
        assert store.entered.wait(30), "the server never started its restore"
        learner.start()
        time.sleep(0.5)  # the learner races the restore under way
        store.proceed.set()
        learner.join(30)
        assert clients, "the learner did not attach"
        client = clients[0]
        assert client.version == 7
        assert np.all(client.weights == 7.0)
        assert int(client.control.server[S_APPLIED]) == 7
        assert int(client.slot.words.server[V_IN_WEIGHTS]) == 7
        client.close()
    finally:
        store.proceed.set()
        stop.set()
        serving.join(30)


def test_snapshot_names_never_repeat_across_starts_on_fresh_regions(base: Path) -> None:
    region, snapshots = base / "region", base / "snapshots"
    store = SnapshotStore(LocalObjectStore(snapshots), JOB, 0)
    store.save(stored_snapshot(7), epoch=1)
    epochs = []
    for _ in range(2):  # the pod is replaced twice: each start has a fresh region
        server = ThreadServer(server_args(region, snapshots))
        wait_for(RegionPaths(region).weights.exists, 30, "the restored model")
        epochs.append(int(server.server.control.server[S_EPOCH]))
        server.stop()  # a last snapshot, at the restored version 7
        shutil.rmtree(region)
    assert epochs == [2, 3]
    names = sorted(p.name for p in snapshots.rglob("snap-*") if (p / "COMMITTED").exists())
    assert names == ["snap-000000000007-e2", "snap-000000000007-e3"]
    restored = store.latest()
    assert restored is not None and restored.version == 7
    assert restored.in_weights == [7]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_sidecars_of_a_job_restore_the_same_replica(base: Path, mode: str) -> None:
    snapshots = base / "snapshots"
    rounds = 8

    def sidecar(rank: int) -> ThreadServer:
        return ThreadServer(
            server_args(
                base / f"region-{rank}",
                snapshots,
                "--snapshot-interval",
                "0.01",
                "--mode",
                mode,
                "--rank",
                str(rank),
                "--world",
                "2",
                "--peers-dir",
                str(base / "peers"),
                "--listen",
                "127.0.0.1:0",
            )
        )

    servers = [sidecar(rank) for rank in range(2)]
    clients = [ParameterServer(base / f"region-{rank}", 0, timeout=30) for rank in range(2)]

    def train(rank: int) -> None:
        client = clients[rank]
        client.attach(LAYOUT, SGD(lr=0.5), np.full(NUMEL, 3.0, np.float32))
        client.gradient[:] = rank + 1.0
        for _ in range(rounds):
            client.push(timeout=30)
        client.close()

    learners = [threading.Thread(target=train, args=(rank,), daemon=True) for rank in range(2)]
    for thread in learners:
        thread.start()
    for thread in learners:
        thread.join(60)
    assert all(c.version >= rounds for c in clients)
    for server in servers:
        server.stop()  # each takes a last snapshot
    # rank 1's last snapshot never made it to the store: it has older ones only
    ranks = [SnapshotStore(LocalObjectStore(snapshots), JOB, rank) for rank in range(2)]
    last = max(ranks[1].versions())
    for name in (snapshots / "jobs" / JOB / "ps" / "1").glob(f"snap-{last:012d}-*"):
        shutil.rmtree(name)
    assert ranks[1].versions() and max(ranks[1].versions()) < last
    for rank in range(2):
        shutil.rmtree(base / f"region-{rank}")

    servers = [sidecar(rank) for rank in range(2)]
    try:
        for rank in range(2):
            wait_for(RegionPaths(base / f"region-{rank}").weights.exists, 30, "a restore")
        models = [read_model(base / f"region-{rank}") for rank in range(2)]
        assert np.array_equal(models[0].vector, models[1].vector)
        if mode == "sync":  # the newest version both stored: they snapshot after the same rounds
            assert models[0].version == models[1].version == max(ranks[1].versions())
    finally:
        for server in servers:
            server.stop()


class UnreachableStore(SnapshotStore):
    """A snapshot store that cannot be listed (an object store that is down)."""

    def _stored(self) -> list[tuple[int, int, str, bool]]:
        raise OSError("object store unreachable")


def test_a_server_on_an_intact_region_starts_while_the_store_is_down(base: Path) -> None:
    region, snapshots = base / "region", base / "snapshots"
    first = ThreadServer(server_args(region, snapshots))
    client = ParameterServer(region, 0, timeout=30)
    client.attach(LAYOUT, SGD(lr=1.0), np.zeros(NUMEL, np.float32))
    client.close()
    epoch = int(first.server.control.server[S_EPOCH])
    first.stop()

    config = parse_config(server_args(region, snapshots), {})
    second = Server(config, UnreachableStore(LocalObjectStore(snapshots), JOB, 0))
    second.open()
    try:
        assert int(second.control.server[S_EPOCH]) == epoch + 1
    finally:
        second._lock.release()
