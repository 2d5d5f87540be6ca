"""Teams' quotas as the scheduler reads them: what each team is guaranteed (nominal), how
far beyond it the team may borrow other teams' idle quota, its weight in fair sharing and
the highest priority its jobs may take.

Amounts are the scheduler's units: GPUs by product, CPUs in millicpus, memory in bytes,
jobs running at once. None means not limited. A team whose quota was never set has every
amount None, weight 1 and max_priority 0.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from storage.models import Team


@dataclass(frozen=True)
class TeamQuota:
    team: str  # team name
    gpus: dict[str, int] | None  # nominal, by product; None = not limited
    millicpus: int | None
    memory: int | None
    jobs: int | None
    borrow_gpus: dict[str, int] | None  # borrowing limit beyond nominal; None = not limited
    borrow_millicpus: int | None
    borrow_memory: int | None
    borrow_jobs: int | None
    weight: float = 1.0
    max_priority: int = 0


# TeamQuota's field -> the column of `teams` that holds it
COLUMNS: dict[str, str] = {
    "gpus": "quota_gpus",
    "millicpus": "quota_millicpus",
    "memory": "quota_memory",
    "jobs": "quota_jobs",
    "borrow_gpus": "borrow_gpus",
    "borrow_millicpus": "borrow_millicpus",
    "borrow_memory": "borrow_memory",
    "borrow_jobs": "borrow_jobs",
    "weight": "weight",
    "max_priority": "max_priority",
}
assert set(COLUMNS) == {f.name for f in fields(TeamQuota)} - {"team"}


class UnknownTeam(LookupError):
    pass


def quota_of(team: Team) -> TeamQuota:
    values: dict[str, Any] = {name: getattr(team, column) for name, column in COLUMNS.items()}
    for gpus in ("gpus", "borrow_gpus"):
        if values[gpus] is not None:
            values[gpus] = dict(values[gpus])
    # a row written before its defaults applied (an unflushed one) reads None
    values["weight"] = 1.0 if values["weight"] is None else float(values["weight"])
    values["max_priority"] = values["max_priority"] or 0
    return TeamQuota(team=team.name, **values)


async def team_quotas(session: AsyncSession) -> list[TeamQuota]:
    """Every team's quota, by team name."""
    rows = await session.execute(select(Team).order_by(Team.name))
    return [quota_of(team) for team in rows.scalars()]


async def max_priority(session: AsyncSession, team_id: int) -> int:
    query = select(Team.max_priority).where(Team.id == team_id)
    return int((await session.execute(query)).scalar_one_or_none() or 0)


async def set_team_quota(session: AsyncSession, team_name: str, **values: Any) -> TeamQuota:
    """Set the named fields of the team's quota (those left out keep theirs) and flush; the
    caller commits. Raises UnknownTeam for no such team, TypeError for no such field."""
    unknown = sorted(set(values) - set(COLUMNS))
    if unknown:
        raise TypeError(f"a team's quota has no field {unknown[0]!r}")
    team = (await session.execute(select(Team).where(Team.name == team_name))).scalar_one_or_none()
    if team is None:
        raise UnknownTeam(team_name)
    for name, value in values.items():
        setattr(team, COLUMNS[name], dict(value) if isinstance(value, dict) else value)
    await session.flush()
    return quota_of(team)
