"""A user's storage quota: new data and new jobs are refused once it would be passed.

What is refused is new work, never what is under way: a running job's results are always
stored (days of training are not thrown away at the end), and may take a user past the
quota; then uploads and submissions are refused until the user frees room.
"""

from __future__ import annotations

from api.auth import Principal
from api.errors import TooLarge
from api.state import ApiState
from storage.usage import Usage, usage_of


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024:
            return f"{value:.1f} {unit}"
    return f"{value / 1024:.1f} TiB"


async def usage(state: ApiState, user: Principal) -> Usage:
    async with state.sessions() as session:
        return await usage_of(session, user.id)


async def check_room(state: ApiState, user: Principal, adding: int, what: str) -> None:
    """Refuse (413 `quota_exceeded`) when `adding` more bytes would pass the user's quota."""
    quota = state.settings.storage_quota_bytes
    if quota <= 0:
        return
    used = (await usage(state, user)).used_bytes
    if used + adding <= quota:
        return
    needs = f" ({_size(adding)} more)" if adding > 0 else ""
    raise TooLarge(
        f"{what}{needs} is refused: you use {_size(used)} of your {_size(quota)} storage "
        "quota (data containers and jobs' results, see `dlaas usage`); delete jobs you no "
        "longer need (`dlaas delete ID`) or ask an admin for more room",
        code="quota_exceeded",
        field="quota",
    )
