"""`dlaas up` / `dlaas down`: start and stop the embedded platform (registered in main)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the `up` and `down` commands to `app`."""
