"""`--small`: a benchmark's own code path with its sizes shrunk so that it ends in seconds.

Its figures only show that the benchmark still runs (the test suite runs every benchmark
so); they are not measurements. Options given beside `--small` still win.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import Any


def parse_with_small(
    parser: argparse.ArgumentParser,
    small: Mapping[str, Any],
    argv: Sequence[str] | None = None,
) -> argparse.Namespace:
    """Parse `argv` with a `--small` flag that makes `small` (option dest -> value) the
    defaults."""
    known = vars(parser.parse_known_args([])[0])
    unknown = sorted(set(small) - set(known))
    if unknown:
        raise ValueError(f"--small sets options the parser does not have: {unknown}")
    shown = ", ".join(f"--{dest.replace('_', '-')} {value}" for dest, value in small.items())
    parser.add_argument(
        "--small",
        action="store_true",
        help=f"run in seconds, to check that it runs (defaults: {shown or 'the same'})",
    )
    if parser.parse_known_args(argv)[0].small:
        parser.set_defaults(**small)
    return parser.parse_args(argv)
