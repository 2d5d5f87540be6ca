"""A team's quota behind `PUT /v2/teams/{team}/quota`."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from api.errors import NotFound
from api.quota_schemas import QuotaBody, QuotaPublic, quota_public, stored_fields
from storage.models import Team
from storage.team_quotas import UnknownTeam, set_team_quota


async def set_quota(session: AsyncSession, team: Team, body: QuotaBody) -> QuotaPublic:
    try:
        quota = await set_team_quota(session, team.name, **stored_fields(body))
    except UnknownTeam:  # gone since the route found it
        raise NotFound(f"no team {team.name!r}", field="team") from None
    await session.commit()
    return quota_public(quota)
