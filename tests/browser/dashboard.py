"""Driving the dashboard in a browser test: signing in, and checking a page with axe-core.

Every wait here is on something the page shows (a selector), never on time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page

CHROMIUM = Path("/usr/bin/chromium")
# Playwright's own Chromium download fails on these machines; Debian's build is driven
# instead. No sandbox (tests run as root in a container), no GPU, and none of the
# background traffic a desktop browser makes on start. bench/dashboard.py launches it so too.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
AXE = Path(__file__).with_name("vendor") / "axe.min.js"  # test-only, see vendor/vendor.json
FAILING_IMPACTS = ("serious", "critical")


def sign_in(page: Page, base_url: str, token: str) -> None:
    """Open the sign-in link `dlaas up` prints and wait for the jobs page it lands on."""
    page.goto(f"{base_url.rstrip('/')}/ui/#token={token}")
    page.wait_for_selector("[data-page=jobs]")


def assert_accessible(page: Page) -> None:
    """Run axe-core on the page as it stands; fail listing every serious or critical
    violation (rule, impact, what it asks for, and the elements that break it)."""
    if not page.evaluate("() => typeof window.axe === 'object'"):
        # Not `page.add_script_tag`: that inserts an inline <script>, which the dashboard's
        # Content-Security-Policy (script-src 'self') rightly blocks. Evaluated through the
        # browser's debugging protocol, axe runs without loosening the page's policy, so the
        # tests still see what the policy blocks.
        page.evaluate(AXE.read_text() + "\n;undefined")
    results: dict[str, Any] = page.evaluate(
        "() => axe.run(document, {resultTypes: ['violations']})"
    )
    violations = [v for v in results["violations"] if v.get("impact") in FAILING_IMPACTS]
    if violations:
        pytest.fail(
            f"{len(violations)} serious accessibility violation(s) on {page.url}:\n"
            + "\n".join(_describe(violation) for violation in violations),
            pytrace=False,
        )


def _describe(violation: dict[str, Any]) -> str:
    nodes = violation.get("nodes", [])
    targets = "\n".join(
        f"      {node.get('target')}: {node.get('html', '')[:160]}" for node in nodes
    )
    return (
        f"  {violation['id']} ({violation['impact']}): {violation['help']}\n"
        f"    {violation.get('helpUrl', '')}\n{targets}"
    )
