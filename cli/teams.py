"""`dlaas team ...`: teams and their members' roles (viewer, member, team_admin)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

import typer

from cli.context import Invocation, dlaas_command
from cli.output import format_time, note, print_json, print_plain, print_table
from cli.team_quota import quota

team_app = typer.Typer(help="Teams: who may see and act on which jobs.", no_args_is_help=True)

TeamName = Annotated[str, typer.Argument(metavar="TEAM", help="The team's name.")]
UserName = Annotated[str, typer.Argument(metavar="USER", help="A user's name.")]


class RoleName(StrEnum):
    viewer = "viewer"
    member = "member"
    team_admin = "team_admin"


def _yes_no(value: Any) -> str:
    return "yes" if value else "no"


@dlaas_command
def create(inv: Invocation, name: TeamName) -> None:
    """Create a team (platform admins only); add members with `dlaas team add-member`."""
    team = inv.client().create_team(name)
    if inv.json:
        print_json(team)
        return
    print_plain(f"created team {team['name']}")
    note(f"add members with `dlaas team add-member {team['name']} USER --role member`")


@dlaas_command
def list_teams(inv: Invocation) -> None:
    """List your teams (a platform admin: every team) and your role in each."""
    teams = inv.client().teams()
    if inv.json:
        print_json({"teams": teams})
        return
    print_table(
        ("TEAM", "YOUR ROLE", "MEMBERS", "PERSONAL", "CREATED"),
        (
            (
                str(t["name"]),
                str(t.get("role") or "-"),
                str(t.get("members", "")),
                _yes_no(t.get("personal")),
                format_time(t.get("created_at")),
            )
            for t in teams
        ),
    )


@dlaas_command
def show(inv: Invocation, name: TeamName) -> None:
    """Show a team and its members."""
    client = inv.client()
    team = client.team(name)
    members = client.team_members(name)
    if inv.json:
        print_json({"team": team, "members": members})
        return
    print_plain(f"team {team['name']}: {team['members']} members, your role {team['role'] or '-'}")
    print_table(("USER", "ROLE"), ((str(m["user"]), str(m["role"])) for m in members))


@dlaas_command
def add_member(
    inv: Invocation,
    team: TeamName,
    user: UserName,
    role: Annotated[RoleName, typer.Option("--role", help="The member's role.")] = RoleName.member,
) -> None:
    """Add a user to a team: a platform admin adds them at once; a team admin invites them,
    and they join with `dlaas team join TEAM`."""
    added = inv.client().add_member(team, user, role.value)
    if inv.json or not added.get("invited"):
        _report(inv, added, team)
        return
    print_plain(f"invited {added['user']} into team {team} as a {added['role']}")
    note(
        f"they join with `dlaas team join {team}` (if a user of that name exists: the answer "
        "is the same either way)"
    )


@dlaas_command
def invitations(inv: Invocation) -> None:
    """List the teams you are invited into."""
    offers = inv.client().invitations()
    if inv.json:
        print_json({"invitations": offers})
        return
    if not offers:
        note("no invitations")
        return
    print_table(
        ("TEAM", "ROLE", "INVITED"),
        ((str(o["team"]), str(o["role"]), format_time(o.get("invited_at"))) for o in offers),
    )
    note("join one with `dlaas team join TEAM`, or `dlaas team decline TEAM`")


@dlaas_command
def join(inv: Invocation, team: TeamName) -> None:
    """Accept your invitation into a team: join it with the role it offers."""
    _report(inv, inv.client().accept_invitation(team), team)


@dlaas_command
def decline(inv: Invocation, team: TeamName) -> None:
    """Decline your invitation into a team."""
    inv.client().decline_invitation(team)
    if inv.json:
        print_json({"team": team, "declined": True})
    else:
        print_plain(f"declined the invitation into team {team}")


@dlaas_command
def set_role(
    inv: Invocation,
    team: TeamName,
    user: UserName,
    role: Annotated[RoleName, typer.Argument(metavar="ROLE", help="viewer, member or team_admin")],
) -> None:
    """Change a member's role."""
    _report(inv, inv.client().set_role(team, user, role.value), team)


@dlaas_command
def remove_member(inv: Invocation, team: TeamName, user: UserName) -> None:
    """Remove a user from a team; the jobs they submitted stay the team's."""
    inv.client().remove_member(team, user)
    if inv.json:
        print_json({"team": team, "user": user, "removed": True})
    else:
        print_plain(f"removed {user} from team {team}")


def _report(inv: Invocation, member: dict[str, Any], team: str) -> None:
    if inv.json:
        print_json({"team": team, **member})
    else:
        print_plain(f"{member['user']} is a {member['role']} of team {team}")


def register(app: typer.Typer) -> None:
    team_app.command("create")(create)
    team_app.command("list")(list_teams)
    team_app.command("show")(show)
    team_app.command("add-member")(add_member)
    team_app.command("set-role")(set_role)
    team_app.command("remove-member")(remove_member)
    team_app.command("invitations")(invitations)
    team_app.command("join")(join)
    team_app.command("decline")(decline)
    team_app.command("quota")(quota)
    app.add_typer(team_app, name="team")
