"""Domain errors raised by the API's services; one handler maps them to HTTP responses.

Every error carries an HTTP status, a machine-readable `code`, a human `detail` that names
the offending field and the fix, and optionally the dotted `field` path itself.
"""

from __future__ import annotations

from typing import Any, ClassVar


class DlaasError(Exception):
    """Base class: `status` and `code` have class defaults that an instance may override."""

    status: int = 400
    default_code: ClassVar[str] = "bad_request"

    def __init__(
        self,
        detail: str,
        *,
        code: str | None = None,
        field: str | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        self.code = code or self.default_code
        self.field = field
        if status is not None:
            self.status = status

    def to_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"error": self.code, "detail": self.detail}
        if self.field is not None:
            body["field"] = self.field
        return body

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(status={self.status}, code={self.code!r}, "
            f"field={self.field!r}, detail={self.detail!r})"
        )


class Invalid(DlaasError):
    """The request is well-formed but its content is refused (422)."""

    status = 422
    default_code = "invalid"


class NotFound(DlaasError):
    status = 404
    default_code = "not_found"


class Conflict(DlaasError):
    status = 409
    default_code = "conflict"


class TooLarge(DlaasError):
    status = 413
    default_code = "too_large"


class Unauthorized(DlaasError):
    status = 401
    default_code = "unauthorized"


class Forbidden(DlaasError):
    status = 403
    default_code = "forbidden"
