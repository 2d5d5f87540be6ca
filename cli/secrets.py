"""`dlaas secrets`: the secrets a deployment starts with, strong and random, never a default.

    dlaas secrets compose [--dir DIR] [--replace-weak]
        write DIR/.env (created 0600) beside docker-compose.yml: the admin token, the
        PostgreSQL and Redis passwords, the S3 keys and the node agent's token; values
        already there and strong are kept, missing ones generated
    dlaas secrets check
        refuse, naming each and the fix, a secret of the environment that is missing, a
        known default or shorter than 32 characters (compose runs it before anything starts)

The Helm chart applies the same rules when it renders (helm/dlaas/templates/_helpers.tpl).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated

import typer

from cli.config import write_private
from cli.context import Invocation, dlaas_command
from cli.errors import CliError
from cli.output import note, print_json, stdout_console

MIN_LENGTH = 32
# What docker-compose.yml reads from .env, and what each is.
COMPOSE_SECRETS = {
    "DLAAS_ADMIN_TOKEN": "the admin's API token",
    "DLAAS_POSTGRES_PASSWORD": "PostgreSQL's password",
    "DLAAS_REDIS_PASSWORD": "Redis's password",
    "DLAAS_S3_ACCESS_KEY": "the S3 access key",
    "DLAAS_S3_SECRET_KEY": "the S3 secret key",
    "DLAAS_AGENT_TOKEN": "the node agent's token",
}
# Values dlaas or its examples once shipped, and the placeholders people type.
KNOWN_DEFAULTS = frozenset(
    {
        "change-me-admin-token",
        "change-me-postgres",
        "change-me-s3-secret",
        "dlaas",
        "dlaas-secret",
        "e2e-admin-token",
        "admin",
        "changeme",
        "change-me",
        "password",
        "secret",
        "minioadmin",
    }
)
COMPOSE_FILE = "docker-compose.yml"
ENV_FILE = ".env"
ENV_HEADER = """\
# The secrets docker-compose.yml starts dlaas with, written by `dlaas secrets compose`.
# Readable by its owner only (0600): keep it so, and out of version control. PostgreSQL
# keeps the password its volume was first created with: changing DLAAS_POSTGRES_PASSWORD
# later locks the services out of the database.
"""


def weakness(value: str | None) -> str | None:
    """Why `value` may not be a secret (missing, a known default, too short), or None."""
    if not value:
        return "is missing"
    if value.lower() in KNOWN_DEFAULTS:
        return "is a well-known default"
    if len(value) < MIN_LENGTH:
        return f"is shorter than {MIN_LENGTH} characters"
    return None


def new_secret(name: str) -> str:
    """A strong random value for `name`: hex, so it is safe in URLs, YAML and .env files."""
    return secrets.token_hex(20 if name == "DLAAS_S3_ACCESS_KEY" else 32)


def read_env_file(path: Path) -> tuple[list[str], dict[str, str]]:
    """The lines of a .env file and the `KEY=value` settings among them (quotes dropped)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return [], {}
    values = {}
    for line in lines:
        key, sep, value = line.partition("=")
        if sep and not key.lstrip().startswith("#"):
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1]
            values[key.strip().removeprefix("export ").strip()] = value
    return lines, values


def compose_env(
    lines: list[str], existing: Mapping[str, str], *, replace_weak: bool
) -> tuple[str, list[str], list[str]]:
    """The new .env text from the old one's `lines`: every compose secret strong, the other
    lines kept. Returns it with the names generated and those kept."""
    generated, kept, refused = [], [], []
    chosen: dict[str, str] = {}
    for name in COMPOSE_SECRETS:
        value = existing.get(name)
        why = weakness(value)
        if value is not None and why is None:
            kept.append(name)
        elif value and not replace_weak:
            refused.append(f"{name} {why}")
        else:
            generated.append(name)
            chosen[name] = new_secret(name)
    if refused:
        raise CliError(
            f"{ENV_FILE} holds weak secrets: {'; '.join(refused)}. Set strong ones there "
            f"(`openssl rand -hex 32`), or run `dlaas secrets compose --replace-weak` to "
            "generate them (a PostgreSQL volume keeps the password it was created with)",
            code=2,
        )
    # Lines of values kept stay as they were written; replaced ones go.
    out = [line for line in lines if _key(line) not in generated] or ENV_HEADER.splitlines()
    out += [f"{name}={chosen[name]}" for name in generated]
    return "\n".join(out) + "\n", generated, kept


def _key(line: str) -> str:
    key, sep, _ = line.partition("=")
    return key.strip().removeprefix("export ").strip() if sep else ""


DirOption = Annotated[
    Path,
    typer.Option(
        "--dir", help=f"The folder of {COMPOSE_FILE}; its {ENV_FILE} is written (default: here)."
    ),
]
ReplaceWeakOption = Annotated[
    bool,
    typer.Option("--replace-weak", help="Replace weak values already in .env with new ones."),
]


@dlaas_command
def compose(
    inv: Invocation, folder: DirOption = Path("."), replace_weak: ReplaceWeakOption = False
) -> None:
    """Write .env beside docker-compose.yml with strong random secrets (created 0600)."""
    if not (folder / COMPOSE_FILE).is_file():
        raise CliError(
            f"no {COMPOSE_FILE} in {folder.resolve()}: run this beside it, or pass --dir", code=2
        )
    target = folder / ENV_FILE
    lines, existing = read_env_file(target)
    text, generated, kept = compose_env(lines, existing, replace_weak=replace_weak)
    write_private(target, text)
    if inv.json:
        print_json({"env_file": str(target), "generated": generated, "kept": kept})
        return
    console = stdout_console()
    console.print(f"wrote {target} (readable by you only)")
    if generated:
        console.print(f"  generated: {', '.join(generated)}")
    if kept:
        console.print(f"  kept:      {', '.join(kept)}")
    console.print("next:")
    here = folder.resolve() == Path.cwd().resolve()
    console.print(f"  {'' if here else f'cd {folder} && '}docker compose up -d")
    console.print(
        "  export DLAAS_URL=http://127.0.0.1:8470 "
        f"DLAAS_TOKEN=$(sed -n 's/^DLAAS_ADMIN_TOKEN=//p' {target if here else target.resolve()})"
    )


@dlaas_command
def check(inv: Invocation) -> None:
    """Refuse a missing, well-known or short secret among docker-compose.yml's."""
    problems = {
        name: why for name in COMPOSE_SECRETS if (why := weakness(os.environ.get(name))) is not None
    }
    if inv.json:
        print_json({"ok": not problems, "problems": problems})
    if problems:
        for name, why in problems.items():
            note(f"{name} ({COMPOSE_SECRETS[name]}) {why}")
        raise CliError(
            f"refusing to start with weak secrets ({', '.join(problems)}): run "
            f"`dlaas secrets compose` beside {COMPOSE_FILE} to write strong ones to {ENV_FILE}, "
            "or set each to a value like `openssl rand -hex 32` prints",
            code=2,
        )
    if not inv.json:
        note(f"the {len(COMPOSE_SECRETS)} secrets are set and strong")


def register(app: typer.Typer) -> None:
    group = typer.Typer(
        help="Deployment secrets: generate strong ones, refuse weak ones.", no_args_is_help=True
    )
    group.command("compose")(compose)
    group.command("check")(check)
    app.add_typer(group, name="secrets")
