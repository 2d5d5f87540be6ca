"""Browser tests: the dashboard in Debian's Chromium, driven by Playwright, against a real
embedded platform.

Fixtures:
    chromium  (session) -> Path      /usr/bin/chromium, installed with apt-get first if it
                                     is missing and the tests run as root (a fresh CI machine)
    platform  (package) -> Platform  `dlaas up` in a temporary home (tests/platform.py):
                                     `.url`, `.token` (the admin's), `.create_user(name)`
    browser   (package) -> Browser   headless Chromium, one for all the browser tests
    page      (test)    -> Page      a fresh context (no storage shared with other tests),
                                     1280x800; its screenshot is saved when the test ends, to
                                     `$DLAAS_TEST_ARTIFACTS/screenshots/<test name>.png`
                                     (default: `.artifacts/` in the repository)

Helpers to drive the pages (`sign_in`, `assert_accessible`) are in tests/browser/dashboard.py.

The platform and the browser last for this package's tests, not the whole run. Playwright's
synchronous API marks its own event loop as the running one for as long as it is open, and
pytest-asyncio refuses to run an async test while a loop runs ("Runner.run() cannot be called
from a running event loop"): a session-wide browser broke every async test collected after
this folder. So browser tests are plain `def` tests, and the browser stops when they end.
"""

from __future__ import annotations

import fcntl
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, ViewportSize, sync_playwright
from playwright.sync_api import Error as PlaywrightError

from tests.browser.dashboard import CHROMIUM, CHROMIUM_ARGS
from tests.platform import Platform

INSTALL = ("apt-get update", "apt-get install -y chromium")
APT_LOCK_WAIT_S = 600.0
APT_LOCK_RETRY_S = 2.0
VIEWPORT: ViewportSize = {"width": 1280, "height": 800}
REPO = Path(__file__).resolve().parents[2]


def artifacts_dir() -> Path:
    """Where tests leave what a person looks at after a run (screenshots)."""
    return Path(os.environ.get("DLAAS_TEST_ARTIFACTS") or REPO / ".artifacts")


@pytest.fixture(scope="session")
def chromium() -> Path:
    """Debian's Chromium, installed here if missing: the browser tests never skip."""
    if CHROMIUM.exists():
        return CHROMIUM
    commands = " && ".join(INSTALL)
    if os.geteuid() != 0:
        pytest.fail(f"{CHROMIUM} is missing; install it as root: `{commands}`", pytrace=False)
    # Each test process (pytest -n) comes here at once on a fresh machine: one installs
    # while the others wait for it, then find Chromium there.
    with open(Path(tempfile.gettempdir()) / "dlaas-tests-chromium.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not CHROMIUM.exists():
            _install_chromium(commands)
    if not CHROMIUM.exists():
        pytest.fail(f"`{commands}` succeeded but {CHROMIUM} is still missing", pytrace=False)
    return CHROMIUM


def _install_chromium(commands: str) -> None:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in INSTALL:
        argv = [*command.split(), "-o", "DPkg::Lock::Timeout=600"]
        give_up = time.monotonic() + APT_LOCK_WAIT_S
        while True:
            try:
                done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=1200)
            except (OSError, subprocess.TimeoutExpired) as error:
                pytest.fail(
                    f"`{command}` failed ({error}); run `{commands}` as root", pytrace=False
                )
            # apt-get update does not wait for another apt holding the lists' lock
            if done.returncode == 0 or "Could not get lock" not in done.stderr:
                break
            if time.monotonic() > give_up:
                break
            time.sleep(APT_LOCK_RETRY_S)
        if done.returncode != 0:
            pytest.fail(
                f"`{command}` exited {done.returncode}; run `{commands}` as root\n"
                f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}",
                pytrace=False,
            )


@pytest.fixture(scope="package")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    running = Platform.up(tmp_path_factory.mktemp("dlaas-home"))
    try:
        yield running
    finally:
        running.down()


@pytest.fixture(scope="package")
def browser(chromium: Path) -> Iterator[Browser]:
    playwright = sync_playwright().start()
    try:
        launched = playwright.chromium.launch(
            executable_path=str(chromium), headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield launched
        finally:
            launched.close()
    finally:
        playwright.stop()  # unmarks its loop: async tests after this package run again


@pytest.fixture
def page(browser: Browser, request: pytest.FixtureRequest) -> Iterator[Page]:
    context = browser.new_context(viewport=VIEWPORT)
    opened = context.new_page()
    problems: list[str] = []
    opened.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    opened.on(
        "console",
        lambda message: (
            problems.append(f"console {message.type}: {message.text}")
            if message.type == "error"
            else None
        ),
    )
    try:
        yield opened
    finally:
        screenshot = artifacts_dir() / "screenshots" / f"{_file_name(request.node.name)}.png"
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        try:
            opened.screenshot(path=screenshot, full_page=True)
        except PlaywrightError as error:  # a crashed or closed page: say so, keep the result
            print(f"no screenshot of {request.node.name}: {error}")
        else:
            print(f"screenshot: {screenshot}")
        context.close()
        # printed, so shown beside a failing test: what the page itself complained about
        for problem in problems:
            print(problem)


def _file_name(test_name: str) -> str:
    return re.sub(r"[^\w.-]+", "_", test_name).strip("_")
