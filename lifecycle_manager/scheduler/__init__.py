"""The scheduler's decisions, pure: a cluster snapshot and a time in, a `SchedulePass` out.

No I/O, no database, no clock: the service, the tests and the simulator (`bench.sched_sim`)
all call `schedule` with plain data. See `schedule.py` for how a pass runs.
"""

from lifecycle_manager.scheduler.capacity import validate_fits
from lifecycle_manager.scheduler.decisions import (
    Admission,
    Preemption,
    Refusal,
    SchedulePass,
    WaitCause,
    Waiting,
)
from lifecycle_manager.scheduler.fair_share import queue_order
from lifecycle_manager.scheduler.model import (
    GIB,
    ClusterSnapshot,
    Gang,
    Node,
    PendingJob,
    Quota,
    RunningJob,
    Team,
)
from lifecycle_manager.scheduler.placement import Placement, place_gang
from lifecycle_manager.scheduler.schedule import schedule

__all__ = [
    "GIB",
    "Admission",
    "ClusterSnapshot",
    "Gang",
    "Node",
    "PendingJob",
    "Placement",
    "Preemption",
    "Quota",
    "Refusal",
    "RunningJob",
    "SchedulePass",
    "Team",
    "WaitCause",
    "Waiting",
    "place_gang",
    "queue_order",
    "schedule",
    "validate_fits",
]
