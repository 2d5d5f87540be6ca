"""Hostile and malformed requests for `bench/fuzz.py`, as raw HTTP/1.1 bytes.

Each case is what a careless or hostile client sends: YAML bombs and huge numbers in
manifests, deep nesting, bodies over their limit or cut short, lying Content-Lengths, bad
encodings, path tricks, malformed query values, cursors, tokens and headers. They are built
as raw bytes so that a case can lie (a Content-Length that is not the body's, a body that
stops early), which no HTTP client library lets one do.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

from tests.integration.api_harness import make_zip


@dataclass(frozen=True)
class Case:
    name: str
    raw: bytes  # the whole request: request line, headers (no Host: added later) and body
    expects_answer: bool = True  # False: the body is cut short, the server may just wait


MODEL = make_zip({"train.py": b"print('hello')\n"})


def merge_key_bomb(levels: int) -> bytes:
    lines = ["a0: &a0 {x: 1}"]
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i}\n  <<: [*a{i - 1}, *a{i - 1}]\n  y{i}: {i}")
    lines.append("framework: {command: python train.py}")
    return "\n".join(lines).encode()


def alias_bomb(levels: int) -> bytes:
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels + 1):
        items = ", ".join([f"*l{i - 1}"] * 9)
        lines.append(f"l{i}: &l{i} [{items}]")
    lines.append("framework: {command: python train.py}")
    return "\n".join(lines).encode()


def hostile_manifests() -> dict[str, bytes]:
    """Manifests under 64 KiB that a parser must refuse quickly (or accept), never choke on."""
    base = b"framework: {command: python train.py}\n"
    return {
        "merge_keys_18": merge_key_bomb(18),
        "merge_keys_40": merge_key_bomb(40),
        "billion_laughs_9": alias_bomb(9),
        "recursive_anchor": b"a: &a [*a]\n" + base,
        "deep_flow": b"x: " + b"[" * 5000 + b"]" * 5000 + b"\n" + base,
        "deep_block": b"".join(b"  " * i + b"k:\n" for i in range(300)) + b"  " * 300 + b"v\n",
        "huge_memory": b"memory: " + b"9" * 5000 + b"Gi\n" + base,
        "huge_learners": b"learners: " + b"9" * 400 + b"\n" + base,
        "float_learners": b"learners: 1e400\n" + base,
        "nan_cpus": b"cpus: .nan\n" + base,
        "negative_gpus": b"gpus: -1\n" + base,
        "wide_list": b"tags: [" + b"1, " * 20000 + b"1]\n" + base,
        "long_string": b"description: " + b"x" * 60000 + b"\n" + base,
        "bad_utf8": b"name: \xff\xfe\xfa\n" + base,
        "nul_bytes": b"name: a\x00b\n" + base,
        "binary": bytes(range(256)) * 100,
        "not_a_mapping": b"- just\n- a\n- list\n",
        "empty": b"",
        "tabs": b"framework:\n\tcommand: python\n",
        "python_tag": b"!!python/object/apply:os.system ['true']\n" + base,
        "odd_key": b"? [a, b]\n: c\n" + base,
        "big_int_key": b"123456789012345678901234567890: 1\n" + base,
        "just_over_64k": b"description: " + b"y" * (64 * 1024) + b"\n" + base,
    }


def _request(
    method: str,
    path: str,
    token: str | None,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    content_length: int | None = None,
) -> bytes:
    lines = [f"{method} {path} HTTP/1.1"]
    if token is not None:
        lines.append(f"Authorization: Bearer {token}")
    for name, value in (headers or {}).items():
        lines.append(f"{name}: {value}")
    length = len(body) if content_length is None else content_length
    if method in ("POST", "PUT", "PATCH") or body or content_length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace") + body


def _multipart(parts: list[tuple[str, str, bytes]], boundary: str = "fuzzb0undary") -> bytes:
    chunks = []
    for name, filename, data in parts:
        chunks.append(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; '
            f'filename="{filename}"\r\nContent-Type: application/octet-stream\r\n\r\n'.encode()
        )
        chunks.append(data + b"\r\n")
    chunks.append(f"--{boundary}--\r\n".encode())
    return b"".join(chunks)


def _submit(token: str, manifest: bytes, model: bytes = MODEL, **extra: str) -> bytes:
    body = _multipart([("manifest", "manifest.yml", manifest), ("model", "model.zip", model)])
    headers = {"Content-Type": "multipart/form-data; boundary=fuzzb0undary", **extra}
    return _request("POST", "/v2/jobs", token, body, headers)


def cases(token: str, job_id: str) -> Iterator[Case]:
    """Every hostile case, for a user whose token is `token` and who owns job `job_id`."""
    for name, manifest in hostile_manifests().items():
        yield Case(f"manifest:{name}", _submit(token, manifest))
    yield from _archive_cases(token)
    yield from _body_cases(token)
    yield from _path_cases(token, job_id)
    yield from _query_cases(token, job_id)
    yield from _header_cases(token, job_id)


def _archive_cases(token: str) -> Iterator[Case]:
    manifest = b"framework: {command: python train.py}\n"
    archives = {
        "zip_slip": make_zip({"../../etc/evil": b"x", "train.py": b"1"}),
        "absolute": make_zip({"/etc/evil": b"x"}),
        "not_a_zip": b"this is not a zip file at all",
        "empty_zip": make_zip({}),
        "zip_bomb": make_zip({"big.bin": b"\0" * (20 * 1024 * 1024)}),
        "truncated_zip": MODEL[: len(MODEL) // 2],
    }
    for name, archive in archives.items():
        yield Case(f"archive:{name}", _submit(token, manifest, archive))
    json_type = {"Content-Type": "application/json"}
    yield Case("submit:not_multipart", _request("POST", "/v2/jobs", token, b"{}", json_type))
    only_manifest = _multipart([("manifest", "m.yml", manifest)])
    headers = {"Content-Type": "multipart/form-data; boundary=fuzzb0undary"}
    yield Case("submit:no_model", _request("POST", "/v2/jobs", token, only_manifest, headers))
    no_boundary = {"Content-Type": "multipart/form-data"}
    yield Case("submit:no_boundary", _request("POST", "/v2/jobs", token, b"--x--", no_boundary))
    many = _multipart([(f"f{i}", f"f{i}", b"x") for i in range(50)])
    yield Case("submit:many_parts", _request("POST", "/v2/jobs", token, many, headers))


def _body_cases(token: str) -> Iterator[Case]:
    json_type = {"Content-Type": "application/json"}
    yield Case(
        "users:huge_content_length",
        _request("POST", "/v2/users", token, b"", json_type, content_length=10**12),
    )
    form = {"Content-Type": "multipart/form-data; boundary=x"}
    yield Case(
        "jobs:huge_content_length",
        _request("POST", "/v2/jobs", token, b"", form, content_length=10**12),
    )
    yield Case(
        "data:huge_content_length",
        _request("PUT", "/v2/data/fuzz/x.bin", token, b"", content_length=10**15),
    )
    yield Case(
        "users:truncated_body",
        _request("POST", "/v2/users", token, b'{"name": "tr', json_type, content_length=500),
        expects_answer=False,
    )
    yield Case("users:bad_json", _request("POST", "/v2/users", token, b"{name:", json_type))
    deep = b"[" * 100_000 + b"]" * 100_000
    yield Case("users:deep_json", _request("POST", "/v2/users", token, deep, json_type))
    yield Case(
        "users:bad_encoding",
        _request("POST", "/v2/users", token, b'{"name": "\xff\xfe"}', json_type),
    )
    long_name = json.dumps({"name": "n" * 100_000}).encode()
    yield Case("users:long_name", _request("POST", "/v2/users", token, long_name, json_type))
    slashes = json.dumps({"name": "../../etc"}).encode()
    yield Case("users:path_name", _request("POST", "/v2/users", token, slashes, json_type))
    chunked = {"Transfer-Encoding": "chunked", "Content-Type": "application/json"}
    raw = _request("POST", "/v2/users", token, b"", chunked).replace(b"Content-Length: 0\r\n", b"")
    yield Case("users:bad_chunks", raw + b"zz\r\nxx\r\n0\r\n\r\n")


def _path_cases(token: str, job_id: str) -> Iterator[Case]:
    paths = [
        "/v2/jobs/..%2f..%2fetc%2fpasswd",
        "/v2/jobs/%00",
        "/v2/jobs/" + "x" * 8000,
        f"/v2/jobs/{job_id}/results/../../../../etc/passwd",
        f"/v2/jobs/{job_id}/results/%2e%2e/%2e%2e/secrets",
        "/v2/data/..%2F..%2Fjobs",
        "/v2/data/c/" + "d/" * 2000,
        "/v2/jobs/training-%ff%fe",
        "/%2e%2e/%2e%2e/etc/passwd",
        "/v2/jobs/training-0000000000/logs",
    ]
    for i, path in enumerate(paths):
        yield Case(f"path:{i}", _request("GET", path, token))
    yield Case("path:put_dotdot", _request("PUT", "/v2/data/c/../../x", token, b"x"))
    yield Case("method:patch_jobs", _request("PATCH", "/v2/jobs", token, b"{}"))
    yield Case("method:delete_all", _request("DELETE", "/v2/jobs", token))


def _query_cases(token: str, job_id: str) -> Iterator[Case]:
    queries = [
        "/v2/jobs?limit=-1",
        "/v2/jobs?limit=99999999999999999999999",
        "/v2/jobs?limit=abc",
        "/v2/jobs?cursor=garbage",
        "/v2/jobs?cursor=" + "A" * 5000,
        "/v2/jobs?state=EXPLODED",
        "/v2/jobs?created_after=yesterday",
        "/v2/jobs?created_before=99999-99-99",
        "/v2/jobs?name=%00%ff",
        f"/v2/jobs/{job_id}/logs?learner=0",
        f"/v2/jobs/{job_id}/logs?learner=99999999999999999999",
        f"/v2/jobs/{job_id}/logs?follow=maybe",
        f"/v2/jobs/{job_id}/metrics?last=-5",
        f"/v2/jobs/{job_id}/metrics?last=1e9",
        f"/v2/jobs/{job_id}/events?limit=0",
    ]
    for i, path in enumerate(queries):
        yield Case(f"query:{i}", _request("GET", path, token))


def _header_cases(token: str, job_id: str) -> Iterator[Case]:
    follow = f"/v2/jobs/{job_id}/logs?follow=true"
    yield Case(
        "header:bad_last_event_id",
        _request("GET", follow, token, headers={"Last-Event-ID": "x:y:z"}),
    )
    yield Case("header:no_token", _request("GET", "/v2/jobs", None))
    yield Case("header:bad_token", _request("GET", "/v2/jobs", "not-a-token"))
    yield Case(
        "header:basic_auth",
        _request("GET", "/v2/jobs", None, headers={"Authorization": "Basic Zm9vOmJhcg=="}),
    )
    bad_key = {"Idempotency-Key": "\x01\x02"}
    yield Case(
        "header:bad_idempotency_key",
        _request("POST", f"/v2/jobs/{job_id}/halt", token, b"", bad_key),
    )
    long_key = {"Idempotency-Key": "k" * 1000}
    yield Case(
        "header:long_idempotency_key",
        _request("POST", f"/v2/jobs/{job_id}/resume", token, b"", long_key),
    )
    yield Case(
        "header:huge_header", _request("GET", "/v2/jobs", token, headers={"X-Big": "h" * 60_000})
    )
