"""A fingerprint of a request's body that is the same for the same request sent again.

A multipart body is framed by a boundary the client picks afresh for each request, so the
boundary's occurrences are left out: a retry of the same upload has the same fingerprint.
The body is fed in the chunks it arrives in; nothing of it is kept but a short tail.
"""

from __future__ import annotations

import hashlib
import re

_BOUNDARY = re.compile(rb"boundary=(?:\"([^\"]+)\"|([^;\s]+))", re.IGNORECASE)


def multipart_boundary(content_type: bytes) -> bytes | None:
    """The boundary of a multipart content type, or None."""
    if not content_type.lower().startswith(b"multipart/"):
        return None
    match = _BOUNDARY.search(content_type)
    if match is None:
        return None
    return match.group(1) or match.group(2)


class BodyFingerprint:
    """sha256 over method, path, content type (without its boundary) and body (without the
    boundary's occurrences)."""

    def __init__(self, method: str, path: str, content_type: bytes) -> None:
        self._hash = hashlib.sha256()
        boundary = multipart_boundary(content_type)
        # The delimiter as it appears in the body ("--" + boundary), so that a boundary that
        # happens to be a common word does not take that word out of the data.
        self._drop = b"--" + boundary if boundary else b""
        shown_type = content_type.split(b";", 1)[0].strip().lower()
        for part in (method.encode(), path.encode(), shown_type):
            self._hash.update(len(part).to_bytes(4, "big") + part)
        self._held = b""

    def feed(self, chunk: bytes) -> None:
        if not self._drop:
            self._hash.update(chunk)
            return
        data = (self._held + chunk).replace(self._drop, b"")
        # A delimiter may be split across chunks: hold back what could be its start.
        keep = len(self._drop) - 1
        self._hash.update(data[: len(data) - keep] if len(data) > keep else b"")
        self._held = data[len(data) - keep :] if len(data) > keep else data

    def hexdigest(self) -> str:
        final = self._hash.copy()
        final.update(self._held)
        return final.hexdigest()
