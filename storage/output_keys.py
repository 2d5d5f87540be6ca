"""Where a learner's output is stored: its whole log and its metrics, one object each."""

from __future__ import annotations


def log_key(job_id: str, learner: int) -> str:
    return f"jobs/{job_id}/logs/learner-{learner}.log"


def metrics_key(job_id: str, learner: int) -> str:
    return f"jobs/{job_id}/metrics/learner-{learner}.jsonl"
