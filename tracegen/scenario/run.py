"""A scenario timed: every job's CommOps on the GPUs it was placed on, one table, one schedule.

Each job's CommOps are built as `tracegen plan` builds them (unfolded: a folded job's replicas
sit at rank offsets placement does not keep), its stragglers' compute slowed (events.py), its
ranks renamed to scenario GPUs (place.py) and its op ids shifted; its first ops are released
`start_ns` late. The table is timed once on the scenario's fabric by the ordinary engine
(timing/schedule.py per chunk, timing/schedule_conn.py per connection: the fluid max-min engine
shares every link among all jobs' traffic), so interference is the engine's. Each job is timed
again alone, at the same placement on the same fabric (events included): its slowdown is the
scenario's time over that. A one-job scenario on the job's own cluster is exactly the job's
`tracegen plan` (tests/test_scenario.py).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from .events import apply_fabric_events, apply_stragglers
from .patterns import pattern_ops, pattern_units
from .place import place, rank_map
from .spec import Scenario
from .. import progress
from ..collectives import expand
from ..config import show_path
from ..errors import ConfigError
from ..fabric.topology import Fabric, build_fabric
from ..pipeline import chunk_transfer_count
from ..report.kpi import FlowSide, jain, op_kpis
from ..tables import CollKind, CommOps, Flows, LinkKind, Ragged
from ..timing.detail import pick_detail
from ..timing.schedule import schedule
from ..timing.schedule_conn import schedule_connections
from ..timing.work import estimate
from ..workload import build_commops


@dataclass(frozen=True)
class _Hardware:
    """What fabric.topology.build_fabric reads of a job: the scenario's cluster, all its nodes."""
    cluster: object
    fabric: object
    output: object
    world: int
    nodes: int


@dataclass(frozen=True)
class JobResult:
    name: str
    nodes: np.ndarray              # scenario nodes
    ranks: np.ndarray              # per job rank: its scenario GPU
    op_lo: int                     # the job's ops in the combined table: [op_lo, op_hi)
    op_hi: int
    start_ns: int
    iterations: int
    end_ns: int                    # last op's end in the scenario
    jct_ns: int                    # end - start
    iteration_ns: list             # per iteration, in the scenario
    alone_jct_ns: int              # the job alone, same placement and fabric
    alone_iteration_ns: list
    busbw_pct: float | None        # median over its ops that cross the fabric (report/kpi.py)
    alone_busbw_pct: float | None

    @property
    def slowdown(self) -> float:
        return self.jct_ns / self.alone_jct_ns if self.alone_jct_ns else float("nan")


@dataclass(frozen=True)
class ScenarioRun:
    scenario: Scenario
    fabric: Fabric
    ops: CommOps                   # every job's, combined
    op_job: np.ndarray             # per op: its job
    flows: Flows
    detail: str
    jobs: list

    def placed(self):
        """What emit/views/placed.py reads of a run (flows, ops, fabric, job): the scenario's
        hardware job, whose output selects no NIC, so every NIC's chunks are placed."""
        from types import SimpleNamespace
        return SimpleNamespace(flows=self.flows, ops=self.ops, fabric=self.fabric, job=self.scenario.hardware)

    @property
    def fairness(self) -> float:
        """Jain's index over the jobs' slowdowns: 1 when interference slows every job alike."""
        return jain(np.array([j.slowdown for j in self.jobs])) if len(self.jobs) > 1 else 1.0


def base_fabric(sc: Scenario) -> Fabric:
    """The scenario's fabric before any event: its cluster, all its nodes."""
    hw = sc.hardware
    gpn = hw.cluster.gpus_per_node
    return build_fabric(_Hardware(dataclasses.replace(hw.cluster, nodes=sc.nodes), hw.fabric, hw.output,
                                  sc.nodes * gpn, sc.nodes))


def scenario_fabric(sc: Scenario) -> Fabric:
    return apply_fabric_events(base_fabric(sc), sc.events, sc.ecmp_on_failure)


def renamed(ops: CommOps, ranks: np.ndarray, start_ns: int = 0) -> CommOps:
    """A job's ops on scenario GPUs (ranks[r] for job rank r), released start_ns late."""
    rows = ops.rows
    if start_ns:
        rows = rows.copy()
        rows["gap_ns"][ops.deps.lengths() == 0] += start_ns
    return CommOps(rows, Ragged(ops.groups.ptr, ranks[ops.groups.values]), ops.deps)


def combine(parts: list[CommOps]) -> CommOps:
    """One op table of several: op ids and dependencies shifted, groups as they are."""
    offsets = np.cumsum([0] + [len(p) for p in parts])[:-1].tolist()
    rows = np.concatenate([p.rows for p in parts])
    rows["op_id"] = np.arange(len(rows))
    return CommOps(rows, Ragged.concat([p.groups for p in parts]),
                   Ragged.concat([p.deps for p in parts], offsets))


def time_ops(ops: CommOps, fabric: Fabric, job, detail: str, rates: bool = False) -> Flows:
    """The ordinary engine on an op table; rates: keep the NET flows' rate changes (the pcap
    writer paces each message by them), as run_pipeline does for generate."""
    if detail == "full":
        return schedule(ops, expand(ops, fabric, job.nccl), fabric, job, rates=rates)
    return schedule_connections(ops, fabric, job, rates=rates, aggregate=False)   # per pair (scenario report)


def _ends(flows: Flows, ops: CommOps, lo: int, hi: int, start_ns: int, iterations: int) -> tuple[int, list]:
    end = flows.op_end_ns[lo:hi]
    it = ops.rows["iteration"][lo:hi]
    last = [int(end[it == k].max()) if (it == k).any() else start_ns for k in range(iterations)]
    per = np.diff([start_ns] + last).tolist()
    return int(end.max()) if len(end) else start_ns, per


def _busbw(flows: Flows, ops: CommOps, lo: int, hi: int, line_gbps: float) -> float | None:
    r = flows.rows
    mine = (r["op_id"] >= lo) & (r["op_id"] < hi)
    net_ops = np.unique(r["op_id"][mine & (r["link"] == LinkKind.NET)])
    if not len(net_ops):
        return None
    sel = np.isin(r["op_id"], net_ops)
    kinds = [CollKind(int(k)).label for k in ops.rows["kind"]]
    per = op_kpis(r["op_id"][sel], r["bytes"][sel].astype(float), FlowSide(r["start_ns"][sel], r["end_ns"][sel]),
                  ops.rows["bytes"], ops.groups.lengths(), kinds, line_gbps)
    vals = [v["busbw_pct"] for v in per.values() if np.isfinite(v["busbw_pct"])]
    return float(np.median(vals)) if vals else None


def _transfer_count(ops: CommOps, fabric: Fabric, job) -> int:
    return chunk_transfer_count(ops, fabric, job)


def check_work(sc: Scenario, max_work: int, chunks: bool = False) -> int:
    """Bounded work, as for a job (timing/work.py): the jobs' estimates summed, twice with more
    than one job (each is timed in the scenario and alone); ConfigError beyond max_work (0: no
    limit). chunks: an ns-3 scenario will be written (every chunk timed, detail.needs_chunks)."""
    units = []
    for e in sc.jobs:
        units.append(pattern_units(*e.pattern[:3], e.job.iterations) if e.pattern else
                     estimate(e.job, 0, pcap=False, emit=chunks, per_sender=False).units)
    total = sum(units) * (2 if len(units) > 1 else 1)
    if max_work and total > max_work:
        each = ", ".join(f"{e.name} {u:,}" for e, u in zip(sc.jobs, units))
        raise ConfigError(f"{show_path(sc.path)}: scenario too big for --max-work {max_work:,}: ~{total:,} work units "
                          f"({each}{'; each job is timed in the scenario and alone' if len(units) > 1 else ''}); "
                          "shrink its jobs or raise --max-work (0: no limit)")
    return total


def prepare(sc: Scenario) -> tuple[list, Fabric]:
    """Placement and the fabric with its events: every check of the scenario that needs the
    fabric, before any work (errors name the scenario file)."""
    try:
        return place(sc), scenario_fabric(sc)
    except ConfigError as e:
        raise ConfigError(f"{show_path(sc.path)}: {e}") from None


def run_scenario(sc: Scenario, stage=None, alone: bool = True, prepared=None, rates: bool = False,
                 chunks: bool = False) -> ScenarioRun:
    """The scenario timed, and (alone) every job timed alone at its placement. rates: the
    combined schedule keeps its flows' rate changes (pcaps are placed on them, link_time.csv
    splits links by them). chunks: every chunk will be written (an ns-3 scenario replays them
    all): `detail: auto` times per chunk, `detail: conn` is refused - as for a job
    (pipeline.run_pipeline, timing/detail.py needs_chunks)."""
    say = stage or (lambda text: None)
    say("scenario: placement and fabric")
    placed, fabric = prepared or prepare(sc)
    gpn = sc.hardware.cluster.gpus_per_node
    parts, solo, ranks = [], [], []
    for i, e in enumerate(sc.jobs):
        say(f"workload: {e.name}")
        built = pattern_ops(*e.pattern, e.job.iterations) if e.pattern else build_commops(e.job)
        ops = apply_stragglers(built, sc.events, i)
        r = rank_map(placed[i], gpn)
        ranks.append(r)
        parts.append(renamed(ops, r, e.start_ns))
        solo.append(renamed(ops, r))
    ops = combine(parts)
    op_job = np.repeat(np.arange(len(parts)), [len(p) for p in parts])
    job = sc.hardware
    detail = job.detail
    if detail == "conn" and chunks:
        raise ConfigError(f"{show_path(sc.path)}: detail=conn times the scenario per NCCL connection; an ns-3 "
                          "scenario replays every chunk of it: use detail full (or auto) in its jobs, or --no-ns3")
    if detail == "auto":
        if not chunks:
            say("detail: chunk transfers counted")
        detail = pick_detail(detail, chunks, 0 if chunks else _transfer_count(ops, fabric, job))
    say(f"schedule: {len(sc.jobs)} jobs, {len(ops):,} ops on one fabric ({detail})")
    flows = time_ops(ops, fabric, job, detail, rates)
    if any(e.dscp is not None or e.pcp is not None for e in sc.jobs):
        # per-job traffic classes: each op's frames carry its job's (the pcap writer reads op_tc)
        tc = np.array([(e.job.output.dscp if e.dscp is None else e.dscp, e.job.output.pcp if e.pcp is None else e.pcp)
                       for e in sc.jobs], np.int64)
        flows = dataclasses.replace(flows, op_tc=tc[op_job])
    line = float(fabric.port_gbps)
    lo = np.cumsum([0] + [len(p) for p in parts])
    results = []
    for i, e in enumerate(sc.jobs):
        its = e.job.iterations
        end, per = _ends(flows, ops, int(lo[i]), int(lo[i + 1]), e.start_ns, its)
        bus = _busbw(flows, ops, int(lo[i]), int(lo[i + 1]), line)
        if alone and len(sc.jobs) > 1:
            say(f"schedule: {e.name} alone")
            with progress.muted():
                f1 = time_ops(solo[i], fabric, e.job, detail)
            a_end, a_per = _ends(f1, solo[i], 0, len(solo[i]), 0, its)
            a_bus = _busbw(f1, solo[i], 0, len(solo[i]), line)
        else:                       # one job: the scenario is its run alone
            a_end, a_per, a_bus = end - e.start_ns, per, bus
        results.append(JobResult(e.name, placed[i], ranks[i], int(lo[i]), int(lo[i + 1]), e.start_ns, its,
                                 end, end - e.start_ns, per, a_end, a_per, bus, a_bus))
    return ScenarioRun(sc, fabric, ops, op_job, flows, detail, results)
