"""`dlaas token ...`: your named API tokens, with an optional expiry; and `--out`, which
writes a new token to a file only its owner can read."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from cli.config import write_private
from cli.context import Invocation, dlaas_command
from cli.errors import CliError
from cli.output import format_time, note, print_json, print_plain, print_table

token_app = typer.Typer(help="Your API tokens: create, list, revoke.", no_args_is_help=True)

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"^([0-9]{1,6})([smhdw])$")

OutOption = Annotated[
    Path | None,
    typer.Option(
        "--out",
        help="Also write the token to this file, created readable by you alone (0600).",
        show_default=False,
    ),
]
UserOption = Annotated[
    str | None,
    typer.Option("--user", help="Another user's tokens (platform admins).", show_default=False),
]


def parse_duration(text: str) -> int:
    """`30d`, `12h`, `90m`, `45s`, `2w` in seconds."""
    match = _DURATION.fullmatch(text.strip().lower())
    if match is None:
        raise CliError(
            f"--expires-in {text!r} is not a duration: write a number and a unit, "
            "such as 30d, 12h, 90m, 45s or 2w"
        )
    seconds = int(match.group(1)) * _UNITS[match.group(2)]
    if seconds == 0:
        raise CliError(
            f"--expires-in {text!r} would expire the token at once: give a duration above "
            "zero, such as 1h, or leave the option out for a token that does not expire"
        )
    return seconds


def default_token_name(now: datetime | None = None) -> str:
    return "token-" + (now or datetime.now(UTC)).strftime("%Y%m%d-%H%M%S")


def hand_out_token(inv: Invocation, made: dict[str, Any], out: Path | None) -> None:
    """An answer holding a new token: written to `out` (created 0600) when asked, and
    printed, all of it as JSON, else the token alone on stdout."""
    if out is not None:
        write_private(out.expanduser(), f"{made['token']}\n")
    if inv.json:
        print_json(made)
    else:
        print_plain(str(made["token"]))


@dlaas_command
def create(
    inv: Invocation,
    name: Annotated[
        str | None,
        typer.Option("--name", help="Its name (default: token-DATE-TIME).", show_default=False),
    ] = None,
    expires_in: Annotated[
        str | None,
        typer.Option(
            "--expires-in",
            metavar="DURATION",
            help="It stops working after this long: 30d, 12h, 90m... (default: never).",
            show_default=False,
        ),
    ] = None,
    out: OutOption = None,
) -> None:
    """Create a token and print it: it is shown this once, never again."""
    seconds = parse_duration(expires_in) if expires_in is not None else None
    made = inv.client().create_token(name or default_token_name(), seconds)
    hand_out_token(inv, made, out)
    if inv.json:
        return
    expiry = f", expires {format_time(made['expires_at'])}" if made.get("expires_at") else ""
    note(f"token {made['name']} (id {made['id']}{expiry}): copy it now, it is not shown again")


@dlaas_command
def list_tokens(inv: Invocation, user: UserOption = None) -> None:
    """List your tokens that are not revoked (never the tokens themselves)."""
    tokens = inv.client().tokens(user)
    if inv.json:
        print_json({"tokens": tokens})
        return
    print_table(
        ("ID", "NAME", "CREATED", "EXPIRES", "LAST USED"),
        (
            (
                str(t["id"]),
                str(t["name"]),
                format_time(t.get("created_at")),
                format_time(t.get("expires_at")) if t.get("expires_at") else "never",
                format_time(t.get("last_used_at")) if t.get("last_used_at") else "never",
            )
            for t in tokens
        ),
    )


@dlaas_command
def revoke(
    inv: Invocation,
    name_or_id: Annotated[
        str, typer.Argument(metavar="NAME_OR_ID", help="The token's name or id.")
    ],
    user: UserOption = None,
) -> None:
    """Revoke a token: every API worker refuses it within a second."""
    revoked: dict[str, Any] = inv.client().revoke_token(name_or_id, user)
    if inv.json:
        print_json(revoked)
    else:
        print_plain(f"revoked token {revoked['name']} (id {revoked['id']})")


def register(app: typer.Typer) -> None:
    token_app.command("create")(create)
    token_app.command("list")(list_tokens)
    token_app.command("revoke")(revoke)
    app.add_typer(token_app, name="token")
