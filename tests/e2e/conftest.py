"""End-to-end tests: one embedded platform (`dlaas up`) per session, shared by the tests.

`Platform` (tests/platform.py) is the class the chaos and browser tests use as well.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.platform import Platform, Shown

__all__ = ["Platform", "Shown", "platform"]


@pytest.fixture(scope="session")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    running = Platform.up(tmp_path_factory.mktemp("dlaas-home"))
    try:
        yield running
    finally:
        running.down()
