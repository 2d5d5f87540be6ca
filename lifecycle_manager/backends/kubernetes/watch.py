"""A list-then-watch loop over dlaas's learner pods in one namespace.

```
 list (resourceVersion R) --> watch from R --(event: pod, R')--> watch from R' ...
   ^                             |  connection dropped / timed out: watch again from R'
   +---- 410 Gone (R' expired) --+  other errors: back off, then watch again
```

Every pod of a list or an event goes to the callback as it comes; after a list the callback
is also told which pods the list holds (`relisted`), so that pods that went away while
nothing was watching are noticed. Synchronous: it runs in a daemon thread of its own, which
ends at the first event or reconnection after `stop` is set.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

import urllib3
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from lifecycle_manager.backends.base import BackendUnavailable
from lifecycle_manager.backends.kubernetes.client import GONE, Caller
from lifecycle_manager.backends.kubernetes.manifests import MANAGED_BY, MANAGED_SELECTOR

log = logging.getLogger(__name__)


class PodSink(Protocol):
    def pod_event(self, kind: str, pod: Mapping[str, Any]) -> None: ...

    def relisted(self, pods: list[Mapping[str, Any]]) -> None: ...


class Expired(Exception):
    """The resourceVersion the watch asked for is too old: list again."""


def _resource_version(obj: Mapping[str, Any]) -> str | None:
    version = (obj.get("metadata") or {}).get("resourceVersion")
    return str(version) if version else None


def _ours(pod: Mapping[str, Any]) -> bool:
    return ((pod.get("metadata") or {}).get("labels") or {}).get(MANAGED_BY) == "dlaas"


class PodWatch:
    def __init__(
        self,
        calls: Caller,
        namespace: str,
        *,
        watch_timeout_s: int = 300,
        backoff_s: float = 1.0,
    ) -> None:
        self.calls = calls
        self.namespace = namespace
        self.watch_timeout_s = watch_timeout_s
        self.backoff_s = backoff_s
        self.lists = 0  # how many times it listed (a measure of expiries)

    def run(self, sink: PodSink, stop: threading.Event) -> None:
        version: str | None = None
        while not stop.is_set():
            try:
                if version is None:
                    version = self._list(sink)
                version = self._follow(sink, version, stop)
            except Expired:
                log.info("pod watch: resourceVersion %s expired; listing again", version)
                version = None
            except (urllib3.exceptions.ReadTimeoutError, urllib3.exceptions.ProtocolError):
                stop.wait(0.05)  # a quiet watch timed out, or the server closed it: again
            except (ApiException, BackendUnavailable, urllib3.exceptions.HTTPError, OSError) as e:
                if stop.is_set():
                    break
                log.warning("pod watch: %s; watching again in %.1f s", e, self.backoff_s)
                stop.wait(self.backoff_s)

    def _list(self, sink: PodSink) -> str:
        answer = self.calls.json(
            self.calls.core.list_namespaced_pod, self.namespace, label_selector=MANAGED_SELECTOR
        )
        self.lists += 1
        pods = [pod for pod in answer.get("items") or [] if _ours(pod)]
        sink.relisted(pods)
        return _resource_version(answer) or ""

    def _follow(self, sink: PodSink, version: str, stop: threading.Event) -> str:
        for event in self._events(version):
            if stop.is_set():
                break
            kind = event.get("type")
            obj = event.get("object") or {}
            if kind == "ERROR":
                if obj.get("code") == GONE:
                    raise Expired()
                raise ApiException(status=obj.get("code", 500), reason=obj.get("message"))
            version = _resource_version(obj) or version
            if kind in ("ADDED", "MODIFIED", "DELETED") and _ours(obj):
                sink.pod_event(kind, obj)
        return version

    def _events(self, version: str) -> Iterator[dict[str, Any]]:
        kwargs: dict[str, Any] = {
            "watch": True,
            "label_selector": MANAGED_SELECTOR,
            "allow_watch_bookmarks": True,
            # The server ends the watch after this long; the client gives it a little more.
            "timeout_seconds": self.watch_timeout_s,
            "_request_timeout": (self.calls.timeout, self.watch_timeout_s + self.calls.timeout),
            "_preload_content": False,
        }
        if version:
            kwargs["resource_version"] = version
        try:
            response: Any = self.calls.core.list_namespaced_pod(self.namespace, **kwargs)
        except ApiException as error:
            if error.status == GONE:
                raise Expired() from error
            raise
        try:
            for line in iter_resp_lines(response):
                if line:
                    yield json.loads(line)
        finally:
            response.close()
            response.release_conn()
