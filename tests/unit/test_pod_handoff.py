"""What a learner pod's program container leaves its shipper, and the log the shipper follows:
read through no link, the end of a program told apart from its being killed or frozen."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from learner_image.launcher import ProgramEnd
from learner_image.pod.handoff import (
    CONTROL,
    EXIT,
    FRESH_S,
    HEARTBEAT,
    ProgramSide,
    ShipperSide,
    leave_start,
    read_start,
)
from learner_image.shared_log import SharedLog


def launcher_gone(side: ProgramSide) -> None:
    """As when the launcher process exits: its lock goes with it."""
    assert side._running is not None
    os.close(side._running)


def test_the_shipper_gets_the_programs_end_once_the_launcher_is_gone(tmp_path: Path) -> None:
    program, shipper = ProgramSide(tmp_path), ShipperSide(tmp_path)
    assert not shipper.started() and shipper.end() is None
    program.announce()
    assert shipper.started() and shipper.launcher_alive()
    end = ProgramEnd(-signal.SIGTERM, signal.SIGTERM, killed_after_grace=False, last_line="x")
    program.ended(end)
    launcher_gone(program)
    assert shipper.wait_end(lambda: None) == end
    assert end.report().stopped and end.report().exit_code == 143


def test_a_launcher_killed_without_a_word_is_a_sigkill(tmp_path: Path) -> None:
    program, shipper = ProgramSide(tmp_path), ShipperSide(tmp_path)
    program.announce()
    launcher_gone(program)
    end = shipper.wait_end(lambda: None)
    assert (end.returncode, end.report().exit_code) == (-signal.SIGKILL, 137)


def test_a_shipper_stopped_before_the_program_started_reports_a_stop_before_start(
    tmp_path: Path,
) -> None:
    end = ShipperSide(tmp_path).wait_end(lambda: signal.SIGTERM)
    assert end == ProgramEnd(None, signal.SIGTERM)


def test_a_frozen_program_stops_the_heartbeats(tmp_path: Path) -> None:
    program, shipper = ProgramSide(tmp_path), ShipperSide(tmp_path)
    assert not shipper.beating()
    program.announce()
    assert shipper.beating()
    stale = time.time() - FRESH_S - 1
    os.utime(tmp_path / CONTROL / HEARTBEAT, (stale, stale))
    assert not shipper.beating()
    program.beat()
    assert shipper.beating()


def test_control_files_swapped_for_links_or_garbage_are_refused(tmp_path: Path) -> None:
    secret = tmp_path / "helper-only"
    secret.write_text('{"returncode": 0}')
    (tmp_path / CONTROL).mkdir()
    (tmp_path / CONTROL / EXIT).symlink_to(secret)
    shipper = ShipperSide(tmp_path)
    assert shipper.end() is None
    (tmp_path / CONTROL / EXIT).unlink()
    (tmp_path / CONTROL / EXIT).write_text("not json")
    forged = shipper.end()
    assert forged is not None and forged.failure


def test_the_start_record_goes_from_fetch_to_shipper(tmp_path: Path) -> None:
    leave_start(tmp_path / "helper", "ckpt-000000000007", (120, 4))
    assert read_start(tmp_path / "helper") == ("ckpt-000000000007", (120, 4))


def test_the_shared_log_ends_at_whole_lines_and_refuses_a_link(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    path = logs / "learner-1.log"
    path.write_bytes(b"earlier\n")
    log = SharedLog(tmp_path, path, (8, 1))
    assert log.end() == 8
    with open(path, "ab", buffering=0) as writer:
        writer.write(b"one\n")
        assert log.wait_beyond(8, timeout=5) == (12, False)
        log.write_line("[dlaas] a line of the shipper's")
        writer.write(b"tw")  # a line on its way: not yet the log's
    whole = len(b"earlier\none\n[dlaas] a line of the shipper's\n")
    assert log.end() == whole
    path.unlink()
    path.symlink_to(tmp_path / "elsewhere")
    (tmp_path / "elsewhere").write_text("secret\n" * 100)
    with pytest.raises(OSError):
        log.open_reader()
    assert log.end() == whole  # where it was: nothing read through the link


def test_closing_the_shared_log_completes_an_unfinished_last_line(tmp_path: Path) -> None:
    path = tmp_path / "learner-1.log"
    path.write_bytes(b"whole\nhalf")
    log = SharedLog(tmp_path, path, (0, 0))
    assert log.end() == 6
    log.close()
    assert path.read_bytes() == b"whole\nhalf\n"
    assert log.wait_beyond(6, timeout=5) == (11, True)
