"""Sample the API's worker processes with py-spy while load runs, and say where time goes.

`record(pids, seconds, out_dir)` starts one `py-spy record --format raw` per process (idle
threads excluded, so samples are CPU or GIL-holding time); `hottest_functions(paths)` folds the
collapsed stacks into the functions with the most samples: by self time, dlaas's own functions
by inclusive time, and the library calls dlaas code makes by inclusive time.
py-spy is a separate tool: `pip install py-spy` (or pass its path).
"""

from __future__ import annotations

import itertools
import re
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

_LINE_NUMBER = re.compile(r":\d+\)$")


def find_py_spy(explicit: str | None) -> str:
    found = explicit or shutil.which("py-spy")
    if not found:
        raise RuntimeError("py-spy is not installed: `pip install py-spy`, or pass --py-spy PATH")
    return found


def start_recording(
    py_spy: str,
    pids: list[int],
    seconds: float,
    out_dir: Path,
    *,
    gil_only: bool = False,
    rate: int = 200,
) -> list[tuple[subprocess.Popen[bytes], Path]]:
    """One py-spy per process. `gil_only` keeps samples of the thread holding the GIL (Python
    CPU time); otherwise every thread that is not idle, so blocking calls (fsync, socket
    reads) made on the event loop count too."""
    out_dir.mkdir(parents=True, exist_ok=True)
    running = []
    for pid in pids:
        path = out_dir / f"worker-{pid}{'.gil' if gil_only else ''}.txt"
        process = subprocess.Popen(
            [py_spy, "record", "--pid", str(pid), "--rate", str(rate), "--format", "raw",
             "--duration", str(int(seconds)), "--nonblocking", "--output", str(path),
             *(["--gil"] if gil_only else [])],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        running.append((process, path))
    return running


def _frame(frame: str) -> str:
    """'send_task (celery/app/base.py:801)' -> 'send_task (celery/app/base.py)'."""
    frame = _LINE_NUMBER.sub(")", frame.strip())
    return frame.replace("/work/main/.venv/lib/python3.11/site-packages/", "").replace(
        "/work/main/", ""
    )


_DLAAS_PACKAGES = ("api/", "storage/", "lifecycle_manager/", "learner_image/")


def _is_dlaas(frame: str) -> bool:
    return frame.rpartition("(")[2].startswith(_DLAAS_PACKAGES)


@dataclass
class Hotspots:
    samples: int
    self_pct: list[tuple[str, float]]
    dlaas_pct: list[tuple[str, float]]  # dlaas functions, inclusive
    library_calls_pct: list[tuple[str, float]]  # "dlaas caller -> library callee", inclusive


def hottest_functions(paths: list[Path], top: int = 25) -> Hotspots:
    self_time: Counter[str] = Counter()
    dlaas: Counter[str] = Counter()
    calls: Counter[str] = Counter()
    total = 0
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text(errors="replace").splitlines():
            stack, _, count_text = line.rpartition(" ")
            if not stack or not count_text.isdigit():
                continue
            count = int(count_text)
            frames = [_frame(f) for f in stack.split(";") if not f.startswith("process ")]
            frames = [f for f in frames if not f.startswith("thread (")]
            if not frames:
                continue
            total += count
            self_time[frames[-1]] += count
            for frame in {f for f in frames if _is_dlaas(f)}:
                dlaas[frame] += count
            pairs = itertools.pairwise(frames)
            for pair in {f"{a} -> {b}" for a, b in pairs if _is_dlaas(a) and not _is_dlaas(b)}:
                calls[pair] += count

    def share(counter: Counter[str]) -> list[tuple[str, float]]:
        return [(name, round(100.0 * n / max(1, total), 1)) for name, n in counter.most_common(top)]

    return Hotspots(total, share(self_time), share(dlaas), share(calls))
