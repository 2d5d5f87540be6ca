"""How many connections an HTTP server process holds, per client address and in all.

Pure bookkeeping over plain data; `storage.http_server` applies its answers to sockets.

A connection counts from the moment it is accepted until it is closed. Over the cap of its
client address it is refused. At the total cap, the connection that has waited longest for a
request head (a new one that has not sent one, or a keep-alive one between requests) makes
room for the new one: idle incomplete-head connections, the currency of an exhaustion attack,
cannot crowd out a client that does send requests. Only when every connection is inside a
request is a new one refused.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable
from typing import Generic, Literal, TypeVar

Key = TypeVar("Key", bound=Hashable)

# Open files a server process keeps for what is not a client connection (its database and
# Redis pools, the listening socket, logs, archives being read or written), at the least.
DEFAULT_FD_HEADROOM = 512


def total_connection_cap(fd_limit: int, headroom: int, asked: int = 0) -> int:
    """Connections a process with `fd_limit` open files may hold: the limit less `headroom`
    (half the limit when the limit is under twice the headroom), and no more than `asked`
    when one is asked (0: as many as the limit allows)."""
    room = fd_limit - headroom if fd_limit > 2 * headroom else fd_limit // 2
    room = max(room, 1)
    return min(asked, room) if asked > 0 else room


@dataclasses.dataclass(frozen=True)
class Admission(Generic[Key]):
    """The answer to a new connection: admitted (possibly in place of `evicted`, which is to
    be closed), or refused because its address or the process is at its cap."""

    admitted: bool
    evicted: Key | None = None
    refused: Literal["", "address", "total"] = ""


class ConnectionTable(Generic[Key]):
    """The connections of one server process, each under a key of the caller's (its
    protocol object) with its client address."""

    def __init__(self, *, per_address: int, total: int) -> None:
        if per_address < 1 or total < 1:
            raise ValueError(f"caps must be at least 1, got {per_address=}, {total=}")
        self.per_address = per_address
        self.total = total
        self._address_of: dict[Key, str] = {}
        self._per_address: dict[str, int] = {}
        # Connections waiting for a request head, longest-waiting first (dicts keep order).
        self._awaiting_head: dict[Key, None] = {}

    def __len__(self) -> int:
        return len(self._address_of)

    def count(self, address: str) -> int:
        return self._per_address.get(address, 0)

    def awaiting_head(self) -> int:
        return len(self._awaiting_head)

    def admit(self, key: Key, address: str) -> Admission[Key]:
        """Count `key` as a new connection from `address` waiting for its first request head,
        unless a cap refuses it. An evicted connection is no longer counted."""
        if key in self._address_of:
            raise ValueError(f"{key!r} is already admitted")
        if self.count(address) >= self.per_address:
            return Admission(admitted=False, refused="address")
        evicted: Key | None = None
        if len(self) >= self.total:
            if not self._awaiting_head:
                return Admission(admitted=False, refused="total")
            evicted = next(iter(self._awaiting_head))
            self.release(evicted)
        self._address_of[key] = address
        self._per_address[address] = self.count(address) + 1
        self._awaiting_head[key] = None
        return Admission(admitted=True, evicted=evicted)

    def request_started(self, key: Key) -> None:
        """`key` sent a whole request head: it is not evicted while the request lasts."""
        self._awaiting_head.pop(key, None)

    def request_finished(self, key: Key) -> None:
        """`key` answered its requests and waits for another head, newest in the queue."""
        if key in self._address_of:
            self._awaiting_head.pop(key, None)
            self._awaiting_head[key] = None

    def release(self, key: Key) -> None:
        """`key` is closed (releasing one that is not counted, or twice, does nothing)."""
        address = self._address_of.pop(key, None)
        if address is None:
            return
        self._awaiting_head.pop(key, None)
        left = self._per_address[address] - 1
        if left:
            self._per_address[address] = left
        else:
            del self._per_address[address]
