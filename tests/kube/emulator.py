"""kmock's Kubernetes API emulator, made a little more like an API server, on a real port.

    python -m tests.kube.emulator [--port P]     (prints `READY <url>`, serves until killed;
                                                 keeps no request log, for benchmarks)

On top of kmock's in-memory objects this fills in what a real API server does and dlaas
relies on: `metadata.uid`, an increasing `resourceVersion` and `creationTimestamp` on
create, a new `resourceVersion` on every change, `status.phase: Pending` for a new pod,
`metadata.namespace` from the URL (kmock's watch only sees objects whose body has one).
`expire_watches()` ends the open watches with 410 Gone, as a real server does when a
resourceVersion is too old; `refuse(name)` fails the next create of an object before it is
stored (a kmock reaction fails a request after the object was stored). The resources dlaas
uses are declared: the core ones, and Deployments (the chart's shutdown hook scales them).
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import kmock
from kmock._internal import enums

RESOURCES = (
    "v1/pods",
    "v1/services",
    "v1/secrets",
    "v1/nodes",
    "v1/events",
    "v1/configmaps",
    "apps/v1/deployments",
)
GONE_EVENT = {
    "type": "ERROR",
    "object": {
        "apiVersion": "v1",
        "kind": "Status",
        "status": "Failure",
        "code": 410,
        "reason": "Expired",
        "message": "too old resource version",
    },
}


WAKE = "dlaas-test-wake"


class ApiServerEmulator(kmock.KubernetesEmulator):
    """kmock's emulator with uids, resource versions, expiring watches and refusals."""

    def prepare(self, *, keep_requests: bool = True) -> None:
        # kmock matches every request against all it served before (for its request views),
        # so a long run slows down; a benchmark's server keeps none.
        self._keep_requests = keep_requests
        self._version = 0
        self._expired_below = 0  # a watch from an older resourceVersion gets 410 Gone
        self._generation = 0  # watches open when the versions expired end with 410 Gone
        self._closing = False
        self._watched: set[tuple[Any, str | None]] = set()
        self._refusals: list[list[Any]] = []  # [object name, status, times left]
        for resource in RESOURCES:
            self.resources[resource] = {}

    def refuse(self, name: str, status: int = 503, times: int = 1) -> None:
        """Fail the next `times` creates of the object `name` before storing it."""
        self._refusals.append([name, status, times])

    async def expire_watches(self) -> None:
        self._version += 1
        self._expired_below = self._version
        self._generation += 1
        await self._wake()

    async def close_watches(self) -> None:
        self._closing = True
        await self._wake()

    async def _wake(self) -> None:
        for resource, namespace in list(self._watched):
            marker = {"metadata": {"name": WAKE, "namespace": namespace}}
            await self._buses[resource].put({"type": "BOOKMARK", "object": marker})

    async def _handle(self, request: Any) -> Any:
        data = request.data
        if request.resource is not None and isinstance(data, dict):
            meta = data.setdefault("metadata", {})
            if request.action == enums.action.CREATE:
                self._check_refusals(str(meta.get("name")))
                meta.setdefault("uid", str(uuid.uuid4()))
                meta.setdefault("creationTimestamp", datetime.now(UTC).isoformat())
                if request.namespace and request.resource.plural != "nodes":
                    meta.setdefault("namespace", request.namespace)
                if request.resource.plural == "pods":
                    data.setdefault("status", {}).setdefault("phase", "Pending")
            if request.action in (enums.action.CREATE, enums.action.UPDATE):
                self._version += 1
                meta["resourceVersion"] = str(self._version)
        try:
            return await super()._handle(request)
        finally:
            if not self._keep_requests:
                self._requests.clear()

    def _check_refusals(self, name: str) -> None:
        for refusal in self._refusals:
            if refusal[0] == name and refusal[2] > 0:
                refusal[2] -= 1
                raise kmock.KubernetesError(
                    status=refusal[1], reason="ServiceUnavailable", message="refused by the test"
                )

    async def _serve_watch(self, request: Any) -> AsyncIterator[Any]:
        generation = self._generation
        self._watched.add((request.resource, request.namespace))
        version = request.params.get("resourceVersion", "")
        if version.isdigit() and int(version) < self._expired_below:
            yield b""
            yield GONE_EVENT
            return
        async for event in super()._serve_watch(request):
            if self._closing:
                return
            if self._generation != generation:
                yield GONE_EVENT
                return
            if isinstance(event, dict) and event["object"].get("metadata", {}).get("name") == WAKE:
                continue
            yield event

    async def _serve_list(self, request: Any) -> Any:
        answer = await super()._serve_list(request)
        answer["metadata"]["resourceVersion"] = str(self._version)
        return answer


class RunningEmulator:
    """An emulator serving on a port from a thread of its own, with its own event loop."""

    def __init__(self, emulator: ApiServerEmulator, url: str, loop: asyncio.AbstractEventLoop):
        self.emulator = emulator
        self.url = url
        self.loop = loop

    def call(self, function: Callable[[], Any]) -> Any:
        """Run `function` on the emulator's loop (kmock is not thread-safe) and return its
        value, awaited if it is awaitable."""

        async def run() -> Any:
            value = function()
            return await value if inspect.isawaitable(value) else value

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(10)

    def objects(self, plural: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Live objects of one core resource, as raw dicts."""

        def collect() -> list[dict[str, Any]]:
            found = []
            for (resource, ns, _name), obj in list(self.emulator.objects.items()):
                wanted = resource.plural == plural and namespace in (None, ns)
                if wanted and not obj.deleted:
                    found.append(obj.raw)
            return found

        result: list[dict[str, Any]] = self.call(collect)
        return result

    def expire_watches(self) -> None:
        self.call(self.emulator.expire_watches)

    def refuse(self, name: str, status: int = 503, times: int = 1) -> None:
        self.call(lambda: self.emulator.refuse(name, status, times))


@contextmanager
def running_emulator(
    port: int | None = None, *, keep_requests: bool = True
) -> Iterator[RunningEmulator]:
    started = threading.Event()
    stopping: dict[str, Any] = {}
    box: dict[str, RunningEmulator] = {}

    def serve() -> None:
        loop = asyncio.new_event_loop()

        async def main() -> None:
            emulator = ApiServerEmulator()
            emulator.prepare(keep_requests=keep_requests)
            stop = asyncio.Event()
            stopping["stop"] = stop
            async with emulator, kmock.Server(emulator, port=port) as server:
                box["running"] = RunningEmulator(emulator, str(server.url).rstrip("/"), loop)
                started.set()
                await stop.wait()

        loop.run_until_complete(main())
        loop.close()

    thread = threading.Thread(target=serve, name="kube-emulator", daemon=True)
    thread.start()
    if not started.wait(15):
        raise RuntimeError("the Kubernetes API emulator did not start")
    running = box["running"]
    try:
        yield running
    finally:
        running.call(running.emulator.close_watches)
        running.loop.call_soon_threadsafe(stopping["stop"].set)
        thread.join(10)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.kube.emulator")
    parser.add_argument("--port", type=int, default=None)
    args = parser.parse_args()
    with running_emulator(args.port, keep_requests=False) as running:
        print(f"READY {running.url}", flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main()
