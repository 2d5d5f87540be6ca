"""Aggregated updates between the sidecars of one job; every sidecar holds a full replica.

- sync: each update is one round. A sidecar sums its learners' gradients block by block
  into its outbox (or sends its one learner's slot as it is) while the links send the
  blocks already summed; the peers' sums arrive into per-peer inboxes; the kernel applies
  the sums of all sidecars, in rank order, block by block as the blocks arrive. Every
  replica applies the same numbers in the same order with the same optimizer state, so the
  replicas stay identical. Rank 0 decides when to snapshot and marks that round's
  message: every sidecar snapshots after the same round, at the same version, so a restart
  finds a version every sidecar stored (`learner_image.ps.snapshots.agreed_version`).
- async and bounded: a sidecar applies its own learners' gradients as the policy allows and
  ships the change of its weights since the last shipment (`weights - base`, then
  `base = weights`) whenever the previous shipment has been acknowledged; a received change
  is added to the weights and to the base (so it is never shipped back), once: each
  counts as one update for the staleness bound. Each message carries the sender's slowest
  learner clock, which bounded mode includes in its floor.

At the first start (version 0, nothing restored), rank 0 sends its initial weights to every
peer and the peers take them before serving, so all replicas start from the same point (a
restore starts them alike by itself: `learner_image.ps.restore`). Message numbers
start at the server's epoch shifted left by 32, so a restarted sidecar's messages are never
taken for resent ones.

A sidecar whose peer is lost fails, naming it (`PeerFailed`): the peer restarted (its
replica is no longer the others': `learner_image.ps.failure`), or it could not be dialled
for `--peer-timeout`. Every wait on the peers ends at once when one is lost. A sidecar that
stops on purpose (its learners finished) says it LEFT: its peers send it nothing more and
go on without it (in sync mode, a round then waits for it only as long as `--peer-timeout`).

The buffers live in the region directory (`exchange`: outbox, base, one inbox per peer):
the sockets send from and receive into them directly.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import torch

from learner_image.ps.failure import GANG
from learner_image.ps.kernels import CHUNK, add_delta, take_delta
from learner_image.ps.layout import Mode
from learner_image.ps.peers import publish, resolver
from learner_image.ps.region import S_EPOCH, V_DRAINED
from learner_image.ps.server_config import ServerConfig
from learner_image.ps.shm import map_file, round_up
from learner_image.ps.transport import (
    DATA,
    LEFT,
    RESTARTED,
    Header,
    Inbox,
    Link,
    Listener,
    Outgoing,
    PeerFailed,
    PeerRestarted,
    PeerTimeout,
    Progress,
    announce,
    job_tag,
)

if TYPE_CHECKING:
    from learner_image.ps.server import Server

log = logging.getLogger("dlaas.ps.exchange")

INIT_CLOCK = 2**63  # marks rank 0's initial weights
SNAPSHOT_MARK = 1  # on a sync round's message: every sidecar snapshots after the round
ANNOUNCE_S = 5.0  # how long a restarted sidecar tries to reach its peers to say so
LEAVE_S = 1.0  # how long a stopping one tries (a peer may have stopped already)


class SyncRound(NamedTuple):
    grads: list[torch.Tensor]  # every sidecar's sum, in rank order
    lr: float
    gate: Callable[[int], None]
    snapshot: bool


class Exchange:
    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.peers = [r for r in range(config.world) if r != config.rank]
        self.inboxes = {peer: Inbox(peer) for peer in self.peers}
        self._cond = threading.Condition()
        self._consumed = dict.fromkeys(self.peers, 0)  # last seq the server used, per peer
        self._ready: set[int] = set()  # peers whose delivered message waits to be applied
        self.clocks = dict.fromkeys(self.peers, 0)
        self.tag = job_tag(config.job, config.secret)
        self.listener = Listener(
            config.listen, self.inboxes, self._destination, self._delivered, self._lost, self.tag
        )
        if config.peers_dir is not None:
            host = "127.0.0.1" if config.listen[0] in ("0.0.0.0", "") else config.listen[0]
            publish(config.peers_dir, config.rank, (host, self.listener.address[1]))
        self.links = {
            peer: Link(config.rank, peer, resolver(config, peer), self.tag) for peer in self.peers
        }
        self._server: Server | None = None
        self._round_headers: dict[int, Header] = {}
        self._seq = 0
        self._dirty = False
        self._closed = False
        self._failure: PeerFailed | None = None

    # -- set-up --------------------------------------------------------------------------

    def bind(self, server: Server) -> None:
        """Map the buffers for the server's model, connect, and agree on initial weights."""
        self._server = server
        numel = server.files.numel
        stride = round_up(numel * 4)
        rows = 2 + len(self.peers)
        buffer = map_file(server.paths.root / "exchange", rows * stride)
        self._buffer = buffer
        self._rows = [
            torch.from_numpy(np.frombuffer(buffer, np.float32, numel, i * stride))
            for i in range(rows)
        ]
        self.outbox, self.base = self._rows[0], self._rows[1]
        self.inbox_tensors = {peer: self._rows[2 + i] for i, peer in enumerate(self.peers)}
        self._seq = int(server.control.server[S_EPOCH]) << 32
        self.outbox_ready = Progress()
        epoch = int(server.control.server[S_EPOCH])
        for peer, link in self.links.items():
            link.on_acked = lambda seq: server.control.bell.post()
            link.epoch = epoch
            link.give_up_s = self.config.peer_timeout_s
            link.on_gone = functools.partial(self._gone, peer)
        self.listener.start()
        for link in self.links.values():
            link.start()
        if server.version == 0 and not server.restored:
            self._agree_on_initial_weights(server)
        self.base.copy_(server.weights)

    def _agree_on_initial_weights(self, server: Server) -> None:
        if self.config.rank == 0:
            self._send_all(server.weights, clock=INIT_CLOCK)
            self._wait_links_idle("take the initial weights")
            return
        log.info("waiting for rank 0's initial weights")
        with self._cond:
            sent = self._cond.wait_for(
                lambda: 0 in self._ready or self._closed or self._failure is not None,
                self.config.peer_timeout_s,
            )
        self._answered(sent, 0, "send its initial weights")
        header = self.inboxes[0].header
        if header is not None and header.clock == INIT_CLOCK:
            server.weights.copy_(self.inbox_tensors[0])
        self._free(0)

    # -- lost peers ----------------------------------------------------------------------

    def announce_restart(self, epoch: int) -> None:
        """Tell every peer this sidecar restarted."""
        self._announce(RESTARTED, epoch, ANNOUNCE_S, "restarted")

    def leave(self) -> None:
        """Tell every peer this sidecar stops on purpose."""
        self._announce(LEFT, 0, LEAVE_S, "left")

    def _announce(self, kind: int, epoch: int, within: float, what: str) -> None:
        deadline = time.monotonic() + within
        for peer, link in self.links.items():
            if not announce(kind, self.config.rank, epoch, link.address, deadline, self.tag):
                log.warning("peer sidecar rank %d not reached to say this one %s", peer, what)

    def _lost(self, inbox: Inbox, kind: int) -> None:
        if kind == LEFT:
            log.info("peer sidecar rank %d left; sending it nothing more", inbox.peer)
            self.links[inbox.peer].close()
            if self._server is not None:
                self._server.control.bell.post()
            return
        self._lose(
            PeerRestarted(
                f"peer sidecar rank {inbox.peer}{self._where(inbox.peer)} restarted while "
                f"this sidecar ran on; {GANG}"
            )
        )

    def _gone(self, peer: int, waited: float) -> None:
        self._lose(
            PeerTimeout(
                f"peer sidecar rank {peer}{self._where(peer)} vanished: not reachable for "
                f"{waited:.0f} s (--peer-timeout {self.config.peer_timeout_s:g}); {GANG}"
            )
        )

    def _lose(self, failure: PeerFailed) -> None:
        """Record the first lost peer and end every wait on the peers."""
        with self._cond:
            if self._failure is None:
                log.error("%s", failure)
                self._failure = failure
            self._cond.notify_all()
        for inbox in self.inboxes.values():
            inbox.progress.interrupt()
        for link in self.links.values():
            link.interrupt()
        if self._server is not None:
            self._server.control.bell.post()

    def check(self) -> None:
        """Raise the lost peer's `PeerFailed`, if one is lost."""
        if self._failure is not None:
            raise self._failure

    # -- receiving -----------------------------------------------------------------------

    def _destination(self, inbox: Inbox, header: Header) -> memoryview:
        """Where a message lands: the peer's inbox, once the server is done with the last."""
        with self._cond:
            self._cond.wait_for(
                lambda: self._consumed[inbox.peer] >= inbox.last_seq or self._closed
            )
        inbox.header = header
        inbox.progress.advance(header.seq, 0)
        return self.inbox_tensors[inbox.peer].numpy().data.cast("B")

    def _delivered(self, inbox: Inbox, header: Header) -> None:
        if self.config.mode is Mode.SYNC and header.clock != INIT_CLOCK:
            return  # the round consumes it block by block, as it arrives
        with self._cond:
            self._ready.add(inbox.peer)
            self._cond.notify_all()
        if self._server is not None:
            self._server.control.bell.post()

    def _free(self, peer: int) -> None:
        with self._cond:
            self._ready.discard(peer)
            self._consumed[peer] = self.inboxes[peer].last_seq
            self._cond.notify_all()

    # -- async and bounded ---------------------------------------------------------------

    def remote_ready(self) -> bool:
        with self._cond:
            return bool(self._ready)

    def apply_remote(self) -> None:
        """Add every delivered change to the weights and the base (the server is between
        the start and the end of one update)."""
        assert self._server is not None
        with self._cond:
            ready = sorted(self._ready)
        for peer in ready:
            header = self.inboxes[peer].header
            add_delta([self._server.weights, self.base], self.inbox_tensors[peer])
            if header is not None:
                self.clocks[peer] = header.clock
            self._free(peer)

    def local_update(self) -> None:
        self._dirty = True
        self.poll()

    def poll(self) -> bool:
        """Ship the change since the last shipment if there is one and every link is free."""
        self.check()
        if not self._dirty or self._server is None:
            return False
        if not all(link.idle for link in self.links.values()):
            return False
        take_delta(self._server.weights, self.base, self.outbox)
        self._dirty = False
        self._send_all(self.outbox, clock=self._local_clock())
        return True

    def _local_clock(self) -> int:
        assert self._server is not None
        server = self._server
        clocks = [
            int(slot.server[V_DRAINED])
            for i, slot in enumerate(server.control.slots)
            if server.alive[i]
        ]
        return min(clocks) if clocks else 0

    def peer_clocks(self) -> list[int]:
        if self.config.mode is not Mode.BOUNDED:
            return []
        return list(self.clocks.values())

    def _send_all(
        self,
        tensor: torch.Tensor,
        *,
        clock: int = 0,
        lr: float = 0.0,
        ready: Progress | None = None,
    ) -> int:
        self._seq += 1
        payload = tensor.numpy().data.cast("B")
        header = Header(DATA, self._seq, len(payload), clock, lr)
        for link in self.links.values():
            link.send(Outgoing(header, payload, ready))
        return self._seq

    # -- sync ----------------------------------------------------------------------------

    def sync_round(self, grads: list[torch.Tensor], lr: float, snapshot: bool = False) -> SyncRound:
        """Exchange this sidecar's gradient sum for the peers'; the sums of every rank in
        rank order, the round's learning rate, a gate for the kernel's blocks, and whether
        any sidecar (rank 0, with `snapshot`) asked for a snapshot after the round. Every
        wait on a peer is bounded by `--peer-timeout` (`PeerTimeout` names the peer)."""
        self._wait_links_idle("acknowledge the last round")
        if len(grads) == 1:
            source, ready = grads[0], None
        else:
            source, ready = self.outbox, self.outbox_ready
        clock = SNAPSHOT_MARK if snapshot else 0
        seq = self._send_all(source, clock=clock, lr=lr, ready=ready)
        if ready is not None:
            numel = source.numel()
            for start in range(0, numel, CHUNK):
                stop = min(start + CHUNK, numel)
                torch.add(grads[0][start:stop], grads[1][start:stop], out=source[start:stop])
                for grad in grads[2:]:
                    source[start:stop].add_(grad[start:stop])
                ready.advance(seq, stop * 4)
        expected = {}
        for peer in self.peers:
            inbox = self.inboxes[peer]
            with self._cond:
                consumed = self._consumed[peer]
            arrived = inbox.progress.wait_for(consumed + 1, 0, self.config.peer_timeout_s)
            self._answered(arrived, peer, "send its part of the round")
            header = inbox.header
            assert header is not None
            expected[peer] = header
        lrs = {self.config.rank: lr} | {peer: h.lr for peer, h in expected.items()}
        ordered = [
            source if rank == self.config.rank else self.inbox_tensors[rank]
            for rank in range(self.config.world)
        ]
        round_lr = sum(lrs[r] for r in range(self.config.world)) / self.config.world

        def gate(stop: int) -> None:
            for peer, header in expected.items():
                arrived = self.inboxes[peer].progress.wait_for(
                    header.seq, stop * 4, self.config.peer_timeout_s
                )
                self._answered(arrived, peer, "finish sending its part of the round")

        self._round_headers = expected
        marked = snapshot or any(h.clock == SNAPSHOT_MARK for h in expected.values())
        return SyncRound(ordered, round_lr, gate, marked)

    def end_round(self) -> None:
        """The round is applied: free the inboxes, and keep the learners waiting until the
        peers have all of this sidecar's sum (it may be sent out of a learner's slot)."""
        for peer in self._round_headers:
            self._free(peer)
        self._round_headers = {}
        self._wait_links_idle("acknowledge this sidecar's part of the round")

    def _wait_links_idle(self, what: str) -> None:
        for peer, link in self.links.items():
            self._answered(link.wait_idle(self.config.peer_timeout_s), peer, what)

    def _answered(self, answered: bool, peer: int, what: str) -> None:
        self.check()
        if answered or self._closed:
            return
        raise PeerTimeout(
            f"peer sidecar rank {peer}{self._where(peer)} did not {what} within "
            f"{self.config.peer_timeout_s:g} s (--peer-timeout)"
        )

    def _where(self, peer: int) -> str:
        try:
            host, port = self.links[peer].address()
        except OSError:
            return ""
        return f" at {host}:{port}"

    def close(self) -> None:
        self._closed = True
        with self._cond:
            self._cond.notify_all()
        for link in self.links.values():
            link.close()
        self.listener.close()


def open_exchange(config: ServerConfig) -> Exchange:
    return Exchange(config)
