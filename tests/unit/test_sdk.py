"""The learner SDK: checkpoint directory protocol, learner environment, timer, metric lines."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from itertools import pairwise
from pathlib import Path

import pytest

from learner_image import sdk
from learner_image.metric_lines import format_metric_line, parse_metric_line
from learner_image.sdk.checkpoints import COMMITTED, verify_checkpoint
from learner_image.sdk.timer import UPLOAD_POLL_S

LEARNER_VARS = (
    "TRAINING_ID",
    "LEARNER_ID",
    "NUM_LEARNERS",
    "RANK",
    "WORLD_SIZE",
    "GPU_COUNT",
    "DLAAS_ATTEMPT",
    "DATA_DIR",
    "MODEL_DIR",
    "RESULT_DIR",
    "LOG_DIR",
    "CHECKPOINT_DIR",
    "DLAAS_RESTART_SCOPE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "DLAAS_CHECKPOINT_INTERVAL",
    "DLAAS_CHECKPOINT_KEEP",
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in LEARNER_VARS:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def ckpt_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "checkpoints"
    monkeypatch.setenv("CHECKPOINT_DIR", str(path))
    return path


def names(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir())


def save(step: int, payload: bytes = b"x" * 10) -> Path:
    files = {"weights.bin": payload, "meta/info.json": b"{}"}
    saved = sdk.save_checkpoint_files(files, step, blocking=True)
    assert saved is not None
    return saved


# --- the learner environment -------------------------------------------------------------


def test_env_defaults_outside_dlaas(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    e = sdk.env()
    assert (e.rank, e.world_size, e.learner_id, e.num_learners) == (0, 1, 1, 1)
    assert e.training_id == "local" and not e.in_dlaas
    assert not e.is_distributed and e.is_chief
    assert e.data_dir == tmp_path
    assert e.result_dir == tmp_path / "results"
    assert e.checkpoint_dir == tmp_path / "checkpoints"
    assert e.checkpoint_interval_s == 30.0 and e.checkpoint_keep == 2
    assert e.master_addr is None and e.master_port is None


def test_env_reads_the_learner_environment() -> None:
    e = sdk.env(
        {
            "TRAINING_ID": "training-abcdefghij",
            "LEARNER_ID": "2",
            "NUM_LEARNERS": "3",
            "RANK": "1",
            "WORLD_SIZE": "3",
            "DATA_DIR": "/job/data",
            "RESULT_DIR": "/job/results",
            "CHECKPOINT_DIR": "/job/ckpt",
            "MASTER_ADDR": "10.0.0.1",
            "MASTER_PORT": "29500",
            "DLAAS_ATTEMPT": "4",
            "DLAAS_CHECKPOINT_INTERVAL": "2.5",
            "DLAAS_CHECKPOINT_KEEP": "5",
        }
    )
    assert e.in_dlaas and e.is_distributed and not e.is_chief
    assert (e.rank, e.world_size, e.learner_id, e.attempt) == (1, 3, 2, 4)
    assert e.checkpoint_dir == Path("/job/ckpt") and e.data_dir == Path("/job/data")
    assert (e.master_addr, e.master_port) == ("10.0.0.1", 29500)
    assert (e.checkpoint_interval_s, e.checkpoint_keep) == (2.5, 5)


def test_env_derives_rank_and_world_from_learner_vars() -> None:
    e = sdk.env({"LEARNER_ID": "3", "NUM_LEARNERS": "4"})
    assert (e.rank, e.world_size) == (2, 4)


@pytest.mark.parametrize(
    "environ",
    [{"RANK": "two"}, {"RANK": "2", "WORLD_SIZE": "2"}, {"DLAAS_CHECKPOINT_KEEP": "0"}],
)
def test_env_refuses_bad_values(environ: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        sdk.env(environ)


def test_importing_the_sdk_does_not_import_torch() -> None:
    code = "import sys, learner_image.sdk; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


# --- committing ----------------------------------------------------------------------------


def test_commit_writes_files_then_committed_and_leaves_no_temp(ckpt_dir: Path) -> None:
    path = save(7, b"abc")
    assert path == ckpt_dir / "ckpt-000000000007"
    assert names(ckpt_dir) == ["ckpt-000000000007"]
    record = json.loads((path / COMMITTED).read_text())
    assert record["step"] == 7
    assert record["files"] == {"weights.bin": 3, "meta/info.json": 2}
    assert isinstance(record["time"], float)
    assert (path / "meta" / "info.json").read_bytes() == b"{}"


def test_failed_write_leaves_nothing_restorable(ckpt_dir: Path) -> None:
    save(1)

    def explode() -> bytes:
        raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError):
        sdk.save_checkpoint(explode, 2)
    missing = ckpt_dir / "no-such-file"
    with pytest.raises(FileNotFoundError):
        sdk.save_checkpoint_files({"a": b"1", "b": missing}, 3)
    assert names(ckpt_dir) == ["ckpt-000000000001"]
    loaded = sdk.load_checkpoint()
    assert loaded is not None and loaded.step == 1


def test_state_dict_round_trip(ckpt_dir: Path) -> None:
    import torch

    weights, rng = torch.arange(6.0).reshape(2, 3), torch.get_rng_state()
    saving = sdk.save_checkpoint({"w": weights, "step": 5, "rng": rng}, 5)
    assert saving is not None
    path = saving.wait()
    assert path is not None and (path / "state.pt").is_file()
    loaded = sdk.load_checkpoint()
    assert loaded is not None and loaded.step == 5 and loaded.path == path
    assert loaded.state is not None
    assert torch.equal(loaded.state["w"], weights) and loaded.state["step"] == 5
    assert torch.equal(loaded.state["rng"], rng)


def test_bytes_callable_is_stored_as_is(ckpt_dir: Path) -> None:
    sdk.save_checkpoint(lambda: b"opaque", 3, blocking=True)
    loaded = sdk.load_checkpoint()
    assert loaded is not None and loaded.state is None
    assert loaded.read("state.bin") == b"opaque"


def test_files_can_be_copied_from_paths(ckpt_dir: Path, tmp_path: Path) -> None:
    source = tmp_path / "big.bin"
    source.write_bytes(os.urandom(3 << 20))
    path = sdk.save_checkpoint_files({"big.bin": source}, 1, blocking=True)
    assert path is not None and (path / "big.bin").read_bytes() == source.read_bytes()
    assert verify_checkpoint(path) is not None


@pytest.mark.parametrize("bad", ["", "/abs", "a/../b", "./a", "a//b", "COMMITTED", "a\\b"])
def test_file_names_must_be_plain_relative_paths(ckpt_dir: Path, bad: str) -> None:
    with pytest.raises(ValueError):
        sdk.save_checkpoint_files({bad: b"1"}, 1)
    assert not ckpt_dir.exists() or names(ckpt_dir) == []


def test_committed_step_is_kept_not_replaced(ckpt_dir: Path) -> None:
    first = save(4, b"first")
    again = save(4, b"second!")
    assert again == first
    assert (first / "weights.bin").read_bytes() == b"first"
    assert names(ckpt_dir) == ["ckpt-000000000004"]


def test_uncommitted_directory_of_the_same_step_is_replaced(ckpt_dir: Path) -> None:
    stale = ckpt_dir / "ckpt-000000000004"
    stale.mkdir(parents=True)
    (stale / "weights.bin").write_bytes(b"half")
    path = save(4, b"whole")
    assert (path / "weights.bin").read_bytes() == b"whole"
    assert verify_checkpoint(path) is not None
    assert names(ckpt_dir) == ["ckpt-000000000004"]


def test_other_ranks_do_not_write(ckpt_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert sdk.save_checkpoint_files({"a": b"1"}, 1) is None
    assert sdk.save_checkpoint(lambda: b"1", 1) is None
    assert not ckpt_dir.exists()
    path = sdk.save_checkpoint_files({"a": b"1"}, 1, all_ranks=True, blocking=True)
    assert path is not None and verify_checkpoint(path) is not None


def test_every_learner_writes_when_each_is_restarted_on_its_own(
    ckpt_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("DLAAS_RESTART_SCOPE", "learner")
    assert sdk.env().writes_checkpoints and not sdk.env().is_chief
    path = sdk.save_checkpoint_files({"a": b"1"}, 1, blocking=True)
    assert path is not None and verify_checkpoint(path) is not None


# --- what is never restored ----------------------------------------------------------------


def test_half_written_temp_directory_is_never_loaded(ckpt_dir: Path) -> None:
    save(1)
    tmp = ckpt_dir / ".tmp-ckpt-9-12345"
    tmp.mkdir()
    (tmp / "weights.bin").write_bytes(b"x" * 10)
    (tmp / COMMITTED).write_text(json.dumps({"step": 9, "files": {"weights.bin": 10}}))
    loaded = sdk.load_checkpoint()
    assert loaded is not None and loaded.step == 1
    assert [s for s, _ in sdk.committed_checkpoints()] == [1]


def test_directory_without_committed_is_never_loaded(ckpt_dir: Path) -> None:
    save(1)
    partial = ckpt_dir / "ckpt-000000000002"
    partial.mkdir()
    (partial / "weights.bin").write_bytes(b"x" * 10)
    loaded = sdk.load_checkpoint()
    assert loaded is not None and loaded.step == 1


def test_truncated_file_falls_back_to_older_checkpoint(ckpt_dir: Path) -> None:
    save(1)
    newest = save(2)
    with open(newest / "weights.bin", "r+b") as f:
        f.truncate(4)
    loaded = sdk.load_checkpoint()
    assert loaded is not None and loaded.step == 1
    assert verify_checkpoint(newest) is None


@pytest.mark.parametrize(
    "damage",
    [
        "extra file",
        "missing file",
        "symlinked file",
        "bad json",
        "wrong step",
        "not a dict",
        "negative size",
    ],
)
def test_damaged_checkpoints_are_skipped(ckpt_dir: Path, damage: str) -> None:
    save(1)
    newest = save(2)
    committed = newest / COMMITTED
    record = json.loads(committed.read_text())
    if damage == "extra file":
        (newest / "surprise").write_bytes(b"!")
    elif damage == "missing file":
        (newest / "meta" / "info.json").unlink()
    elif damage == "symlinked file":
        outside = ckpt_dir.parent / "outside.bin"
        outside.write_bytes((newest / "weights.bin").read_bytes())
        (newest / "weights.bin").unlink()
        (newest / "weights.bin").symlink_to(outside)
    elif damage == "bad json":
        committed.write_text('{"step": 2, "files": ')
    elif damage == "wrong step":
        committed.write_text(json.dumps(dict(record, step=3)))
    elif damage == "not a dict":
        committed.write_text("[]")
    elif damage == "negative size":
        committed.write_text(json.dumps(dict(record, files={"weights.bin": -1})))
    loaded = sdk.load_checkpoint()
    assert loaded is not None and loaded.step == 1


def test_unloadable_state_falls_back_to_older_checkpoint(
    ckpt_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import torch

    sdk.save_checkpoint({"w": torch.ones(2)}, 1, blocking=True)
    newest = sdk.save_checkpoint({"w": torch.zeros(2)}, 2, blocking=True)
    assert newest is not None
    state_file = newest / "state.pt"
    size = state_file.stat().st_size
    state_file.write_bytes(b"\0" * size)  # same size, garbage inside
    loaded = sdk.load_checkpoint()
    assert loaded is not None and loaded.step == 1
    assert loaded.state is not None and torch.equal(loaded.state["w"], torch.ones(2))
    assert "skipping checkpoint ckpt-000000000002" in capsys.readouterr().err


def test_load_specific_step_and_empty_dir(ckpt_dir: Path) -> None:
    assert sdk.load_checkpoint() is None
    save(1)
    save(2)
    one = sdk.load_checkpoint(step=1)
    assert one is not None and one.step == 1
    assert sdk.load_checkpoint(step=5) is None


# --- pruning -------------------------------------------------------------------------------


def test_keeps_the_newest_two_by_default(ckpt_dir: Path) -> None:
    for step in (1, 2, 3, 10):
        save(step)
    assert names(ckpt_dir) == ["ckpt-000000000003", "ckpt-000000000010"]


def test_keep_comes_from_the_environment(ckpt_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DLAAS_CHECKPOINT_KEEP", "3")
    for step in range(1, 6):
        save(step)
    assert [s for s, _ in sdk.committed_checkpoints()] == [5, 4, 3]


def test_pruning_spares_newer_partial_and_removes_dead_temp_dirs(ckpt_dir: Path) -> None:
    ckpt_dir.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (ckpt_dir / f".tmp-ckpt-99-{dead.pid}").mkdir()
    (ckpt_dir / f".tmp-ckpt-98-{os.getppid()}").mkdir()  # a live writer
    (ckpt_dir / "ckpt-000000000001").mkdir()  # older, never committed
    (ckpt_dir / "ckpt-000000000050").mkdir()  # newer, not committed (yet)
    for step in (2, 3, 4):
        save(step)
    assert names(ckpt_dir) == [
        f".tmp-ckpt-98-{os.getppid()}",
        "ckpt-000000000003",
        "ckpt-000000000004",
        "ckpt-000000000050",
    ]


# --- when to checkpoint --------------------------------------------------------------------


def run_with_timer(
    timer: sdk.CheckpointTimer, now: list[float], step_s: float, save_s: float, steps: int
) -> list[tuple[float, float]]:
    """Train `steps` steps on a fake clock; (state time, commit time) of every checkpoint."""
    saved = []
    for _ in range(steps):
        now[0] += step_s
        if timer.due():
            state_at = now[0]
            now[0] += save_s
            timer.reset()
            saved.append((state_at, now[0]))
    return saved


def test_checkpoint_timer_saves_in_time_for_the_interval() -> None:
    """However long steps and saves take, no moment is further than the interval from the
    state of a checkpoint the platform holds (committed and uploaded)."""
    for step_s, save_s in [(0.05, 0.01), (0.3, 0.2), (1.0, 0.0), (0.01, 0.5)]:
        now = [100.0]
        timer = sdk.CheckpointTimer(5.0, clock=lambda now=now: now[0])
        saved = run_with_timer(timer, now, step_s, save_s, int(60 / step_s))
        assert len(saved) >= 10
        # from the first save on, whose cost the timer has then measured
        held_from = saved[0][0]
        for state_at, committed_at in saved[1:]:
            uploaded_at = committed_at + save_s + UPLOAD_POLL_S
            assert uploaded_at - held_from <= 5.0 + 1e-9, (step_s, save_s)
            held_from = state_at
        # and it does not save much more often than it must
        gaps = [b[0] - a[0] for a, b in pairwise(saved[1:])]
        assert min(gaps) >= 5.0 - 2 * (step_s + 2 * save_s + UPLOAD_POLL_S)


def test_checkpoint_timer_off_and_measuring() -> None:
    now = [100.0]
    assert not sdk.CheckpointTimer(0, clock=lambda: now[0]).due()
    timer = sdk.CheckpointTimer(5.0, clock=lambda: now[0])
    assert not timer.due()
    for second in (101.0, 102.0, 103.0):
        now[0] = second
        assert not timer.due()
    assert timer.step_s == 1.0
    now[0] = 104.0  # the next step would end at 105, and its upload later: save now
    assert timer.due()
    now[0] = 104.5
    timer.reset()
    assert timer.save_s == 0.5
    now[0] = 105.0
    assert not timer.due()
    assert timer.step_s == 0.5  # measured from the end of the save


def test_timer_and_checkpoint_due_read_the_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DLAAS_CHECKPOINT_INTERVAL", "3")
    assert sdk.CheckpointTimer().interval_s == 3.0
    assert not sdk.checkpoint_due(10.0, now=12.9)
    assert sdk.checkpoint_due(10.0, now=13.0)
    monkeypatch.setenv("DLAAS_CHECKPOINT_INTERVAL", "0")
    assert not sdk.checkpoint_due(0.0, now=1e9)


# --- metric lines --------------------------------------------------------------------------


def test_log_metrics_prints_one_parseable_line(capsys: pytest.CaptureFixture[str]) -> None:
    sdk.log_metrics(12, loss=0.31, accuracy=0.9, lr=1)
    sdk.log_metrics(loss=math.nan, accuracy=1.0)
    first, second = capsys.readouterr().out.splitlines()
    assert json.loads(first) == {
        "dlaas_metric": True,
        "step": 12,
        "loss": 0.31,
        "accuracy": 0.9,
        "lr": 1.0,
    }
    assert parse_metric_line(first) == {"step": 12, "loss": 0.31, "accuracy": 0.9, "lr": 1.0}
    assert parse_metric_line(second) == {"step": None, "accuracy": 1.0}


@pytest.mark.parametrize(
    ("step", "values"), [(-1, {"a": 1.0}), (1, {"step": 2.0}), (1, {"dlaas_metric": 1.0})]
)
def test_format_metric_line_refuses_bad_steps_and_reserved_names(
    step: int, values: dict[str, float]
) -> None:
    with pytest.raises(ValueError):
        format_metric_line(step, values)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('{"dlaas_metric": true, "step": 3, "loss": 0.5}', {"step": 3, "loss": 0.5}),
        ('  {"dlaas_metric": true, "loss": 2}\r\n', {"step": None, "loss": 2.0}),
        ('{"dlaas_metric": true, "step": null, "acc": 1e-3}', {"step": None, "acc": 0.001}),
        (
            '{"dlaas_metric": true, "step": 1, "loss": 0.5, "tag": "x", "ok": true, "n": null}',
            {"step": 1, "loss": 0.5},
        ),
        ('{"dlaas_metric": true, "step": 1, "loss": NaN, "acc": 0.5}', {"step": 1, "acc": 0.5}),
        ('{"dlaas_metric": true, "step": 1, "nested": {"a": 1}}', None),
        ('{"dlaas_metric": true, "step": 4}', None),
        ('{"dlaas_metric": false, "step": 1, "loss": 0.5}', None),
        ('{"dlaas_metric": "true", "step": 1, "loss": 0.5}', None),
        ('{"dlaas_metric": 1, "step": 1, "loss": 0.5}', None),
        ('{"step": 1, "loss": 0.5}', None),
        ('{"dlaas_metric": true, "step": -1, "loss": 0.5}', None),
        ('{"dlaas_metric": true, "step": 1.5, "loss": 0.5}', None),
        ('{"dlaas_metric": true, "step": true, "loss": 0.5}', None),
        ('{"dlaas_metric": true, "step": "3", "loss": 0.5}', None),
        ('[{"dlaas_metric": true, "loss": 0.5}]', None),
        ('{"dlaas_metric": true, "loss": 0.5', None),
        ("step 10 loss 0.51 accuracy 0.82", None),
        ('note: {"dlaas_metric": true, "loss": 0.5}', None),
        ("", None),
    ],
)
def test_parse_metric_line(line: str, expected: dict[str, object] | None) -> None:
    assert parse_metric_line(line) == expected


def test_parse_metric_line_refuses_huge_lines() -> None:
    padding = "x" * 70_000
    line = json.dumps({"dlaas_metric": True, "loss": 0.5, "pad": padding})
    assert parse_metric_line(line) is None


def test_an_elastic_attempt_scales_the_learning_rate_with_its_batch() -> None:
    e = sdk.env({"DLAAS_GLOBAL_BATCH_SIZE": "256", "DLAAS_BATCH_SIZE": "128", "WORLD_SIZE": "2"})
    assert (e.global_batch_size, e.batch_size) == (256, 128)
    assert e.scaled_lr(0.1, base_batch=64) == pytest.approx(0.4)
    assert sdk.env({}).scaled_lr(0.1, base_batch=64) == 0.1  # not elastic: unchanged
