"""A test-side kubelet for the API emulator: binds pods, moves them through their phases, and
may run a pod's containers as local processes.

It watches the namespace's pods. A new pod is bound to the node and, unless `hold` is set,
set Running at once (Pending first). With `run_commands`, the pod's containers run as
processes, as a kubelet runs them: its init containers one after the other (native
sidecars, such as the parameter server, are not run), then its containers side by side,
each with its own environment resolved (Secret references included; MASTER_ADDR=127.0.0.1
with a port per job), the learner image's interpreter in its command this machine's, each
volume a local directory under `workdir/<pod>/volumes/` at the paths its container mounts
it (environment values and the working directory under a mount path made local, the
termination message file too), each in a PID namespace of its own
(`unshare`, where the machine allows it), so a container's processes see no other's
`/proc`. A failed init container fails the pod with its exit code and message; once every
container ended, the pod is Succeeded or Failed with each container's exit code and
message. A deleted pod's processes are sent SIGTERM, and SIGKILL after the pod's grace
period.
Tests may also set any status by hand (`start`, `finish`, `unschedulable`, `waiting`).
Like the scheduler, it takes only pods whose `nodeSelector` its node's labels match (the node
as the API server has it, else just its `kubernetes.io/hostname`): a pod placed on another
node is left for that node's kubelet.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kubernetes import client, watch

from learner_image.rendezvous_port import free_rendezvous_port
from lifecycle_manager.backends.kubernetes.manifests import LEARNER_PYTHON

TERMINATION_MESSAGE = "termination-log"  # a container's terminationMessagePath, made local
# What a pod is taken to hold when the test made its status by hand and the kubelet has not
# seen it: the learner pod's containers.
LEARNER_CONTAINERS = ("program", "shipper")
OOM_CONTAINER = "program"  # the container the OOM killer ends in a learner pod


def container_status(
    state: dict[str, Any], name: str = "program", image: str = "dlaas-learner"
) -> dict[str, Any]:
    return {
        "name": name,
        "image": image,
        "imageID": "",
        "ready": "running" in state,
        "restartCount": 0,
        "state": state,
    }


@functools.cache
def isolation() -> tuple[str, ...]:
    """The command prefix that runs a container's processes in a PID namespace of their own,
    as a pod's containers are; empty where this machine cannot make one."""
    if shutil.which("unshare") is None:
        return ()
    prefix = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]
    if os.getuid() != 0:
        prefix[1:1] = ["--user", "--map-root-user"]
    probe = subprocess.run([*prefix, "true"], capture_output=True, timeout=30, check=False)
    return tuple(prefix) if probe.returncode == 0 else ()


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


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
        self._labels: dict[str, str] | None = None
        self.pods: dict[str, dict[str, Any]] = {}
        self.processes: dict[str, list[subprocess.Popen[bytes]]] = {}
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

    def _containers(self, name: str) -> list[str]:
        spec = self.pods.get(name, {}).get("spec") or {}
        return [c["name"] for c in spec.get("containers") or []] or list(LEARNER_CONTAINERS)

    def patch_status(self, name: str, status: dict[str, Any]) -> None:
        self.core.patch_namespaced_pod_status(name, self.namespace, {"status": status})

    def bind(self, name: str) -> None:
        self.core.patch_namespaced_pod(name, self.namespace, {"spec": {"nodeName": self.node}})
        creating = {"waiting": {"reason": "ContainerCreating"}}
        self.patch_status(
            name,
            {
                "phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [
                    container_status(creating, each) for each in self._containers(name)
                ],
            },
        )

    def start(self, name: str) -> None:
        running = {"running": {"startedAt": _now()}}
        self.patch_status(
            name,
            {
                "phase": "Running",
                "containerStatuses": [
                    container_status(running, each) for each in self._containers(name)
                ],
            },
        )

    def finish(
        self, name: str, exit_code: int, reason: str | None = None, message: str | None = None
    ) -> None:
        """Every container ended with `exit_code` (and `message`); `reason` is the one the
        OOM killer's container gives (the others say Completed or Error)."""
        ended = {each: (exit_code, message) for each in self._containers(name)}
        self._finished(name, ended, {OOM_CONTAINER: reason} if reason else {})

    def _finished(
        self,
        name: str,
        ended: Mapping[str, tuple[int, str | None]],
        reasons: Mapping[str, str] | None = None,
        init: Sequence[dict[str, Any]] = (),
    ) -> None:
        statuses = []
        for each, (code, message) in ended.items():
            default = "Completed" if code == 0 else "Error"
            terminated: dict[str, Any] = {
                "exitCode": code,
                "reason": (reasons or {}).get(each) or default,
            }
            if message:
                terminated["message"] = message
            statuses.append(container_status({"terminated": terminated}, each))
        status: dict[str, Any] = {
            "phase": "Succeeded" if all(c == 0 for c, _ in ended.values()) else "Failed",
            "containerStatuses": statuses,
        }
        if init:
            status["initContainerStatuses"] = list(init)
        self.patch_status(name, status)

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
        if not self._selects_this_node(pod):
            return
        self.seen.add(name)
        self.pods[name] = dict(pod)
        if self.hold:
            return
        threading.Thread(target=self._bring_up, args=(dict(pod),), daemon=True).start()

    def _selects_this_node(self, pod: Mapping[str, Any]) -> bool:
        selector = (pod.get("spec") or {}).get("nodeSelector") or {}
        if not selector:
            return True
        if self._labels is None:
            labels = {"kubernetes.io/hostname": self.node}
            try:
                node = self.api.sanitize_for_serialization(self.core.read_node(self.node))
                labels.update((node.get("metadata") or {}).get("labels") or {})
            except client.ApiException:
                pass  # no such node object: its name is all there is to match
            self._labels = labels
        return all(self._labels.get(key) == value for key, value in selector.items())

    def _bring_up(self, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        try:
            self.bind(name)
            if not self.run_commands:
                self.start(name)
        except client.ApiException:
            return  # deleted meanwhile
        if self.run_commands:
            self._run(pod)

    def _run(self, pod: dict[str, Any]) -> None:
        assert self.workdir is not None
        name = pod["metadata"]["name"]
        root = self.workdir / name
        self.processes[name] = []
        init_statuses: list[dict[str, Any]] = []
        for container in pod["spec"].get("initContainers") or []:
            if container.get("restartPolicy") == "Always":
                continue  # a native sidecar: not run here
            with contextlib.suppress(client.ApiException):
                self.patch_status(
                    name,
                    {
                        "initContainerStatuses": [
                            *init_statuses,
                            container_status({"running": {"startedAt": _now()}}, container["name"]),
                        ]
                    },
                )
            [process] = self._launch(name, pod, [container], root)
            code = _exit_code(process.wait())
            if name not in self.processes:
                return  # stopped because the pod was deleted
            message = self._message(container, root)
            terminated: dict[str, Any] = {"exitCode": code, "reason": "Completed"}
            if code != 0:
                terminated.update(reason="Error", message=message or "")
            init_statuses.append(container_status({"terminated": terminated}, container["name"]))
            if code != 0:
                self._finish_quietly(name, {}, init_statuses)
                return
        with contextlib.suppress(client.ApiException):
            self.start(name)
        containers = pod["spec"]["containers"]
        processes = self._launch(name, pod, containers, root)
        codes = [_exit_code(process.wait()) for process in processes]
        if self.processes.pop(name, None) is None:
            return  # stopped because the pod was deleted
        # As a kubelet does: each container's termination message file becomes its status.
        ended = {
            c["name"]: (code, self._message(c, root))
            for c, code in zip(containers, codes, strict=True)
        }
        self._finish_quietly(name, ended, init_statuses)

    def _finish_quietly(
        self,
        name: str,
        ended: Mapping[str, tuple[int, str | None]],
        init: Sequence[dict[str, Any]],
    ) -> None:
        if not ended:  # an init container failed: the pod failed, its containers never ran
            self.processes.pop(name, None)
            with contextlib.suppress(client.ApiException):
                self.patch_status(name, {"phase": "Failed", "initContainerStatuses": list(init)})
            return
        with contextlib.suppress(client.ApiException):
            self._finished(name, ended, init=init)

    def _launch(
        self,
        name: str,
        pod: Mapping[str, Any],
        containers: Sequence[Mapping[str, Any]],
        root: Path,
    ) -> list[subprocess.Popen[bytes]]:
        started = []
        for container in containers:
            mounts = self._mounts(container, root)
            env = self._environment(pod, container, root, mounts)
            cwd = _local(container.get("workingDir", "/"), mounts) or str(root)
            Path(cwd).mkdir(parents=True, exist_ok=True)
            output = root / f"{container['name']}.output.log"
            process = subprocess.Popen(
                [*isolation(), *_local_command(container["command"])],
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=open(output, "ab"),  # noqa: SIM115
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            self.processes.setdefault(name, []).append(process)
            started.append(process)
        return started

    def _mounts(self, container: Mapping[str, Any], root: Path) -> dict[str, str]:
        """Each mount path of the container, and the local directory of its volume."""
        mounts = {}
        for mount in container.get("volumeMounts") or []:
            local = root / "volumes" / mount["name"]
            local.mkdir(parents=True, exist_ok=True)
            mounts[mount["mountPath"]] = str(local)
        return mounts

    def _message(self, container: Mapping[str, Any], root: Path) -> str | None:
        if not container.get("terminationMessagePath"):
            return None
        message_file = root / f"{container['name']}.{TERMINATION_MESSAGE}"
        return message_file.read_text()[:4096] if message_file.exists() else None

    def _environment(
        self,
        pod: Mapping[str, Any],
        container: Mapping[str, Any],
        root: Path,
        mounts: Mapping[str, str],
    ) -> dict[str, str]:
        declared: dict[str, str] = {}
        secrets: dict[str, dict[str, str]] = {}
        for item in container.get("env") or []:
            if "value" in item:
                declared[item["name"]] = item["value"]
                continue
            ref = item["valueFrom"]["secretKeyRef"]
            if ref["name"] not in secrets:
                secrets[ref["name"]] = self._secret(ref["name"])
            declared[item["name"]] = secrets[ref["name"]][ref["key"]]
        # Only what the pod declares names paths inside the container: this machine's own
        # PATH may lie under a directory the pod mounts over (a checkout under /tmp).
        for key, value in list(declared.items()):
            if value == container.get("terminationMessagePath"):
                declared[key] = str(root / f"{container['name']}.{TERMINATION_MESSAGE}")
            elif (local := _local(value, mounts)) is not None:
                declared[key] = local
        interpreter_bin = str(Path(sys.executable).parent)
        env = {
            "PATH": os.pathsep.join((interpreter_bin, os.environ.get("PATH", ""))),
            "HOME": os.environ.get("HOME", str(root)),
        }
        if os.environ.get("PYTHONPATH"):  # the image's code: this checkout's, as the tests'
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        env.update(declared)
        job = pod["metadata"]["labels"].get("dlaas.io/job", "")
        env["MASTER_ADDR"] = "127.0.0.1"
        env["MASTER_PORT"] = str(self._ports.setdefault(job, free_rendezvous_port()))
        return env

    def _secret(self, name: str) -> dict[str, str]:
        raw = self.core.read_namespaced_secret(name, self.namespace, _preload_content=False)
        secret = json.loads(raw.data)
        values = dict(secret.get("stringData") or {})
        for key, encoded in (secret.get("data") or {}).items():
            values[key] = base64.b64decode(encoded).decode()
        return values

    def _kill(self, name: str) -> None:
        processes = self.processes.pop(name, None)
        if not processes:
            return
        grace = (self.pods.get(name, {}).get("spec") or {}).get("terminationGracePeriodSeconds")
        for process in processes:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + (grace if grace is not None else 2)
        for process in processes:
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(2)


def _exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _local_command(command: Sequence[str]) -> list[str]:
    """A container's command with the learner image's interpreter made this machine's (as
    the image's code is this checkout's)."""
    if command and command[0] == LEARNER_PYTHON:
        return [sys.executable, *command[1:]]
    return list(command)


def _local(value: str, mounts: Mapping[str, str]) -> str | None:
    """`value` with the longest mount path it starts with made local; None if none."""
    for path in sorted(mounts, key=len, reverse=True):
        if value == path:
            return mounts[path]
        if value.startswith(path.rstrip("/") + "/"):
            return mounts[path] + value[len(path.rstrip("/")) :]
    return None
