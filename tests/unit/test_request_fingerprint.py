"""Body fingerprints: the same request sent again has the same one, whatever its framing."""

from __future__ import annotations

import pytest

from api.request_fingerprint import BodyFingerprint, multipart_boundary


def fingerprint(body: bytes, content_type: bytes, chunk: int, path: str = "/v2/jobs") -> str:
    print_ = BodyFingerprint("POST", path, content_type)
    for start in range(0, len(body), chunk):
        print_.feed(body[start : start + chunk])
    return print_.hexdigest()


def multipart(boundary: bytes, payload: bytes) -> tuple[bytes, bytes]:
    body = (
        b"--"
        + boundary
        + b'\r\nContent-Disposition: form-data; name="manifest"\r\n\r\n'
        + payload
        + b"\r\n--"
        + boundary
        + b"--\r\n"
    )
    return body, b"multipart/form-data; boundary=" + boundary


def test_boundaries_are_read_quoted_or_not() -> None:
    assert multipart_boundary(b"multipart/form-data; boundary=abc123") == b"abc123"
    assert multipart_boundary(b'multipart/form-data; boundary="a b"; x=y') == b"a b"
    assert multipart_boundary(b"application/json") is None
    assert multipart_boundary(b"multipart/form-data") is None


@pytest.mark.parametrize("chunk", [1, 3, 7, 64, 10_000])
def test_a_multipart_retry_with_a_new_boundary_has_the_same_fingerprint(chunk: int) -> None:
    first = multipart(b"a1b2c3d4e5f6", b"name: tiny\n" * 20)
    retry = multipart(b"ffeeddccbbaa99887766", b"name: tiny\n" * 20)
    assert fingerprint(*first, chunk) == fingerprint(*retry, 10_000)


@pytest.mark.parametrize("chunk", [1, 5, 10_000])
def test_a_different_body_path_or_type_has_another_fingerprint(chunk: int) -> None:
    base = fingerprint(*multipart(b"xyzxyz", b"name: tiny\n"), chunk)
    assert base != fingerprint(*multipart(b"xyzxyz", b"name: big\n"), chunk)
    assert base != fingerprint(*multipart(b"xyzxyz", b"name: tiny\n"), chunk, "/v2/other")
    assert fingerprint(b'{"a": 1}', b"application/json", chunk) != fingerprint(
        b'{"a": 1}', b"text/plain", chunk
    )
    assert fingerprint(b'{"a": 1}', b"application/json", chunk) == fingerprint(
        b'{"a": 1}', b"application/json; charset=utf-8", 10_000
    )


def test_a_boundary_that_is_a_word_of_the_data_leaves_the_data_alone() -> None:
    # Only the delimiter ("--" + boundary) is left out, not the word where it is data.
    one = fingerprint(*multipart(b"name", b"name: tiny\n"), 4)
    other = fingerprint(*multipart(b"name", b": tiny\n"), 4)
    assert one != other
