"""A program killed (SIGKILL) at any stage of a background checkpoint save, or a runner killed
while it uploads one to S3 (SeaweedFS), leaves only whole checkpoints restorable: the previous
one, or the new one once it is whole.

The SDK's test-only hook (`DLAAS_TEST_CHECKPOINT_PAUSE=stage`) stops the save at a known point
and writes a marker file; the test waits for the marker, then kills."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from learner_image import sdk
from learner_image.checkpoint_sync import CheckpointUploader, remote_checkpoints, restore_newest
from learner_image.sdk.checkpoints import TEST_MARKER_ENV, TEST_PAUSE_ENV, verify_checkpoint
from storage.object_store.s3 import S3ObjectStore
from tests.services import s3_client, s3_env, unique_name
from tests.unit.test_sdk import LEARNER_VARS

REPO = Path(__file__).resolve().parents[2]
WAIT_S = 60.0
JOB = "training-killed"
MiB = 1 << 20

# Trains a state of two 4 MiB tensors (a save writes more than the 1 MiB the `serialize`
# stage stops at); step n holds a = n, b = -n. Step 1 is saved and committed; step 2 is saved
# in the background with the pause hook set, and training goes on until the test kills it.
TRAINS_AND_SAVES = """
import os, sys, time
import torch
from learner_image import sdk

stage = sys.argv[1]
a, b = torch.zeros(MIB // 4), torch.zeros(MIB // 4)
step = 0
while True:
    step += 1
    a.fill_(step)
    b.fill_(-step)
    if step == 1:
        sdk.save_checkpoint({"a": a, "b": b, "step": step}, step, blocking=True)
        print("committed 1", flush=True)
        os.environ["PAUSE_ENV"] = stage
    elif step == 2:
        sdk.save_checkpoint({"a": a, "b": b, "step": step}, step)
        print("handed over 2", flush=True)
    time.sleep(0.002)
""".replace("MIB", str(4 * MiB)).replace("PAUSE_ENV", TEST_PAUSE_ENV)


@pytest.fixture
def ckpt_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in LEARNER_VARS:
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "checkpoints"
    monkeypatch.setenv("CHECKPOINT_DIR", str(path))
    return path


def run_until_marker(argv: list[str], marker: Path, env: dict[str, str]) -> int:
    """Start `argv`, wait for `marker` to appear, SIGKILL it; its pid."""
    proc = subprocess.Popen(
        argv,
        cwd=REPO,
        env={**os.environ, **env, TEST_MARKER_ENV: str(marker)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + WAIT_S
        while not marker.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                out = proc.stdout.read().decode() if proc.stdout else ""
                pytest.fail(f"no {marker.name} (exit {proc.poll()}):\n{out}")
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(WAIT_S) == -signal.SIGKILL
    finally:
        proc.kill()
        proc.wait()
    return proc.pid


def assert_whole(checkpoint: sdk.Checkpoint | None, step: int) -> None:
    assert checkpoint is not None and checkpoint.step == step and checkpoint.state is not None
    state = checkpoint.state
    assert state["step"] == step
    assert torch.equal(state["a"], torch.full((MiB,), float(step)))
    assert torch.equal(state["b"], torch.full((MiB,), float(-step)))


@pytest.mark.parametrize(
    ("stage", "restored"),
    [("snapshot", 1), ("serialize", 1), ("commit", 1), ("rename", 2), ("prune", 2)],
)
def test_a_save_killed_at_any_stage_leaves_only_whole_checkpoints(
    ckpt_dir: Path, tmp_path: Path, stage: str, restored: int
) -> None:
    marker = tmp_path / "paused"
    pid = run_until_marker([sys.executable, "-c", TRAINS_AND_SAVES, stage], marker, {})
    assert marker.read_text() == stage

    temp = ckpt_dir / f".tmp-ckpt-2-{pid}"
    if stage == "serialize":  # killed in the middle of torch.save
        assert MiB <= (temp / "state.pt").stat().st_size < 8 * MiB
        assert not (temp / "COMMITTED").exists()
    if stage == "commit":  # everything written, COMMITTED included; not renamed into place
        assert (temp / "COMMITTED").is_file()
    assert temp.exists() == (stage in ("serialize", "commit"))

    assert_whole(sdk.load_checkpoint(), restored)
    committed = sdk.committed_checkpoints()
    assert [step for step, _ in committed] == list(range(restored, 0, -1))
    for step, _ in committed:
        assert_whole(sdk.load_checkpoint(step=step), step)

    # the next save (a restarted program) clears what the killed one left behind
    sdk.save_checkpoint_files({"x": b"1"}, 3, blocking=True)
    assert not temp.exists()


# --- the upload to S3 -----------------------------------------------------------------------

# Uploads the newest local checkpoint as the runner does (`CheckpointUploader.sync_once`) to a
# store whose multipart parts are 5 MiB, and stops for good at `where`: `mid-part` (the state
# file's second part), or `before-committed` (every file up, COMMITTED not yet).
UPLOADS = """
import pathlib, sys, threading
from learner_image.checkpoint_sync import CheckpointUploader
from storage.object_store.s3 import S3ObjectStore
from tests.services import s3_client

endpoint, bucket, job, ckpt_dir, already, where, marker = sys.argv[1:]
client = s3_client(endpoint)
store = S3ObjectStore(client, bucket, part_size=5 << 20)

def stop():
    pathlib.Path(marker).write_text(where)
    threading.Event().wait()

if where == "mid-part":
    upload_part, parts = client.upload_part, []

    def counted_part(**kwargs):
        parts.append(kwargs["PartNumber"])
        if len(parts) == 2:
            stop()
        return upload_part(**kwargs)

    client.upload_part = counted_part
else:
    put_stream = store.put_stream

    def put(key, stream, progress=None):
        if key.endswith("/COMMITTED"):
            stop()
        return put_stream(key, stream, progress)

    store.put_stream = put
CheckpointUploader(store, job, pathlib.Path(ckpt_dir), 2, print, print, already).sync_once()
print("uploaded", flush=True)
"""


@pytest.fixture
def s3_store(seaweedfs: str) -> Iterator[S3ObjectStore]:
    client = s3_client(seaweedfs)
    store = S3ObjectStore(client, unique_name("dlaas-test"))
    yield store
    store.delete_prefix("")
    client.delete_bucket(Bucket=store.bucket)


def big_state(step: int) -> dict[str, object]:
    # 12 MiB: three multipart parts of 5 MiB
    return {"a": torch.full((MiB,), float(step)), "b": torch.full((2 * MiB,), 0.5), "step": step}


@pytest.mark.parametrize("where", ["mid-part", "before-committed"])
def test_an_upload_killed_midway_restores_the_previous_checkpoint(
    ckpt_dir: Path,
    tmp_path: Path,
    seaweedfs: str,
    s3_store: S3ObjectStore,
    monkeypatch: pytest.MonkeyPatch,
    where: str,
) -> None:
    sdk.save_checkpoint(big_state(1), 1, blocking=True)
    uploader = CheckpointUploader(s3_store, JOB, ckpt_dir, 2, print, print)
    assert uploader.sync_once() == "ckpt-000000000001"
    sdk.save_checkpoint(big_state(2), 2, blocking=True)

    marker = tmp_path / "paused"
    argv = [sys.executable, "-c", UPLOADS, seaweedfs, s3_store.bucket, JOB, str(ckpt_dir)]
    run_until_marker(
        [*argv, "ckpt-000000000001", where, str(marker)], marker, s3_env(seaweedfs, s3_store.bucket)
    )

    remote = remote_checkpoints(s3_store, JOB)
    assert remote.committed == ["ckpt-000000000001"]
    if where == "before-committed":
        assert remote.partial == ["ckpt-000000000002"]  # every file up, but not restorable
    restored = tmp_path / "restored"
    assert restore_newest(s3_store, JOB, restored) == "ckpt-000000000001"
    assert verify_checkpoint(restored / "ckpt-000000000001") is not None
    monkeypatch.setenv("CHECKPOINT_DIR", str(restored))
    loaded = sdk.load_checkpoint()
    assert loaded is not None and loaded.step == 1 and loaded.state is not None
    assert torch.equal(loaded.state["a"], torch.full((MiB,), 1.0))

    # the next runner uploads the new checkpoint whole
    again = CheckpointUploader(s3_store, JOB, ckpt_dir, 2, print, print, "ckpt-000000000001")
    assert again.sync_once() == "ckpt-000000000002"
    fresh = tmp_path / "fresh"
    assert restore_newest(s3_store, JOB, fresh) == "ckpt-000000000002"
    monkeypatch.setenv("CHECKPOINT_DIR", str(fresh))
    loaded = sdk.load_checkpoint()
    assert loaded is not None and loaded.step == 2 and loaded.state is not None
    assert torch.equal(loaded.state["a"], torch.full((MiB,), 2.0))
