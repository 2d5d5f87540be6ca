"""The `local` cluster backend: learners as processes of the node agent on this machine.

The agent answers only requests that carry its bearer token (`DLAAS_AGENT_TOKEN`, or the
file `DLAAS_AGENT_TOKEN_FILE` names); a refusal is reported as the agent being unavailable,
with the setting to fix, so jobs wait rather than fail while it is wrong.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import httpx

from lifecycle_manager.backends.base import (
    BackendUnavailable,
    LearnerPhase,
    LearnerSpec,
    LearnerStatus,
)
from lifecycle_manager.backends.local.capacity import local_node, pretend_gpu_env
from storage.cluster_nodes import NodeCapacity
from storage.settings import Settings


class AgentTokenError(RuntimeError):
    """The node agent's token cannot be read; the message names the setting."""


def agent_token(settings: Settings) -> str | None:
    """The node agent's bearer token: `agent_token`, else what `agent_token_file` holds."""
    if settings.agent_token:
        return settings.agent_token.strip()
    if settings.agent_token_file is None:
        return None
    try:
        return settings.agent_token_file.read_text().strip() or None
    except OSError as error:
        raise AgentTokenError(
            f"cannot read DLAAS_AGENT_TOKEN_FILE {settings.agent_token_file}: {error.strerror}"
        ) from None


class LocalBackend:
    def __init__(
        self,
        agent_url: str,
        *,
        token: str | None,
        timeout: float = 10.0,
        node: NodeCapacity | None = None,
    ) -> None:
        """`node`: the agent's node as `DLAAS_LOCAL_*` describe it (default: as the
        environment's settings do)."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._client = httpx.AsyncClient(base_url=agent_url, timeout=timeout, headers=headers)
        self.node = node if node is not None else local_node(Settings())

    @classmethod
    def from_settings(cls, settings: Settings) -> LocalBackend:
        return cls(settings.agent_url, token=agent_token(settings), node=local_node(settings))

    async def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = await self._client.request(method, path, **kwargs)
        except httpx.HTTPError as error:
            raise BackendUnavailable(f"node agent at {self._client.base_url}: {error!r}") from error
        if response.status_code == 401:
            raise BackendUnavailable(
                f"node agent at {self._client.base_url} refused the lifecycle manager's token: "
                "give it the agent's token in DLAAS_AGENT_TOKEN or DLAAS_AGENT_TOKEN_FILE"
            )
        if response.status_code == 421:
            raise BackendUnavailable(
                f"node agent at {self._client.base_url} does not answer to that name: add "
                f"{self._client.base_url.host!r} to the agent's DLAAS_AGENT_ALLOWED_HOSTS"
            )
        if response.status_code >= 500:
            raise BackendUnavailable(
                f"node agent at {self._client.base_url}: HTTP {response.status_code}"
            )
        response.raise_for_status()
        return response

    async def create_learners(self, specs: Sequence[LearnerSpec]) -> list[str]:
        responses = await asyncio.gather(*(self._put(spec) for spec in specs))
        return [spec.name for spec, created in zip(specs, responses, strict=True) if created]

    async def nodes(self) -> list[NodeCapacity]:
        return [self.node]

    async def _put(self, spec: LearnerSpec) -> bool:
        body = {
            "job": spec.job_id,
            "learner": spec.learner,
            "attempt": spec.attempt,
            "num_learners": spec.num_learners,
            "command": spec.command,
            "env": {**spec.env, **pretend_gpu_env(self.node, spec.resources.gpus)},
            "program_env": spec.program_env,
            "resources": asdict(spec.resources),
        }
        response = await self._request("PUT", f"/learners/{spec.name}", json=body)
        return response.status_code == 201

    async def delete_learners(
        self,
        job_id: str,
        *,
        wait: float = 0.0,
        grace: float | None = None,
        up_to_attempt: int | None = None,
    ) -> bool:
        return await self._delete(f"/jobs/{job_id}", wait, grace, up_to_attempt)

    async def _delete(
        self, path: str, wait: float, grace: float | None, up_to_attempt: int | None
    ) -> bool:
        params: dict[str, float] = {"wait": wait}
        if grace is not None:
            params["grace"] = grace
        if up_to_attempt is not None:
            params["up_to_attempt"] = up_to_attempt
        response = await self._request("DELETE", path, params=params, timeout=wait + 10)
        return bool(response.json()["gone"])

    async def delete_learner(self, name: str) -> None:
        await self._request("DELETE", f"/learners/{name}")

    async def delete_learner_of(
        self,
        job_id: str,
        learner: int,
        *,
        wait: float = 0.0,
        grace: float | None = None,
        up_to_attempt: int | None = None,
    ) -> bool:
        return await self._delete(f"/jobs/{job_id}/learners/{learner}", wait, grace, up_to_attempt)

    async def list_learners(self) -> list[LearnerStatus]:
        response = await self._request("GET", "/learners")
        return [
            LearnerStatus(
                job_id=item["job"],
                learner=item["learner"],
                attempt=item["attempt"],
                name=item["name"],
                phase=LearnerPhase(item["phase"]),
                exit_code=item["exit_code"],
                signal=item["signal"],
                reason=item["reason"],
                stopping=item["deleting"],
                told_to_stop=bool(item.get("stopped", False)),
                last_line=str(item.get("last_line", "")),
            )
            for item in response.json()["learners"]
        ]

    async def aclose(self) -> None:
        await self._client.aclose()
