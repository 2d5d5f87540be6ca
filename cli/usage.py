"""`dlaas usage`: what you keep on the platform, against your storage quota."""

from __future__ import annotations

import typer

from cli.context import Invocation, dlaas_command
from cli.output import format_size, print_json, print_plain


@dlaas_command
def usage(inv: Invocation) -> None:
    """Show the bytes in your data containers and jobs' results, and your storage quota."""
    info = inv.client().usage()
    if inv.json:
        print_json(info)
        return
    quota = info.get("quota_bytes")
    print_plain(f"data containers  {format_size(info.get('data_bytes', 0))}")
    print_plain(f"jobs' results    {format_size(info.get('results_bytes', 0))}")
    used = format_size(info.get("used_bytes", 0))
    if quota is None:
        print_plain(f"in all           {used} (no quota)")
    else:
        left = format_size(info.get("left_bytes", 0))
        print_plain(f"in all           {used} of {format_size(quota)} ({left} left)")


def register(app: typer.Typer) -> None:
    app.command("usage")(usage)
