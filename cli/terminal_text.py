"""Text that came from a job's program (its log lines, its last words in a job's reason,
its metric names), made safe to put on a terminal: a program's escape sequences would
otherwise retitle the user's window, clear their screen or move the cursor over what
dlaas printed. Every control character but newline and tab is shown as its escape, `\\x1b`
for ESC, as Python writes it."""

from __future__ import annotations

import re

# C0 controls but tab and newline, DEL, and the C1 controls (0x9b is a one-byte CSI)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    return _CONTROL.sub(lambda control: f"\\x{ord(control.group()):02x}", text)
