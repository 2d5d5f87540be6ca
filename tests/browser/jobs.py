"""Jobs for the browser tests: the steady job's manifest, and submitting it as a user."""

from __future__ import annotations

import json
from pathlib import Path

from cli.archive import zip_directory
from tests.platform import Platform

STEADY_JOB = Path(__file__).with_name("steady_job")


def steady_manifest(
    directory: Path,
    name: str,
    *,
    steps: int = 40,
    step_s: float = 0.1,
    scale: float = 1.0,
    fail_at: int = 0,
) -> Path:
    command = (
        f"python train.py --steps {steps} --step-s {step_s} --scale {scale} --fail-at {fail_at}"
    )
    path = directory / f"{name}.yml"
    path.write_text(
        f"name: {name}\nlearners: 1\ncpus: 0.1\nmemory: 256Mi\n"
        f"framework:\n  name: python\n  command: {json.dumps(command)}\n"
    )
    return path


def submit_steady(
    platform: Platform,
    directory: Path,
    name: str,
    *,
    token: str | None = None,
    steps: int = 40,
    step_s: float = 0.1,
    scale: float = 1.0,
    fail_at: int = 0,
) -> str:
    """Submit the steady job through the API as the owner of `token` (the admin's if None)."""
    manifest = steady_manifest(
        directory, name, steps=steps, step_s=step_s, scale=scale, fail_at=fail_at
    )
    archive = zip_directory(STEADY_JOB, directory)
    try:
        with platform.client(token) as client:
            return str(client.submit_job(manifest, archive)["id"])
    finally:
        archive.unlink()
