"""The heartbeat file the beat, monitor and pod watcher refresh, and the probe that reads it."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from lifecycle_manager import liveness
from lifecycle_manager.liveness import Heartbeat, keep_beating, staleness


def test_a_heartbeat_refreshes_its_file_at_most_every_interval(tmp_path: Path) -> None:
    path = tmp_path / "run" / "alive"
    now = [100.0]
    heartbeat = Heartbeat(path, every_s=2.0, clock=lambda: now[0])
    assert not path.exists()
    heartbeat.beat()
    assert path.exists()
    os.utime(path, (0, 0))
    now[0] += 1.0
    heartbeat.beat()  # too soon: skipped
    assert path.stat().st_mtime == 0
    now[0] += 1.5
    heartbeat.beat()
    assert time.time() - path.stat().st_mtime < 5


def test_a_file_left_by_an_earlier_run_does_not_count(tmp_path: Path) -> None:
    path = tmp_path / "alive"
    path.touch()
    Heartbeat(path)
    assert not path.exists()


def test_without_a_file_a_heartbeat_does_nothing() -> None:
    Heartbeat(None).beat()


def test_staleness(tmp_path: Path) -> None:
    path = tmp_path / "alive"
    missing = staleness(path, 60)
    assert missing is not None and "does not exist" in missing
    path.touch()
    os.utime(path, (1000.0, 1000.0))
    assert staleness(path, 60, now=1059.0) is None
    old = staleness(path, 60, now=1100.0)
    assert old is not None and "100 s ago, more than 60 s" in old


def test_the_probe_exits_1_unless_the_file_is_fresh(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "alive"
    assert liveness.main([str(path), "--max-age", "60"]) == 1
    assert "not alive" in capsys.readouterr().err
    path.touch()
    assert liveness.main([str(path), "--max-age", "60"]) == 0
    os.utime(path, (time.time() - 120,) * 2)
    assert liveness.main([str(path), "--max-age", "60"]) == 1


async def test_keep_beating_beats_only_while_the_process_works(tmp_path: Path) -> None:
    path = tmp_path / "alive"
    working = [False]
    task = asyncio.create_task(
        keep_beating(Heartbeat(path, every_s=0.0), lambda: working[0], every_s=0.01)
    )
    try:
        await asyncio.sleep(0.1)
        assert not path.exists()  # e.g. the watch thread died
        working[0] = True
        await asyncio.sleep(0.1)
        assert path.exists()
    finally:
        task.cancel()


def test_the_beat_refreshes_the_heartbeat_at_every_tick(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lifecycle_manager.entrypoints.beat import HeartbeatScheduler
    from lifecycle_manager.entrypoints.celery_app import app

    path = tmp_path / "alive"
    monkeypatch.setenv("DLAAS_LIVENESS_FILE", str(path))
    scheduler = HeartbeatScheduler(app=app, schedule_filename=str(tmp_path / "schedule"))
    try:
        assert not path.exists()
        assert scheduler.tick() <= 5.0  # the reconcile is due every 5 s: so are the ticks
        assert path.exists()
    finally:
        scheduler.close()
