"""What every /v2 JSON request body shares: strict types, and unknown fields refused, so a
misspelled field (`expires_in_s` for `expires_in`) is a 422 naming it rather than a request
silently done without it. The FfDL-compatible /v1 bodies (`api.ffdl_v1.schemas`) stay
lenient, as FfDL's clients expect."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class RequestBody(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
