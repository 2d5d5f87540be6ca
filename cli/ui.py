"""`dlaas ui`: open the web dashboard in a browser, signed in with this CLI's token."""

from __future__ import annotations

import webbrowser
from typing import Annotated
from urllib.parse import quote

import typer

from cli.context import Invocation, dlaas_command
from cli.errors import CliError
from cli.output import print_json, print_plain

PrintOption = Annotated[
    bool,
    typer.Option("--print", help="Only print the sign-in link; do not open a browser."),
]


def sign_in_link(url: str, token: str) -> str:
    """The dashboard's address with the token in the fragment, which browsers never send to
    a server: the page stores it and drops it from the address bar."""
    return f"{url.rstrip('/')}/ui/#token={quote(token, safe='')}"


@dlaas_command
def ui(inv: Invocation, print_only: PrintOption = False) -> None:
    """Open the dashboard (jobs, logs, charts, the queue) signed in as you."""
    url, token = inv.connection()
    if not token:
        raise CliError(
            "no API token: run `dlaas up`, or set DLAAS_TOKEN to the token your admin gave you"
        )
    link = sign_in_link(url, token)
    opened = False if print_only else webbrowser.open(link)
    if inv.json:
        print_json({"url": link, "opened": opened})
        return
    if not opened and not print_only:
        print_plain("no browser could be opened here; open this link in yours:")
    print_plain(link)


def register(app: typer.Typer) -> None:
    app.command("ui")(ui)
