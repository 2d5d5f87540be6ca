"""`save_checkpoint` in the background: it returns once the state is copied, one save is
written at a time (a newer one replaces one waiting), failures reach the program and the
runner, and exit waits for the save under way."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, cast

import numpy as np
import pytest
import torch

from learner_image import sdk
from learner_image.checkpoint_sync import CheckpointUploader
from learner_image.sdk import background_save
from learner_image.sdk.snapshot import BufferPool, take_snapshot
from storage.object_store import LocalObjectStore
from tests.unit.test_sdk import LEARNER_VARS

REPO = Path(__file__).resolve().parents[2]
WAIT_S = 30.0


@pytest.fixture(autouse=True)
def ckpt_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    for name in LEARNER_VARS:
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "checkpoints"
    monkeypatch.setenv("CHECKPOINT_DIR", str(path))
    yield path
    assert sdk.wait_for_checkpoints(WAIT_S)  # nothing of this test is left to the next
    background_save._saver.take_failures()


class Gate:
    """Pickles, in the background writer, only once the test opens it; copied as it is."""

    def __init__(self) -> None:
        self.reached = threading.Event()
        self.opened = threading.Event()

    def __deepcopy__(self, memo: dict[int, Any]) -> Gate:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        self.reached.set()
        assert self.opened.wait(WAIT_S)
        return (str, ("gate",))


class Unpicklable:
    def __deepcopy__(self, memo: dict[int, Any]) -> Unpicklable:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        raise RuntimeError("cannot pickle this")


class Counter:
    def __init__(self, count: int) -> None:
        self.count = count


@contextmanager
def writer_held(step: int = 0) -> Iterator[sdk.PendingCheckpoint]:
    """The background writer busy with the save of `step` until the block ends."""
    gate = Gate()
    saving = sdk.save_checkpoint({"gate": gate}, step)
    assert saving is not None
    try:
        assert gate.reached.wait(WAIT_S)
        assert saving.status == "saving"
        yield saving
    finally:
        gate.opened.set()


def state_of(step: int) -> dict[str, Any]:
    loaded = sdk.load_checkpoint(step=step)
    assert loaded is not None and loaded.state is not None
    return loaded.state


def test_save_returns_before_writing_and_later_training_does_not_reach_the_checkpoint(
    ckpt_dir: Path,
) -> None:
    weights = torch.arange(6.0)
    gate = Gate()
    saving = sdk.save_checkpoint({"w": weights, "gate": gate, "step": 1}, 1)
    assert saving is not None and saving.step == 1
    assert gate.reached.wait(WAIT_S)  # serializing, and held there by the test
    assert saving.status == "saving" and not saving.done()
    assert not (ckpt_dir / "ckpt-000000000001").exists()
    weights.add_(100)  # the next training steps
    gate.opened.set()
    assert saving.wait(WAIT_S) == ckpt_dir / "ckpt-000000000001"
    assert saving.status == "committed"
    state = state_of(1)
    assert torch.equal(state["w"], torch.arange(6.0)) and state["gate"] == "gate"


def test_the_copy_is_deep_and_keeps_shared_tensors_shared(ckpt_dir: Path) -> None:
    w = torch.arange(4.0)
    param = torch.nn.Parameter(torch.ones(2))
    trained = torch.ones(2, requires_grad=True)
    arr = np.arange(3)
    listed: list[Any] = [1, [2, 3]]
    counter = Counter(7)
    state_dict: OrderedDict[str, Any] = OrderedDict(x=torch.zeros(3))
    state_dict._metadata = {"": {"version": 2}}  # type: ignore[attr-defined]
    state = {
        "tied": {"a": w, "b": w},
        "nested": {"list": listed, "tuple": (w, 5)},
        "param": param,
        "trained": trained,
        "arr": arr,
        "counter": counter,
        "sd": state_dict,
    }
    with writer_held():
        saving = sdk.save_checkpoint(state, 1)
        assert saving is not None and saving.status == "queued"
        w.add_(100)
        param.data.add_(1)
        arr += 100
        listed[1].append(4)
        counter.count = 99
        state_dict["x"].add_(1)
    assert saving.wait(WAIT_S) is not None
    saved = state_of(1)
    assert torch.equal(saved["tied"]["a"], torch.arange(4.0))
    assert saved["tied"]["a"] is saved["tied"]["b"] is saved["nested"]["tuple"][0]
    assert saved["nested"] == {"list": [1, [2, 3]], "tuple": (saved["tied"]["a"], 5)}
    assert isinstance(saved["param"], torch.nn.Parameter)
    assert torch.equal(saved["param"], torch.ones(2))
    assert saved["trained"].requires_grad and not saved["tied"]["a"].requires_grad
    assert np.array_equal(saved["arr"], np.arange(3))
    assert saved["counter"].count == 7
    assert torch.equal(saved["sd"]["x"], torch.zeros(3))
    assert saved["sd"]._metadata == {"": {"version": 2}}


def test_files_and_bytes_are_taken_when_saved(ckpt_dir: Path, tmp_path: Path) -> None:
    source = tmp_path / "weights.bin"
    source.write_bytes(b"before")
    buf = bytearray(b"abc")
    with writer_held():
        files = {"w.bin": source, "b.bin": buf}
        saving = sdk.save_checkpoint_files(files, 1)  # type: ignore[arg-type]
        assert saving is not None
        source.write_bytes(b"after, and longer")
        buf[:] = b"xyz"
    assert saving.wait(WAIT_S) is not None
    loaded = sdk.load_checkpoint(step=1)
    assert loaded is not None
    assert (loaded.read("w.bin"), loaded.read("b.bin")) == (b"before", b"abc")

    buf[:] = b"abc"
    with writer_held(2):
        raw = sdk.save_checkpoint(lambda: buf, 3)  # type: ignore[arg-type, return-value]
        assert raw is not None
        buf[:] = b"xyz"
    assert raw.wait(WAIT_S) is not None
    loaded = sdk.load_checkpoint(step=3)
    assert loaded is not None and loaded.read("state.bin") == b"abc"


def test_a_newer_save_replaces_the_one_waiting_which_is_never_written(
    ckpt_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with writer_held(1) as first:
        second = sdk.save_checkpoint({"n": 2}, 2)
        assert second is not None and second.status == "queued"
        third = sdk.save_checkpoint({"n": 3}, 3)
        assert third is not None and third.status == "queued"
        assert second.status == "replaced" and second.replaced_by == 3
        assert second.wait(WAIT_S) is None
    assert third.wait(WAIT_S) == ckpt_dir / "ckpt-000000000003"
    assert first.status == "committed"
    assert "dlaas: checkpoint step 2 replaced by step 3 before it was written\n" in (
        capsys.readouterr().err
    )
    assert [s for s, _ in sdk.committed_checkpoints()] == [3, 1]
    assert sorted(p.name for p in ckpt_dir.iterdir()) == ["ckpt-000000000001", "ckpt-000000000003"]


def test_a_newer_copy_is_taken_into_the_memory_of_the_save_it_replaces(ckpt_dir: Path) -> None:
    weights = torch.ones(1 << 16)
    with writer_held():
        first = sdk.save_checkpoint({"w": weights}, 1)
        [(_, buffer)] = background_save._saver._queue[-1].buffers
        weights.fill_(2.0)
        second = sdk.save_checkpoint({"w": weights}, 2)
        [(_, reused)] = background_save._saver._queue[-1].buffers
        assert first is not None and first.status == "replaced"
        assert reused is buffer  # no fresh memory while the writer is busy
    assert second is not None and second.wait(WAIT_S) is not None
    assert torch.equal(state_of(2)["w"], torch.full((1 << 16,), 2.0))


def test_a_blocking_save_waits_for_the_one_being_written_and_is_never_replaced(
    ckpt_dir: Path,
) -> None:
    done: list[Path | None] = []
    with writer_held(1):
        blocking = threading.Thread(
            target=lambda: done.append(sdk.save_checkpoint({"n": 2}, 2, blocking=True))
        )
        blocking.start()
        while background_save._saver.pending()[-1].step != 2:  # handed over, and waiting
            time.sleep(0.001)
        later = sdk.save_checkpoint({"n": 3}, 3)
        assert later is not None and later.status == "queued"
        assert done == []  # still waiting for step 1, then its own commit
    blocking.join(WAIT_S)
    assert done == [ckpt_dir / "ckpt-000000000002"]
    assert later.wait(WAIT_S) == ckpt_dir / "ckpt-000000000003"


def test_a_failed_background_save_is_raised_at_the_next_save_and_left_for_the_runner(
    ckpt_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sdk.save_checkpoint({"n": 1}, 1, blocking=True)
    failing = sdk.save_checkpoint({"bad": Unpicklable()}, 4)
    assert failing is not None and sdk.wait_for_checkpoints(WAIT_S)
    assert failing.status == "failed" and isinstance(failing.error, RuntimeError)
    reason = "RuntimeError: cannot pickle this"
    assert f"dlaas: checkpoint step 4 failed: {reason}\n" in capsys.readouterr().err
    record = json.loads((ckpt_dir / ".failed-ckpt-4.json").read_text())
    assert (record["step"], record["error"]) == (4, reason)
    assert isinstance(record["time"], float)

    with pytest.raises(sdk.CheckpointSaveError) as raised:
        sdk.save_checkpoint({"n": 5}, 5)
    assert str(raised.value) == f"checkpoint step 4 could not be saved: {reason}"
    assert raised.value.step == 4 and raised.value.cause is failing.error
    assert not (ckpt_dir / "ckpt-000000000005").exists()  # the call that raised saved nothing
    saved = sdk.save_checkpoint({"n": 5}, 5)  # reported once: the next call saves
    assert saved is not None and saved.wait(WAIT_S) == ckpt_dir / "ckpt-000000000005"

    # the runner's uploader reports it once, and removes the record
    failures: list[tuple[int, str]] = []
    errors: list[str] = []
    uploader = CheckpointUploader(
        LocalObjectStore(tmp_path / "objects"),
        "training-failed",
        ckpt_dir,
        2,
        on_uploaded=lambda name: None,
        on_error=errors.append,
        on_failed=lambda step, error: failures.append((step, error)),
    )
    assert uploader.sync_once() == "ckpt-000000000005"
    sdk.save_checkpoint_files({"x": b"1"}, 6, blocking=True)
    assert uploader.sync_once() == "ckpt-000000000006"
    assert failures == [(4, reason)] and errors == []
    assert not (ckpt_dir / ".failed-ckpt-4.json").exists()


def test_failures_raised_by_wait_or_a_blocking_save_are_not_raised_again(ckpt_dir: Path) -> None:
    failing = sdk.save_checkpoint({"bad": Unpicklable()}, 1)
    assert failing is not None
    with pytest.raises(sdk.CheckpointSaveError, match="checkpoint step 1 could not be saved"):
        failing.wait(WAIT_S)
    assert sdk.save_checkpoint({"n": 2}, 2, blocking=True) == ckpt_dir / "ckpt-000000000002"
    with pytest.raises(sdk.CheckpointSaveError) as raised:
        sdk.save_checkpoint({"bad": Unpicklable()}, 3, blocking=True)
    assert raised.value.step == 3 and isinstance(raised.value.__cause__, RuntimeError)
    assert sdk.save_checkpoint({"n": 4}, 4, blocking=True) == ckpt_dir / "ckpt-000000000004"


def test_several_failures_are_raised_together(ckpt_dir: Path) -> None:
    gate = Gate()
    first = sdk.save_checkpoint({"gate": gate, "bad": Unpicklable()}, 2)  # fails once opened
    assert first is not None and gate.reached.wait(WAIT_S)
    second = sdk.save_checkpoint({"bad": Unpicklable()}, 3)
    gate.opened.set()
    assert second is not None and sdk.wait_for_checkpoints(WAIT_S)
    assert (first.status, second.status) == ("failed", "failed")
    with pytest.raises(sdk.CheckpointSaveError) as raised:
        sdk.save_checkpoint({"n": 4}, 4)
    assert (raised.value.step, raised.value.also_failed) == (3, [2])
    assert "(so did the checkpoints of steps 2)" in str(raised.value)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread niceness")
def test_the_writer_runs_at_a_lower_priority_than_training(ckpt_dir: Path) -> None:
    with writer_held() as saving:
        assert saving.status == "saving"
        thread = background_save._saver._thread
        assert thread is not None and thread.native_id is not None
        mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        assert os.getpriority(os.PRIO_PROCESS, thread.native_id) == min(19, mine + 10)


def test_bad_arguments_are_refused_in_the_callers_thread(ckpt_dir: Path) -> None:
    with pytest.raises(ValueError):
        sdk.save_checkpoint({"n": 1}, -1)
    with pytest.raises(TypeError):
        sdk.save_checkpoint(lambda: 5, 1)  # type: ignore[arg-type, return-value]
    assert background_save._saver.pending() == []


class Lines:
    """The lines a process writes to `stream`, read as they come."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.text: list[str] = []
        self.ended = False
        self._cond = threading.Condition()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: IO[bytes]) -> None:
        for line in stream:
            with self._cond:
                self.text.append(line.decode())
                self._cond.notify_all()
        with self._cond:
            self.ended = True
            self._cond.notify_all()

    def wait_for(self, text: str) -> str:
        def found() -> str | None:
            return next((line for line in self.text if text in line), None)

        with self._cond:
            self._cond.wait_for(lambda: found() is not None or self.ended, timeout=WAIT_S)
            line = found()
        assert line is not None, f"no line with {text!r}: {''.join(self.text)}"
        return line


EXITS_AT_ONCE = """
import pathlib, sys, time
from learner_image import sdk

release = pathlib.Path(sys.argv[1])

class WaitsForTheTest:
    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        while not release.exists():
            time.sleep(0.005)
        return (str, ("released",))

saving = sdk.save_checkpoint({"gate": WaitsForTheTest(), "step": 1}, 1)
print("returned", saving.status, flush=True)
"""


def test_exit_waits_for_the_save_under_way(ckpt_dir: Path, tmp_path: Path) -> None:
    release = tmp_path / "release"
    proc = subprocess.Popen(
        [sys.executable, "-c", EXITS_AT_ONCE, str(release)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        out, err = Lines(proc.stdout), Lines(proc.stderr)
        assert out.wait_for("returned").split()[1] in ("queued", "saving")
        waiting = "dlaas: waiting for checkpoint step 1 to be written before exiting"
        err.wait_for(waiting)  # the program is done; its exit waits
        release.touch()
        assert proc.wait(WAIT_S) == 0
    finally:
        proc.kill()
        proc.wait()
    assert state_of(1) == {"gate": "released", "step": 1}


# --- the buffers copies are made into ---------------------------------------------------------


def test_snapshots_reuse_the_buffers_of_finished_ones() -> None:
    pool = BufferPool()
    first = take_snapshot({"t": torch.ones(1000), "a": np.zeros(10)}, pool)
    assert first.nbytes == 4000 + 80 and pool.limit == 2 * first.nbytes
    pool.give(first.buffers)
    assert pool.nbytes == first.nbytes
    second = take_snapshot({"t": torch.full((1000,), 2.0), "a": np.ones(10)}, pool)
    assert second.state["t"].data_ptr() == first.state["t"].data_ptr()
    assert torch.equal(second.state["t"], torch.full((1000,), 2.0))
    assert second.state["a"] is first.state["a"] and np.array_equal(second.state["a"], np.ones(10))
    assert pool.nbytes == 0
    other_shape = take_snapshot({"t": torch.ones(10)}, pool)
    assert other_shape.state["t"].data_ptr() != first.state["t"].data_ptr()
    third = take_snapshot({"t": torch.ones(1000)}, pool)  # fresh buffers: the pool is empty
    fourth = take_snapshot({"t": torch.ones(1000)}, pool)
    given = second.buffers + other_shape.buffers + third.buffers + fourth.buffers
    pool.give(given)  # over two snapshots' worth: the oldest given back go first
    assert pool.nbytes == 80 + 40 + 4000 + 4000 <= pool.limit
    assert pool.take(("torch", torch.float32, (1000,))) is fourth.state["t"]
    assert pool.take(("torch", torch.float32, (1000,))) is third.state["t"]
    assert pool.take(("torch", torch.float32, (1000,))) is None  # second's was dropped
    assert pool.take(("torch", torch.float32, (10,))) is other_shape.state["t"]


def test_saves_in_a_row_copy_into_the_same_memory(ckpt_dir: Path) -> None:
    weights = torch.zeros(1 << 16)
    pointers = []
    for step in range(1, 4):
        weights.fill_(step)
        saving = sdk.save_checkpoint({"w": weights}, step)
        assert saving is not None and saving.wait(WAIT_S) is not None
        free = background_save._saver.pool._free[("torch", torch.float32, (1 << 16,))]
        pointers.append([buf.data_ptr() for buf in free])
    assert pointers[0] == pointers[1] == pointers[2] and len(pointers[0]) == 1
    assert torch.equal(state_of(3)["w"], torch.full((1 << 16,), 3.0))


# --- the timer counts a background save until its commit ------------------------------------


class FakeSaving:
    def __init__(self) -> None:
        self.status = "saving"

    def done(self) -> bool:
        return self.status != "saving"


def test_the_timer_counts_a_background_save_until_it_is_seen_committed() -> None:
    now = [100.0]
    timer = sdk.CheckpointTimer(5.0, clock=lambda: now[0])
    while not timer.due():
        now[0] += 1.0
    now[0] += 0.01
    saving = FakeSaving()
    timer.reset(cast(sdk.PendingCheckpoint, saving))
    assert timer.save_s == pytest.approx(0.01)  # the copy
    now[0] += 1.0
    timer.due()
    assert timer.save_s == pytest.approx(1.01)  # still writing: at least this long
    saving.status = "committed"
    now[0] += 1.0
    timer.due()
    assert timer.save_s == pytest.approx(2.01)
    now[0] += 1.0
    timer.due()
    assert timer.save_s == pytest.approx(2.01)  # counted once
