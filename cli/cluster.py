"""`dlaas cluster`: what the platform runs on and how much room it has."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer
from rich.table import Table
from rich.text import Text

from cli.context import Invocation, dlaas_command
from cli.output import format_size, print_json, stdout_console


@dlaas_command
def cluster(inv: Invocation) -> None:
    """Show the cluster backend, its nodes and free capacity."""
    info = inv.client().cluster()
    if inv.json:
        print_json(info)
        return
    console = stdout_console()
    for key, value in info.items():
        if key == "nodes" and isinstance(value, list):
            console.print(Text(f"{key}:", style="bold"))
            console.print(_nodes_table(value))
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            console.print(Text(f"{key}:", style="bold"))
            console.print(_table(value))
        elif isinstance(value, dict):
            pairs = ", ".join(f"{k}={_scalar(v)}" for k, v in value.items())
            console.print(Text.assemble((f"{key}: ", "bold"), pairs))
        else:
            console.print(Text.assemble((f"{key}: ", "bold"), _scalar(value)))


def _table(rows: list[dict[str, Any]]) -> Table:
    columns: list[str] = []
    for row in rows:
        columns.extend(k for k in row if k not in columns)
    table = Table(box=None, header_style="bold")
    for column in columns:
        table.add_column(column.upper())
    for row in rows:
        table.add_row(*(_scalar(row.get(c)) for c in columns))
    return table


def _nodes_table(nodes: list[dict[str, Any]]) -> Table:
    """One line a node, each resource as what learners hold of what the node has."""
    table = Table(box=None, header_style="bold")
    for column in ("NAME", "LEARNERS", "CPUS", "MEMORY", "GPUS"):
        table.add_column(column)
    for node in nodes:
        gpus = _used_of(node, "gpus", _scalar)
        if node.get("gpus") and node.get("gpu_product"):
            gpus += f" {node['gpu_product']}"
        if node.get("pretend_gpus"):
            gpus += " (pretend: learners run on CPU)"
        table.add_row(
            _scalar(node.get("name")),
            _scalar(node.get("learners", 0)),
            _used_of(node, "cpus", _scalar),
            _used_of(node, "memory_bytes", format_size),
            gpus,
        )
    return table


def _used_of(node: dict[str, Any], key: str, shown: Callable[[Any], str]) -> str:
    """What the node's learners hold of `key`, over what the node has."""
    return f"{shown(node.get(f'{key}_used', 0))}/{shown(node.get(key))}"


def _scalar(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict):
        return ", ".join(f"{k}={_scalar(v)}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(_scalar(v) for v in value)
    return str(value)


def register(app: typer.Typer) -> None:
    app.command("cluster")(cluster)
