"""workload stage: Job -> CommOps (what must be communicated in one iteration, in what order)."""
from __future__ import annotations

from ..config import Job
from ..tables import CommOps
from .iteration import build_iteration


def build_commops(job: Job) -> CommOps:
    return build_iteration(job)
