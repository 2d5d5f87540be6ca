"""End-to-end tests: one embedded platform (`dlaas up`) for this package's tests, shared by
them, and stopped once they are done rather than left idling until the run ends.

`Platform` (tests/platform.py) is the class the chaos and browser tests use as well.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.platform import Platform, Shown

__all__ = ["Platform", "Shown", "platform", "platform_with"]


def platform_with(
    factory: pytest.TempPathFactory, *, as_a_new_user: bool = False, **settings: str
) -> Iterator[Platform]:
    """A platform of its own with these settings (or as a new user starts it: see
    `Platform.up`), for a fixture to yield from."""
    running = Platform.up(factory.mktemp("dlaas-home"), settings, as_a_new_user=as_a_new_user)
    try:
        yield running
    finally:
        running.down()


@pytest.fixture(scope="package")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    yield from platform_with(tmp_path_factory)
