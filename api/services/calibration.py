"""The figures a calibration job measured (`learner_image.calibrate`), read from its results
for a plan. The caller must be allowed to read that job's results, as
`GET /v2/jobs/{id}/results/calibration.json` would check; every refusal names the
`calibration` parameter and says what to do."""

from __future__ import annotations

from anyio import to_thread

from api.access import readable_job
from api.auth import Principal
from api.errors import Conflict, Invalid
from api.permissions import PERMISSIONS
from api.state import ApiState
from storage.calibration import CALIBRATION_FILE, MAX_BYTES, Calibration, parse_calibration
from storage.job_states import JobState
from storage.object_store import ObjectNotFound, ObjectStore

FIELD = "calibration"
READ_RESULTS = PERMISSIONS["GET /v2/jobs/{job_id}/results/{path}"]
HOW_TO_CALIBRATE = (
    "run one with `dlaas train examples/calibrate/manifest.yml` (as many learners as the "
    "job will have, on the same kind of nodes) and name it once it has COMPLETED"
)


def calibration_key(job_id: str) -> str:
    return f"jobs/{job_id}/results/{CALIBRATION_FILE}"


def _read(objects: ObjectStore, key: str) -> bytes | None:
    """The file, or None when there is none or it is far larger than a calibration."""
    try:
        if objects.size(key) > MAX_BYTES:
            return None
        return objects.get_bytes(key)
    except ObjectNotFound:
        return None


async def read_calibration(state: ApiState, user: Principal, job_id: str) -> Calibration:
    """The calibration job `job_id` wrote. Raises NotFound (no such job among the caller's
    teams'), Conflict (it has not COMPLETED) or Invalid (it left no calibration)."""
    job = await readable_job(state, user, job_id, READ_RESULTS, FIELD)
    if job.state != JobState.COMPLETED:
        raise Conflict(
            f"calibration: job {job_id} is {job.state}, not COMPLETED, and its figures are "
            f"written as it ends: wait for it (`dlaas wait {job_id}`) and plan again",
            code="calibration_not_ready",
            field=FIELD,
        )
    raw = await to_thread.run_sync(_read, state.objects, calibration_key(job_id))
    if raw is None:
        raise Invalid(
            f"calibration: job {job_id} has no {CALIBRATION_FILE} of at most "
            f"{MAX_BYTES // 1024} KiB in its results, so it is not a calibration job; "
            + HOW_TO_CALIBRATE,
            code="not_a_calibration",
            field=FIELD,
        )
    try:
        return parse_calibration(raw)
    except ValueError as exc:
        raise Invalid(
            f"calibration: job {job_id}'s {CALIBRATION_FILE} {exc}, so it cannot be used; "
            + HOW_TO_CALIBRATE,
            code="not_a_calibration",
            field=FIELD,
        ) from None
