"""The Kubernetes API client and the one way dlaas calls it: timed out, retried, classified.

Every call is given a request timeout (an API server may hold a connection open) and is
retried a few times, briefly, when the failure is passing: a 5xx or 429 answer, a refused or
dropped connection, a timeout. Whatever still fails becomes `BackendUnavailable`, which the
lifecycle manager retries later. Answers are read as plain JSON: dlaas works with the raw
objects and does not need the client's models.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from lifecycle_manager.backends.base import BackendUnavailable
from storage.settings import Settings

log = logging.getLogger(__name__)

CONFLICT = 409
NOT_FOUND = 404
GONE = 410


def api_client(settings: Settings) -> client.ApiClient:
    """`kube_api_url` if set, else the in-cluster service account, else the kubeconfig."""
    configuration = client.Configuration()
    if settings.kube_api_url:
        configuration.host = settings.kube_api_url.rstrip("/")
    else:
        try:
            config.load_incluster_config(client_configuration=configuration)
        except ConfigException:
            config.load_kube_config(
                context=settings.kube_context, client_configuration=configuration
            )
    return client.ApiClient(configuration)


def is_passing(error: BaseException) -> bool:
    """Whether a failed call may succeed if simply tried again."""
    if isinstance(error, ApiException):
        return error.status in (0, 429) or error.status >= 500
    return isinstance(error, urllib3.exceptions.HTTPError | OSError)


def describe(error: BaseException) -> str:
    if isinstance(error, ApiException):
        try:
            message = json.loads(error.body or "{}").get("message", "")
        except ValueError:
            message = ""
        return f"HTTP {error.status} {error.reason or ''}: {message}".strip().rstrip(":")
    return repr(error)


class Answer(NamedTuple):
    response: Any  # the raw HTTP response; None when the status was an accepted error
    status: int
    retried: bool  # an earlier try failed, and may have taken effect


class Caller:
    """Calls the API with a timeout and brief retries; reads answers as JSON."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        timeout: float = 10.0,
        tries: int = 3,
        delay: float = 0.1,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.networking = client.NetworkingV1Api(api)
        self.timeout = timeout
        self.tries = tries
        self.delay = delay
        self.sleep = sleep

    def json(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        answer = self.call(method, *args, **kwargs)
        return json.loads(answer.response.data or b"null")

    def call(
        self, method: Callable[..., Any], *args: Any, accept: tuple[int, ...] = (), **kwargs: Any
    ) -> Answer:
        """Call until the answer is a success, an error status in `accept`, or a lasting
        failure (raised as is) or passing failures ran out (`BackendUnavailable`)."""
        kwargs.setdefault("_request_timeout", self.timeout)
        kwargs["_preload_content"] = False
        retried = False
        for attempt in range(self.tries):
            try:
                response = method(*args, **kwargs)
                return Answer(response, int(response.status), retried)
            except ApiException as error:
                if error.status in accept:
                    return Answer(None, error.status, retried)
                if not is_passing(error):
                    raise
                failure: BaseException = error
            except (urllib3.exceptions.HTTPError, OSError) as error:
                failure = error
            retried = True
            log.info("kubernetes: %s failed (%s); try %s", method.__name__, failure, attempt + 1)
            if attempt + 1 < self.tries:
                self.sleep(self.delay * 2**attempt)
        raise BackendUnavailable(
            f"the Kubernetes API failed {self.tries} times: {describe(failure)}"
        ) from failure

    def create(self, method: Callable[..., Any], *args: Any) -> tuple[dict[str, Any] | None, bool]:
        """(the object, whether this call made it); (None, False) if it already existed.

        A create whose earlier try failed in transit and whose retry finds the object made
        it all the same: it counts as made here.
        """
        answer = self.call(method, *args, accept=(CONFLICT,))
        if answer.status == CONFLICT:
            return None, answer.retried
        return json.loads(answer.response.data), True

    def delete(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> bool:
        """Whether the object was there to delete."""
        return self.call(method, *args, accept=(NOT_FOUND,), **kwargs).status != NOT_FOUND

    def close(self) -> None:
        self.api.close()
