"""Chaos tests: faults injected into a real embedded platform (`dlaas up`), one for this
package's tests.

The platform fixture is the end-to-end tests' own; these tests kill, freeze and restart its
processes, so they get a platform of their own rather than sharing one with other tests.
"""

from __future__ import annotations

from tests.e2e.conftest import platform

__all__ = ["platform"]
