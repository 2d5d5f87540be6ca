"""Where the CLI finds the dlaas server and its token.

Each field is resolved on its own, first match wins:
`--url`/`--token` options, then `DLAAS_URL`/`DLAAS_TOKEN`, then `$DLAAS_HOME/client.json`
(`DLAAS_HOME` defaults to `~/.dlaas`; `dlaas up` writes that file), then the embedded
default URL `http://127.0.0.1:8470` (no token).

`DLAAS_HOME` is the owner's alone (0700), and every file in it that holds a token or a
password is written by `write_private`: created 0600, so no other user can read it at any
moment of its life.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

DEFAULT_URL = "http://127.0.0.1:8470"


class ConfigError(Exception):
    """The client configuration cannot be used; the message says how to fix it."""


@dataclass(frozen=True)
class ClientConfig:
    url: str
    token: str | None
    url_source: str
    token_source: str


def dlaas_home(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    home = env.get("DLAAS_HOME")
    return Path(home).expanduser() if home else Path.home() / ".dlaas"


def private_dir(path: Path) -> Path:
    """`path` as a directory, created (with missing parents) for its owner alone: 0700."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def write_private(path: Path, text: str) -> None:
    """Replace `path` atomically with `text`, in a file created 0600 (a temporary file in
    the same directory, opened with that mode and renamed over `path`): its contents are
    never readable by anyone but the owner, not even while it is written."""
    temp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def client_file(env: Mapping[str, str] | None = None) -> Path:
    return dlaas_home(env) / "client.json"


def read_client_file(path: Path) -> dict[str, str]:
    """The `{"url", "token"}` saved by `dlaas up`; empty when the file does not exist."""
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{path} is not valid JSON ({exc.msg} at line {exc.lineno}): "
            "fix it, delete it, or run `dlaas up` to write it again"
        ) from exc
    if not isinstance(data, dict):
        raise ConfigError(f'{path} must hold a JSON object with "url" and "token"')
    return {k: v for k, v in data.items() if k in ("url", "token") and isinstance(v, str) and v}


def resolve_config(
    url: str | None = None,
    token: str | None = None,
    env: Mapping[str, str] | None = None,
) -> ClientConfig:
    env = os.environ if env is None else env
    path = client_file(env)
    saved: dict[str, str] | None = None

    def from_file(key: str) -> str | None:
        nonlocal saved
        if saved is None:
            saved = read_client_file(path)
        return saved.get(key)

    url_value, url_source = _first(
        ("--url", url), ("DLAAS_URL", env.get("DLAAS_URL")), (str(path), lambda: from_file("url"))
    )
    token_value, token_source = _first(
        ("--token", token),
        ("DLAAS_TOKEN", env.get("DLAAS_TOKEN")),
        (str(path), lambda: from_file("token")),
    )
    final_url = (url_value or DEFAULT_URL).rstrip("/")
    if not final_url.startswith(("http://", "https://")):
        raise ConfigError(
            f"dlaas URL {final_url!r} (from {url_source or 'default'}) must start with "
            "http:// or https://, e.g. http://127.0.0.1:8470"
        )
    return ClientConfig(
        url=final_url,
        token=token_value,
        url_source=url_source or "default",
        token_source=token_source or "none",
    )


def _first(*candidates: tuple[str, object]) -> tuple[str | None, str | None]:
    for source, value in candidates:
        resolved = value() if callable(value) else value
        if isinstance(resolved, str) and resolved:
            return resolved, source
    return None, None
