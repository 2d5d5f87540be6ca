"""Objects in an S3 bucket (AWS S3, SeaweedFS, MinIO, ...) through boto3.

Large objects move in parts: uploads above one part (8 MiB) are multipart uploads, aborted on any
error, and downloads stream to disk; no object is ever held whole in memory.
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

from storage.object_store.atomic import Readable, read_full, write_atomically
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

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import CompletedPartTypeDef, ObjectIdentifierTypeDef

log = logging.getLogger(__name__)

MiB = 1 << 20
PART_SIZE = 8 * MiB
"""Size of every part but the last; streams up to this size go up in one request."""
MAX_PARTS = 10_000
PARTS_PER_STEP = 1_000
"""A stream of unknown length grows its part size by PART_SIZE every PARTS_PER_STEP parts,
so that 10,000 parts reach about 440 GiB."""
DELETE_BATCH = 1_000
_NOT_FOUND = frozenset({"404", "NoSuchKey", "NotFound"})
_BAD_TOKEN = frozenset({"400", "InvalidArgument", "InvalidToken"})

PartSizer = Callable[[int], int]
"""Size of part `number` (1-based) of an upload."""


def make_s3_client(
    endpoint_url: str | None,
    access_key: str | None,
    secret_key: str | None,
    region: str = "us-east-1",
) -> S3Client:
    """A boto3 S3 client; path-style addressing when talking to a custom endpoint."""
    config = Config(
        region_name=region,
        signature_version="s3v4",
        s3={"addressing_style": "path"} if endpoint_url else {},
        retries={"max_attempts": 5, "mode": "standard"},
        connect_timeout=10,
        read_timeout=120,
        max_pool_connections=16,
    )
    session = boto3.session.Session()
    return session.client(
        "s3",
        endpoint_url=endpoint_url,
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
        config=config,
    )


class S3ObjectStore:
    """Stores key `a/b` as object `a/b` in `bucket`, creating the bucket if it is missing."""

    def __init__(
        self,
        client: S3Client,
        bucket: str,
        *,
        create_bucket: bool = True,
        part_size: int = PART_SIZE,
        page_size: int = 1000,
    ) -> None:
        if part_size < 5 * MiB:
            raise ValueError(f"part_size must be at least 5 MiB (S3's minimum), got {part_size}")
        self.client = client
        self.bucket = bucket
        self.part_size = part_size
        self.page_size = page_size
        if create_bucket:
            self._ensure_bucket()

    def __repr__(self) -> str:
        return f"S3ObjectStore(bucket={self.bucket!r}, endpoint={self.client.meta.endpoint_url!r})"

    def _ensure_bucket(self) -> None:
        try:
            self.client.head_bucket(Bucket=self.bucket)
            return
        except ClientError as exc:
            if _code(exc) not in {"404", "NoSuchBucket", "NotFound"}:
                raise
        region = self.client.meta.region_name
        try:
            if region and region != "us-east-1":
                self.client.create_bucket(
                    Bucket=self.bucket,
                    CreateBucketConfiguration={"LocationConstraint": region},  # type: ignore[typeddict-item]
                )
            else:
                self.client.create_bucket(Bucket=self.bucket)
        except ClientError as exc:
            if _code(exc) != "BucketAlreadyOwnedByYou":
                raise

    # -- writing --------------------------------------------------------------------------

    def put_file(self, key: str, path: Path, progress: ProgressCallback | None = None) -> None:
        path = Path(path)
        size = path.stat().st_size
        # A known size lets every part have the same size, even for very large files.
        base = max(self.part_size, math.ceil(size / MAX_PARTS / MiB) * MiB)
        with open(path, "rb") as stream:
            self._upload(validate_key(key), stream, progress, lambda _number: base)

    def put_stream(
        self, key: str, stream: BinaryIO, progress: ProgressCallback | None = None
    ) -> int:
        base = self.part_size
        return self._upload(
            validate_key(key),
            stream,
            progress,
            lambda number: base * (1 + (number - 1) // PARTS_PER_STEP),
        )

    def put_bytes(self, key: str, data: bytes) -> None:
        self.put_stream(key, io.BytesIO(data))

    def _upload(
        self,
        key: str,
        stream: Readable,
        progress: ProgressCallback | None,
        part_size: PartSizer,
    ) -> int:
        first = read_full(stream, part_size(1))
        second = read_full(stream, part_size(2)) if len(first) == part_size(1) else b""
        if not second:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=first)
            if progress is not None:
                progress(len(first))
            return len(first)
        return self._upload_parts(key, _parts(first, second, stream, part_size), progress)

    def _upload_parts(
        self, key: str, parts: Iterable[bytes], progress: ProgressCallback | None
    ) -> int:
        upload_id = self.client.create_multipart_upload(Bucket=self.bucket, Key=key)["UploadId"]
        done: list[CompletedPartTypeDef] = []
        total = 0
        try:
            for number, data in enumerate(parts, start=1):
                if number > MAX_PARTS:
                    raise ValueError(f"object {key!r} needs more than {MAX_PARTS} parts")
                answer = self.client.upload_part(
                    Bucket=self.bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=data
                )
                done.append({"ETag": answer["ETag"], "PartNumber": number})
                total += len(data)
                if progress is not None:
                    progress(len(data))
            self.client.complete_multipart_upload(
                Bucket=self.bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": done}
            )
        except BaseException:
            try:
                self.client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
            except Exception:
                log.warning("could not abort multipart upload of %s (%s)", key, upload_id)
            raise
        return total

    # -- reading --------------------------------------------------------------------------

    def get_file(self, key: str, path: Path, progress: ProgressCallback | None = None) -> None:
        body = self._get(key)["Body"]
        with contextlib.closing(body):
            write_atomically(Path(path), body, progress)

    def get_bytes(self, key: str) -> bytes:
        body = self._get(key)["Body"]
        with contextlib.closing(body):
            return body.read()

    def iter_chunks(
        self, key: str, chunk_size: int = CHUNK_SIZE, start: int = 0
    ) -> Iterator[bytes]:
        check_range(chunk_size, start)
        try:
            answer = self._get(key, f"bytes={start}-" if start else None)
        except ClientError as exc:
            if _code(exc) == "InvalidRange":  # start is at or past the end
                return iter(())
            raise
        return _body_chunks(answer["Body"], chunk_size)

    def _get(self, key: str, byte_range: str | None = None) -> Any:
        validate_key(key)
        try:
            if byte_range:
                return self.client.get_object(Bucket=self.bucket, Key=key, Range=byte_range)
            return self.client.get_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if _code(exc) in _NOT_FOUND:
                raise ObjectNotFound(key) from None
            raise

    def size(self, key: str) -> int:
        try:
            head = self.client.head_object(Bucket=self.bucket, Key=validate_key(key))
        except ClientError as exc:
            if _code(exc) in _NOT_FOUND:
                raise ObjectNotFound(key) from None
            raise
        return head["ContentLength"]

    def exists(self, key: str) -> bool:
        try:
            self.size(key)
        except ObjectNotFound:
            return False
        return True

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        # S3 lists in key order, but some compatible servers (SeaweedFS) list folder by
        # folder, which puts "a/b" before "a-z": sort to keep the contract on every server.
        found = [
            ObjectInfo(key=item["Key"], size=item["Size"])
            for page in self._pages(validate_prefix(prefix))
            for item in page
        ]
        found.sort(key=lambda info: info.key)
        return iter(found)

    def list_page(self, prefix: str, limit: int, continuation: str | None = None) -> ObjectPage:
        """A page of at most `limit` objects (S3 answers 1000 at most), sorted as `list` is;
        the continuation is S3's own continuation token."""
        check_page_size(limit)
        validate_prefix(prefix)
        size = min(limit, 1000)
        try:
            if continuation is None:
                answer = self.client.list_objects_v2(
                    Bucket=self.bucket, Prefix=prefix, MaxKeys=size
                )
            else:
                answer = self.client.list_objects_v2(
                    Bucket=self.bucket, Prefix=prefix, MaxKeys=size, ContinuationToken=continuation
                )
        except ClientError as exc:
            if continuation is not None and _code(exc) in _BAD_TOKEN:
                raise BadContinuation(f"S3 refused the continuation token: {exc}") from None
            raise
        objects = [ObjectInfo(key=i["Key"], size=i["Size"]) for i in answer.get("Contents", [])]
        objects.sort(key=lambda info: info.key)
        following = answer.get("NextContinuationToken") if answer.get("IsTruncated") else None
        return ObjectPage(objects, following or None)

    def delete_prefix(self, prefix: str) -> int:
        count = 0
        for page in self._pages(validate_prefix(prefix)):
            for start in range(0, len(page), DELETE_BATCH):
                batch: list[ObjectIdentifierTypeDef] = [
                    {"Key": item["Key"]} for item in page[start : start + DELETE_BATCH]
                ]
                answer = self.client.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True}
                )
                if errors := answer.get("Errors"):
                    first = errors[0]
                    raise OSError(
                        f"could not delete {len(errors)} objects under {prefix!r}, e.g. "
                        f"{first.get('Key')!r}: {first.get('Code')} {first.get('Message')}"
                    )
                count += len(batch)
        return count

    def _pages(self, prefix: str) -> Iterator[Sequence[Any]]:
        paginator = self.client.get_paginator("list_objects_v2")
        pages = paginator.paginate(
            Bucket=self.bucket, Prefix=prefix, PaginationConfig={"PageSize": self.page_size}
        )
        for page in pages:
            yield page.get("Contents", [])


def _parts(first: bytes, second: bytes, stream: Readable, part_size: PartSizer) -> Iterator[bytes]:
    yield first
    yield second
    number = 3
    while data := read_full(stream, part_size(number)):
        yield data
        number += 1


def _body_chunks(body: Any, chunk_size: int) -> Iterator[bytes]:
    with contextlib.closing(body):
        yield from body.iter_chunks(chunk_size)


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))
