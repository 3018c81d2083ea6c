"""workload stage: Job -> CommOps (what must be communicated in one iteration, in what order).

May import: config and the shared modules (errors, progress, tables). Must not import fabric,
collectives, timing, report, pipeline, output, emit, corpus or cli.
"""
from __future__ import annotations

from ..config import Job
from ..tables import CommOps
from .iteration import build_iteration, foldable


def build_commops(job: Job, fold: bool = False) -> CommOps:
    """fold: build DP replica 0 alone when the job allows it (foldable); CommOps.replicas says."""
    return build_iteration(job, fold)


__all__ = ["build_commops", "foldable"]
