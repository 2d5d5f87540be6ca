"""docker-compose.yml as compose reads it: `${VAR...}` references resolved from an
environment (its .env and the shell), with the secrets `dlaas secrets compose` generates."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from cli.secrets import COMPOSE_SECRETS, new_secret

COMPOSE = Path(__file__).resolve().parents[1] / "docker-compose.yml"
# `${NAME}`, `${NAME:?message}`, `${NAME?message}`, `${NAME:-default}`, `${NAME-default}`
REFERENCE = re.compile(r"\$\{(?P<name>\w+)(?:(?P<op>:?[?-])(?P<arg>[^}]*))?\}")


class MissingVariable(Exception):
    """Compose's refusal of a required variable that is unset (or empty, with `:?`)."""


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """What compose makes of `value` with `env`: references replaced, `$$` an escaped `$`,
    a missing `${NAME:?message}` an error carrying the message."""
    if isinstance(value, dict):
        return {key: interpolate(item, env) for key, item in value.items()}
    if isinstance(value, list):
        return [interpolate(item, env) for item in value]
    if not isinstance(value, str):
        return value

    def one(match: re.Match[str]) -> str:
        name, op, arg = match["name"], match["op"] or "", match["arg"] or ""
        present = env.get(name)
        unset = present is None or (op.startswith(":") and present == "")
        if op.endswith("?") and unset:
            raise MissingVariable(f"required variable {name} is missing a value: {arg}")
        if op.endswith("-") and unset:
            return arg
        return present or ""

    return "$".join(REFERENCE.sub(one, part) for part in value.split("$$"))


def raw() -> dict[str, Any]:
    """The file as YAML, references left as written."""
    return dict(yaml.safe_load(COMPOSE.read_text()))


def generated_env() -> dict[str, str]:
    """Secrets as `dlaas secrets compose` writes them to .env."""
    return {name: new_secret(name) for name in COMPOSE_SECRETS}


def services(env: dict[str, str]) -> dict[str, Any]:
    """Every service as compose runs it with `env`."""
    return dict(interpolate(raw()["services"], env))
