"""The pure pipeline: Job -> Fabric, CommOps, Transfers, Flows, Report. No files touched here."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .collectives import expand
from .config import Job
from .report import Report, build_report
from .schedule import schedule
from .tables import CommOps, Flows, Transfers
from .topology import Fabric, build_fabric
from .workload import build_commops


@dataclass(frozen=True)
class Run:
    job: Job
    fabric: Fabric
    ops: CommOps
    transfers: Transfers
    flows: Flows
    report: Report


def run_pipeline(job: Job, stage: Callable[[str], None] | None = None) -> Run:
    """`stage(text)` is told what runs next (the CLI shows it; big jobs take minutes)."""
    say = stage or (lambda text: None)
    say("topology")
    fabric = build_fabric(job)
    say("workload: collectives of one iteration")
    ops = build_commops(job)
    say(f"collectives: {len(ops):,} ops -> transfers")
    transfers = expand(ops, fabric, job.nccl)
    say(f"schedule: {len(transfers):,} transfers")
    flows = schedule(ops, transfers, fabric, job)
    say("report")
    return Run(job, fabric, ops, transfers, flows, build_report(job, fabric, flows))
