"""`dlaas user ...`: users (created and listed by platform admins) and who you are."""

from __future__ import annotations

from typing import Annotated

import typer

from cli.context import Invocation, dlaas_command
from cli.output import format_time, note, print_json, print_plain, print_table
from cli.tokens import OutOption, hand_out_token

user_app = typer.Typer(help="Users, and who you are.", no_args_is_help=True)


@dlaas_command
def create(
    inv: Invocation,
    name: Annotated[str, typer.Argument(metavar="NAME", help="The new user's name.")],
    admin: Annotated[bool, typer.Option("--admin", help="Make them a platform admin.")] = False,
    out: OutOption = None,
) -> None:
    """Create a user, with a team of their own named after them; prints their token once."""
    made = inv.client().create_user(name, admin=admin)
    hand_out_token(inv, made, out)
    if inv.json:
        return
    note(
        f"user {made['name']} and their team {made['team']} created; hand them the token "
        "above (it is not shown again)"
    )
    if made.get("warning"):
        note(f"warning: {made['warning']}")


@dlaas_command
def list_users(inv: Invocation) -> None:
    """List every user (platform admins only)."""
    users = inv.client().users()
    if inv.json:
        print_json({"users": users})
        return
    print_table(
        ("USER", "ADMIN", "CREATED"),
        (
            (str(u["name"]), "yes" if u.get("admin") else "no", format_time(u.get("created_at")))
            for u in users
        ),
    )


@dlaas_command
def me(inv: Invocation) -> None:
    """Who this token belongs to, and their teams and roles."""
    info = inv.client().me()
    if inv.json:
        print_json(info)
        return
    print_plain(f"{info['name']}{' (platform admin)' if info.get('admin') else ''}")
    print_table(
        ("TEAM", "ROLE"),
        (
            (f"{t['team']}{' (your own)' if t.get('personal') else ''}", str(t["role"]))
            for t in info.get("teams") or []
        ),
    )


def register(app: typer.Typer) -> None:
    user_app.command("create")(create)
    user_app.command("list")(list_users)
    user_app.command("me")(me)
    app.add_typer(user_app, name="user")
