"""What a learner's runner leaves behind when it ends, for the cluster to keep with the
learner: how it ended, whether it was told to stop, and the program's last line.

The runner sends the same facts as its `exit` event; this copy stays with the learner
itself (a file in its working directory on the local backend, the container's termination
message on Kubernetes, `/dev/termination-log`), so whoever looks at the cluster later (the
reconcile, a node agent started again after the learner ended) classes the end exactly as
the event would have, even when the event was lost or is not read yet.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from storage.private_files import write_private_text

# Where the runner writes its report, set by the cluster backend.
EXIT_REPORT_ENV = "DLAAS_EXIT_REPORT"
KUBERNETES_PATH = "/dev/termination-log"
# Kubernetes keeps at most 4096 bytes of a termination message.
MAX_BYTES = 4096
_LINE_LIMIT = 500


@dataclass(frozen=True)
class ExitReport:
    exit_code: int
    signal: str | None
    reason: str
    stopped: bool  # the runner was told to stop: the program did not end by itself
    last_line: str = ""
    source: str = "command"  # `command` (the program ended) or `runner` (the runner failed)

    def to_json(self) -> str:
        fitted = replace(self, last_line=self.last_line[:_LINE_LIMIT])
        text = json.dumps({"dlaas_exit": asdict(fitted)})
        # The reason gives way first (the exit code says most of it), then the last line.
        while len(text.encode()) > MAX_BYTES:
            if fitted.reason:
                fitted = replace(fitted, reason=fitted.reason[: len(fitted.reason) // 2])
            else:
                fitted = replace(fitted, last_line=fitted.last_line[: len(fitted.last_line) // 2])
            text = json.dumps({"dlaas_exit": asdict(fitted)})
        return text

    @classmethod
    def from_json(cls, text: str) -> ExitReport | None:
        """The report in `text`, or None when it holds none (any other message)."""
        try:
            fields = json.loads(text)["dlaas_exit"]
            return cls(
                exit_code=int(fields["exit_code"]),
                signal=fields["signal"] or None,
                reason=str(fields["reason"]),
                stopped=bool(fields["stopped"]),
                last_line=str(fields.get("last_line", "")),
                source=str(fields.get("source", "command")),
            )
        except (ValueError, TypeError, KeyError):
            return None


def leave(report: ExitReport, environ: Mapping[str, str]) -> None:
    """Write the report where the backend asked (`DLAAS_EXIT_REPORT`), if it asked. A report
    that cannot be written costs only its later readers the detail: the event has it all.
    It is 0600: the program's last line is no business of other jobs on the node."""
    path = environ.get(EXIT_REPORT_ENV)
    if path:
        with contextlib.suppress(OSError):
            write_private_text(Path(path), report.to_json())


def read(path: Path) -> ExitReport | None:
    try:
        return ExitReport.from_json(path.read_text())
    except OSError:
        return None
