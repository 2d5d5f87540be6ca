"""Hung learners: running learners whose runner stopped sending heartbeats.

A learner that hangs without exiting (stopped, deadlocked, its node frozen) is a failure
too, found after the job's `restart_policy.heartbeat_timeout_s` of silence. The runner
beats every 2 s; a learner that never beat is timed from its row's last change. No learner
can be heard while Redis is down, so silence is counted at the earliest from when the
monitor last failed to reach Redis (`listening_since`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from storage.job_states import LEARNER_BEATING, LearnerState


@dataclass(frozen=True)
class LearnerBeat:
    index: int
    state: LearnerState
    changed_at: float  # unix time of the row's last change


def silent_learners(
    learners: Sequence[LearnerBeat],
    beats: Mapping[int, float],
    *,
    now: float,
    timeout_s: float,
    listening_since: float = 0.0,
) -> dict[int, float]:
    """Learners silent longer than `timeout_s`, with how long each has been silent."""
    silent = {}
    for learner in learners:
        if learner.state not in LEARNER_BEATING:
            continue
        last = max(beats.get(learner.index, 0.0), learner.changed_at, listening_since)
        if now - last > timeout_s:
            silent[learner.index] = now - last
    return silent
