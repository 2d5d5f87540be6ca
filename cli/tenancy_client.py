"""The calls of `DlaasClient` on teams, users and tokens (`/v2/teams`, `/v2/users`,
`/v2/tokens`), kept apart from the jobs' so that each module stays small."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any
from urllib.parse import quote


def _part(name: str) -> str:
    return quote(name, safe="")


class TenancyCalls(ABC):
    @abstractmethod
    def _json(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]: ...

    @abstractmethod
    def _every(
        self, path: str, key: str, params: dict[str, Any] | None = None
    ) -> list[dict[str, Any]]: ...

    # -- teams ------------------------------------------------------------------------------

    def create_team(self, name: str) -> dict[str, Any]:
        return self._json("POST", "/v2/teams", json={"name": name})

    def teams(self) -> list[dict[str, Any]]:
        return self._every("/v2/teams", "teams")

    def team(self, name: str) -> dict[str, Any]:
        return self._json("GET", f"/v2/teams/{_part(name)}")

    def team_members(self, name: str) -> list[dict[str, Any]]:
        return self._every(f"/v2/teams/{_part(name)}/members", "members")

    def team_quota(self, name: str) -> dict[str, Any]:
        return self._json("GET", f"/v2/teams/{_part(name)}/quota")

    def set_team_quota(self, name: str, quota: dict[str, Any]) -> dict[str, Any]:
        """Set the team's quota as a whole (`PUT /v2/teams/{team}/quota`)."""
        return self._json("PUT", f"/v2/teams/{_part(name)}/quota", json=quota)

    def add_member(self, team: str, user: str, role: str) -> dict[str, Any]:
        body = {"user": user, "role": role}
        return self._json("POST", f"/v2/teams/{_part(team)}/members", json=body)

    def set_role(self, team: str, user: str, role: str) -> dict[str, Any]:
        path = f"/v2/teams/{_part(team)}/members/{_part(user)}"
        return self._json("PATCH", path, json={"role": role})

    def remove_member(self, team: str, user: str) -> None:
        self._json("DELETE", f"/v2/teams/{_part(team)}/members/{_part(user)}")

    def invitations(self) -> list[dict[str, Any]]:
        return list(self._json("GET", "/v2/invitations")["invitations"])

    def accept_invitation(self, team: str) -> dict[str, Any]:
        return self._json("POST", f"/v2/invitations/{_part(team)}")

    def decline_invitation(self, team: str) -> None:
        self._json("DELETE", f"/v2/invitations/{_part(team)}")

    # -- users ------------------------------------------------------------------------------

    def create_user(self, name: str, *, admin: bool = False) -> dict[str, Any]:
        return self._json("POST", "/v2/users", json={"name": name, "admin": admin})

    def users(self) -> list[dict[str, Any]]:
        return self._every("/v2/users", "users")

    def me(self) -> dict[str, Any]:
        return self._json("GET", "/v2/users/me")

    # -- tokens -----------------------------------------------------------------------------

    def create_token(self, name: str, expires_in_s: int | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"name": name}
        if expires_in_s is not None:
            body["expires_in"] = expires_in_s
        return self._json("POST", "/v2/tokens", json=body)

    def tokens(self, user: str | None = None) -> list[dict[str, Any]]:
        """Your tokens, or (for a platform admin) `user`'s."""
        path = "/v2/tokens" if user is None else f"/v2/users/{_part(user)}/tokens"
        return self._every(path, "tokens")

    def revoke_token(self, name_or_id: str, user: str | None = None) -> dict[str, Any]:
        base = "/v2/tokens" if user is None else f"/v2/users/{_part(user)}/tokens"
        return self._json("DELETE", f"{base}/{_part(name_or_id)}")
