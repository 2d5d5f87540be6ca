"""What one scheduling pass decides: plain values the service acts on.

The service starts the admitted gangs where the placement says, asks each preemption
victim to checkpoint and stop (then requeues it), fails refused jobs, and shows every
waiting job its reason, queue position and estimated start (`dlaas queue`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class WaitCause(enum.StrEnum):
    TEAM_QUOTA = "team_quota"  # the team's nominal quota plus borrowing limit is used up
    NO_IDLE_QUOTA = "no_idle_quota"  # other teams have no idle quota left to lend
    CAPACITY = "capacity"  # no room on the nodes; the job holds the reservation
    RESERVATION = "reservation"  # behind the job holding the reservation
    PREEMPTING = "preempting"  # victims were asked to stop to make room for it


@dataclass(frozen=True, slots=True)
class Admission:
    """Start `job_id` now: learner i (1-based) on `nodes[i - 1]`. `borrowed` says the
    team is beyond its nominal quota with it (so it may be reclaimed later);
    `backfilled` that it went ahead of the job holding the reservation."""

    job_id: str
    team: str
    nodes: tuple[str, ...]
    gpu_product: str | None
    borrowed: bool = False
    backfilled: bool = False


@dataclass(frozen=True, slots=True)
class Preemption:
    """Ask `victim_id` to checkpoint and stop, then requeue it, to make room for `for_job_id`."""

    victim_id: str
    victim_team: str
    for_job_id: str
    reason: str


@dataclass(slots=True)  # not frozen: a pass builds one per waiting job, and frozen costs 3x
class Waiting:
    """A job that stays queued: its place among the waiting jobs (1 = next), why, and
    when it is expected to start (None when no estimate can be given)."""

    job_id: str
    position: int
    cause: WaitCause
    reason: str
    estimated_start: float | None


@dataclass(frozen=True, slots=True)
class Refusal:
    """A job that can never run as asked; `field` names the manifest field to change."""

    job_id: str
    field: str
    reason: str


@dataclass(frozen=True, slots=True)
class SchedulePass:
    admissions: tuple[Admission, ...]
    preemptions: tuple[Preemption, ...]
    waiting: tuple[Waiting, ...]
    refusals: tuple[Refusal, ...] = ()
