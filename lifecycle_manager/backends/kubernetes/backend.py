"""The `kubernetes` cluster backend: learners as pods that dlaas creates and owns itself.

Creating a gang (or one learner of it again, for `restart_policy.scope: learner`): check that
the nodes can hold all of it (gang admission), then the job's Secret (its root object, holding
the credentials), its headless Service (jobs of two or more learners), and a pod per learner,
in parallel. Every object has a deterministic name, and an
object that already exists counts as created, so a deploy run again after a crash, a timeout
or a 5xx creates only what is missing. Deleting a job deletes its pods (with the stop grace)
and then its Service and Secret; owner references would let the garbage collector finish
the job if dlaas stopped half-way. Deleting the learners of an attempt (and older ones), as
a halt or a restart does, or one learner, deletes pods only: the job's next attempt uses the
same Secret and Service.

The client is synchronous; each call runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from kubernetes import client

from lifecycle_manager.backends.base import LearnerSpec, LearnerStatus, NoCapacity
from lifecycle_manager.backends.kubernetes.admission import admit
from lifecycle_manager.backends.kubernetes.client import Caller, api_client
from lifecycle_manager.backends.kubernetes.manifests import (
    ATTEMPT_LABEL,
    JOB_LABEL,
    LEARNER_LABEL,
    MANAGED_BY,
    MANAGED_SELECTOR,
    PodOptions,
    job_selector,
    network_policy_manifest,
    owner_reference,
    pod_manifest,
    root_name,
    secret_manifest,
    service_manifest,
    split_env,
)
from lifecycle_manager.backends.kubernetes.node_capacity import cluster_nodes
from lifecycle_manager.backends.kubernetes.pod_status import learner_status
from storage.cluster_nodes import NodeCapacity
from storage.settings import Settings

WAIT_POLL_S = 0.1


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def _of_job(obj: Mapping[str, Any], job_id: str | None = None) -> bool:
    # The selector is sent to the API server too; checking here as well costs nothing.
    labels = _labels(obj)
    return labels.get(MANAGED_BY) == "dlaas" and (job_id is None or labels.get(JOB_LABEL) == job_id)


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _learner_of(pod: Mapping[str, Any]) -> int | None:
    try:
        return int(_labels(pod).get(LEARNER_LABEL, ""))
    except ValueError:
        return None


def _up_to(pod: Mapping[str, Any], attempt: int | None) -> bool:
    """Whether the pod is of `attempt` or an older one (any, when None)."""
    if attempt is None:
        return True
    try:
        return int(_labels(pod).get(ATTEMPT_LABEL, "")) <= attempt
    except ValueError:
        return True  # not one of ours to judge by attempt: as the job's


class KubernetesBackend:
    def __init__(
        self, api: client.ApiClient, options: PodOptions, *, admission: bool = True, **calls: Any
    ) -> None:
        self.options = options
        self.admission = admission
        self.calls = Caller(api, **calls)

    @classmethod
    def from_settings(cls, settings: Settings) -> KubernetesBackend:
        return cls(
            api_client(settings),
            PodOptions.from_settings(settings),
            admission=settings.kube_gang_admission,
            timeout=settings.kube_request_timeout_s,
        )

    @property
    def namespace(self) -> str:
        return self.options.namespace

    # -- create ---------------------------------------------------------------------------

    async def create_learners(self, specs: Sequence[LearnerSpec]) -> list[str]:
        if not specs:
            return []
        job_id = specs[0].job_id
        pods = [pod_manifest(spec, self.options) for spec in specs]
        shortfall = await self._shortfall(job_id, pods)
        if shortfall is not None:
            raise NoCapacity(shortfall)
        _plain, credentials = split_env(specs[0].env)
        root = await asyncio.to_thread(self._ensure_secret, job_id, credentials)
        owner = owner_reference(root)
        # The policy is in place before any pod of the job exists: no pod starts open.
        policy = network_policy_manifest(job_id, self.options, owner)
        await asyncio.to_thread(
            self.calls.create,
            self.calls.networking.create_namespaced_network_policy,
            self.namespace,
            policy,
        )
        core = self.calls.core
        creations = []
        if specs[0].num_learners > 1:
            service = service_manifest(job_id, self.namespace, owner)
            creations.append(
                asyncio.to_thread(
                    self.calls.create, core.create_namespaced_service, self.namespace, service
                )
            )
        for pod in pods:
            pod["metadata"]["ownerReferences"] = [owner]
            creations.append(
                asyncio.to_thread(
                    self.calls.create, core.create_namespaced_pod, self.namespace, pod
                )
            )
        # Every creation runs to its end before a failure is raised: no request is left
        # running behind the caller's back.
        results = await asyncio.gather(*creations, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        made = [result for result in results[-len(pods) :] if isinstance(result, tuple)]
        return [spec.name for spec, (_obj, created) in zip(specs, made, strict=True) if created]

    async def _shortfall(self, job_id: str, gang: list[dict[str, Any]]) -> str | None:
        """What the nodes lack to hold the gang's pods not created yet (gang admission)."""
        if not self.admission:
            return None
        nodes, pods = await self._nodes_and_live_pods()
        existing = {
            _name(pod)
            for pod in pods.get("items") or []
            if _of_job(pod, job_id)
            and (pod.get("metadata") or {}).get("namespace") == self.namespace
        }
        missing = [pod for pod in gang if _name(pod) not in existing]
        if not missing:
            return None
        return admit(missing, nodes.get("items") or [], pods.get("items") or [])

    def _ensure_secret(self, job_id: str, credentials: Mapping[str, str]) -> dict[str, Any]:
        """The job's Secret with the current credentials, as the API server holds it."""
        body = secret_manifest(job_id, self.namespace, credentials)
        core = self.calls.core
        created, _made = self.calls.create(core.create_namespaced_secret, self.namespace, body)
        if created is not None:
            return created
        patch = {"stringData": body["stringData"]}
        secret: dict[str, Any] = self.calls.json(
            core.patch_namespaced_secret, root_name(job_id), self.namespace, patch
        )
        return secret

    # -- delete ---------------------------------------------------------------------------

    async def delete_learners(
        self,
        job_id: str,
        *,
        wait: float = 0.0,
        grace: float | None = None,
        up_to_attempt: int | None = None,
    ) -> bool:
        async def pods() -> list[dict[str, Any]]:
            return [p for p in await self._job_pods(job_id) if _up_to(p, up_to_attempt)]

        await self._delete_pods(await pods(), grace)
        if up_to_attempt is None:  # the job is done with: what was made for it goes too
            root = root_name(job_id)
            core = self.calls.core
            await asyncio.gather(
                asyncio.to_thread(
                    self.calls.delete, core.delete_namespaced_service, root, self.namespace
                ),
                asyncio.to_thread(
                    self.calls.delete,
                    self.calls.networking.delete_namespaced_network_policy,
                    root,
                    self.namespace,
                ),
                asyncio.to_thread(
                    self.calls.delete,
                    core.delete_namespaced_secret,
                    root,
                    self.namespace,
                    propagation_policy="Background",
                ),
            )
        return await self._gone(pods, wait)

    async def delete_learner_of(
        self,
        job_id: str,
        learner: int,
        *,
        wait: float = 0.0,
        grace: float | None = None,
        up_to_attempt: int | None = None,
    ) -> bool:
        # The job's Secret and Service stay: its other learners still use them.
        async def pods() -> list[dict[str, Any]]:
            return [
                p
                for p in await self._job_pods(job_id)
                if _learner_of(p) == learner and _up_to(p, up_to_attempt)
            ]

        await self._delete_pods(await pods(), grace)
        return await self._gone(pods, wait)

    async def _delete_pods(self, pods: Sequence[Mapping[str, Any]], grace: float | None) -> None:
        seconds = self.options.stop_grace_s if grace is None else max(0, round(grace))
        await asyncio.gather(
            *(
                asyncio.to_thread(
                    self.calls.delete,
                    self.calls.core.delete_namespaced_pod,
                    _name(pod),
                    self.namespace,
                    grace_period_seconds=seconds,
                )
                for pod in pods
                if not (pod.get("metadata") or {}).get("deletionTimestamp")
            )
        )

    @staticmethod
    async def _gone(pods: Callable[[], Awaitable[list[dict[str, Any]]]], wait: float) -> bool:
        """Whether `pods()` comes back empty within `wait` seconds."""
        deadline = time.monotonic() + wait
        while True:
            if not await pods():
                return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(WAIT_POLL_S)

    async def delete_learner(self, name: str) -> None:
        await asyncio.to_thread(
            self.calls.delete,
            self.calls.core.delete_namespaced_pod,
            name,
            self.namespace,
            grace_period_seconds=self.options.stop_grace_s,
        )

    # -- list -----------------------------------------------------------------------------

    async def nodes(self) -> list[NodeCapacity]:
        nodes, pods = await self._nodes_and_live_pods()
        others = [pod for pod in pods.get("items") or [] if not self._is_learner_pod(pod)]
        return cluster_nodes(nodes.get("items") or [], others)

    async def _nodes_and_live_pods(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The cluster's nodes and every pod not finished, in all namespaces."""
        core = self.calls.core
        nodes, pods = await asyncio.gather(
            asyncio.to_thread(self.calls.json, core.list_node),
            asyncio.to_thread(
                self.calls.json,
                core.list_pod_for_all_namespaces,
                field_selector="status.phase!=Succeeded,status.phase!=Failed",
            ),
        )
        return nodes, pods

    def _is_learner_pod(self, pod: Mapping[str, Any]) -> bool:
        meta = pod.get("metadata") or {}
        return meta.get("namespace") == self.namespace and JOB_LABEL in (meta.get("labels") or {})

    async def _pods(self, selector: str) -> list[dict[str, Any]]:
        answer = await asyncio.to_thread(
            self.calls.json,
            self.calls.core.list_namespaced_pod,
            self.namespace,
            label_selector=selector,
        )
        return list(answer.get("items") or [])

    async def _job_pods(self, job_id: str) -> list[dict[str, Any]]:
        return [pod for pod in await self._pods(job_selector(job_id)) if _of_job(pod, job_id)]

    async def list_learners(self) -> list[LearnerStatus]:
        statuses = []
        for pod in await self._pods(MANAGED_SELECTOR):
            status = learner_status(pod) if _of_job(pod) else None
            if status is not None:
                statuses.append(status)
        return statuses

    async def aclose(self) -> None:
        await asyncio.to_thread(self.calls.close)
