"""A count and its noun as a person writes them: 1 learner, 2 learners."""

from __future__ import annotations


def counted(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"
