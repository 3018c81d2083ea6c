"""The pure pipeline: Job -> Fabric, CommOps, Transfers, Flows, Report. No files touched here."""
from __future__ import annotations

from dataclasses import dataclass

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


def run_pipeline(job: Job) -> Run:
    fabric = build_fabric(job)
    ops = build_commops(job)
    transfers = expand(ops, fabric, job.nccl)
    flows = schedule(ops, transfers, fabric, job)
    return Run(job, fabric, ops, transfers, flows, build_report(job, fabric, flows))
