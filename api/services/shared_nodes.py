"""Nodes of the local backend that run every job as one OS user (no node agent as root, or
no namespace to show the agent's Python in): one user's job there reads another's files and
the platform's own. New users are warned; the jobs of users who are not admins are refused,
unless the operator accepts that (DLAAS_ALLOW_SHARED_NODES=1)."""

from __future__ import annotations

from typing import Any

from api.auth import Principal
from api.errors import Conflict
from api.state import ApiState
from storage import streams

FIX = (
    "run the platform as root (the node agent then gives each job a uid of its own), or set "
    "DLAAS_ALLOW_SHARED_NODES=1 to accept every user's jobs on nodes they share"
)


async def _reports(state: ApiState) -> tuple[int, dict[str, dict[str, Any]]]:
    """How many of the local backend's nodes reported, and those that run every job as one
    OS user."""
    if state.settings.cluster_backend != "local":
        return 0, {}
    nodes = await streams.anode_isolation(state.redis)
    shared = {node: report for node, report in nodes.items() if not report.get("isolated")}
    return len(nodes), shared


def _why(shared: dict[str, dict[str, Any]]) -> str:
    return "; ".join(
        f"on node {node}, {report.get('why') or 'no reason given'}"
        for node, report in sorted(shared.items())
    )


async def shared_user_warning(state: ApiState) -> str | None:
    """What a new user should know when the nodes run every job as the same OS user."""
    _, shared = await _reports(state)
    if not shared:
        return None
    refused = "" if state.settings.allow_shared_nodes else " (their jobs are refused until then)"
    return (
        "jobs on this platform run as one OS user, so one user's job can read another's "
        f"files and the platform's own: {_why(shared)}. Before sharing it{refused}: {FIX}"
    )


async def check_isolated(state: ApiState, user: Principal) -> None:
    """Refuse the job of a user who is not an admin when every node that reported runs
    every job as one OS user (409 node_not_isolated), unless the operator accepts it."""
    if user.is_admin or state.settings.allow_shared_nodes:
        return
    reported, shared = await _reports(state)
    if not shared or len(shared) < reported:
        return  # no node shares, or some node isolates jobs
    raise Conflict(
        "this platform's nodes run every job as one OS user, so your job could read other "
        f"users' jobs and the platform's tokens: {_why(shared)}. An admin can {FIX}",
        code="node_not_isolated",
    )
