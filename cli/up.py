"""`dlaas up` / `dlaas down`: start and stop the embedded platform on this machine."""

from __future__ import annotations

import signal
import time
from collections.abc import Mapping
from typing import Annotated

import typer

from cli import embedded
from cli.config import dlaas_home
from cli.context import Invocation, dlaas_command
from cli.errors import CliError
from cli.output import note, print_json, stdout_closed, stdout_console
from cli.ui import sign_in_link

DetachOption = Annotated[
    bool, typer.Option("--detach", "-d", help="Start in the background and return.")
]
PortOption = Annotated[int, typer.Option("--port", help="API port (a free one if taken).")]
AgentPortOption = Annotated[
    int, typer.Option("--agent-port", help="Node agent port (a free one if taken).")
]
RedisPortOption = Annotated[
    int, typer.Option("--redis-port", help="Redis port (a free one if taken).")
]


@dlaas_command
def up(
    inv: Invocation,
    detach: DetachOption = False,
    port: PortOption = embedded.API_PORT,
    agent_port: AgentPortOption = embedded.AGENT_PORT,
    redis_port: RedisPortOption = embedded.REDIS_PORT,
) -> None:
    """Start the embedded platform: Redis, API, lifecycle manager and node agent."""
    home = dlaas_home()
    try:
        platform = embedded.start(
            home,
            api_port=port,
            agent_port=agent_port,
            redis_port=redis_port,
            on_step=lambda s: note(s),
        )
    except embedded.PlatformError as error:
        raise CliError(str(error)) from None
    summary = {
        "url": platform.url,
        "home": platform.home,
        "client_config": str(home / "client.json"),
        "logs": str(home / "logs"),
        "services": sorted(platform.pids),
        "dashboard": sign_in_link(platform.url, embedded.read_token(home)),
        "jobs": embedded.job_isolation(platform),
    }
    try:
        _print_summary(inv, platform.url, summary)
    except BrokenPipeError:
        # Whoever reads the summary went away (`dlaas up -d | head -2`): the platform runs on.
        stdout_closed()
    if detach:
        return
    note("running in the foreground; Ctrl-C stops the platform")
    stopping = False

    def _stop(_signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, _stop)
    try:
        while not stopping and len(platform.alive()) == len(platform.pids):
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    dead = sorted(set(platform.pids) - set(platform.alive()))
    if dead:
        note(f"service(s) {', '.join(dead)} stopped; see {home / 'logs'}; stopping the rest")
    embedded.stop(home, on_step=note)
    note("dlaas is down")


def _print_summary(inv: Invocation, url: str, summary: Mapping[str, object]) -> None:
    if inv.json:
        print_json(summary)
        return
    console = stdout_console()
    console.print(f"[bold green]dlaas is up[/] at {url}")
    console.print(f"  dashboard:     {summary['dashboard']} (or: dlaas ui)")
    console.print(f"  token and URL: {summary['client_config']} (the CLI reads it)")
    console.print(f"  jobs:          {summary['jobs']}")
    console.print(f"  service logs:  {summary['logs']}")
    console.print("  stop it with:  dlaas down")
    console.file.flush()


@dlaas_command
def down(inv: Invocation) -> None:
    """Stop the embedded platform that `dlaas up` started."""
    stopped = embedded.stop(dlaas_home(), on_step=note)
    if inv.json:
        print_json({"stopped": stopped})
    elif stopped:
        note(f"stopped {', '.join(stopped)}")
    else:
        note("no embedded platform is running")


def register(app: typer.Typer) -> None:
    """Add the `up` and `down` commands to `app`."""
    app.command("up")(up)
    app.command("down")(down)
