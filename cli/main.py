"""The `dlaas` command: a Typer app whose commands talk to the dlaas REST API."""

from __future__ import annotations

import typer

from cli import (
    cluster,
    data,
    jobs,
    logs,
    plan,
    queue,
    results,
    secrets,
    teams,
    tokens,
    ui,
    usage,
    users,
)
from cli.context import (
    DebugOption,
    GlobalOptions,
    OutputOption,
    TokenOption,
    UrlOption,
    WideOption,
)
from cli.up import register as register_up

app = typer.Typer(
    name="dlaas",
    help="dlaas: deep-learning training as a service.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.callback()
def main(
    ctx: typer.Context,
    output: OutputOption = None,
    wide: WideOption = False,
    url: UrlOption = None,
    token: TokenOption = None,
    debug: DebugOption = False,
) -> None:
    """Submit, watch and manage training jobs on a dlaas server.

    The server and token come from --url/--token, else DLAAS_URL/DLAAS_TOKEN,
    else $DLAAS_HOME/client.json (written by `dlaas up`).
    """
    ctx.obj = GlobalOptions(url=url, token=token, output=output, wide=wide, debug=debug)


register_up(app)
jobs.register(app)
plan.register(app)
logs.register(app)
results.register(app)
data.register(app)
cluster.register(app)
usage.register(app)
queue.register(app)
ui.register(app)
secrets.register(app)
teams.register(app)
users.register(app)
tokens.register(app)
