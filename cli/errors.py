"""What the CLI says when something fails: one line naming the problem and the fix."""

from __future__ import annotations

import re
from urllib.parse import unquote

from cli.client import ApiError, DlaasConnectionError
from cli.config import ConfigError


class CliError(Exception):
    """A failure the CLI detected itself (bad argument, missing file); exits with `code`."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


_JOB_PATH = re.compile(r"^/v2/jobs/([^/]+)")
_DATA_PATH = re.compile(r"^/v2/data/([^/]+)")


def describe_error(exc: BaseException) -> str:
    if isinstance(exc, CliError):
        return exc.message
    if isinstance(exc, ConfigError):
        return str(exc)
    if isinstance(exc, DlaasConnectionError):
        return describe_connection_error(exc)
    if isinstance(exc, ApiError):
        return describe_api_error(exc)
    return (
        f"unexpected error: {type(exc).__name__}: {exc} (run again with --debug for the traceback)"
    )


def describe_connection_error(exc: DlaasConnectionError) -> str:
    if exc.refused:
        return (
            f"cannot reach dlaas at {exc.url}: is it running? start it with `dlaas up`, "
            "or point DLAAS_URL / --url at your server"
        )
    return f"lost contact with dlaas at {exc.url}: {exc.reason}; check that the server is up"


def describe_api_error(exc: ApiError) -> str:
    detail = exc.detail.strip()
    if exc.status == 401 and exc.code in ("token_revoked", "token_expired"):
        return f"authentication failed: {detail}"
    if exc.status == 401:
        return "authentication failed: set DLAAS_TOKEN or run `dlaas up` to write a token"
    if exc.status == 403:
        return f"not allowed: {detail or 'your token may not do this'}"
    if exc.status == 404:
        job = _JOB_PATH.match(exc.path)
        if job and exc.code == "deleted" and detail:
            return detail
        if job and "/results/" not in exc.path:
            return f"no job {unquote(job.group(1))}: see your jobs with `dlaas list`"
        data = _DATA_PATH.match(exc.path)
        if data and not detail:
            return f"no data container {unquote(data.group(1))}: upload with `dlaas data upload`"
        return f"not found: {detail or f'{exc.method} {unquote(exc.path)}'}"
    if exc.status >= 500:
        hint = "" if "log" in detail else "; this is a bug in dlaas, see the server log"
        where = f"{exc.method} {exc.path}"
        return f"dlaas server error {exc.status} on {where}: {detail or exc.code}{hint}"
    prefix = f"{exc.field}: " if exc.field and exc.field not in detail else ""
    return f"{prefix}{detail or exc.code} ({exc.status} {exc.code})"
