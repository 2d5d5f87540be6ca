"""`dlaas cluster`: what the platform runs on and how much room it has."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer
from rich.text import Text

from cli.context import Invocation, dlaas_command
from cli.output import format_field, format_size, print_json, print_table, stdout_console


@dlaas_command
def cluster(inv: Invocation) -> None:
    """Show the cluster backend, its nodes and free capacity."""
    info = inv.client().cluster()
    if inv.json:
        print_json(info)
        return
    console = stdout_console()
    published = info.get("published")
    where = (
        "nodes as the lifecycle manager last reported them"
        if published
        else "not reported by the lifecycle manager yet: this machine as its settings say"
        if published is not None
        else ""
    )
    console.print(
        Text.assemble(
            ("backend: ", "bold"), str(info.get("backend", "?")), f" ({where})" * bool(where)
        )
    )
    if isinstance(info.get("nodes"), list):
        _print_nodes(info["nodes"])
    if "active_learners" in info:
        count = info["active_learners"]
        console.print(f"{count} learner{'' if count == 1 else 's'} holding room on the nodes")
    if info.get("gpus_by_product"):
        pairs = ", ".join(f"{n} {product}" for product, n in info["gpus_by_product"].items())
        console.print(Text.assemble(("GPUs: ", "bold"), pairs))
    # the rest (`used`, what all the nodes' learners hold; anything a newer server adds)
    for key, value in info.items():
        if key in _SHOWN:
            continue
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            console.print(Text(f"{key}:", style="bold"))
            _print_rows(value)
        elif isinstance(value, dict):
            pairs = ", ".join("=".join(_field(k, v)) for k, v in value.items())
            console.print(Text.assemble((f"{key}: ", "bold"), pairs))
        else:
            label, shown = _field(key, value)
            console.print(Text.assemble((f"{label}: ", "bold"), shown))


# Keys shown above in words.
_SHOWN = frozenset({"backend", "published", "nodes", "active_learners", "gpus_by_product"})


def _print_rows(rows: list[dict[str, Any]]) -> None:
    columns: list[str] = []
    for row in rows:
        columns.extend(k for k in row if k not in columns)
    headers = [_field(column, None)[0].upper() for column in columns]
    print_table(
        headers,
        ([_field(c, row.get(c))[1] for c in columns] for row in rows),
        free=headers,
    )


def _print_nodes(nodes: list[dict[str, Any]]) -> None:
    """One line a node, each resource as what learners hold of what the node has."""
    rows = []
    for node in nodes:
        gpus = _used_of(node, "gpus", _scalar)
        if node.get("gpus") and node.get("gpu_product"):
            gpus += f" {node['gpu_product']}"
        if node.get("pretend_gpus"):
            gpus += " (pretend: learners run on CPU)"
        rows.append(
            (
                _scalar(node.get("name")),
                _scalar(node.get("learners", 0)),
                _used_of(node, "cpus", _scalar),
                _used_of(node, "memory_bytes", format_size),
                gpus,
            )
        )
    print_table(("NAME", "LEARNERS", "CPUS", "MEMORY", "GPUS"), rows, free=("GPUS",))


def _used_of(node: dict[str, Any], key: str, shown: Callable[[Any], str]) -> str:
    """What the node's learners hold of `key`, over what the node has."""
    return f"{shown(node.get(f'{key}_used', 0))}/{shown(node.get(key))}"


def _field(key: str, value: Any) -> tuple[str, str]:
    """`(label, text)`: sizes and spans in human units (`memory_bytes` -> memory 23.5 GiB)."""
    return format_field(key, value) or (key, _scalar(value))


def _scalar(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict):
        return ", ".join("=".join(_field(k, v)) for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(_scalar(v) for v in value)
    return str(value)


def register(app: typer.Typer) -> None:
    app.command("cluster")(cluster)
