"""`dlaas-ps`: the parameter-server sidecar of a learner pod.

One process per pod (per learner process on the local backend), beside its learners and
sharing the region directory with them (`learner_image.ps.region`). Its loop:

```
 start --> take server.lock, then create.lock (no learner creates a model meanwhile)
       --> control file (new, or the one a previous server left) --> epoch: one past any
           earlier start's (the control file's, the stored snapshots')
       --> a sidecar of a multi-pod job that finds a control file restarted while its peers
           ran on: it tells them and its learners so and exits (`failure`)
       --> no weights: restore the snapshot the job's sidecars agree on (`restore`);
           weights left torn by a server killed mid-update: the same
       --> release create.lock --> model: the restored one | the one a learner creates
       --> loop: wait on the bell --> acknowledge attaches --> apply what the mode allows
                 (policy.next_group) --> release learners (policy.may_release)
                 --> snapshot when due --> look for dead learners when idle
       --> SIGTERM: a last snapshot, then exit 0
       --> a peer sidecar lost (`exchange`): the learners told why (`failure`), exit 2
```

Updates are applied in place by the kernels of `learner_image.ps.kernels`; the weights'
seqlock is odd during an update, so a reader (and a restarted server) can tell a torn
vector from a whole one. Between sidecars of one job, `learner_image.ps.exchange` carries
aggregated updates.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from learner_image.ps import failure, policy, sidecar
from learner_image.ps.kernels import Kernel
from learner_image.ps.layout import Mode, ModelLayout, OptimizerConfig
from learner_image.ps.region import (
    L_ATTACH,
    L_COMMITTED,
    S_APPLIED,
    S_APPLYING,
    S_EPOCH,
    S_LOST,
    S_MAX_GAP,
    S_MAX_STALENESS,
    S_MODEL,
    S_PID,
    S_SNAPSHOT,
    V_APPLIED_AT,
    V_ATTACH_ACK,
    V_DRAINED,
    V_GAP,
    V_IN_WEIGHTS,
    V_READ_VERSION,
    V_RELEASED,
    V_STALENESS,
    W_SEQ,
    W_VERSION,
    Control,
    ModelFiles,
    RegionPaths,
    create_model_files,
    creation_lock,
    ensure_directory,
)
from learner_image.ps.restore import UnreadableSnapshot, snapshot_to_restore
from learner_image.ps.server_config import ServerConfig, parse_config
from learner_image.ps.shm import FileLock, is_locked
from learner_image.ps.slots import release, server_view
from learner_image.ps.snapshots import Snapshot, SnapshotStore, Snapshotter
from learner_image.ps.transport import PeerFailed

if TYPE_CHECKING:
    from learner_image.ps.exchange import Exchange

log = logging.getLogger("dlaas.ps")

IDLE_WAIT_S = 0.05
PROBE_EVERY_S = 0.02
STOP_SNAPSHOT_WAIT_S = 60.0
LOCK_WAIT_S = 1.0
CREATE_WAIT_S = 30.0


class ServerError(Exception):
    """The server cannot start on this directory (another one runs, or it is inconsistent)."""


class Server:
    def __init__(
        self,
        config: ServerConfig,
        snapshots: SnapshotStore | None = None,
        exchange: Exchange | None = None,
    ) -> None:
        self.config = config
        self.paths: RegionPaths = ensure_directory(config.directory)
        self.snapshots = snapshots
        self.exchange = exchange
        self._lock = FileLock(self.paths.server_lock)
        self.control: Control
        self.files: ModelFiles
        self.kernel: Kernel
        self.alive = [False] * config.slots
        self._grads: list[torch.Tensor] = []
        self._fresh_control = False
        self.restored = False  # the model came from a snapshot (the replicas agree already)
        self._last_probe = 0.0
        self._snapshotter: Snapshotter | None = None
        self._snapshot_buffer: np.ndarray | None = None
        # sync mode across sidecars snapshots after rounds rank 0 marks, not on a timer
        self._rounds_snapshot = config.distributed and config.mode is Mode.SYNC
        self._mark_round = False  # rank 0: ask for a snapshot after the next round
        self._round_snapshot = False  # the round just applied was marked

    # -- start-up ----------------------------------------------------------------------

    def open(self) -> None:
        """Take the region: its control file, a fresh epoch, and the model restored from a
        snapshot when the region has none (or a torn one). All of it under `create.lock`,
        taken before the control file can appear, so no learner creates fresh weights
        (and no restored snapshot is dropped) while a restore is under way."""
        try:
            # a learner checking whether a server is up holds the lock for a moment
            self._lock.acquire(LOCK_WAIT_S, "another parameter server holds it")
        except TimeoutError as error:
            raise ServerError(str(error)) from None
        creating = creation_lock(self.paths)
        try:
            creating.acquire(CREATE_WAIT_S, "a learner is creating the model")
        except TimeoutError as error:
            self._lock.release()
            raise ServerError(str(error)) from None
        try:
            # on one machine and on Kubernetes alike, the region lives as long as the pod
            # (the local backend's attempt): a control file means the sidecar restarted
            restarted = self.config.distributed and self.paths.control.exists()
            self.control = self._open_control()
            epoch = self._start_epoch()
            if restarted:
                self._refuse_to_rejoin(epoch)
            if self.snapshots is not None:
                self._snapshotter = Snapshotter(
                    self.snapshots, self.config.snapshot_interval_s, epoch, self._snapshot_stored
                )
            self._restore()
        finally:
            creating.release()
        c = self.config
        log.info(
            "dlaas-ps %s: %d slot(s), mode %s, staleness %d, epoch %d",
            self.paths.root,
            c.slots,
            c.mode,
            c.staleness,
            epoch,
        )

    def _refuse_to_rejoin(self, epoch: int) -> None:
        """A sidecar of a multi-pod job restarted while its peers ran on: its replica is not
        theirs (and a snapshot's is older), so it serves no more. Its learners and its peers
        are told why, and fail; the job restarts as a gang from the agreed snapshot."""
        why = failure.mark(self.paths, self.control, failure.restarted(self.config.rank))
        if self.exchange is not None:
            self.exchange.announce_restart(epoch)
            self.exchange.close()
        self._lock.release()
        raise ServerError(why)

    def _open_control(self) -> Control:
        """The control file a previous server left, if made for this configuration, else a
        fresh one."""
        c = self.config
        control = Control.open(self.paths) if self.paths.control.exists() else None
        if control is not None and (control.slots_count, control.mode, control.staleness) != (
            c.slots,
            c.mode,
            c.staleness,
        ):
            if any(is_locked(self.paths.slot_lock(i)) for i in range(control.slots_count)):
                raise ServerError(
                    f"{self.paths.control} was made for {control.slots_count} slot(s), mode "
                    f"{control.mode} {control.staleness}, and learners are attached to it"
                )
            control = None
        if control is None:
            control = Control.create(self.paths, c.slots, c.mode, c.staleness)
            self._fresh_control = True
        return control

    def _start_epoch(self) -> int:
        """One past every earlier start's: the control file's and the stored snapshots'
        (a fresh region starts its control file from 0)."""
        server = self.control.server
        epoch = max(int(server[S_EPOCH]), self._stored_epoch()) + 1
        server[S_MODEL] = 0
        server[S_EPOCH] = epoch
        server[S_PID] = os.getpid()
        return epoch

    def _stored_epoch(self) -> int:
        """The newest epoch in the snapshot store; 0 if none, or if the store cannot be
        listed now (a server whose region is intact still starts; a restore would fail)."""
        if self.snapshots is None:
            return 0
        try:
            return self.snapshots.newest_epoch()
        except Exception as error:  # any store error: the control file's epoch goes on
            log.warning("snapshot store not listed (%s); epoch from the control file", error)
            return 0

    def _restore(self) -> None:
        """Restore the snapshot the sidecars agree on when the region has no model, or one
        a server left torn (the caller holds `create.lock`)."""
        if not self.paths.weights.exists():
            snapshot = self._snapshot_to_restore()
            if snapshot is not None:
                create_model_files(
                    self.paths,
                    self.config.slots,
                    ModelLayout.from_json(snapshot.layout),
                    OptimizerConfig.from_json(snapshot.optimizer),
                    snapshot.weights,
                    version=snapshot.version,
                    states=snapshot.states,
                    step=snapshot.step,
                )
                self._restore_counters(snapshot)
                self.restored = True
                log.info("model restored from the snapshot of version %d", snapshot.version)
            return
        files = ModelFiles(self.paths, self.config.slots)
        if int(files.weights_header[W_SEQ]) % 2:
            self._recover_torn(files)

    def _snapshot_to_restore(self) -> Snapshot | None:
        """The snapshot the sidecars of the job agree on (`learner_image.ps.restore`)."""
        if self.snapshots is None:
            return None
        try:
            return snapshot_to_restore(self.config, self.snapshots)
        except UnreadableSnapshot as error:
            raise ServerError(str(error)) from None

    def _map_model(self) -> None:
        self.files = ModelFiles(self.paths, self.config.slots)
        torch.set_num_threads(self.config.threads)
        files = self.files
        self.weights = torch.from_numpy(files.weights)
        self._grads = [torch.from_numpy(g) for g in files.grads]
        states = [torch.from_numpy(s) for s in files.states]
        self.kernel = Kernel(
            files.optimizer, self.weights, states, torch.from_numpy(files.optim_step)
        )
        if self.exchange is not None:
            self.exchange.bind(self)
        for i in range(self.config.slots):
            if is_locked(self.paths.slot_lock(i)):
                self.alive[i] = True
        self.control.server[S_MODEL] = 1

    def wait_for_model(self, stop: threading.Event) -> bool:
        """Map the model once it exists (`open` restored it, or a learner creates it)."""
        while not stop.is_set():
            if self.paths.weights.exists():
                self._map_model()
                return True
            self.control.bell.wait(IDLE_WAIT_S * 2)
            self.control.bell.drain()
        return False

    def _recover_torn(self, files: ModelFiles) -> None:
        snapshot = self._snapshot_to_restore()
        if snapshot is None:
            # The update's gradients left their slots before it began: none is applied
            # again (a part of it twice); they stay partly applied, and count as lost.
            server = self.control.server
            torn = int(server[S_APPLYING])
            server[S_LOST] = int(server[S_LOST]) + torn
            log.error(
                "the weights were left mid-update by a server that died, and there is no "
                "snapshot: going on with %d gradient(s) partly applied, counted as lost",
                torn,
            )
            files.weights_header[W_SEQ] = int(files.weights_header[W_SEQ]) + 1
            return
        if snapshot.layout["numel"] != files.numel:
            raise ServerError("the newest snapshot is of another model than the region's")
        files.weights[:] = snapshot.weights
        for i, state in enumerate(files.states):
            state[:] = snapshot.states[i]
        files.optim_step[0] = snapshot.step
        files.weights_header[W_VERSION] = snapshot.version
        files.weights_header[W_SEQ] = int(files.weights_header[W_SEQ]) + 1
        self._restore_counters(snapshot)
        log.warning("torn weights: restored the snapshot of version %d", snapshot.version)

    def _restore_counters(self, snapshot: Snapshot) -> None:
        """Make the slot counters agree with the restored weights: a gradient drained after
        the snapshot that is still in its slot is applied again (it is not in the
        snapshot); older ones drained after the snapshot are lost, and counted."""
        server = self.control.server
        server[S_APPLIED] = snapshot.applied
        if len(snapshot.drained) != len(self.control.slots):
            return
        if self._fresh_control:  # commit numbers start again; the tallies carry on
            for slot, in_weights in zip(self.control.slots, snapshot.in_weights, strict=True):
                slot.server[V_IN_WEIGHTS] = in_weights
            return
        lost = 0
        for i, slot in enumerate(self.control.slots):
            committed = int(slot.learner[L_COMMITTED])
            drained = int(slot.server[V_DRAINED])
            released = int(slot.server[V_RELEASED])
            before = snapshot.drained[i]
            if drained > released and drained > before:
                slot.server[V_DRAINED] = committed - 1
                lost += committed - 1 - before
            else:
                lost += max(0, drained - before)
            slot.server[V_IN_WEIGHTS] = snapshot.in_weights[i]
            # the versions go back to the snapshot's: a learner computing now read weights
            # that are gone, and its age counts from the restored version
            slot.server[V_READ_VERSION] = min(int(slot.server[V_READ_VERSION]), snapshot.version)
        server[S_LOST] = int(server[S_LOST]) + lost

    # -- the loop ----------------------------------------------------------------------

    @property
    def version(self) -> int:
        return int(self.files.weights_header[W_VERSION])

    def run(self, stop: threading.Event) -> None:
        try:
            if not self.wait_for_model(stop):
                return
            self._serve(stop)
        except BaseException as error:
            if isinstance(error, PeerFailed):
                failure.mark(self.paths, self.control, str(error))
            self._abandon()
            raise
        self.shutdown()

    def _serve(self, stop: threading.Event) -> None:
        while not stop.is_set():
            if self.step():
                self._maybe_snapshot()
                continue
            self._maybe_snapshot()
            now = time.monotonic()
            if now - self._last_probe >= PROBE_EVERY_S:
                self._last_probe = now
                if self._probe():
                    continue
            self.control.bell.wait(IDLE_WAIT_S)
            self.control.bell.drain()

    def views(self) -> list[policy.SlotView]:
        return [server_view(s, self.alive[i], i) for i, s in enumerate(self.control.slots)]

    def step(self) -> bool:
        """Do what can be done now; whether anything changed."""
        progressed = self._acknowledge()
        if self.exchange is not None:
            self.exchange.poll()
        views = self.views()
        remote = self.exchange is not None and self.exchange.remote_ready()
        decision = policy.next_group(
            self.config.mode, self.config.staleness, self.version, views, remote
        )
        if decision is not None:
            self._apply([views[i] for i in decision.slots], decision)
            views = self.views()
            progressed = True
        return self._release(views) or progressed

    def _acknowledge(self) -> bool:
        changed = False
        version = self.version
        for i, slot in enumerate(self.control.slots):
            attach = int(slot.learner[L_ATTACH])
            if attach == int(slot.server[V_ATTACH_ACK]):
                continue
            self.alive[i] = True
            if int(slot.server[V_RELEASED]) == int(slot.learner[L_COMMITTED]):
                slot.server[V_READ_VERSION] = version
            slot.server[V_ATTACH_ACK] = attach
            slot.bell.post()
            changed = True
        return changed

    def _probe(self) -> bool:
        """Mark learners whose lock is free as gone; whether any was."""
        gone = False
        for i in range(self.config.slots):
            if self.alive[i] and not is_locked(self.paths.slot_lock(i)):
                self.alive[i] = False
                gone = True
                log.info("learner of slot %d is gone", i)
        return gone

    def _apply(self, views: Sequence[policy.SlotView], group: policy.Group) -> None:
        slots = self.control.slots
        header = self.files.weights_header
        server = self.control.server
        before = self.version
        grads = [self._grads[v.index] for v in views]
        lrs = [float(slots[v.index].lr[0]) for v in views]
        summed = group.summed or not views
        lr = (sum(lrs) / len(lrs) if lrs else self.files.optimizer.lr) if summed else 0.0
        sync = None
        if summed and views and self.exchange is not None and self.config.mode is Mode.SYNC:
            # the peers' sums are on their way (the kernel follows them block by block)
            sync = self.exchange.sync_round(grads, lr, self._mark_round)
            self._mark_round = False
            self._round_snapshot = sync.snapshot
        # Taken out of their slots before the weights change: a server that dies mid-update
        # leaves them drained, so its successor never applies a part of one twice.
        server[S_APPLYING] = len(views)
        for v in views:
            slots[v.index].server[V_DRAINED] = v.committed
        header[W_SEQ] = int(header[W_SEQ]) + 1
        if sync is not None:
            self.kernel.apply(sync.grads, sync.lr, sync.gate)
        elif summed:
            self.kernel.apply(grads, lr)
        else:
            self.kernel.apply_each(grads, lrs)
        if summed:
            applied_at = [before] * len(views)
            updates = 1
        else:
            applied_at = [before + i for i in range(len(views))]
            updates = len(views)
        if group.with_remote and self.exchange is not None:
            self.exchange.apply_remote()
        for v, at in zip(views, applied_at, strict=True):
            slot = slots[v.index].server
            staleness = max(0, at - v.read_version)
            slot[V_IN_WEIGHTS] = int(slot[V_IN_WEIGHTS]) + 1
            slot[V_STALENESS] = staleness
            slot[V_APPLIED_AT] = at
            if staleness > int(server[S_MAX_STALENESS]):
                server[S_MAX_STALENESS] = staleness
        server[S_APPLIED] = int(server[S_APPLIED]) + len(views)
        header[W_VERSION] = before + updates
        header[W_SEQ] = int(header[W_SEQ]) + 1
        if self.exchange is None or not views:
            return
        if sync is not None:
            self.exchange.end_round()
        elif self.config.mode is not Mode.SYNC:
            self.exchange.local_update()

    def _release(self, views: Sequence[policy.SlotView]) -> bool:
        peers = self.exchange.peer_clocks() if self.exchange is not None else ()
        floor = policy.clock_floor(views, peers)
        released = False
        version = self.version
        server = self.control.server
        for v in views:
            if policy.may_release(self.config.mode, self.config.staleness, v, floor):
                slot = self.control.slots[v.index]
                gap = v.drained - floor if floor is not None else 0
                slot.server[V_GAP] = max(gap, 0)
                if gap > int(server[S_MAX_GAP]):
                    server[S_MAX_GAP] = gap
                release(slot, version)
                released = True
        return released

    # -- snapshots ---------------------------------------------------------------------

    def _maybe_snapshot(self) -> None:
        snapshotter = self._snapshotter
        if snapshotter is None:
            return
        if not self._rounds_snapshot:
            if snapshotter.due(time.monotonic()):
                self.snapshot()
            return
        # sync across sidecars: rank 0 marks a round when one is due; all snapshot after it
        if self._round_snapshot:
            self._round_snapshot = False
            self.snapshot()
        elif self.config.rank == 0 and snapshotter.due(time.monotonic()):
            self._mark_round = True

    def snapshot(self) -> None:
        """Copy the state (between updates) and upload it in the background."""
        if self._snapshotter is None:
            return
        self._snapshotter.take(time.monotonic(), self._capture)

    def _snapshot_stored(self, snapshot: Snapshot) -> None:
        """Publish the version a restarted server would now restore."""
        self.control.server[S_SNAPSHOT] = snapshot.version

    def _capture(self) -> Snapshot:
        files = self.files
        rows = 1 + len(files.states)
        if self._snapshot_buffer is None or self._snapshot_buffer.shape != (rows, files.numel):
            self._snapshot_buffer = np.empty((rows, files.numel), dtype=np.float32)
        buffer = self._snapshot_buffer
        torch.from_numpy(buffer[0]).copy_(self.weights)
        for i, state in enumerate(files.states):
            buffer[1 + i] = state
        slots = self.control.slots
        return Snapshot(
            version=self.version,
            applied=int(self.control.server[S_APPLIED]),
            drained=[int(s.server[V_DRAINED]) for s in slots],
            in_weights=[int(s.server[V_IN_WEIGHTS]) for s in slots],
            layout=files.layout.to_json(),
            optimizer=files.optimizer.to_json(),
            step=float(files.optim_step[0]),
            weights=buffer[0],
            states=buffer[1:],
        )

    def _abandon(self) -> None:
        """Let go after an error, as a dying process would: no last snapshot (the state may
        be mid-update), the peers' connections and `server.lock` released."""
        if self.exchange is not None:
            self.exchange.close()
        self._lock.release()

    def shutdown(self) -> None:
        if self.exchange is not None:
            self.exchange.leave()
            self.exchange.close()
        if self._snapshotter is not None and hasattr(self, "files"):
            self._snapshotter.wait_idle(STOP_SNAPSHOT_WAIT_S)
            self.snapshot()
            self._snapshotter.wait_idle(STOP_SNAPSHOT_WAIT_S)
        self._lock.release()


def open_snapshots(config: ServerConfig) -> SnapshotStore | None:
    """Where snapshots go: `--snapshot-dir`, else the object store the environment names."""
    if config.snapshot_interval_s <= 0:
        return None
    from storage.object_store import (
        JOB_OBJECTS_URL_ENV,
        LocalObjectStore,
        open_learner_object_store,
    )

    if config.snapshot_dir is not None:
        return SnapshotStore(LocalObjectStore(config.snapshot_dir), config.job, config.rank)
    if JOB_OBJECTS_URL_ENV not in os.environ and "DLAAS_OBJECT_STORE" not in os.environ:
        return None
    from storage.settings import Settings

    store = open_learner_object_store(Settings(), os.environ)
    return SnapshotStore(store, config.job, config.rank)


def serve(config: ServerConfig, stop: threading.Event) -> None:
    exchange = None
    if config.distributed:
        from learner_image.ps.exchange import open_exchange

        exchange = open_exchange(config)
    server = Server(config, open_snapshots(config), exchange)
    server.open()
    server.run(stop)


def supervise(argv: Sequence[str], exit_with: int | None = None) -> int:
    """Run the server as a child and start it again whenever it dies of anything but a stop
    (what a kubelet does for a sidecar container); with `exit_with`, stop once that process
    (the learner's runner) has exited."""
    child_argv = [a for a in argv if a != "--supervise"]
    stopping = threading.Event()
    child: subprocess.Popen[bytes] | None = None

    def stop(signum: int, frame: object) -> None:
        stopping.set()
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if exit_with is not None:
        threading.Thread(target=_wait_exit, args=(exit_with,), daemon=True).start()
    backoff = 0.2
    while not stopping.is_set():
        child = subprocess.Popen([*sidecar.command(sys.executable), *child_argv])
        code = child.wait()
        if stopping.is_set() or code == 0:
            return code
        log.warning("dlaas-ps exited with %s; starting it again in %.1f s", code, backoff)
        time.sleep(backoff)
        backoff = min(backoff * 2, 5.0)
    return 0


def _wait_exit(pid: int) -> None:
    """Wait for `pid` to exit, then stop this supervisor (SIGTERM to itself)."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        fd = None
    if fd is not None:
        select.select([fd], [], [])
        os.close(fd)
    os.kill(os.getpid(), signal.SIGTERM)


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    config = parse_config(args)
    if config.supervise:
        exit_with = os.environ.get("DLAAS_PS_EXIT_WITH")
        sys.exit(supervise(args, int(exit_with) if exit_with else None))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    signal.signal(signal.SIGINT, lambda signum, frame: stop.set())
    code = 0
    try:
        serve(config, stop)
    except (ServerError, PeerFailed) as error:
        print(f"dlaas-ps: {error}", file=sys.stderr)
        code = 2
    # The server has closed its region and stored its last snapshot. Skip the interpreter's
    # teardown: a peer link's daemon thread still inside torch can make torch's C++ threads
    # end the process in std::terminate (SIGABRT) instead of with `code`.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
