"""The options every command shares and the one place failures become an error line.

`--output`, `--wide`, `--url`, `--token` and `--debug` are accepted both before the command
(`dlaas --output json list`) and after it (`dlaas list --output json`); the latter wins.
`--wide` is shared rather than given to each command with a table because, like
`--output`, it says how to show whatever the command prints, and a dozen commands print
tables (list, show, queue, plan, cluster, data list, team/user/token lists, ...).
"""

from __future__ import annotations

import functools
import inspect
import sys
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Any

import click
import typer

from cli.client import DlaasClient
from cli.config import resolve_config
from cli.errors import CliError, describe_error
from cli.output import error_line, stdout_closed, whole_cells


class Output(StrEnum):
    text = "text"
    json = "json"


OutputOption = Annotated[
    Output | None,
    typer.Option("--output", "-o", help="text (default) or json: machine-readable on stdout."),
]
WideOption = Annotated[
    bool,
    typer.Option(
        "--wide",
        help="Show tables' cells whole, however long the lines get "
        "(else long text is cut with … to fit the terminal, or 80 columns when piped).",
    ),
]
UrlOption = Annotated[
    str | None, typer.Option("--url", help="dlaas server URL (else DLAAS_URL, client.json).")
]
TokenOption = Annotated[
    str | None, typer.Option("--token", help="API token (else DLAAS_TOKEN, client.json).")
]
DebugOption = Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")]


@dataclass
class GlobalOptions:
    url: str | None = None
    token: str | None = None
    output: Output | None = None
    wide: bool = False
    debug: bool = False


@dataclass
class Invocation:
    """What one command runs with: resolved options and a lazily built client."""

    url: str | None = None
    token: str | None = None
    output: Output = Output.text
    wide: bool = False
    debug: bool = False
    _client: DlaasClient | None = field(default=None, repr=False)

    @property
    def json(self) -> bool:
        return self.output is Output.json

    def connection(self) -> tuple[str, str | None]:
        """The resolved `(url, token)`."""
        config = resolve_config(self.url, self.token)
        return config.url, config.token

    def client(self) -> DlaasClient:
        if self._client is None:
            self._client = DlaasClient(*self.connection())
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


_SHARED = {
    "output": (OutputOption, None),
    "wide": (WideOption, False),
    "url": (UrlOption, None),
    "token": (TokenOption, None),
    "debug": (DebugOption, False),
}


def dlaas_command(func: Callable[..., None]) -> Callable[..., None]:
    """Turn `func(inv: Invocation, ...)` into a Typer command taking the shared options.

    Every failure is reported as one red line on stderr with exit code 1 (or the
    `CliError`'s code); `--debug` lets the traceback through instead.
    """
    hints = typing.get_type_hints(func, include_extras=True)
    own = [
        p.replace(annotation=hints.get(p.name, p.annotation))
        for p in inspect.signature(func).parameters.values()
        if p.name != "inv"
    ]
    shared = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=ann)
        for name, (ann, default) in _SHARED.items()
    ]
    ctx_param = inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context)
    parameters = [*own, ctx_param, *shared]

    @functools.wraps(func)
    def wrapper(
        *args: Any,
        ctx: typer.Context,
        output: Output | None,
        wide: bool,
        url: str | None,
        token: str | None,
        debug: bool,
        **kwargs: Any,
    ) -> None:
        root = ctx.find_root().obj
        base = root if isinstance(root, GlobalOptions) else GlobalOptions()
        inv = Invocation(
            url=url or base.url,
            token=token or base.token,
            output=output or base.output or Output.text,
            wide=wide or base.wide,
            debug=debug or base.debug,
        )
        with whole_cells(inv.wide):
            run_reporting_errors(inv, lambda: func(inv, *args, **kwargs))

    wrapper.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in parameters}
    return wrapper


def run_reporting_errors(inv: Invocation, body: Callable[[], None]) -> None:
    try:
        body()
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader closed the pipe: end quietly, as standard tools do (128 + SIGPIPE).
        stdout_closed()
        raise typer.Exit(141) from None
    except (typer.Exit, click.exceptions.Exit, click.ClickException, click.Abort):
        raise
    except KeyboardInterrupt:
        error_line("interrupted")
        raise typer.Exit(130) from None
    except Exception as exc:
        if inv.debug:
            raise
        error_line(describe_error(exc))
        raise typer.Exit(exc.code if isinstance(exc, CliError) else 1) from None
    finally:
        inv.close()
