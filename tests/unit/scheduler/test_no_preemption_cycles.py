"""No preemption cycle: passes applied one after another, with victims queued again as they
were and no job ending of itself, never preempt a job twice for the same waiting job. Jobs
of random shapes, teams with random quotas and borrowing limits, arriving in waves (the
clusters and arrivals of test_invariants). A fixed set of examples, so the suite answers
the same on every run."""

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from lifecycle_manager.scheduler import SchedulePass
from tests.unit.scheduler.factories import NOW, play_passes
from tests.unit.scheduler.test_invariants import arrivals, clusters

ARRIVAL_WAVES = 3


def _cycles(passes: list[SchedulePass]) -> list[tuple[str, str]]:
    pairs = Counter((p.victim_id, p.for_job_id) for result in passes for p in result.preemptions)
    return [pair for pair, count in pairs.items() if count > 1]


def _trace(passes: list[SchedulePass]) -> str:
    """What each pass did, to read a failing example by."""
    lines = []
    for step, result in enumerate(passes):
        lines.append(f"pass {step}: admitted {[(a.job_id, a.nodes) for a in result.admissions]}")
        lines += [
            f"  preempts {p.victim_id} for {p.for_job_id}: {p.reason}" for p in result.preemptions
        ]
        lines += [f"  {w.job_id} waits ({w.cause}): {w.reason}" for w in result.waiting]
    return "\n".join(lines)


@settings(max_examples=300, derandomize=True, deadline=None)
@given(st.data())
def test_no_job_is_preempted_twice_for_the_same_waiting_job(data: st.DataObject) -> None:
    nodes, teams = data.draw(clusters())
    waves = [
        data.draw(arrivals(teams, 10 * wave, NOW + 60 * wave)) for wave in range(ARRIVAL_WAVES)
    ]
    jobs = sum(len(wave) for wave in waves)
    # every job may preempt or be preempted a few times before the queue settles
    passes = play_passes(list(nodes), list(teams), waves, ARRIVAL_WAVES + 2 * jobs + 2)
    assert _cycles(passes) == [], _trace(passes)
