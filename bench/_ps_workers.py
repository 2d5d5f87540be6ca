"""The processes `bench/ps.py` starts: learners pushing to dlaas-ps, and the baselines.

    python -m bench._ps_workers push --dir D --slot N --numel N --seconds S [--latency]
                                     [--control FILE]
    python -m bench._ps_workers gloo --rank R --port P --numel N --iterations K --windows W
    python -m bench._ps_workers rpc --rank R --port P --numel N --seconds S
    python -m bench._ps_workers recv --port P --numel N --ready FILE
    python -m bench._ps_workers send --port P --numel N --messages M --windows W

Each prints one JSON line of what it measured.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import socket
import sys
import tempfile
import threading
import time
from concurrent import futures
from pathlib import Path
from typing import Any

import numpy as np

GRPC_CHUNK = 4 << 20
GRPC_METHOD = "/dlaasbench.Transfer/Send"


def emit(result: dict[str, Any]) -> None:
    print(json.dumps(result), flush=True)


def control_word(path: Path | None) -> str:
    """`run`, `pause` or `stop`: what the benchmark wrote in the learner's control file."""
    if path is None:
        return "run"
    try:
        return path.read_text().strip() or "run"
    except FileNotFoundError:
        return "run"


def push(args: argparse.Namespace) -> None:
    """A learner whose gradient is already computed: commit, wait for release, again.
    With `--control FILE`, it parks between pushes while FILE says `pause`, ends on `stop`."""
    from learner_image.ps.client import ParameterServer
    from learner_image.ps.layout import SGD, ModelLayout

    layout = ModelLayout.of([("w", (args.numel,))])
    client = ParameterServer(Path(args.dir), args.slot)
    client.attach(layout, SGD(lr=1e-6), np.zeros(layout.numel, np.float32))
    client.gradient[:] = 1.0
    latencies: list[float] = []
    pushes = 0
    started = time.perf_counter()
    deadline = started + args.seconds
    control = Path(args.control) if args.control else None
    while time.perf_counter() < deadline and (args.count is None or pushes < args.count):
        word = control_word(control)
        if word == "stop":
            break
        if word == "pause":
            time.sleep(0.005)
            continue
        began = time.perf_counter()
        client.push()
        if args.latency:
            latencies.append(time.perf_counter() - began)
        pushes += 1
    emit({"pushes": pushes, "seconds": time.perf_counter() - started, "latencies": latencies})
    client.close()


def gloo(args: argparse.Namespace) -> None:
    """torch.distributed all-reduce of the model-sized gradient between 2 processes."""
    import torch
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=args.rank, world_size=2
    )
    grad = torch.ones(args.numel)
    dist.all_reduce(grad)
    windows = []
    for _ in range(args.windows):
        dist.barrier()
        began = time.perf_counter()
        for _ in range(args.iterations):
            dist.all_reduce(grad)
        windows.append(time.perf_counter() - began)
    dist.destroy_process_group()
    emit({"rank": args.rank, "iterations": args.iterations, "windows": windows})


_WEIGHTS: Any = None
_LOCK = threading.Lock()


def apply_gradient(grad: Any, lr: float) -> int:
    """The rpc parameter server's update (runs in the server process)."""
    with _LOCK:
        _WEIGHTS.add_(grad, alpha=-lr)
    return 1


def rpc(args: argparse.Namespace) -> None:
    """A torch.distributed.rpc parameter server (rank 0) and two learners pushing to it."""
    import torch
    import torch.distributed.rpc as rpc_api

    global _WEIGHTS
    options = rpc_api.TensorPipeRpcBackendOptions(
        init_method=f"tcp://127.0.0.1:{args.port}", num_worker_threads=4, rpc_timeout=120
    )
    name = "ps" if args.rank == 0 else f"learner{args.rank}"
    if args.rank == 0:
        _WEIGHTS = torch.zeros(args.numel)
    rpc_api.init_rpc(name, rank=args.rank, world_size=3, rpc_backend_options=options)
    result: dict[str, Any] = {"rank": args.rank}
    if args.rank > 0:
        grad = torch.ones(args.numel)
        rpc_api.rpc_sync("ps", apply_gradient, args=(grad, 1e-6))
        pushes = 0
        began = time.perf_counter()
        while time.perf_counter() - began < args.seconds:
            rpc_api.rpc_sync("ps", apply_gradient, args=(grad, 1e-6))
            pushes += 1
        result.update(pushes=pushes, seconds=time.perf_counter() - began)
    rpc_api.shutdown()
    emit(result)


def _shm_buffer(nbytes: int) -> mmap.mmap:
    fd, path = tempfile.mkstemp(dir="/dev/shm", prefix="dlaas-bench-")
    os.unlink(path)
    os.ftruncate(fd, nbytes)
    buffer = mmap.mmap(fd, nbytes)
    os.close(fd)
    return buffer


def recv(args: argparse.Namespace) -> None:
    """Serve all three kinds at once: the transport's Listener on `port`, a plain socket
    loop on `port + 1`, gRPC on `port + 2`; until killed."""
    import grpc

    from learner_image.ps.transport import Inbox, Listener

    nbytes = args.numel * 4
    inbox = memoryview(_shm_buffer(nbytes))
    listener = Listener(
        ("127.0.0.1", args.port), {1: Inbox(1)}, lambda box, header: inbox, lambda b, h: None
    )
    listener.start()

    plain = socket.create_server(("127.0.0.1", args.port + 1))

    def serve_plain() -> None:
        sock, _ = plain.accept()
        buffer = memoryview(bytearray(nbytes))
        while True:
            got = 0
            while got < nbytes:
                n = sock.recv_into(buffer[got:])
                if n == 0:
                    return
                got += n
            sock.sendall(b"k")

    threading.Thread(target=serve_plain, daemon=True).start()

    target = bytearray(nbytes)

    def receive(chunks: Any, context: Any) -> bytes:
        offset = 0
        for chunk in chunks:
            target[offset : offset + len(chunk)] = chunk
            offset += len(chunk)
        return b"ok"

    handler = grpc.method_handlers_generic_handler(
        "dlaasbench.Transfer", {"Send": grpc.stream_unary_rpc_method_handler(receive)}
    )
    options = [("grpc.max_receive_message_length", 2 * GRPC_CHUNK)]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), options=options)
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{args.port + 2}")
    server.start()
    Path(args.ready).write_text("ok")
    time.sleep(args.seconds)


def send(args: argparse.Namespace) -> None:
    """Windows of `messages` model-sized messages, the three kinds taking turns."""
    import grpc
    import torch

    from learner_image.ps.transport import DATA, Header, Link, Outgoing

    nbytes = args.numel * 4
    source = _shm_buffer(nbytes)
    source[:] = np.ones(args.numel, np.float32).tobytes()
    payload = memoryview(source)
    link = Link(1, 0, lambda: ("127.0.0.1", args.port))
    link.start()
    seq = 0

    def transport() -> None:
        nonlocal seq
        seq += 1
        link.send(Outgoing(Header(DATA, seq, nbytes), payload))
        link.wait_idle()

    data = memoryview(bytearray(np.ones(args.numel, np.float32).tobytes()))
    sock = socket.create_connection(("127.0.0.1", args.port + 1))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    ack = bytearray(1)

    def plain() -> None:
        sock.sendall(data)
        sock.recv_into(ack)

    tensor = torch.ones(args.numel)
    options = [("grpc.max_send_message_length", 2 * GRPC_CHUNK)]
    channel = grpc.insecure_channel(f"127.0.0.1:{args.port + 2}", options=options)
    call = channel.stream_unary(GRPC_METHOD)

    def chunks() -> Any:
        raw = tensor.numpy().data.cast("B")
        for start in range(0, nbytes, GRPC_CHUNK):
            yield bytes(raw[start : start + GRPC_CHUNK])

    kinds = {"ps": transport, "socket": plain, "grpc": lambda: call(chunks())}
    windows: dict[str, list[float]] = {kind: [] for kind in kinds}
    for window in range(args.windows + 1):
        for kind, once in kinds.items():
            began = time.perf_counter()
            for _ in range(args.messages):
                once()
            if window:  # the first round warms up every path and buffer
                windows[kind].append(time.perf_counter() - began)
    link.close()
    sock.close()
    channel.close()
    emit({"bytes": nbytes * args.messages, "windows": windows})


def main() -> None:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="command", required=True)
    a = sub.add_parser("push")
    a.add_argument("--dir", required=True)
    a.add_argument("--slot", type=int, default=0)
    a.add_argument("--numel", type=int, required=True)
    a.add_argument("--seconds", type=float, required=True)
    a.add_argument("--count", type=int, default=None)
    a.add_argument("--latency", action="store_true")
    a.add_argument("--control", default="")
    a = sub.add_parser("gloo")
    a.add_argument("--rank", type=int, required=True)
    a.add_argument("--port", type=int, required=True)
    a.add_argument("--numel", type=int, required=True)
    a.add_argument("--iterations", type=int, default=5)
    a.add_argument("--windows", type=int, default=3)
    a = sub.add_parser("rpc")
    a.add_argument("--rank", type=int, required=True)
    a.add_argument("--port", type=int, required=True)
    a.add_argument("--numel", type=int, required=True)
    a.add_argument("--seconds", type=float, default=6.0)
    for name in ("recv", "send"):
        a = sub.add_parser(name)
        a.add_argument("--port", type=int, required=True)
        a.add_argument("--numel", type=int, required=True)
        a.add_argument("--messages", type=int, default=4)
        a.add_argument("--windows", type=int, default=3)
        a.add_argument("--seconds", type=float, default=120.0)
        a.add_argument("--ready", default="")
    args = p.parse_args()
    {"push": push, "gloo": gloo, "rpc": rpc, "recv": recv, "send": send}[args.command](args)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
