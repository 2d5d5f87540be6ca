"""Checkpoint upload, pruning and restore between a CHECKPOINT_DIR and a local object store."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import pytest

from learner_image.checkpoint_sync import (
    CheckpointUploader,
    CheckpointVanished,
    newest_local,
    prune_remote,
    remote_checkpoints,
    restore_newest,
    stored_name,
    upload_checkpoint,
)
from learner_image.sdk import save_checkpoint_files, verify_checkpoint
from storage.object_store import LocalObjectStore, ProgressCallback

JOB = "training-ckpt"
BASE = f"jobs/{JOB}/checkpoints/"


@pytest.fixture
def ckpt_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "checkpoints"
    monkeypatch.setenv("CHECKPOINT_DIR", str(root))
    monkeypatch.setenv("DLAAS_CHECKPOINT_KEEP", "10")
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("LEARNER_ID", raising=False)
    return root


@pytest.fixture
def store(tmp_path: Path) -> LocalObjectStore:
    return LocalObjectStore(tmp_path / "objects")


class RecordingStore(LocalObjectStore):
    """A local store that remembers the order of uploads and can run a hook after each."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.puts: list[str] = []
        self.after_put: list[Callable[[], None]] = []

    def put_stream(
        self, key: str, stream: BinaryIO, progress: ProgressCallback | None = None
    ) -> int:
        size = super().put_stream(key, stream, progress)
        self.puts.append(key)
        for hook in self.after_put:
            hook()
        return size


def keys(store: LocalObjectStore) -> list[str]:
    return [info.key[len(BASE) :] for info in store.list(BASE)]


def test_upload_sends_listed_files_then_committed(ckpt_dir: Path, tmp_path: Path) -> None:
    store = RecordingStore(tmp_path / "objects")
    path = save_checkpoint_files({"a.bin": b"aa", "sub/b.bin": b"b"}, 3, blocking=True)
    assert path is not None
    record = verify_checkpoint(path)
    assert record is not None
    upload_checkpoint(store, JOB, path, record)
    names = [key[len(BASE) :] for key in store.puts]
    assert names[-1] == "ckpt-000000000003/COMMITTED"
    assert sorted(names[:-1]) == ["ckpt-000000000003/a.bin", "ckpt-000000000003/sub/b.bin"]


def test_half_written_checkpoints_are_not_local_candidates(ckpt_dir: Path) -> None:
    save_checkpoint_files({"w": b"1"}, 1, blocking=True)
    (ckpt_dir / "ckpt-000000000005").mkdir()
    (ckpt_dir / "ckpt-000000000005" / "w").write_bytes(b"no commit")
    (ckpt_dir / ".tmp-ckpt-6-99").mkdir()
    good = save_checkpoint_files({"w": b"22"}, 4, blocking=True)
    assert good is not None
    (good / "w").write_bytes(b"truncated-or-rewritten")  # no longer matches COMMITTED
    found = newest_local(ckpt_dir)
    assert found is not None and found[0] == "ckpt-000000000001"


def test_a_checkpoint_that_vanishes_mid_upload_is_abandoned(ckpt_dir: Path, tmp_path: Path) -> None:
    store = RecordingStore(tmp_path / "objects")
    path = save_checkpoint_files({"a": b"1", "b": b"2"}, 7, blocking=True)
    assert path is not None
    record = verify_checkpoint(path)
    assert record is not None
    store.after_put.append(lambda: shutil.rmtree(path, ignore_errors=True))
    with pytest.raises(CheckpointVanished):
        upload_checkpoint(store, JOB, path, record)
    assert keys(store) == []


def test_uploader_uploads_each_new_checkpoint_once_and_prunes(
    ckpt_dir: Path, store: LocalObjectStore
) -> None:
    uploaded: list[str] = []
    errors: list[str] = []
    uploader = CheckpointUploader(store, JOB, ckpt_dir, 2, uploaded.append, errors.append)
    assert uploader.sync_once() is None
    for step in (1, 2, 3):
        save_checkpoint_files({"w": bytes([step])}, step, blocking=True)
        assert uploader.sync_once() == f"ckpt-{step:012d}"
        assert uploader.sync_once() is None
    assert uploaded == ["ckpt-000000000001", "ckpt-000000000002", "ckpt-000000000003"]
    assert remote_checkpoints(store, JOB).committed == ["ckpt-000000000002", "ckpt-000000000003"]
    assert errors == []


def test_prune_keeps_newest_and_drops_older_partial_uploads(store: LocalObjectStore) -> None:
    for name in ("ckpt-000000000001", "ckpt-000000000002", "ckpt-000000000004"):
        store.put_bytes(f"{BASE}{name}/w", b"x")
        store.put_bytes(f"{BASE}{name}/COMMITTED", b"{}")
    store.put_bytes(f"{BASE}ckpt-000000000003/w", b"partial, older than the newest")
    store.put_bytes(f"{BASE}ckpt-000000000009/w", b"partial, maybe being uploaded")
    assert prune_remote(store, JOB, keep=2) == ["ckpt-000000000001", "ckpt-000000000003"]
    remote = remote_checkpoints(store, JOB)
    assert remote.committed == ["ckpt-000000000002", "ckpt-000000000004"]
    assert remote.partial == ["ckpt-000000000009"]


def put_remote(
    store: LocalObjectStore, step: int, files: dict[str, bytes], sizes: dict[str, int]
) -> None:
    name = f"ckpt-{step:012d}"
    for rel, data in files.items():
        store.put_bytes(f"{BASE}{name}/{rel}", data)
    record = {"step": step, "files": sizes, "time": 1.0}
    store.put_bytes(f"{BASE}{name}/COMMITTED", json.dumps(record).encode())


def test_restore_takes_the_newest_that_verifies(ckpt_dir: Path, store: LocalObjectStore) -> None:
    put_remote(store, 1, {"w": b"one"}, {"w": 3})
    put_remote(store, 2, {"w": b"two"}, {"w": 99})  # its record does not match its files
    store.put_bytes(f"{BASE}ckpt-000000000003/w", b"never committed")
    assert restore_newest(store, JOB, ckpt_dir) == "ckpt-000000000001"
    assert sorted(p.name for p in ckpt_dir.iterdir()) == ["ckpt-000000000001"]
    assert (ckpt_dir / "ckpt-000000000001" / "w").read_bytes() == b"one"


def test_restore_with_nothing_remote(ckpt_dir: Path, store: LocalObjectStore) -> None:
    assert restore_newest(store, JOB, ckpt_dir) is None


def test_a_learner_keeps_a_series_of_its_own_beside_the_gangs(
    ckpt_dir: Path, store: LocalObjectStore, tmp_path: Path
) -> None:
    put_remote(store, 9, {"w": b"gang"}, {"w": 4})
    uploaded: list[str] = []
    uploader = CheckpointUploader(store, JOB, ckpt_dir, 1, uploaded.append, print, learner=2)
    for step in (1, 2):
        save_checkpoint_files({"w": bytes([step])}, step, blocking=True)
        uploader.sync_once()
    assert uploaded == ["ckpt-000000000001", "ckpt-000000000002"]
    assert keys(store) == [
        "ckpt-000000000009/COMMITTED",
        "ckpt-000000000009/w",
        "learner-2/ckpt-000000000002/COMMITTED",
        "learner-2/ckpt-000000000002/w",
    ]  # pruned to keep 1 within its own series; the gang's is untouched
    assert remote_checkpoints(store, JOB).committed == ["ckpt-000000000009"]
    assert remote_checkpoints(store, JOB, 2).committed == ["ckpt-000000000002"]
    assert remote_checkpoints(store, JOB, 1).committed == []
    fresh = tmp_path / "fresh"
    assert restore_newest(store, JOB, fresh, learner=2) == "ckpt-000000000002"
    assert restore_newest(store, JOB, tmp_path / "other", learner=1) is None
    assert stored_name("ckpt-000000000002", 2) == "learner-2/ckpt-000000000002"
    assert stored_name("ckpt-000000000002") == "ckpt-000000000002"
