"""The pure pipeline: Job -> Fabric, CommOps, Transfers, Flows, Report. No files touched here."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from . import progress
from .collectives import expand, op_templates
from .config import Job
from .errors import ConfigError
from .report.build import Report, build_report
from .timing.schedule import schedule
from .timing.schedule_conn import schedule_connections
from .tables import CommOps, Flows, Transfers
from .fabric.topology import Fabric, build_fabric
from .timing.detail import FULL_DETAIL_MAX_TRANSFERS, far_beyond, needs_chunks, pick_detail, want_fold  # noqa: F401
from .workload import build_commops


@dataclass(frozen=True)
class Run:
    job: Job
    fabric: Fabric
    ops: CommOps
    transfers: Transfers | None     # None when timed per connection (detail conn)
    flows: Flows
    report: Report


def chunk_transfer_count(ops: CommOps, fabric: Fabric, job: Job) -> int:
    """Transfers a chunk-level expansion of the whole job would make (templates are cached:
    cheap; a folded op counts once per replica it stands for)."""
    copies = ops.copies()
    n = len(ops)
    # the CLI's bar: ops in up to 64 blocks (the templates are built as the blocks go)
    block = max(progress.BLOCK_OPS, -(-n // 64)) if progress.active() else max(n, 1)
    count = 0
    for lo in range(0, n, block):
        hi = min(n, lo + block)
        count += sum(len(t) * int(copies[i]) for i, _, t, _ in op_templates(ops, fabric, job.nccl, range(lo, hi)))
        progress.report(hi, n)
    return count


def run_pipeline(job: Job, stage: Callable[[str], None] | None = None, emit: bool | None = None,
                 fold: bool = True) -> Run:
    """`stage(text)` is told what runs next (the CLI shows it; big jobs take minutes). emit: the
    job's outputs will be written: an ns-3 scenario needs every chunk (detail full); pcaps of a
    connection-level schedule expand only the NICs they show (emit/views/placed.py); the schedule keeps
    the NET flows' rate changes for the pcap writer unless emit is False (a plan) or the job
    writes no pcaps.
    fold: timed per connection, build and time DP replica 0's ops once for all replicas where the
    job allows it (workload.foldable; the network edges of every replica are still timed)."""
    say = stage or (lambda text: None)
    say("topology")
    fabric = build_fabric(job)
    say("workload: collectives of one iteration")
    from .timing.work import built_commops, built_transfers
    known_transfers = built_transfers(job)
    ops = built_commops(job)
    if ops is None or (ops.replicas > 1 and not fold):
        ops = build_commops(job, fold=fold and want_fold(job, emit))
    detail = job.detail
    whole = needs_chunks(job, emit)
    if detail == "conn" and whole:
        raise ConfigError("detail=conn times the job per NCCL connection; an ns-3 scenario replays "
                          "every chunk of it: use --detail full (or auto), or --no-ns3")
    if detail == "auto":
        # the estimate's closed-form count where it is far beyond the line (counting exactly
        # would build every template, a whole job's grad-norm ring among them), else exact
        far = far_beyond(known_transfers)
        if not (whole or far):
            progress.stage(f"detail: chunk transfers of {len(ops):,} ops counted (full or per connection)", "ops")
        detail = pick_detail(detail, whole, 0 if whole else known_transfers if far
                             else chunk_transfer_count(ops, fabric, job))
    if detail == "full" and ops.replicas > 1:
        ops = build_commops(job)            # every chunk of every replica
    if detail == "full":
        say(f"collectives: {len(ops):,} ops -> transfers")
        transfers = expand(ops, fabric, job.nccl)
        say(f"schedule: {len(transfers):,} transfers")
        flows = schedule(ops, transfers, fabric, job, rates=bool(job.output.pcap and emit is not False))
    else:
        folded = f" (DP replica 0 of {ops.replicas}, network edges of all)" if ops.replicas > 1 else ""
        say(f"schedule: {len(ops):,} ops{folded}, per connection")
        transfers = None
        flows = schedule_connections(ops, fabric, job, rates=bool(job.output.pcap and emit is not False))
    say("report")
    return Run(job, fabric, ops, transfers, flows, build_report(job, fabric, flows))
