"""`dlaas team quota TEAM [--gpus A100=8 --cpus 16 ...]`: show a team's quota, or change
parts of it (platform admins); the options not given keep their values, `none` clears one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer

from cli.context import Invocation, dlaas_command
from cli.errors import CliError
from cli.output import format_number, format_size, print_json, print_plain, print_table

NONE = "none"
AMOUNTS = ("gpus", "cpus", "memory", "jobs")


def _gpus(option: str, values: list[str]) -> dict[str, int] | None:
    if [v.lower() for v in values] == [NONE]:
        return None
    counts: dict[str, int] = {}
    for value in values:
        product, _, count = value.partition("=")
        if not product or not count.isdigit():
            raise CliError(f"{option} {value!r}: use PRODUCT=COUNT, e.g. A100=8, or {NONE}")
        counts[product] = int(count)
    return counts


def _cpus(option: str, value: str) -> float | None:
    if value.lower() == NONE:
        return None
    try:
        return float(value)
    except ValueError:
        raise CliError(
            f"{option} {value!r}: use a number of CPUs, e.g. 16 or 0.5, or {NONE}"
        ) from None


def _memory(option: str, value: str) -> int | str | None:
    """Bytes as a number, else the text as it is: the server reads "64GiB" and names what
    it cannot read."""
    if value.lower() == NONE:
        return None
    return int(value) if value.isdigit() else value


def _jobs(option: str, value: str) -> int | None:
    if value.lower() == NONE:
        return None
    if not value.isdigit():
        raise CliError(f"{option} {value!r}: use a whole number of jobs, e.g. 10, or {NONE}")
    return int(value)


PARSERS: dict[str, Callable[[str, Any], Any]] = {
    "gpus": _gpus,
    "cpus": _cpus,
    "memory": _memory,
    "jobs": _jobs,
}


def _amount(value: Any, key: str) -> str:
    if value is None:
        return "unlimited"
    if key == "gpus":
        return ", ".join(f"{product}={count}" for product, count in sorted(value.items())) or "0"
    if key == "memory":
        return format_size(value)
    return format_number(value)


def show_quota(quota: dict[str, Any]) -> None:
    borrow = quota.get("borrowing_limit") or {}
    print_plain(f"team {quota['team']}")
    print_table(
        ("RESOURCE", "QUOTA", "BORROWING LIMIT"),
        (
            (key.upper(), _amount(quota.get(key), key), _amount(borrow.get(key), key))
            for key in AMOUNTS
        ),
    )
    weight = format_number(quota.get("weight"))
    print_plain(f"weight {weight}, max priority {quota.get('max_priority')}")


def merged(
    current: dict[str, Any], changes: dict[str, Any], borrow: dict[str, Any]
) -> dict[str, Any]:
    """The quota to PUT: the current one with the options given applied."""
    body = {key: current.get(key) for key in (*AMOUNTS, "weight", "max_priority")}
    borrowing = current.get("borrowing_limit") or {}
    body.update(changes)
    body["borrowing_limit"] = {key: borrowing.get(key) for key in AMOUNTS} | borrow
    return body


def _given(options: dict[str, Any], prefix: str) -> dict[str, Any]:
    """The amount options given, parsed, by amount."""
    return {
        key: PARSERS[key](f"--{prefix}{key}", value)
        for key, value in options.items()
        if value is not None and value != []
    }


def _amount_option(help_text: str, metavar: str = "N") -> Any:
    return typer.Option(
        metavar=metavar, help=f"{help_text}; none: not limited.", show_default=False
    )


def _gpu_counts(flag: str, help_text: str) -> Any:
    return typer.Option(
        flag, metavar="PRODUCT=COUNT", help=f"{help_text}; none: not limited.", show_default=False
    )


Amount = str | None
Products = list[str] | None


@dlaas_command
def quota(
    inv: Invocation,
    team: Annotated[str, typer.Argument(metavar="TEAM", help="The team's name.")],
    gpus: Annotated[
        Products,
        _gpu_counts(
            "--gpus",
            "GPUs guaranteed, by product; repeat it for several (together they replace the "
            "GPU quota)",
        ),
    ] = None,
    cpus: Annotated[Amount, _amount_option("CPUs guaranteed, e.g. 16")] = None,
    memory: Annotated[Amount, _amount_option("Memory guaranteed, e.g. 64GiB", "SIZE")] = None,
    jobs: Annotated[Amount, _amount_option("Jobs running at once")] = None,
    borrow_gpus: Annotated[
        Products, _gpu_counts("--borrow-gpus", "GPUs it may borrow beyond its quota, by product")
    ] = None,
    borrow_cpus: Annotated[Amount, _amount_option("CPUs it may borrow")] = None,
    borrow_memory: Annotated[Amount, _amount_option("Memory it may borrow", "SIZE")] = None,
    borrow_jobs: Annotated[Amount, _amount_option("Jobs it may run beyond its quota")] = None,
    weight: Annotated[
        float | None,
        typer.Option(metavar="W", help="Its weight in fair sharing (above 0).", show_default=False),
    ] = None,
    max_priority: Annotated[
        int | None,
        typer.Option(
            metavar="P", help="The highest priority its jobs may take (0-1000).", show_default=False
        ),
    ] = None,
) -> None:
    """Show a team's quota; with options, change it (platform admins only)."""
    changes = _given({"gpus": gpus, "cpus": cpus, "memory": memory, "jobs": jobs}, "")
    borrow = _given(
        {"gpus": borrow_gpus, "cpus": borrow_cpus, "memory": borrow_memory, "jobs": borrow_jobs},
        "borrow-",
    )
    changes.update(
        (key, value)
        for key, value in (("weight", weight), ("max_priority", max_priority))
        if value is not None
    )
    client = inv.client()
    result = client.team_quota(team)
    if changes or borrow:
        result = client.set_team_quota(team, merged(result, changes, borrow))
    if inv.json:
        print_json(result)
    else:
        show_quota(result)
