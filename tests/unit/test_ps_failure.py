"""A region that serves no more: the first reason recorded stands, and a waiting learner
fails with it."""

from __future__ import annotations

from pathlib import Path

import pytest

from learner_image.ps import failure
from learner_image.ps.layout import Mode
from learner_image.ps.region import Control, ensure_directory
from learner_image.ps.slots import LearnerSlot


def test_the_first_reason_stands_and_a_waiting_learner_fails_with_it(tmp_path: Path) -> None:
    paths = ensure_directory(tmp_path / "region")
    control = Control.create(paths, 1, Mode.ASYNC, 1)
    assert failure.reason(paths, control) is None
    failure.check(paths, control)  # serving: nothing raised

    first = failure.restarted(1)
    assert failure.mark(paths, control, first) == first
    assert failure.mark(paths, control, "a later reason") == first
    # a learner's view of the same region (another process maps the same files)
    slot = LearnerSlot(Control.open(paths), paths, 0)
    with pytest.raises(failure.ServerFailed, match="sidecar rank 1 restarted while its peers"):
        slot.wait(lambda: False, timeout=10)
