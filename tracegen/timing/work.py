"""How much work a job is, estimated before the pipeline runs, and the refusal beyond --max-work.

Three cheap steps, each refusing before the next costs anything:
  1. closed forms from the job alone: int64-safe sizes (bytes of one collective, ns of one
     iteration's compute), the fabric's links, and an upper estimate of the CommOps the workload
     stage builds (per stream, micro-batch and layer: TP/SP collectives, CP ring sends, EP
     AllToAlls, PP sends, ZeRO-3 gathers, DP buckets);
  2. the CommOp table itself (the workload stage: ~10 us per op, vectorised stages follow);
  3. transfers per op from NCCL's plan (tuning.plan: the same algorithm, channels and chunk the
     collectives stage will use) and closed-form template sizes (ring: loops x channels x steps
     x ranks, ...), grouped by distinct op shape; NCCL network messages from the bytes.
Work units = transfers + 4 x ops + 1.3 x messages: a transfer costs ~330 B of peak memory (and
~3 us) through schedule and report, a network message ~430 B (and ~2 us) in the pcap estimate,
measured on the 2-core development VM; with CE marks, + 60 (900 with DCQCN) x messages for the
schedules that choose the CNPs (ECN_UNITS_PER_MESSAGE). Timed per connection (the detail the pipeline picks,
pipeline.pick_detail), no transfer is made: the cost is per row of the connection-level schedule
(op x NCCL connection: a ring's n edges per channel, a pair's channels; a folded job's network
rows once per DP replica), ~CONN_EDGE_BYTES each, plus 4 units per op timed. The default budget, DEFAULT_MAX_WORK, fits a 2-core
24 GB machine shared with others: ~13 GB and a few minutes; every shipped preset fits.

The estimate follows the workload and collectives stages; tests/test_bad_input.py compares it
with the real counts on every preset and on random small jobs, so a change there shows up.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from types import SimpleNamespace

from ..config import DTYPE_BYTES, Job
from ..errors import ConfigError
from . import work_templates as templates

DEFAULT_MAX_WORK = 40_000_000        # ~13 GB peak, a few minutes on the 2-core development VM (every preset fits)
BYTES_PER_UNIT = 330                 # peak memory per transfer (llama3-8b plan: 390 MB, 0.95 M transfers)
BYTES_PER_MESSAGE = 430              # per network message held at once (deepseek-v3 plan before it
                                     # counted in blocks: 11.5 GB, 26.4 M messages)
# The pcap estimate of a plan builds its wire plan a few sender NICs at a time beyond this many
# network messages (emit/views/pcap.py; ~700 B each: deepseek-v3's 27 M messages held 17 GB whole)
PCAP_BLOCK_MESSAGES = 1 << 21
BASE_BYTES = 150 << 20               # interpreter, numpy, numba
OP_UNITS = 4
CONN_EDGE_BYTES = 380                # per connection-level row (op x connection): edge columns, its
                                     # fluid item's share, flow row (llama3-405b plan: 4.18 GB at
                                     # 65,536 GPUs, 10.9 M rows, items merged in blocks)
# CE marks (output.ecn_mark_fraction): the pcap writer schedules every packet, picks the CNPs on
# that schedule and schedules again with them (timing.add_cnps), where a host view without marks
# counts from the plan alone: ~0.2 ms per network message more, 2-core VM (tiny job, 20 iterations:
# 1.2 s vs 0.25 s, 4,960 messages); with output.dcqcn the senders are paced and all of it runs
# again up to DCQCN_ROUNDS times: ~3 ms per message (13 s). In work units of ~3 us:
ECN_UNITS_PER_MESSAGE = 60
DCQCN_UNITS_PER_MESSAGE = 900
MAX_OP_BYTES = 1 << 44               # one collective's buffer (16 TiB): byte x 8 x ranks stays in int64
MAX_ITERATION_NS = 1 << 56           # ~2.3 years of compute: time sums stay far inside int64
MAX_LINKS = 10_000_000


@dataclass(frozen=True)
class Work:
    ops: int
    transfers: int
    messages: int
    memory_bytes: int
    detail: str = "full"          # how the pipeline will time it (full: per chunk, conn: per connection)
    timed_ops: int = -1           # ops the schedule times (folded job: replica 0's and the shared; -1: ops)
    conn_edges: int = 0           # connection-level rows (op x NCCL connection) the schedule times
    cnp_units: int = 0            # scheduling the pcaps' CNPs (and DCQCN's pacing): CE marks only

    @property
    def units(self) -> int:
        if self.detail == "conn":
            return (OP_UNITS * (self.ops if self.timed_ops < 0 else self.timed_ops)
                    + self.conn_edges * CONN_EDGE_BYTES // BYTES_PER_UNIT + self.cnp_units)
        return (self.transfers + OP_UNITS * self.ops + self.messages * BYTES_PER_MESSAGE // BYTES_PER_UNIT
                + self.cnp_units)


def parse_work(text: str) -> int:
    """'40M', '2e7', '500k', '0' (no limit) -> work units (--max-work)."""
    s = str(text).strip().lower().replace("_", "")
    mult = {"k": 10**3, "m": 10**6, "g": 10**9}.get(s[-1:], 1)
    num = s[:-1] if s[-1:] in ("k", "m", "g") else s
    try:
        value = float(num) * mult
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value < 0 or value > 1e15 or (value and value < 1):
        raise ConfigError(f"--max-work {text!r}: give a count of work units like 40M or 2e7 "
                          "(0: no limit)")
    return int(value)


def _human_ns(ns: float) -> str:
    for unit, size in (("years", 365 * 86400e9), ("days", 86400e9), ("h", 3600e9), ("s", 1e9)):
        if ns >= size:
            return f"{ns / size:,.1f} {unit}"
    return f"{ns:,.0f} ns"


def _closed_forms(job: Job) -> tuple[int, int]:
    """(estimated ops, rank entries of their groups); refuses int64-unsafe sizes and fabrics."""
    from ..workload.compute import ComputeModel, moe_rows
    from ..workload.params import param_count
    m, par, c = job.model, job.parallelism, job.cluster
    B = m.bytes_per_elem
    gB = DTYPE_BYTES[par.grad_dtype] if par.grad_dtype else B
    mbs = par.microbatches
    tokens = par.micro_batch * m.seq_len // par.cp
    sizes = {
        "an activation (micro_batch x seq_len x hidden)": tokens * m.hidden * B,
        "the model's gradients": param_count(m) * max(gB, B),
        "the embedding (vocab x hidden)": m.vocab * m.hidden * max(gB, B),
        "a context-parallel K/V block": tokens * m.kv_elems_per_token * B,
        "an expert AllToAll": (moe_rows(job) * m.hidden * B) if m.experts else 0,
    }
    what, biggest = max(sizes.items(), key=lambda kv: kv[1])
    if biggest > MAX_OP_BYTES:
        raise ConfigError(f"{what} would be {biggest / (1 << 40):,.0f} TiB; tracegen handles collectives "
                          f"up to {MAX_OP_BYTES >> 40} TiB — check model sizes and micro_batch")
    cm = ComputeModel.of(job)
    stage_ns = 3 * (m.layers / par.pp) * max(cm.layer_fwd_ns(True), cm.layer_fwd_ns(False)) + 3 * cm.logits_ns
    it_ns = stage_ns * (mbs + par.pp) * job.iterations
    if it_ns > MAX_ITERATION_NS:
        raise ConfigError(f"the job's compute would take {_human_ns(it_ns)} at cluster.mfu={c.mfu}; "
                          "that is no training run - check model sizes, micro_batch and mfu")
    nics = c.nics_per_node or c.gpus_per_node
    nodes = job.nodes
    from ..fabric.kinds import link_count
    links, why = link_count(job.fabric, nodes, nics)
    if links > MAX_LINKS:
        raise ConfigError(f"the fabric would have {links:,} links ({why}); at most {MAX_LINKS:,} — "
                          "fewer spines or planes, more fabric.nodes_per_leaf, or a smaller fabric.k")
    # --- CommOps per iteration (an upper estimate of what workload/iteration.py builds)
    tp, cp, ep, pp, vpp, dp = par.tp, par.cp, par.ep, par.pp, par.vpp, par.dp
    streams = dp * cp * pp
    ls = m.layers / pp
    split = m.experts > 0 and ep > 1
    moe_frac = (m.moe_layers / m.layers) if split else 0.0
    n_dir = 3 if par.recompute == "full" else 2
    # a column -> row-parallel block: SP AllGather + ReduceScatter forward, and backward one more
    # AllGather (the weight gradient's re-gather, workload/iteration.py); TP: one AllReduce each way
    fwd_block = 2 if par.sp else (1 if tp > 1 else 0)
    bwd_block = 3 if par.sp else (1 if tp > 1 else 0)
    blocks = (n_dir - 1) * fwd_block + bwd_block
    etp = (par.expert_tp or tp) > 1
    per_layer = (blocks * (1 + (1 - moe_frac)) + n_dir * moe_frac * (2 * tp / ep + 2 * etp)
                 + n_dir * (cp - 1) * tp)
    # + the micro-batch's batch broadcasts over TP, embedding / head / cross-entropy collectives
    per_mb = ls * per_layer + 12 + (2 * tp * vpp + 2 * vpp if pp > 1 else 0)
    ops = streams * mbs * per_mb
    entries = streams * mbs * (ls * (2 * blocks * tp + n_dir * moe_frac * 2 * tp + n_dir * (cp - 1) * tp * 2)
                               + 2 * tp * vpp * 2)
    if par.zero == 3:
        ops += pp * mbs * (ls + 2) * (3 * tp + 3)
        entries += pp * mbs * (ls + 2) * (3 * tp * dp * cp + 3 * tp * cp * dp)
    rounds = 2 if par.zero in (1, 2) else 1
    ops += pp * tp * (ls + 2) * rounds + (pp * ep * (ls + 2) * rounds if split else 0)
    entries += pp * tp * (ls + 2) * rounds * dp * cp * 2
    ops += streams * 12 + tp * cp * dp      # per iteration: LayerNorm-grad, grad-norm, flag, loss
    return int(ops * job.iterations), int(entries * job.iterations)


def estimate(job: Job, max_work: int = 0, pcap: bool = True, emit: bool | None = None,
             per_sender: bool = True) -> Work:
    """The work of `job`; with max_work > 0, refuses (ConfigError) as soon as it is exceeded.
    pcap: count the NCCL network messages the pcap estimate and writer expand (plan always does).
    emit: pcaps or an ns-3 scenario will be written (None: as the job's output says), which
    decides the detail the pipeline times the job at (pipeline.pick_detail).
    per_sender=False: AllToAlls counted per pair even beyond alltoall_agg.AGG_PAIRS (a scenario
    times them so)."""
    from .detail import needs_chunks, pick_detail
    if emit is None:
        emit = job.output.pcap or job.output.ns3
    import numpy as np
    from ..collectives import DATA_KINDS, node_layout, tuning
    from ..tables import CollKind
    from ..workload import build_commops
    from .detail import want_fold
    ops_est, entries = _closed_forms(job)
    if want_fold(job, emit):                  # replica 0's streams: about 1/dp of the ops
        ops_est, entries = -(-ops_est // job.parallelism.dp), -(-entries // job.parallelism.dp)
    if max_work and (OP_UNITS * ops_est > max_work or entries > 4 * max_work):
        _refuse(job, Work(ops_est, 0, 0, _memory(ops_est, 0, 0, entries)), max_work, "collective calls")
    from .alltoall_agg import wanted as agg_wanted
    # beyond alltoall_agg.AGG_PAIRS a connection-level schedule times AllToAlls per sending rank:
    # their pairs are then not what costs (only a chunk-level one - full detail, an ns-3
    # scenario - lists them all)
    per_sender = per_sender and agg_wanted(job) and job.detail != "full" and not needs_chunks(job, emit)
    if max_work and not per_sender:
        _refuse_alltoall_pairs(job, max_work)
    ops = build_commops(job, fold=want_fold(job, emit))
    _keep_for_pipeline(job, ops)
    copies = ops.copies()
    rows = ops.rows
    world, gpn = job.world, job.cluster.gpus_per_node
    light = SimpleNamespace(rank_node=np.arange(world, dtype=np.int64) // gpn)
    rank_rail = np.asarray(job.cluster.nic_of_gpu(), dtype=np.int64)[np.arange(world) % gpn]
    groups: dict[tuple, object] = {}
    layouts: dict[bytes, tuple[int, int]] = {}
    shapes: dict[tuple, int] = {}
    timed: dict[tuple, int] = {}          # ops the schedule times (folded: replica 0's once)
    for i in range(len(rows)):
        kind = int(rows["kind"][i])
        group = np.asarray(ops.groups[i])
        if CollKind(kind) not in DATA_KINDS or len(group) < 2:
            continue
        key = group.tobytes()
        if key not in layouts:
            layouts[key] = node_layout(group, light)
        shape = (kind, len(group), *layouts[key], int(rows["bytes"][i]), int(rows["elem_bytes"][i]),
                 key if job.nccl.pxn else b"")
        groups.setdefault(key, group)
        shapes[shape] = shapes.get(shape, 0) + int(copies[i])
        timed[shape] = timed.get(shape, 0) + 1
    transfers = messages = edges = 0
    c = job.cluster
    pxn_share: dict[tuple, float] = {}
    for (kind, n, N, L, nbytes, eb, gkey), count in shapes.items():
        if nbytes < eb:
            continue
        plan = tuning.plan(CollKind(kind), job.nccl, n, N, L, nbytes, c.nic_gbps, c.nvlink_gbps)
        t = templates.transfers(kind, plan, n, N, L, nbytes, eb)
        # connection-level rows: a ring's or tree's n edges per channel, a pair's channels; a
        # folded op's network edges once per replica, its NVLink ones once
        if gkey:
            if (gkey, plan.algo) not in pxn_share:
                pxn_share[gkey, plan.algo] = templates.cross_rail(plan.algo, groups[gkey], light.rank_node,
                                                         rank_rail, N, L)
            t += int(t * pxn_share[gkey, plan.algo])
        # an AllToAll's every transfer is an edge of its own (a pair's channel: alltoall.direct;
        # PXN's hops included): n (n - 1) per channel, not a ring's n
        per_op = t if kind == CollKind.ALLTOALL else plan.channels * (1 if kind == CollKind.SENDRECV else n)
        if kind == CollKind.ALLTOALL and per_sender:
            per_op = 2 * n              # per sender: its NVLink row and its network row (alltoall_agg.py)
        edges += per_op * (count if N > 1 else timed[(kind, n, N, L, nbytes, eb, gkey)])
        moved = nbytes * (2 * (n - 1) if kind in (CollKind.ALLREDUCE,) else
                          1 if kind == CollKind.SENDRECV else (n - 1))
        transfers += t * count
        if pcap:
            net = templates.net_share(plan.algo, n, N, L)
            messages += int(net * (t + moved // max(plan.max_msg_bytes, 1))) * count
        if max_work and transfers > max_work and pick_detail(job.detail, needs_chunks(job, emit), transfers) == "full":
            break
    if per_sender and pick_detail(job.detail, needs_chunks(job, emit), transfers) == "full" and max_work:
        _refuse_alltoall_pairs(job, max_work)        # auto chose chunk level after all: every pair listed
    detail = pick_detail(job.detail, needs_chunks(job, emit), transfers)
    if id(job) in _built and not (max_work and transfers > max_work and detail == "full"):
        _built[id(job)][2] = transfers
    entries = int(ops.groups.values.size) if hasattr(ops.groups, "values") else 0
    # A folded job times one replica's NVLink edges and every replica's network edges: its cost
    # per op counted once, the unfolded op count shown.
    # A plan counts the pcaps' messages a few sender NICs at a time (emit/views/pcap.py): their
    # memory is one block's; generate's writer holds every message's plan.
    held = messages
    if not emit and not job.output.ecn_mark_fraction and not job.output.pcap_needs_schedule:
        held = min(messages, 2 * PCAP_BLOCK_MESSAGES)
    w = Work(int(copies.sum()), transfers, messages, _memory(len(rows), transfers, held, entries, detail, edges),
             detail, timed_ops=len(rows), conn_edges=edges, cnp_units=_cnp_units(job, messages) if pcap else 0)
    if max_work and w.units > max_work:
        _refuse(job, w, max_work, "transfers" if detail == "full" else "ops timed per connection")
    return w


def _refuse_alltoall_pairs(job: Job, max_work: int) -> None:
    """Before the CommOps are built (minutes for a big MoE job): refuse a job whose AllToAll pairs
    alone exceed the budget, naming what to shrink."""
    from .alltoall_agg import alltoall_pairs
    ops, pairs = alltoall_pairs(job)
    if pairs <= max_work:
        return
    par = job.parallelism
    raise ConfigError(
        f"job too big for --max-work {max_work:,}: its {ops:,} EP AllToAlls have {par.ep}x{par.ep - 1} rank pairs "
        f"each, {pairs:,} in all, each timed on its own (~{pairs * CONN_EDGE_BYTES / (1 << 30):,.0f} GiB of memory); "
        f"shrink it (fewer micro-batches or MoE layers: global_batch={par.global_batch} "
        f"({par.microbatches} micro-batches per pipeline), model.layers={job.model.layers}; "
        f"or a smaller parallelism.ep={par.ep}) or raise --max-work (0: no limit)")


def _cnp_units(job: Job, messages: int) -> int:
    """Work of the CNPs CE marks bring into the pcaps (0 without marks): see ECN_UNITS_PER_MESSAGE."""
    out = job.output
    if out.ecn_mark_fraction <= 0:
        return 0
    return messages * (DCQCN_UNITS_PER_MESSAGE if out.dcqcn else ECN_UNITS_PER_MESSAGE)


def _memory(ops: int, transfers: int, messages: int, entries: int, detail: str = "full", edges: int = 0) -> int:
    if detail == "conn":
        return BASE_BYTES + 300 * ops + CONN_EDGE_BYTES * edges + 16 * entries
    return BASE_BYTES + BYTES_PER_UNIT * transfers + BYTES_PER_MESSAGE * messages + 300 * ops + 16 * entries


# The CommOp table the estimate built, handed to the pipeline that runs next on the same job
# (building it is most of the estimate's time: ~10 us per op).
_built: dict = {}


def _keep_for_pipeline(job: Job, ops) -> None:
    _built.clear()
    _built[id(job)] = [job, ops, None]


def built_transfers(job: Job) -> int | None:
    """The chunk transfers estimate() counted for this job (closed forms: no template built)."""
    hit = _built.get(id(job))
    return hit[2] if hit is not None and hit[0] is job else None


def built_commops(job: Job):
    """The CommOps estimate() built for this very job object, once (None if it built none)."""
    hit = _built.pop(id(job), None)
    return hit[1] if hit is not None and hit[0] is job else None


def _refuse(job: Job, w: Work, max_work: int, what: str) -> None:
    p = job.parallelism
    size = (f"{w.ops:,} collective calls timed per connection" if w.detail == "conn" else
            f"~{w.transfers:,} transfers, {w.messages:,} network messages, {w.ops:,} collective calls"
            if w.transfers else f"~{w.ops:,} collective calls before any transfer")
    raise ConfigError(
        f"job too big for --max-work {max_work:,}: {size}, ~{w.memory_bytes / (1 << 30):,.1f} GiB of "
        f"memory; shrink it (fewer layers, iterations or micro-batches: model.layers={job.model.layers}, "
        f"iterations={job.iterations}, global_batch={p.global_batch}; larger chunks and buckets) "
        "or raise --max-work (0: no limit)")
