"""The roles a user holds in a team, weakest first.

A platform admin (`users.is_admin`) is above every team role and needs no membership; what
each role may do is `api.permissions.PERMISSIONS`.
"""

from __future__ import annotations

from enum import StrEnum


class Role(StrEnum):
    VIEWER = "viewer"  # reads the team's jobs
    MEMBER = "member"  # submits, halts, resumes and deletes them
    TEAM_ADMIN = "team_admin"  # and adds, removes and changes the team's members

    @property
    def rank(self) -> int:
        return _RANKS[self]

    @property
    def writes(self) -> bool:
        """Whether the role acts on the team's jobs, not only reads them."""
        return self.rank >= Role.MEMBER.rank


_RANKS = {Role.VIEWER: 1, Role.MEMBER: 2, Role.TEAM_ADMIN: 3}
