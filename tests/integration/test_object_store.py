"""The object store contract, run against both backends: local files and S3 (SeaweedFS)."""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import io
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, cast

import pytest

from storage.object_store import (
    LocalObjectStore,
    ObjectInfo,
    ObjectNotFound,
    ObjectPage,
    ObjectStore,
    S3ObjectStore,
    open_object_store,
)
from storage.settings import Settings
from tests.services import s3_client, unique_name

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

MiB = 1 << 20


@pytest.fixture(scope="module")
def client(seaweedfs: str) -> S3Client:
    return s3_client(seaweedfs)


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ObjectStore]:
    if request.param == "local":
        yield LocalObjectStore(tmp_path / "objects")
        return
    client: S3Client = request.getfixturevalue("client")
    s3 = S3ObjectStore(client, unique_name("dlaas-test"))
    yield s3
    s3.delete_prefix("")
    client.delete_bucket(Bucket=s3.bucket)


@pytest.fixture
def s3_store(client: S3Client) -> Iterator[S3ObjectStore]:
    s3 = S3ObjectStore(client, unique_name("dlaas-test"))
    yield s3
    s3.delete_prefix("")
    client.delete_bucket(Bucket=s3.bucket)


class Pattern(io.RawIOBase):
    """`size` pseudo-random bytes, handed out in uneven reads; fails after `fail_after`."""

    def __init__(self, size: int, fail_after: int | None = None) -> None:
        self.size = size
        self.fail_after = fail_after
        self.sent = 0
        self.digest = hashlib.sha256()
        self.block = os.urandom(MiB + 7)

    def readable(self) -> bool:
        return True

    def io(self) -> BinaryIO:
        return cast(BinaryIO, self)

    def read(self, size: int = -1) -> bytes:
        if self.fail_after is not None and self.sent >= self.fail_after:
            raise OSError("the source went away")
        want = self.size - self.sent if size < 0 else min(size, self.size - self.sent)
        data = self.block[: min(want, len(self.block) - (self.sent % 3))]
        self.sent += len(data)
        self.digest.update(data)
        return data


def sha256_of(chunks: Iterator[bytes]) -> str:
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk)
    return digest.hexdigest()


def test_put_and_get_bytes(store: ObjectStore) -> None:
    store.put_bytes("jobs/j1/model.zip", b"zip bytes")
    store.put_bytes("jobs/j1/empty", b"")

    assert store.get_bytes("jobs/j1/model.zip") == b"zip bytes"
    assert store.get_bytes("jobs/j1/empty") == b""
    assert store.size("jobs/j1/model.zip") == 9
    assert store.exists("jobs/j1/model.zip")
    assert not store.exists("jobs/j1")
    store.put_bytes("jobs/j1/model.zip", b"replaced")
    assert store.get_bytes("jobs/j1/model.zip") == b"replaced"


def test_put_file_and_get_file_report_progress(store: ObjectStore, tmp_path: Path) -> None:
    source = tmp_path / "in.bin"
    data = os.urandom(3 * MiB + 5)
    source.write_bytes(data)
    sent: list[int] = []
    store.put_file("data/u/c/in.bin", source, progress=sent.append)

    received: list[int] = []
    target = tmp_path / "out" / "deep" / "in.bin"
    store.get_file("data/u/c/in.bin", target, progress=received.append)

    assert target.read_bytes() == data
    assert sum(sent) == len(data)
    assert sum(received) == len(data)
    assert all(n > 0 for n in sent + received)
    assert list(target.parent.iterdir()) == [target]


def test_put_stream_of_20_mib_arrives_whole(store: ObjectStore, tmp_path: Path) -> None:
    stream = Pattern(20 * MiB + 3)
    moved: list[int] = []

    assert store.put_stream("jobs/j/checkpoints/big", stream.io(), moved.append) == stream.size

    assert sum(moved) == stream.size
    assert store.size("jobs/j/checkpoints/big") == stream.size
    assert sha256_of(store.iter_chunks("jobs/j/checkpoints/big")) == stream.digest.hexdigest()
    if isinstance(store, S3ObjectStore):  # went up as a multipart upload: 8 + 8 + 4 MiB
        head = store.client.head_object(Bucket=store.bucket, Key="jobs/j/checkpoints/big")
        assert head["ETag"].strip('"').endswith("-3")


def test_put_stream_of_exactly_one_part(store: ObjectStore) -> None:
    stream = Pattern(8 * MiB)
    assert store.put_stream("one-part", stream.io()) == 8 * MiB
    assert sha256_of(store.iter_chunks("one-part")) == stream.digest.hexdigest()


def test_failing_stream_leaves_nothing(store: ObjectStore) -> None:
    with pytest.raises(OSError, match="went away"):
        store.put_stream("jobs/j/results/broken", Pattern(20 * MiB, fail_after=17 * MiB).io())

    assert not store.exists("jobs/j/results/broken")
    assert list(store.list("")) == []
    if isinstance(store, S3ObjectStore):
        uploads = store.client.list_multipart_uploads(Bucket=store.bucket)
        assert uploads.get("Uploads", []) == []
    else:
        assert isinstance(store, LocalObjectStore)
        assert [p for p in store.root.rglob("*") if p.is_file()] == []


def test_get_file_replaces_the_target_whole_or_not_at_all(
    store: ObjectStore, tmp_path: Path
) -> None:
    target = tmp_path / "restore" / "weights.pt"
    target.parent.mkdir()
    target.write_bytes(b"old")
    store.put_bytes("ckpt/weights.pt", os.urandom(2 * MiB + 1))

    def interrupted(_n: int) -> None:
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        store.get_file("ckpt/weights.pt", target, progress=interrupted)
    with pytest.raises(ObjectNotFound):
        store.get_file("ckpt/missing.pt", target)

    assert target.read_bytes() == b"old"
    assert list(target.parent.iterdir()) == [target]


def test_iter_chunks_from_an_offset(store: ObjectStore) -> None:
    data = os.urandom(10_000)
    store.put_bytes("logs/learner-1.log", data)

    chunks = list(store.iter_chunks("logs/learner-1.log", chunk_size=4096, start=5000))

    assert b"".join(chunks) == data[5000:]
    assert [len(c) for c in chunks] == [4096, 904]
    assert b"".join(store.iter_chunks("logs/learner-1.log", chunk_size=3000)) == data
    assert list(store.iter_chunks("logs/learner-1.log", start=10_000)) == []
    assert list(store.iter_chunks("logs/learner-1.log", start=20_000)) == []
    with pytest.raises(ValueError):
        store.iter_chunks("logs/learner-1.log", start=-1)


def test_list_is_sorted_and_selects_by_prefix(store: ObjectStore) -> None:
    keys = ["b", "a/c/d", "ab", "a.txt", "a/b", "a-z", "a/c/e/f"]
    for key in keys:
        store.put_bytes(key, key.encode())

    assert [i.key for i in store.list("")] == sorted(keys)
    assert list(store.list("a/")) == [
        ObjectInfo("a/b", 3),
        ObjectInfo("a/c/d", 5),
        ObjectInfo("a/c/e/f", 7),
    ]
    assert [i.key for i in store.list("a")] == sorted(k for k in keys if k.startswith("a"))
    assert [i.key for i in store.list("a/c/")] == ["a/c/d", "a/c/e/f"]
    assert list(store.list("zzz/")) == []


def _every_page(store: ObjectStore, prefix: str, limit: int) -> list[ObjectPage]:
    pages = [store.list_page(prefix, limit)]
    while pages[-1].continuation is not None:
        pages.append(store.list_page(prefix, limit, pages[-1].continuation))
    return pages


def test_list_page_lists_every_object_once_page_by_page(store: ObjectStore) -> None:
    keys = ["b", "a/c/d", "ab", "a.txt", "a/b", "a-z", "a/c/e/f", "a/c/e/g", "a/d"]
    for key in keys:
        store.put_bytes(key, key.encode())

    for prefix in ("", "a", "a/", "a/c/"):
        wanted = sorted(k for k in keys if k.startswith(prefix))
        for limit in (1, 2, 3, 1000):
            pages = _every_page(store, prefix, limit)
            listed = [info.key for page in pages for info in page.objects]
            assert sorted(listed) == wanted, (prefix, limit)
            assert len(listed) == len(wanted)
            assert all(0 < len(page.objects) <= limit for page in pages)
            assert len(pages) == max(1, -(-len(wanted) // limit))
    assert store.list_page("a/", 10).objects == [
        ObjectInfo("a/b", 3),
        ObjectInfo("a/c/d", 5),
        ObjectInfo("a/c/e/f", 7),
        ObjectInfo("a/c/e/g", 7),
        ObjectInfo("a/d", 3),
    ]
    assert store.list_page("zzz/", 10) == ObjectPage([], None)
    with pytest.raises(ValueError):
        store.list_page("a/", 0)


def test_a_local_continuation_is_where_a_page_ended_under_its_prefix(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path / "objects")
    for key in ("x/1", "x/2/a", "x/3", "y/1"):
        store.put_bytes(key, b"")
    page = store.list_page("x/", 2)
    assert (page.continuation, [i.key for i in page.objects]) == ("2/a", ["x/1", "x/2/a"])
    assert [i.key for i in store.list_page("y/", 5, "0").objects] == ["y/1"]


def test_list_and_delete_beyond_one_page(s3_store: S3ObjectStore, seaweedfs: str) -> None:
    keys = [f"jobs/j/results/part-{n:05d}" for n in range(1005)]
    # Seeded through the plain REST API (the test server takes unsigned requests): a quarter
    # of the time boto3 needs for a thousand small objects.
    put_unsigned(seaweedfs, s3_store.bucket, keys)
    s3_store.put_bytes("jobs/other/keep", b"k")

    listed = [info.key for info in s3_store.list("jobs/j/")]
    assert listed == keys
    paged = _every_page(s3_store, "jobs/j/", 1000)
    assert [len(page.objects) for page in paged] == [1000, 5]
    assert sorted(info.key for page in paged for info in page.objects) == keys
    assert s3_store.delete_prefix("jobs/j/") == 1005
    assert [info.key for info in s3_store.list("")] == ["jobs/other/keep"]


def put_unsigned(endpoint: str, bucket: str, keys: list[str]) -> None:
    host, port = endpoint.removeprefix("http://").split(":")

    def put(some: list[str]) -> None:
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        with contextlib.closing(conn):
            for key in some:
                conn.request("PUT", f"/{bucket}/{key}", body=b"x")
                answer = conn.getresponse()
                answer.read()
                assert answer.status == 200, answer.status

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(put, [keys[i::4] for i in range(4)]))


def test_delete_prefix_touches_only_its_keys(store: ObjectStore) -> None:
    for key in ["jobs/a/model.zip", "jobs/a/logs/learner-1.log", "jobs/ab/model.zip"]:
        store.put_bytes(key, b"1")

    assert store.delete_prefix("jobs/a/") == 2
    assert store.delete_prefix("jobs/a/") == 0
    assert [i.key for i in store.list("")] == ["jobs/ab/model.zip"]
    if isinstance(store, LocalObjectStore):
        assert not (store.root / "jobs" / "a").exists()


def test_missing_objects_raise_object_not_found(store: ObjectStore, tmp_path: Path) -> None:
    store.put_bytes("jobs/x/present", b"1")
    for call in (
        lambda: store.get_bytes("jobs/x/absent"),
        lambda: store.size("jobs/x/absent"),
        lambda: store.iter_chunks("jobs/x/absent"),
        lambda: store.iter_chunks("jobs/x/absent", start=10),
        lambda: store.get_file("jobs/x/absent", tmp_path / "f"),
        lambda: store.get_bytes("jobs/x/present/below"),
    ):
        with pytest.raises(ObjectNotFound) as caught:
            call()
        assert isinstance(caught.value, KeyError)
        assert "jobs/x/" in str(caught.value)
    assert not store.exists("jobs/x/absent")
    assert not (tmp_path / "f").exists()


@pytest.mark.parametrize(
    ("key", "complaint"),
    [
        ("", "empty"),
        ("/jobs/a", "starts with '/'"),
        ("jobs/../etc/passwd", "'..'"),
        ("..", "'..'"),
        ("jobs/./a", "'.'"),
        ("jobs\\a", "backslash"),
        ("jobs//a", "empty component"),
        ("jobs/a/", "ends with '/'"),
    ],
)
def test_bad_keys_are_refused(store: ObjectStore, key: str, complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint.replace(".", r"\.")):
        store.put_bytes(key, b"x")
    with pytest.raises(ValueError):
        store.get_bytes(key)
    with pytest.raises(ValueError):
        store.exists(key)


@pytest.mark.parametrize("prefix", ["/jobs", "jobs/../x", "a\\b"])
def test_bad_prefixes_are_refused(store: ObjectStore, prefix: str) -> None:
    with pytest.raises(ValueError):
        list(store.list(prefix))
    with pytest.raises(ValueError):
        store.delete_prefix(prefix)


def test_open_object_store_picks_the_backend(tmp_path: Path, s3_settings: Settings) -> None:
    local = open_object_store(Settings(home=tmp_path / "home"))
    assert isinstance(local, LocalObjectStore)
    assert local.root == tmp_path / "home" / "objects"

    s3 = open_object_store(s3_settings)
    assert isinstance(s3, S3ObjectStore)
    s3.put_bytes("k", b"v")
    assert s3.get_bytes("k") == b"v"
    assert open_object_store(s3_settings).get_bytes("k") == b"v"  # bucket exists: fine
    s3.delete_prefix("")
    s3.client.delete_bucket(Bucket=s3.bucket)


def test_local_writes_leave_no_temporary_files(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    store.put_bytes("a/b", b"1")
    with pytest.raises(OSError):
        store.put_stream("a/c", Pattern(3 * MiB, fail_after=MiB).io())

    assert [i.key for i in store.list("")] == ["a/b"]
    assert [p.name for p in (tmp_path / ".dlaas-tmp").iterdir()] == []
    with pytest.raises(ValueError, match="reserved"):
        store.put_bytes(".dlaas-tmp/x", b"1")
