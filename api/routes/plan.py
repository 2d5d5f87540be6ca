"""/v2/plan: what the performance model predicts for a manifest, before it is submitted."""

from __future__ import annotations

from typing import Annotated, Any

from anyio import to_thread
from fastapi import APIRouter, Query, Request
from starlette.datastructures import UploadFile

from api.access import Allowed
from api.deps import StateDep
from api.errors import Invalid
from api.manifest import MAX_MANIFEST_BYTES
from api.plan_schemas import PlanPublic
from api.services import plan as service
from api.services.calibration import read_calibration
from storage.jobs import JOB_ID_PATTERN

router = APIRouter(prefix="/v2/plan", tags=["plan"])

# A manifest alone, as YAML: the media types YAML goes by, and plain text.
YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/plain")
_MANIFEST_PART: dict[str, Any] = {
    "type": "string",
    "format": "binary",
    "description": "the manifest, YAML, with a performance block",
}
_PLAN_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            # as `POST /v2/jobs` takes it, without the model
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["manifest"],
                    "properties": {"manifest": _MANIFEST_PART},
                    "additionalProperties": False,
                },
                "encoding": {"manifest": {"contentType": "application/yaml"}},
            },
            "application/yaml": {"schema": _MANIFEST_PART},
        },
    }
}


async def _manifest_text(request: Request) -> bytes:
    kind = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if kind in YAML_TYPES:
        return await request.body()
    if kind != "multipart/form-data":
        raise Invalid(
            "send the manifest as multipart/form-data (manifest=@manifest.yml, as for "
            "POST /v2/jobs) or as the body with Content-Type: application/yaml",
            code="unsupported_body",
            field="body",
        )
    async with request.form(max_files=2, max_fields=2) as form:
        for name in form:
            if name != "manifest":
                raise Invalid(
                    f"the multipart form has a field {name!r} that a plan does not take: "
                    "send only manifest",
                    code="unknown_field",
                    field=name,
                )
        manifest = form.get("manifest")
        if not isinstance(manifest, UploadFile):
            raise Invalid(
                "the multipart form has no file field 'manifest': send the manifest YAML as "
                "manifest=@FILE",
                code="missing_field",
                field="manifest",
            )
        # one byte over the limit is enough for parse_manifest to refuse it by its size
        return await manifest.read(MAX_MANIFEST_BYTES + 1)


# A query parameter rather than a multipart part: the body may be the YAML itself, which
# has no room for a second part, and a job id is a name, not an upload.
CalibrationQuery = Annotated[
    str | None,
    Query(
        pattern=JOB_ID_PATTERN,
        max_length=40,
        description="a COMPLETED calibration job (`learner_image.calibrate`, see "
        "examples/calibrate) whose results' calibration.json the plan uses: its link "
        "replaces DLAAS_NETWORK_*, its device speed turns performance.flops_per_sample "
        "into seconds. The caller must be allowed to read that job's results.",
    ),
]


@router.post("", response_model=PlanPublic, openapi_extra=_PLAN_BODY)
async def plan_job(
    request: Request, state: StateDep, user: Allowed, calibration: CalibrationQuery = None
) -> PlanPublic:
    """Predict step time, throughput, time to finish and scaling efficiency for each size
    the manifest allows (its elastic learners and batch range, else 1 to `learners` at
    `performance.batch_size`), and recommend one: the fewest learners within 10% of the
    fastest. The manifest needs a `performance` block; nothing of the caller's or anyone
    else's is read or written. The body is the manifest: a multipart `manifest` part as a submission
    sends it, or the YAML itself (application/yaml; application/x-yaml, text/yaml and
    text/plain are read as YAML too). With `calibration`, the figures a calibration job
    measured replace the configured ones; the answer's `costs.source`, `network.source`
    and `calibration.used` say which."""
    text = await _manifest_text(request)
    calibrated = None
    if calibration is not None:
        measured = await read_calibration(state, user, calibration)
        calibrated = service.Calibrated(calibration, measured)
    return await to_thread.run_sync(service.plan_manifest, text, state.settings, calibrated)
