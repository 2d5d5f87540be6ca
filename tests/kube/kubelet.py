"""A test-side kubelet for the API emulator: binds pods, moves them through their phases, and
may run a pod's learner container as a local process.

It watches the namespace's pods. A new pod is bound to the node and, unless `hold` is set,
set Running at once (Pending first). With `run_commands`, the learner container's command
runs as a process (its env resolved, Secret references included; `/job/...` directories
made local, its termination message file too; MASTER_ADDR=127.0.0.1 with a port per job)
and its exit sets the pod Succeeded or Failed with that exit code and the message it left;
a deleted pod's process is stopped (SIGTERM, then SIGKILL).
Tests may also set any status by hand (`start`, `finish`, `unschedulable`, `waiting`).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kubernetes import client, watch

LEARNER = "learner"
TERMINATION_MESSAGE = "termination-log"  # the container's terminationMessagePath, made local


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def container_status(state: dict[str, Any], image: str = "dlaas-learner") -> dict[str, Any]:
    return {
        "name": LEARNER,
        "image": image,
        "imageID": "",
        "ready": "running" in state,
        "restartCount": 0,
        "state": state,
    }


class Kubelet:
    def __init__(
        self,
        url: str,
        namespace: str,
        *,
        node: str = "node-1",
        hold: bool = False,
        run_commands: bool = False,
        workdir: Path | None = None,
    ) -> None:
        self.api = client.ApiClient(client.Configuration(host=url))
        self.core = client.CoreV1Api(self.api)
        self.namespace = namespace
        self.node = node
        self.hold = hold
        self.run_commands = run_commands
        self.workdir = workdir
        self.seen: set[str] = set()
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self._ports: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="kubelet", daemon=True)

    def __enter__(self) -> Kubelet:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for name in list(self.processes):
            self._kill(name)
        self.api.close()

    # -- by hand ----------------------------------------------------------------------------

    def patch_status(self, name: str, status: dict[str, Any]) -> None:
        self.core.patch_namespaced_pod_status(name, self.namespace, {"status": status})

    def bind(self, name: str) -> None:
        self.core.patch_namespaced_pod(name, self.namespace, {"spec": {"nodeName": self.node}})
        self.patch_status(
            name,
            {
                "phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [
                    container_status({"waiting": {"reason": "ContainerCreating"}})
                ],
            },
        )

    def start(self, name: str) -> None:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.patch_status(
            name,
            {
                "phase": "Running",
                "containerStatuses": [container_status({"running": {"startedAt": now}})],
            },
        )

    def finish(
        self, name: str, exit_code: int, reason: str | None = None, message: str | None = None
    ) -> None:
        terminated: dict[str, Any] = {
            "exitCode": exit_code,
            "reason": reason or ("Completed" if exit_code == 0 else "Error"),
        }
        if message:
            terminated["message"] = message
        self.patch_status(
            name,
            {
                "phase": "Succeeded" if exit_code == 0 else "Failed",
                "containerStatuses": [container_status({"terminated": terminated})],
            },
        )

    def unschedulable(self, name: str, message: str) -> None:
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": message,
        }
        self.patch_status(name, {"phase": "Pending", "conditions": [condition]})

    def waiting(self, name: str, reason: str, message: str) -> None:
        state = {"waiting": {"reason": reason, "message": message}}
        self.patch_status(
            name,
            {
                "phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [container_status(state)],
            },
        )

    # -- automatic --------------------------------------------------------------------------

    def _watch(self) -> None:
        while not self._stop.is_set():
            stream = watch.Watch().stream(
                self.core.list_namespaced_pod,
                self.namespace,
                deserialize=False,
                _request_timeout=(5, 3600),
            )
            try:
                for event in stream:
                    if self._stop.is_set():
                        return
                    self._on_event(event["type"], event["object"])
            except Exception:
                if not self._stop.is_set():
                    time.sleep(0.1)

    def _on_event(self, kind: str, pod: Mapping[str, Any]) -> None:
        name = pod["metadata"]["name"]
        if kind == "DELETED":
            self.seen.discard(name)
            self._kill(name)
            return
        if name in self.seen or pod.get("metadata", {}).get("deletionTimestamp"):
            return
        self.seen.add(name)
        if self.hold:
            return
        threading.Thread(target=self._bring_up, args=(dict(pod),), daemon=True).start()

    def _bring_up(self, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        try:
            self.bind(name)
            self.start(name)
        except client.ApiException:
            return  # deleted meanwhile
        if self.run_commands:
            self._run(pod)

    def _run(self, pod: dict[str, Any]) -> None:
        assert self.workdir is not None
        name = pod["metadata"]["name"]
        container = next(c for c in pod["spec"]["containers"] if c["name"] == LEARNER)
        root = self.workdir / name
        env = self._environment(pod, container, root)
        root.mkdir(parents=True, exist_ok=True)
        process = subprocess.Popen(
            container["command"],
            cwd=root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=open(root / "output.log", "ab"),  # noqa: SIM115
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.processes[name] = process
        code = process.wait()
        if self.processes.pop(name, None) is None:
            return  # stopped because the pod was deleted
        exit_code = 128 - code if code < 0 else code
        # As a kubelet does: the container's termination message file becomes its status.
        message_file = root / TERMINATION_MESSAGE
        message = message_file.read_text()[:4096] if message_file.exists() else None
        with contextlib.suppress(client.ApiException):
            self.finish(name, exit_code, message=message)

    def _environment(
        self, pod: Mapping[str, Any], container: Mapping[str, Any], root: Path
    ) -> dict[str, str]:
        interpreter_bin = str(Path(sys.executable).parent)
        env = {
            "PATH": os.pathsep.join((interpreter_bin, os.environ.get("PATH", ""))),
            "HOME": os.environ.get("HOME", str(root)),
        }
        if os.environ.get("PYTHONPATH"):  # the image's code: this checkout's, as the tests'
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        secrets: dict[str, dict[str, str]] = {}
        for item in container.get("env") or []:
            if "value" in item:
                env[item["name"]] = item["value"]
                continue
            ref = item["valueFrom"]["secretKeyRef"]
            if ref["name"] not in secrets:
                secrets[ref["name"]] = self._secret(ref["name"])
            env[item["name"]] = secrets[ref["name"]][ref["key"]]
        workdir = container.get("workingDir", "/job")
        for key, value in list(env.items()):
            if value.startswith(workdir + "/"):
                env[key] = str(root / value[len(workdir) + 1 :])
            elif value == container.get("terminationMessagePath"):
                env[key] = str(root / TERMINATION_MESSAGE)
        job = pod["metadata"]["labels"].get("dlaas.io/job", "")
        env["MASTER_ADDR"] = "127.0.0.1"
        env["MASTER_PORT"] = str(self._ports.setdefault(job, _free_port()))
        return env

    def _secret(self, name: str) -> dict[str, str]:
        raw = self.core.read_namespaced_secret(name, self.namespace, _preload_content=False)
        secret = json.loads(raw.data)
        values = dict(secret.get("stringData") or {})
        for key, encoded in (secret.get("data") or {}).items():
            values[key] = base64.b64decode(encoded).decode()
        return values

    def _kill(self, name: str) -> None:
        process = self.processes.pop(name, None)
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(2)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(2)
