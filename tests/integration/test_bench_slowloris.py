"""bench/slowloris.py in its small mode: it holds its idle connections against a real API
and reports /healthz under them beside a baseline of the same run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from bench.slowloris import source_addresses

ROOT = Path(__file__).resolve().parents[2]


def test_the_attack_comes_from_addresses_each_under_the_servers_cap() -> None:
    addresses = source_addresses(20_000, 100)
    assert len(addresses) == 20_000
    assert len(set(addresses)) == 200
    assert max(addresses.count(address) for address in set(addresses)) == 100
    assert all(address.startswith("127.1.") for address in addresses)


def test_the_small_mode_holds_its_connections_and_measures_healthz_beside_them() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DLAAS_")}
    run = subprocess.run(
        [sys.executable, "-m", "bench.slowloris", "--small"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    figures = json.loads(run.stdout.strip().splitlines()[-1])
    assert figures["connections_asked"] == 200
    # the API's cap per address is 256: it holds every one of the 100 from each address
    assert figures["connections_held"] == 200
    assert figures["probes"] == 20
    assert figures["probe_failures"] == figures["baseline_probe_failures"] == 0
    # figures, not verdicts: a busy machine may make any probe slow
    assert figures["baseline_healthz_p99_ms"] > 0
    assert figures["healthz_p99_ms_under_slowloris"] > 0
    assert figures["target_healthz_p99_ms"] == 1000
    # the server itself holds them: one open file each, beside the ones it holds idle
    assert figures["server_open_files_under_slowloris"] >= figures["server_open_files_idle"] + 200
