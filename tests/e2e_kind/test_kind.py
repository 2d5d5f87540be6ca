"""End to end on a kind cluster: dlaas installed from the chart runs the digits example to
COMPLETED, its learners as pods with the kubernetes backend.

Set up by `make e2e-kind` (tests/e2e_kind/run.sh); collected only when
`DLAAS_E2E_KUBE_CONTEXT` names the cluster's context (run.sh sets it), so `make test` does
not count it. Skipped, with the reason, when kubectl is missing, the cluster does not
answer, or dlaas is not installed there. Environment: `DLAAS_E2E_NAMESPACE` (`dlaas`),
`DLAAS_E2E_TOKEN` (default: the admin token in the release's Secret, which run.sh
generated).
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CONTEXT = os.environ.get("DLAAS_E2E_KUBE_CONTEXT", "kind-dlaas-e2e")
NAMESPACE = os.environ.get("DLAAS_E2E_NAMESPACE", "dlaas")
JOB_TIMEOUT_S = 900


def kubectl(*args: str, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["kubectl", "--context", CONTEXT, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def why_not_reachable() -> str | None:
    if shutil.which("kubectl") is None:
        return "no Kubernetes cluster reachable: kubectl is not on PATH (run `make e2e-kind`)"
    try:
        ready = kubectl("get", "--raw", "/readyz", timeout=10)
    except subprocess.TimeoutExpired:
        return f"no Kubernetes cluster reachable: context {CONTEXT} did not answer in 10 s"
    if ready.returncode != 0:
        return f"no Kubernetes cluster reachable at context {CONTEXT}: {ready.stderr.strip()[:200]}"
    installed = kubectl("-n", NAMESPACE, "get", "deployment/dlaas-api")
    if installed.returncode != 0:
        return f"dlaas is not installed in {CONTEXT}/{NAMESPACE} (run `make e2e-kind`)"
    return None


def admin_token() -> str:
    """DLAAS_E2E_TOKEN, else the admin token of the release's Secret."""
    if os.environ.get("DLAAS_E2E_TOKEN"):
        return os.environ["DLAAS_E2E_TOKEN"]
    path = "jsonpath={.data.DLAAS_ADMIN_TOKEN}"
    answer = kubectl("-n", NAMESPACE, "get", "secret", "dlaas", "-o", path)
    assert answer.returncode == 0 and answer.stdout, f"no admin token: {answer.stderr}"
    return base64.b64decode(answer.stdout).decode()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def api_url() -> Iterator[str]:
    reason = why_not_reachable()
    if reason is not None:
        pytest.skip(reason)
    port = free_port()
    forward = subprocess.Popen(
        ["kubectl", "--context", CONTEXT, "-n", NAMESPACE, "port-forward",
         "svc/dlaas-api", f"{port}:8470"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError("the API did not answer through kubectl port-forward")
            time.sleep(0.5)
        yield url
    finally:
        forward.terminate()
        forward.wait(10)


def dlaas(url: str, *args: str, timeout: float = 120) -> str:
    env = {**os.environ, "DLAAS_URL": url, "DLAAS_TOKEN": admin_token()}
    cli = Path(sys.executable).parent / "dlaas"
    done = subprocess.run(
        [str(cli), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"dlaas {' '.join(args)}: {done.stdout}\n{done.stderr}"
    return done.stdout


def test_the_digits_example_completes_with_learner_pods(api_url: str, tmp_path: Path) -> None:
    digits = ROOT / "examples" / "digits"
    # The example as it is, but for its CPU request: gang admission holds a job until the
    # node has room for both learners, and a laptop's kind node has few cores to spare.
    manifest = yaml.safe_load((digits / "manifest.yml").read_text())
    manifest["cpus"] = 0.25
    (tmp_path / "manifest.yml").write_text(yaml.safe_dump(manifest))
    dlaas(api_url, "data", "upload", "digits-data", str(digits / "data" / "digits.npz"))
    submitted = dlaas(api_url, "train", str(tmp_path / "manifest.yml"), str(digits / "model"))
    match = re.search(r"training-[a-z0-9]+", submitted)
    assert match, submitted
    job_id = match.group(0)
    pods = ""
    deadline = time.monotonic() + 120
    while f"dlaas-{job_id}-learner-2" not in pods and time.monotonic() < deadline:
        pods = kubectl("-n", NAMESPACE, "get", "pods", "-l", f"dlaas.io/job={job_id}").stdout
        time.sleep(1)
    assert f"dlaas-{job_id}-learner-1" in pods and f"dlaas-{job_id}-learner-2" in pods, pods
    dlaas(api_url, "wait", job_id, "--timeout", str(JOB_TIMEOUT_S), timeout=JOB_TIMEOUT_S + 30)
    shown = dlaas(api_url, "show", job_id)
    assert "COMPLETED" in shown, shown
