"""Serves the dashboard: one page shell for every `/ui/...` path, and its static assets.

The pages are a client of the public `/v2` API, exactly as the CLI is: they send the same
bearer token, see the same cursors and the same field errors, and need no second way to
sign in (no cookie, so no cross-site request can act with a user's rights). The token lives
in the browser's local storage; the policy below lets only the dashboard's own scripts run.
"""

from __future__ import annotations

import os
from os import PathLike
from pathlib import Path

from fastapi import APIRouter, FastAPI
from fastapi.responses import FileResponse, RedirectResponse
from starlette.responses import Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

STATIC_DIR = Path(__file__).with_name("static")
SHELL = STATIC_DIR / "index.html"

CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        # uPlot positions its cursor and legend with style attributes
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data: blob:",
        "connect-src 'self'",
        "font-src 'self'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)
_PAGE_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}

router = APIRouter(include_in_schema=False)


@router.get("/")
async def root() -> RedirectResponse:
    return RedirectResponse("/ui/", status_code=307)


@router.get("/ui")
async def dashboard_root() -> RedirectResponse:
    return RedirectResponse("/ui/", status_code=307)


@router.get("/ui/{page:path}")
async def dashboard_page(page: str) -> FileResponse:
    """Every page is the same shell; its script draws the page the path names."""
    return FileResponse(SHELL, media_type="text/html", headers=_PAGE_HEADERS)


class DashboardStatic(StaticFiles):
    """The assets, revalidated on each load (a new dlaas version's scripts are seen at once)
    and never sniffed as another type."""

    def file_response(
        self,
        full_path: PathLike[str] | str,
        stat_result: os.stat_result,
        scope: Scope,
        status_code: int = 200,
    ) -> Response:
        response = super().file_response(full_path, stat_result, scope, status_code)
        response.headers["Cache-Control"] = "no-cache"
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response


def install_dashboard(app: FastAPI) -> None:
    # the assets' mount goes first: the page route would otherwise answer for them too
    app.mount("/ui/static", DashboardStatic(directory=STATIC_DIR), name="dashboard-static")
    app.include_router(router)
