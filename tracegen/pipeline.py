"""The pure pipeline: Job -> Fabric, CommOps, Transfers, Flows, Report. No files touched here."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .collectives import expand, op_templates
from .config import Job
from .errors import ConfigError
from .report import Report, build_report
from .schedule import schedule
from .schedule_conn import schedule_connections
from .tables import CommOps, Flows, Transfers
from .topology import Fabric, build_fabric
from .workload import build_commops


@dataclass(frozen=True)
class Run:
    job: Job
    fabric: Fabric
    ops: CommOps
    transfers: Transfers | None     # None when timed per connection (detail conn)
    flows: Flows
    report: Report


# `detail: auto` times the job chunk by chunk up to this many transfers, per connection beyond.
FULL_DETAIL_MAX_TRANSFERS = 2_000_000


def chunk_transfer_count(ops: CommOps, fabric: Fabric, job: Job) -> int:
    """Transfers a chunk-level expansion would make (templates are cached: cheap)."""
    return sum(len(t) for _, _, t, _ in op_templates(ops, fabric, job.nccl))


def pick_detail(detail: str, emit: bool, transfers: int) -> str:
    """full or conn: `auto` is full when pcaps or ns-3 are written (they are made of chunks) or
    the job has at most FULL_DETAIL_MAX_TRANSFERS chunk transfers."""
    if detail != "auto":
        return detail
    return "full" if emit or transfers <= FULL_DETAIL_MAX_TRANSFERS else "conn"


def run_pipeline(job: Job, stage: Callable[[str], None] | None = None, emit: bool = False) -> Run:
    """`stage(text)` is told what runs next (the CLI shows it; big jobs take minutes). emit: pcaps
    or an ns-3 scenario will be written from the flows, which need every chunk (detail full)."""
    say = stage or (lambda text: None)
    say("topology")
    fabric = build_fabric(job)
    say("workload: collectives of one iteration")
    from .work import built_commops
    ops = built_commops(job)
    if ops is None:
        ops = build_commops(job)
    detail = job.detail
    if detail == "conn" and emit:
        raise ConfigError("detail=conn times the job per NCCL connection; pcaps and ns-3 scenarios "
                          "are made of its chunks: use --detail full (or auto), or --no-pcap --no-ns3")
    if detail == "auto":
        detail = pick_detail(detail, emit, 0 if emit else chunk_transfer_count(ops, fabric, job))
    if detail == "full":
        say(f"collectives: {len(ops):,} ops -> transfers")
        transfers = expand(ops, fabric, job.nccl)
        say(f"schedule: {len(transfers):,} transfers")
        flows = schedule(ops, transfers, fabric, job)
    else:
        say(f"schedule: {len(ops):,} ops, per connection")
        transfers = None
        flows = schedule_connections(ops, fabric, job)
    say("report")
    return Run(job, fabric, ops, transfers, flows, build_report(job, fabric, flows))
