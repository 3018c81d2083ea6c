"""workload stage: Job -> CommOps (what must be communicated in one iteration, in what order)."""
from __future__ import annotations

from ..config import Job
from ..tables import CommOps
from .dense import build_dense


def build_commops(job: Job) -> CommOps:
    return build_dense(job)
