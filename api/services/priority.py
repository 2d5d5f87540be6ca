"""A job's priority is bounded by its team's max_priority; a platform admin's is not."""

from __future__ import annotations

from api.auth import Principal
from api.errors import Invalid
from api.services.team_choice import ChosenTeam
from api.state import ApiState
from storage.team_quotas import max_priority


async def check_priority(state: ApiState, user: Principal, team: ChosenTeam, priority: int) -> None:
    """Refuse (422, field priority) a priority above the team's max_priority. A team's
    max_priority is never below 0, so the default priority (0) is never refused."""
    if priority <= 0 or user.is_admin:
        return
    async with state.sessions() as session:
        bound = await max_priority(session, team.id)
    if priority > bound:
        raise Invalid(
            f"priority {priority} is refused: team {team.name} may use priority up to "
            f"{bound}; ask a platform admin to raise it "
            f"(`dlaas team quota {team.name} --max-priority {priority}`)",
            code="priority_too_high",
            field="priority",
        )
