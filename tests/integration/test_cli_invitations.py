"""`dlaas team add-member` by a team admin invites; the invitee lists their invitations and
joins, or declines (the real API served over a socket, on SQLite and PostgreSQL)."""

from __future__ import annotations

from tests.integration.api_harness import CliOnApi


async def test_a_team_admin_invites_and_the_invitee_joins_or_declines(cli: CliOnApi) -> None:
    lead, ana = await cli.api.add_user("lead"), await cli.api.add_user("ana")
    # both teams before the lead's first request: what a token stands for is cached a while
    team = await cli.api.add_team("vision", {lead: "team_admin"})
    other = await cli.api.add_team("audio", {lead: "team_admin"})
    invited = await cli.dlaas(lead.token, "team", "add-member", team, ana.name, "--role", "viewer")
    assert invited.exit_code == 0, invited.output
    assert f"invited {ana.name} into team {team} as a viewer" in invited.stdout
    assert f"dlaas team join {team}" in invited.stderr
    listed = await cli.dlaas(ana.token, "team", "invitations")
    assert listed.exit_code == 0 and team in listed.stdout and "viewer" in listed.stdout
    joined = await cli.dlaas(ana.token, "team", "join", team)
    assert joined.exit_code == 0, joined.output
    assert f"{ana.name} is a viewer of team {team}" in joined.stdout
    again = await cli.dlaas(ana.token, "team", "join", team)
    assert again.exit_code == 1 and "no invitation into team" in again.output

    assert (await cli.dlaas(lead.token, "team", "add-member", other, ana.name)).exit_code == 0
    declined = await cli.dlaas(ana.token, "team", "decline", other)
    assert (
        declined.exit_code == 0 and f"declined the invitation into team {other}" in declined.stdout
    )
    assert "no invitations" in (await cli.dlaas(ana.token, "team", "invitations")).stderr
