"""TCP between sidecars: messages sent from and received into shared buffers, in chunks.

Each sidecar listens once and dials every peer once. A dialled connection carries the
dialler's messages one way; the other way it carries only acknowledgements. A message is a
fixed header and a float32 payload:

    header: magic u32, kind u32, seq u64, payload bytes u64, clock u64, lr f64
    kinds:  HELLO (seq = the sender's rank, clock = its server's epoch), DATA,
            ACK (seq = the message received),
            RESTARTED (seq = the sender's rank, clock = its new epoch; nothing follows),
            LEFT (seq = the sender's rank: it stopped on purpose; nothing follows)
    A greeting (HELLO, RESTARTED, LEFT) carries no payload: its size field is the job's tag
    (`job_tag`, keyed by the job's token), and a listener takes greetings of its own job's
    sidecars only (the job's NetworkPolicy lets no other pod reach it; this keeps a sidecar
    of another job, where policies are not enforced or on a node's loopback, from taking
    part, even one that knows the job's id).

The payload goes out of the sender's buffer with `sendall` on slices of it and comes in
with `recv_into` on slices of the receiver's buffer: the socket's own copies are the only
ones. Both sides work in chunks of `CHUNK_BYTES` with a progress counter, so a producer
(summing gradients) can feed the sender chunk by chunk, and a consumer (the apply kernel)
can follow the receiver chunk by chunk: summing, sending, receiving and applying overlap.

One message per link is in flight: the next is sent once the peer acknowledged the last,
which it does once the whole payload sits in its buffer. A link that breaks is dialled
again and the unacknowledged message sent again; the receiver drops a seq it already has.

A peer that restarted (it says so with RESTARTED, or greets with another epoch than
before) or that cannot be dialled for `give_up_s` is lost: the owner of the link or the
listener is told, and decides (`learner_image.ps.exchange` fails, naming the peer). A peer
that LEFT (its learners finished) is sent nothing more.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("dlaas.ps.transport")

MAGIC = 0x5053_4C44  # "DLSP"
HELLO, DATA, ACK, RESTARTED, LEFT = 1, 2, 3, 4, 5
HEADER = struct.Struct("<IIQQQd")
CHUNK_BYTES = 4 << 20
RETRY_S = 0.05


def job_tag(job: str, secret: str) -> int:
    """The 64-bit tag of a job that its sidecars greet each other with: keyed by the job's
    `secret` (its token), which other jobs do not have, so that one cannot be derived from
    the job's id alone."""
    key = hashlib.sha256(secret.encode()).digest()
    digest = hashlib.blake2b(job.encode(), digest_size=8, key=key).digest()
    return int.from_bytes(digest, "big")


class PeerFailed(Exception):
    """A peer sidecar can no longer take part in the exchange."""


class PeerTimeout(PeerFailed, TimeoutError):
    """A peer sidecar did not answer within the time it is given."""


class PeerRestarted(PeerFailed):
    """A peer sidecar restarted while this one ran on."""


@dataclass(frozen=True)
class Header:
    kind: int
    seq: int
    size: int
    clock: int = 0
    lr: float = 0.0

    def pack(self) -> bytes:
        return HEADER.pack(MAGIC, self.kind, self.seq, self.size, self.clock, self.lr)

    @classmethod
    def unpack(cls, raw: bytes) -> Header:
        magic, kind, seq, size, clock, lr = HEADER.unpack(raw)
        if magic != MAGIC:
            raise ConnectionError("not a dlaas parameter-server peer")
        return cls(kind, seq, size, clock, lr)


class Progress:
    """How many bytes of message `seq` are ready, for the side that waits on them."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._seq = 0
        self._value = 0
        self._interrupted = False

    def interrupt(self) -> None:
        """End every wait, now and later (the waiter finds out why elsewhere)."""
        with self._cond:
            self._interrupted = True
            self._cond.notify_all()

    def advance(self, seq: int, value: int) -> None:
        with self._cond:
            if (seq, value) > (self._seq, self._value):
                self._seq, self._value = seq, value
                self._cond.notify_all()

    def wait_for(self, seq: int, value: int, timeout: float | None = None) -> bool:
        with self._cond:
            return self._cond.wait_for(
                lambda: (self._seq, self._value) >= (seq, value) or self._interrupted, timeout
            )


def tune(sock: socket.socket) -> None:
    """No Nagle delay for headers and acks; buffer sizes are left to the kernel's
    autotuning, which on Linux beats any fixed size set by hand."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def recv_exact(sock: socket.socket, view: memoryview) -> None:
    received = 0
    while received < len(view):
        n = sock.recv_into(view[received:])
        if n == 0:
            raise ConnectionError("peer closed the connection")
        received += n


def read_header(sock: socket.socket) -> Header:
    raw = bytearray(HEADER.size)
    recv_exact(sock, memoryview(raw))
    return Header.unpack(bytes(raw))


def send_payload(
    sock: socket.socket, payload: memoryview, ready: Progress | None = None, seq: int = 0
) -> None:
    """Send `payload` chunk by chunk, each once `ready` (if given) has it for `seq`."""
    for start in range(0, len(payload), CHUNK_BYTES):
        end = min(start + CHUNK_BYTES, len(payload))
        if ready is not None:
            ready.wait_for(seq, end)
        sock.sendall(payload[start:end])


def receive_payload(
    sock: socket.socket, into: memoryview, progress: Progress | None = None, seq: int = 0
) -> None:
    """Receive into `into` chunk by chunk, advancing `progress` for `seq` as each lands."""
    for start in range(0, len(into), CHUNK_BYTES):
        end = min(start + CHUNK_BYTES, len(into))
        recv_exact(sock, into[start:end])
        if progress is not None:
            progress.advance(seq, end)


@dataclass
class Outgoing:
    header: Header
    payload: memoryview
    ready: Progress | None = None


class Link:
    """The dialled connection to one peer, with a sender thread."""

    def __init__(
        self, rank: int, peer: int, address: Callable[[], tuple[str, int]], tag: int = 0
    ) -> None:
        self.rank = rank
        self.peer = peer
        self.tag = tag
        self._address = address
        self._cond = threading.Condition()
        self._pending: Outgoing | None = None
        self._acked = 0
        self._closed = False
        self._interrupted = False
        self._sock: socket.socket | None = None
        self.epoch = 0  # sent in HELLO: the peer tells a restart of this sidecar by it
        self.give_up_s: float | None = None
        self.on_acked: Callable[[int], None] = lambda seq: None
        self.on_gone: Callable[[float], None] = lambda waited: None
        self._thread = threading.Thread(target=self._run, name=f"ps-link-{peer}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def address(self) -> tuple[str, int]:
        """The peer's current address (OSError while it is not known)."""
        return self._address()

    def send(self, message: Outgoing) -> None:
        """Queue a message (the previous one must have been acknowledged); dropped once
        the link is closed."""
        with self._cond:
            if self._closed:
                return
            if self._pending is not None:
                raise RuntimeError(f"peer {self.peer}: a message is still in flight")
            self._pending = message
            self._cond.notify_all()

    @property
    def idle(self) -> bool:
        with self._cond:
            return self._pending is None

    def wait_idle(self, timeout: float | None = None) -> bool:
        with self._cond:
            return self._cond.wait_for(
                lambda: self._pending is None or self._closed or self._interrupted, timeout
            )

    def interrupt(self) -> None:
        """End every wait for this link to be idle, now and later."""
        with self._cond:
            self._interrupted = True
            self._cond.notify_all()

    def close(self) -> None:
        """Send nothing more (the message in flight, if any, is dropped)."""
        with self._cond:
            self._closed = True
            self._pending = None
            self._cond.notify_all()
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)

    def _connect(self) -> socket.socket:
        """Dial until the peer answers; `on_gone` once it has not for `give_up_s`."""
        since = time.monotonic()
        gone = False
        while not self._closed:
            try:
                sock = socket.create_connection(self._address(), timeout=5.0)
            except OSError:
                waited = time.monotonic() - since
                if not gone and self.give_up_s is not None and waited > self.give_up_s:
                    gone = True
                    self.on_gone(waited)
                time.sleep(RETRY_S)
                continue
            sock.settimeout(None)
            tune(sock)
            sock.sendall(Header(HELLO, self.rank, self.tag, self.epoch).pack())
            return sock
        raise ConnectionError("closed")

    def _run(self) -> None:
        while not self._closed:
            try:
                self._sock = self._connect()
                self._serve(self._sock)
            except (OSError, ConnectionError) as error:
                if not self._closed:
                    log.warning("link to peer %d broke (%s); dialling again", self.peer, error)
                    time.sleep(RETRY_S)
            finally:
                if self._sock is not None:
                    self._sock.close()

    def _serve(self, sock: socket.socket) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending is not None or self._closed)
                if self._closed:
                    return
                message = self._pending
            assert message is not None
            sock.sendall(message.header.pack())
            send_payload(sock, message.payload, message.ready, message.header.seq)
            ack = read_header(sock)
            if ack.kind != ACK or ack.seq != message.header.seq:
                raise ConnectionError(f"expected ACK {message.header.seq}, got {ack}")
            with self._cond:
                self._pending = None
                self._acked = ack.seq
                self._cond.notify_all()
            self.on_acked(ack.seq)


class Inbox:
    """Where one peer's messages land: a buffer per message chosen by the receiver."""

    def __init__(self, peer: int) -> None:
        self.peer = peer
        self.progress = Progress()
        self.header: Header | None = None
        self.last_seq = 0
        self.epoch = 0  # the peer's, from its first greeting


def announce(
    kind: int,
    rank: int,
    epoch: int,
    address: Callable[[], tuple[str, int]],
    deadline: float,
    tag: int = 0,
) -> bool:
    """Tell one peer that this sidecar RESTARTED or LEFT, trying until `deadline` (a
    `time.monotonic()`); whether it was reached."""
    while True:
        try:
            with socket.create_connection(address(), timeout=1.0) as sock:
                sock.sendall(Header(kind, rank, tag, epoch).pack())
            return True
        except OSError:
            if time.monotonic() > deadline:
                return False
            time.sleep(RETRY_S)


Destination = Callable[[Inbox, Header], memoryview]
Delivered = Callable[[Inbox, Header], None]
Lost = Callable[[Inbox, int], None]  # the peer RESTARTED or LEFT


class Listener:
    """Accepts the peers' dialled connections and receives their messages."""

    def __init__(
        self,
        listen: tuple[str, int],
        inboxes: dict[int, Inbox],
        destination: Destination,
        delivered: Delivered,
        lost: Lost | None = None,
        tag: int = 0,
    ) -> None:
        self._server = socket.create_server(listen, reuse_port=False)
        self._tag = tag
        self.address = self._server.getsockname()[:2]
        self._inboxes = inboxes
        self._destination = destination
        self._delivered = delivered
        self._lost: Lost = lost or (lambda inbox, kind: None)
        self._closed = False
        self._socks: list[socket.socket] = []

    def start(self) -> None:
        threading.Thread(target=self._accept, name="ps-accept", daemon=True).start()

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._server.close()
        for sock in self._socks:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _accept(self) -> None:
        while not self._closed:
            try:
                sock, _ = self._server.accept()
            except OSError:
                return
            tune(sock)
            self._socks.append(sock)
            threading.Thread(target=self._receive, args=(sock,), daemon=True).start()

    def _receive(self, sock: socket.socket) -> None:
        try:
            hello = read_header(sock)
            inbox = self._inboxes.get(hello.seq)
            if hello.kind not in (HELLO, RESTARTED, LEFT) or inbox is None:
                raise ConnectionError(f"unexpected greeting {hello}")
            if hello.size != self._tag:
                raise ConnectionError(f"a greeting from another job's sidecar: {hello}")
            if hello.kind != HELLO:
                self._lost(inbox, hello.kind)
                return
            if inbox.epoch not in (0, hello.clock):
                self._lost(inbox, RESTARTED)
                return
            inbox.epoch = hello.clock
            while not self._closed:
                header = read_header(sock)
                if header.kind != DATA:
                    raise ConnectionError(f"expected DATA, got {header}")
                if header.seq <= inbox.last_seq:  # sent again after a broken link: drop it
                    receive_payload(sock, memoryview(bytearray(header.size)))
                else:
                    into = self._destination(inbox, header)
                    receive_payload(sock, into[: header.size], inbox.progress, header.seq)
                    inbox.last_seq = header.seq
                    self._delivered(inbox, header)
                sock.sendall(Header(ACK, header.seq, 0).pack())
        except (OSError, ConnectionError) as error:
            if not self._closed:
                log.warning("connection from a peer ended: %s", error)
        finally:
            sock.close()
