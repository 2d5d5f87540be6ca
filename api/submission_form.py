"""The multipart form of a job submission, as /v2 (`manifest`, `model`) and FfDL's /v1
(`manifest`, `model_definition`) take it: its framing checked, its files found, its answer
stored with the job for a retry (`Idempotency-Key`)."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from fastapi import Request
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.datastructures import UploadFile

from api.errors import DlaasError, Invalid
from api.idempotency import Claim
from api.services.jobs import JobCreated
from storage.models import Job

MANIFEST_MAX = 64 * 1024


def check_framing(request: Request, fields: str) -> None:
    """A submission is a multipart form of known length (the body limit is checked on it)."""
    length = request.headers.get("content-length")
    if length is None or not length.isdigit():
        raise DlaasError(
            "send the upload with a Content-Length header",
            code="length_required",
            field="Content-Length",
            status=411,
        )
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise Invalid(
            f"send multipart/form-data with the fields {fields}",
            code="not_multipart",
            field="body",
        )


def form_file(form: Any, name: str, what: str) -> UploadFile:
    value = form.get(name)
    if not isinstance(value, UploadFile):
        raise Invalid(
            f"the multipart form has no file field {name!r}: send {what} as {name}=@FILE",
            code="missing_field",
            field=name,
        )
    return value


def refuse_unknown_fields(form: Any, known: Collection[str]) -> None:
    for name in form:
        if name not in known:
            raise Invalid(
                f"the multipart form has a field {name!r} that a submission does not take: "
                f"send only {', '.join(known)}",
                code="unknown_field",
                field=name,
            )


async def submitted_files(
    form: Any, known: Collection[str], archive_field: str
) -> tuple[bytes, UploadFile]:
    """The manifest's text (read up to one byte past its limit, which the parser refuses)
    and the archive's upload, of a form whose fields are all `known`."""
    refuse_unknown_fields(form, known)
    manifest = form_file(form, "manifest", "the manifest YAML")
    archive = form_file(form, archive_field, "the model code zip")
    return await manifest.read(MANIFEST_MAX + 1), archive


# The answer to a submission of `job` (its team's name given): status, body, headers
Answer = Callable[[Job, str], tuple[int, bytes, dict[str, str]]]


def answer_stored_with_job(claim: Claim | None, answer: Answer) -> JobCreated | None:
    """A submission's answer is stored with its job row: a retry after a crash at any point
    finds either no job and no answer, or both."""
    if claim is None:
        return None

    async def store(session: AsyncSession, job: Job, team: str) -> None:
        status, body, headers = answer(job, team)
        await claim.store_answer(session, status, body, headers)

    return store
