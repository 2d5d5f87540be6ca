"""`dlaas data`: upload training data to a container and list what a container holds."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from cli.context import Invocation, dlaas_command
from cli.errors import CliError
from cli.output import (
    format_size,
    note,
    print_json,
    print_plain,
    print_table,
    transfer_progress,
)

Container = Annotated[str, typer.Argument(metavar="CONTAINER", help="The data container name.")]


def data_files(source: Path) -> list[tuple[Path, str]]:
    """`(file, path in the container)`: a file keeps its name; a directory its relative paths."""
    if source.is_file():
        return [(source, source.name)]
    found: list[tuple[Path, str]] = []
    for dirpath, dirnames, filenames in os.walk(source):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if path.is_file():
                found.append((path, path.relative_to(source).as_posix()))
    return found


@dlaas_command
def upload(
    inv: Invocation,
    container: Container,
    source: Annotated[Path, typer.Argument(metavar="PATH", help="A file or a directory.")],
) -> None:
    """Upload a file, or every file under a directory, into CONTAINER."""
    if not source.exists():
        raise CliError(f"PATH {source}: no such file or directory")
    files = data_files(source)
    if not files:
        raise CliError(f"PATH {source} holds no files to upload")
    client = inv.client()
    total = sum(path.stat().st_size for path, _ in files)
    uploaded: list[dict[str, object]] = []
    with transfer_progress(total, f"uploading to {container}") as advance:
        for path, name in files:
            client.upload_data(container, name, path, progress=advance)
            uploaded.append({"path": name, "size": path.stat().st_size})
    if inv.json:
        print_json({"container": container, "files": uploaded})
    else:
        print_plain(f"uploaded {len(uploaded)} file(s), {format_size(total)}, to {container}")


@dlaas_command
def list_files(inv: Invocation, container: Container) -> None:
    """List the files in CONTAINER."""
    files = inv.client().list_data(container)
    if inv.json:
        print_json({"container": container, "files": files})
        return
    if not files:
        note(f"container {container} is empty: add files with `dlaas data upload {container} PATH`")
        return
    print_table(
        ("PATH", "SIZE"),
        (
            (str(item.get("path", "")), format_size(item.get("size")))
            if isinstance(item, dict)
            else (str(item), "")
            for item in files
        ),
        free=("PATH",),
        right=("SIZE",),
    )


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Training data: upload and list containers.", no_args_is_help=True)
    group.command("upload")(upload)
    group.command("list")(list_files)
    app.add_typer(group, name="data")
