"""/v2/usage: what the caller keeps in the object store, against their storage quota."""

from __future__ import annotations

from fastapi import APIRouter

from api.access import Allowed
from api.deps import StateDep
from api.schemas import UsagePublic
from api.services import quota

router = APIRouter(prefix="/v2/usage", tags=["usage"])


@router.get("", response_model=UsagePublic)
async def my_usage(state: StateDep, user: Allowed) -> UsagePublic:
    """Bytes in your data containers and your jobs' results, and your quota (null: none)."""
    used = await quota.usage(state, user)
    limit = state.settings.storage_quota_bytes
    return UsagePublic(
        data_bytes=used.data_bytes,
        results_bytes=used.results_bytes,
        used_bytes=used.used_bytes,
        quota_bytes=limit if limit > 0 else None,
        left_bytes=max(limit - used.used_bytes, 0) if limit > 0 else None,
    )
