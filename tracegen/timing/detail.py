"""The granularity a job is timed at (`detail`): every chunk (full) or per NCCL connection (conn).

Decided before anything is built - by the work estimate (work.py) and by the pipeline - from the
job and what will be written: an ns-3 scenario replays every chunk; pcaps take the chunks of the
NICs they show from a connection-level schedule (emit/views/placed.py).
"""
from __future__ import annotations

from ..config import Job
from ..workload import foldable

# `detail: auto` times the job chunk by chunk up to this many transfers, per connection beyond.
FULL_DETAIL_MAX_TRANSFERS = 2_000_000


def needs_chunks(job: Job, emit: bool) -> bool:
    """Will every chunk of the job be written? An ns-3 scenario replays them all; pcaps take
    the chunks of the NICs they show from a connection-level schedule too (emit/views/placed.py)."""
    return bool(emit and job.output.ns3)


def want_fold(job: Job, emit: bool) -> bool:
    """Build the workload folded (DP replica 0 alone) when it may be timed per connection."""
    return not needs_chunks(job, emit) and job.detail != "full" and foldable(job)


def pick_detail(detail: str, emit: bool, transfers: int) -> str:
    """full or conn: `auto` is full when every chunk is written (emit: an ns-3 scenario) or the
    job has at most FULL_DETAIL_MAX_TRANSFERS chunk transfers."""
    if detail != "auto":
        return detail
    return "full" if emit or transfers <= FULL_DETAIL_MAX_TRANSFERS else "conn"


def far_beyond(known_transfers: int | None) -> bool:
    """A closed-form transfer count so far beyond the line that counting exactly is not worth it
    (it would build every template, a whole job's grad-norm ring among them)."""
    return known_transfers is not None and known_transfers > 4 * FULL_DETAIL_MAX_TRANSFERS
