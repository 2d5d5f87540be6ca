"""Credentials minted for one job's learners, and what they reach.

A job's code is the least trusted party of the platform: its learners hold no platform
credential, only a bearer token minted for the job when the lifecycle manager deploys an
attempt. The token reaches the job's own objects (`jobs/{id}/`, read and write) and the data
containers its manifest names (`data/{owner}/{container}/`, read only) through the API's
object gateway (`api/routes/job_objects.py`), and nothing else. It works while the job runs:
once the job is halted, finished or deleted, every token of the job is revoked, and a
token is also refused on use when its job's row says so, whatever the revocation did.

Only a hash of each token is stored (tokens are 256 random bits: a fast hash suffices).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from storage.job_states import STOPPED_STATES, JobState
from storage.models import Job, JobCredential, utcnow
from storage.object_store.base import validate_key, validate_prefix
from storage.training_data import data_prefix

# Job tokens look unlike users' (`dlaas_...`), so each side refuses the other's at a glance.
JOB_TOKEN_PREFIX = "dlaasjob_"


def hash_job_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_job_token() -> str:
    return JOB_TOKEN_PREFIX + secrets.token_urlsafe(32)


def is_job_token(token: str) -> bool:
    return token.startswith(JOB_TOKEN_PREFIX)


def credential_usable(state: str, deleted_at: datetime | None) -> bool:
    """Whether a job in `state` may still use its credentials: only while it may run."""
    return deleted_at is None and JobState(state) not in STOPPED_STATES


async def mint(session: AsyncSession, job_id: str) -> str:
    """A new token for the job's learners (committed with the caller's transaction)."""
    token = new_job_token()
    session.add(JobCredential(job_id=job_id, token_hash=hash_job_token(token)))
    await session.flush()
    return token


async def revoke(session: AsyncSession, job_id: str) -> int:
    """Revoke every token of the job; how many were still valid."""
    result = await session.execute(
        update(JobCredential)
        .where(JobCredential.job_id == job_id, JobCredential.revoked_at.is_(None))
        .values(revoked_at=utcnow())
        .execution_options(synchronize_session=False)
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


async def live_token_hashes(session: AsyncSession) -> dict[str, list[str]]:
    """job -> the hashes of its tokens that are valid now (not revoked, the job may run)."""
    stopped = [state.value for state in STOPPED_STATES]
    rows = await session.execute(
        select(JobCredential.job_id, JobCredential.token_hash)
        .join(Job, Job.id == JobCredential.job_id)
        .where(
            JobCredential.revoked_at.is_(None),
            Job.deleted_at.is_(None),
            Job.state.not_in(stopped),
        )
        .order_by(JobCredential.id)
    )
    live: dict[str, list[str]] = {}
    for job_id, token_hash in rows:
        live.setdefault(job_id, []).append(token_hash)
    return live


def named_containers(manifest: Mapping[str, Any]) -> list[str]:
    """Every data container the manifest's data stores name as training data."""
    names = []
    for store in manifest.get("data_stores") or []:
        section = store.get("training_data") if isinstance(store, Mapping) else None
        container = section.get("container") if isinstance(section, Mapping) else None
        if container and str(container) not in names:
            names.append(str(container))
    return names


class OutOfScope(Exception):
    """A key or prefix the job's credentials do not reach; `field` names what was sent."""

    def __init__(self, detail: str, field: str) -> None:
        super().__init__(detail)
        self.detail = detail
        self.field = field


@dataclass(frozen=True)
class JobScope:
    """What one job's credentials reach."""

    job_id: str
    readable: tuple[str, ...]  # prefixes readable only (the named data containers)

    @property
    def own(self) -> str:
        return f"jobs/{self.job_id}/"

    @classmethod
    def of(cls, job_id: str, owner_id: int, manifest: Mapping[str, Any]) -> JobScope:
        readable = tuple(data_prefix(owner_id, name) for name in named_containers(manifest))
        return cls(job_id=job_id, readable=readable)

    def _describe(self) -> str:
        reach = [f"{self.own} (read and write)"]
        reach += [f"{prefix} (read only)" for prefix in self.readable]
        return "a job's credentials reach only " + ", ".join(reach)

    def _check_text(self, text: str, field: str, *, is_key: bool) -> None:
        try:
            validate_key(text) if is_key else validate_prefix(text)
        except ValueError as refusal:
            raise OutOfScope(f"{refusal}; {self._describe()}", field) from None

    def check_read(self, key: str, field: str = "key") -> str:
        self._check_text(key, field, is_key=True)
        if key.startswith(self.own) or any(key.startswith(p) for p in self.readable):
            return key
        raise OutOfScope(f"{field} {key!r} is out of this job's reach: {self._describe()}", field)

    def check_write(self, key: str, field: str = "key") -> str:
        self._check_text(key, field, is_key=True)
        if key.startswith(self.own):
            return key
        raise OutOfScope(
            f"{field} {key!r} may not be written with this job's credentials: {self._describe()}",
            field,
        )

    def check_list(self, prefix: str, field: str = "prefix") -> str:
        """A prefix to list: within one of the reachable prefixes (a narrower one is fine)."""
        self._check_text(prefix, field, is_key=False)
        if any(prefix.startswith(p) for p in (self.own, *self.readable)):
            return prefix
        raise OutOfScope(
            f"{field} {prefix!r} is out of this job's reach: {self._describe()}", field
        )

    def check_delete(self, prefix: str, field: str = "prefix") -> str:
        self._check_text(prefix, field, is_key=False)
        if prefix.startswith(self.own):
            return prefix
        raise OutOfScope(
            f"{field} {prefix!r} may not be deleted with this job's credentials: "
            f"{self._describe()}",
            field,
        )


@dataclass(frozen=True)
class JobCredentialRecord:
    job_id: str
    owner_id: int
    scope: JobScope


async def lookup(session: AsyncSession, token: str) -> JobCredentialRecord | None:
    """The job a token was minted for, if it is valid now (not revoked, the job running)."""
    row = (
        await session.execute(
            select(
                JobCredential.revoked_at,
                Job.id,
                Job.owner_id,
                Job.state,
                Job.deleted_at,
                Job.manifest,
            )
            .join(Job, Job.id == JobCredential.job_id)
            .where(JobCredential.token_hash == hash_job_token(token))
        )
    ).one_or_none()
    if row is None:
        return None
    revoked_at, job_id, owner_id, state, deleted_at, manifest = row
    if revoked_at is not None or not credential_usable(state, deleted_at):
        return None
    return JobCredentialRecord(job_id, owner_id, JobScope.of(job_id, owner_id, manifest or {}))
