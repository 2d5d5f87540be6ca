"""The embedded platform, started the way a user starts it: `dlaas up --detach`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.services import free_port

DLAAS = str(Path(sys.executable).with_name("dlaas"))


@dataclass
class Platform:
    home: Path
    env: dict[str, str]

    def dlaas(
        self, *args: str, timeout: float = 180, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [DLAAS, *args], env=self.env, capture_output=True, text=True, timeout=timeout
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"dlaas {' '.join(args)} exited {result.returncode}\n"
                f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}\n{self.service_logs()}"
            )
        return result

    def json(self, *args: str, timeout: float = 180) -> object:
        return json.loads(self.dlaas(*args, "--output", "json", timeout=timeout).stdout)

    def service_logs(self) -> str:
        logs = []
        for path in sorted((self.home / "logs").glob("*.log")):
            logs.append(f"--- {path.name} ---\n{path.read_text(errors='replace')[-3000:]}")
        return "\n".join(logs)


@pytest.fixture(scope="session")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    home = tmp_path_factory.mktemp("dlaas-home")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DLAAS_")}
    env["DLAAS_HOME"] = str(home)
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    running = Platform(home=home, env=env)
    running.dlaas("up", "--detach", "--port", str(free_port()), timeout=120)
    try:
        yield running
    finally:
        running.dlaas("down", check=False, timeout=60)
