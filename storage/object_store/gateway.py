"""A job's objects through the API's object gateway (`/v2/job-objects`), with the job's token.

What a learner's runner (and its parameter-server sidecar) uses in place of the platform's
own store: it holds no key of the store, only the token minted for its job, which reaches
`jobs/{id}/` of that job and the data containers its manifest names (read only). Keys are
the store's keys as they are, so every caller of `ObjectStore` works unchanged.

Bodies stream both ways: an upload is sent as it is read (a file with its length, a stream
chunked), a download is written as it arrives; nothing is held whole in memory. Requests
that fail on the way (connection errors, 429, 502-504) are retried with backoff when they
can be sent again (not an upload of a stream already partly read). A refusal of the
gateway (401: the job ended, or 403: out of the job's reach) raises `GatewayRefused`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, TypeVar
from urllib.parse import quote

import httpx

from storage.object_store.atomic import write_atomically
from storage.object_store.base import (
    CHUNK_SIZE,
    BadContinuation,
    ObjectInfo,
    ObjectNotFound,
    ObjectPage,
    ProgressCallback,
    check_page_size,
    check_range,
    validate_key,
    validate_prefix,
)

RETRIES = 5
RETRY_STATUSES = frozenset({429, 502, 503, 504})
LIST_PAGE = 1000
T = TypeVar("T")


class GatewayRefused(PermissionError):
    """The gateway refused the job's token (the job ended) or the key (out of its reach)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"the object gateway refused ({status}): {detail}")
        self.status = status
        self.detail = detail


class _Retry(Exception):
    def __init__(self, wait_s: float) -> None:
        super().__init__(wait_s)
        self.wait_s = wait_s


def _detail(response: httpx.Response) -> tuple[str, str | None]:
    try:
        body = response.json()
    except ValueError:
        return response.text[:500], None
    if isinstance(body, dict):
        return str(body.get("detail", body)), body.get("field")
    return str(body), None


class _FileChunks:
    """A file's bytes as the iterable httpx sends, reporting progress as they go."""

    def __init__(self, path: Path, progress: ProgressCallback | None) -> None:
        self.path = path
        self.progress = progress

    def __iter__(self) -> Iterator[bytes]:
        with open(self.path, "rb") as source:
            while chunk := source.read(CHUNK_SIZE):
                if self.progress is not None:
                    self.progress(len(chunk))
                yield chunk


def _stream_chunks(stream: BinaryIO, progress: ProgressCallback | None) -> Iterator[bytes]:
    while chunk := stream.read(CHUNK_SIZE):
        if progress is not None:
            progress(len(chunk))
        yield chunk


class GatewayObjectStore:
    def __init__(
        self,
        url: str,
        token: str,
        *,
        timeout_s: float = 300.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.client = httpx.Client(
            headers={"Authorization": f"Bearer {token}"},
            timeout=httpx.Timeout(timeout_s, connect=10.0),
            limits=httpx.Limits(max_connections=32, max_keepalive_connections=16),
            transport=transport,
        )

    def __repr__(self) -> str:
        return f"GatewayObjectStore({self.url!r})"

    def close(self) -> None:
        self.client.close()

    # -- requests -----------------------------------------------------------------------

    def _object_url(self, key: str) -> str:
        return f"{self.url}/{quote(validate_key(key), safe='/')}"

    def _check(self, response: httpx.Response, key: str | None = None) -> None:
        status = response.status_code
        if status < 400:
            return
        if status in RETRY_STATUSES:
            retry_after = response.headers.get("retry-after", "")
            raise _Retry(float(retry_after) if retry_after.isdigit() else 0.0)
        detail, field = _detail(response)
        if status == 404 and key is not None:
            raise ObjectNotFound(key)
        if status in (401, 403):
            raise GatewayRefused(status, detail)
        if status == 422 and field == "cursor":
            raise BadContinuation(detail)
        if 400 <= status < 500:
            raise ValueError(f"the object gateway refused the request ({status}): {detail}")
        raise OSError(f"the object gateway failed ({status}): {detail}")

    def _retrying(self, attempt: Callable[[], T]) -> T:
        delay = 0.2
        for tries in range(RETRIES + 1):
            try:
                return attempt()
            except (_Retry, httpx.TransportError) as error:
                if tries == RETRIES:
                    if isinstance(error, _Retry):
                        raise OSError("the object gateway is busy or unavailable") from None
                    raise OSError(f"the object gateway is unreachable: {error}") from error
                wait = error.wait_s if isinstance(error, _Retry) and error.wait_s else delay
                time.sleep(min(wait, 10.0))
                delay = min(delay * 2, 5.0)
        raise AssertionError("unreachable")

    def _request(self, method: str, url: str, key: str | None = None, **kwargs: Any) -> Any:
        def attempt() -> Any:
            response = self.client.request(method, url, **kwargs)
            self._check(response, key)
            return response.json()

        return self._retrying(attempt)

    # -- writes -------------------------------------------------------------------------

    def put_file(self, key: str, path: Path, progress: ProgressCallback | None = None) -> None:
        url = self._object_url(key)
        size = Path(path).stat().st_size

        def attempt() -> None:
            response = self.client.put(
                url,
                content=_FileChunks(Path(path), progress),
                headers={
                    "Content-Length": str(size),
                    "Content-Type": "application/octet-stream",
                },
            )
            self._check(response)

        self._retrying(attempt)

    def put_stream(
        self, key: str, stream: BinaryIO, progress: ProgressCallback | None = None
    ) -> int:
        # A stream partly read cannot be sent again: one try.
        response = self.client.put(
            self._object_url(key),
            content=_stream_chunks(stream, progress),
            headers={"Content-Type": "application/octet-stream"},
        )
        try:
            self._check(response)
        except _Retry:
            raise OSError("the object gateway is busy or unavailable") from None
        return int(response.json()["size"])

    def put_bytes(self, key: str, data: bytes) -> None:
        self._request(
            "PUT",
            self._object_url(key),
            content=data,
            headers={"Content-Type": "application/octet-stream"},
        )

    def delete_prefix(self, prefix: str) -> int:
        body = self._request("DELETE", self.url, params={"prefix": validate_prefix(prefix)})
        return int(body["deleted"])

    # -- reads --------------------------------------------------------------------------

    def _open(self, key: str, start: int = 0) -> httpx.Response | None:
        """The streamed answer for the object from byte `start` (None: start is past its end)."""
        url = self._object_url(key)
        headers = {"Range": f"bytes={start}-"} if start else {}

        def attempt() -> httpx.Response | None:
            response = self.client.send(
                self.client.build_request("GET", url, headers=headers), stream=True
            )
            if response.status_code == 416:
                response.close()
                return None
            if response.status_code >= 400:
                response.read()
                response.close()
                self._check(response, key)
            return response

        return self._retrying(attempt)

    def iter_chunks(
        self, key: str, chunk_size: int = CHUNK_SIZE, start: int = 0
    ) -> Iterator[bytes]:
        check_range(chunk_size, start)
        response = self._open(key, start)
        if response is None:
            return iter(())
        return self._chunks_of(response, chunk_size)

    @staticmethod
    def _chunks_of(response: httpx.Response, chunk_size: int) -> Iterator[bytes]:
        try:
            yield from response.iter_bytes(chunk_size)
        finally:
            response.close()

    def get_file(self, key: str, path: Path, progress: ProgressCallback | None = None) -> None:
        response = self._open(key)
        assert response is not None
        with contextlib.closing(response):
            write_atomically(Path(path), _ResponseReader(response), progress)

    def get_bytes(self, key: str) -> bytes:
        return b"".join(self.iter_chunks(key))

    def size(self, key: str) -> int:
        # The key itself sorts first among the keys it prefixes.
        page = self.list_page(validate_key(key), 1)
        if page.objects and page.objects[0].key == key:
            return page.objects[0].size
        raise ObjectNotFound(key)

    def exists(self, key: str) -> bool:
        try:
            self.size(key)
        except ObjectNotFound:
            return False
        return True

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        continuation: str | None = None
        while True:
            page = self.list_page(prefix, LIST_PAGE, continuation)
            yield from page.objects
            if page.continuation is None:
                return
            continuation = page.continuation

    def list_page(self, prefix: str, limit: int, continuation: str | None = None) -> ObjectPage:
        check_page_size(limit)
        params: dict[str, str | int] = {
            "prefix": validate_prefix(prefix),
            "limit": min(limit, LIST_PAGE),
        }
        if continuation is not None:
            params["cursor"] = continuation
        body = self._request("GET", self.url, params=params)
        objects = [ObjectInfo(str(o["key"]), int(o["size"])) for o in body["objects"]]
        return ObjectPage(objects, body.get("next"))


class _ResponseReader:
    """A streamed response as a file to read from."""

    def __init__(self, response: httpx.Response) -> None:
        self._chunks = response.iter_bytes(CHUNK_SIZE)
        self._buffer = b""

    def read(self, size: int = -1, /) -> bytes:
        while size < 0 or len(self._buffer) < size:
            chunk = next(self._chunks, b"")
            if not chunk:
                break
            self._buffer += chunk
        if size < 0:
            data, self._buffer = self._buffer, b""
        else:
            data, self._buffer = self._buffer[:size], self._buffer[size:]
        return data
