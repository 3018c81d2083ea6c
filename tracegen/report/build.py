"""Flow table -> the volume table a network engineer sizes a fabric with (plan output, summary.md).

Every measured number sits beside the closed form it must equal (tracegen/workload/volumes.py), so
a reader can check the schedule against the paper quantities at a glance. Numbers come with what
they count. This module computes the Report; render.py lays it out as tables and Markdown,
plan_json.py as `tracegen plan --json`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import progress
from ..config import Job, grad_elem_bytes
from ..tables import Dim, Flows, LinkKind
from ..fabric.topology import Fabric
from ..workload import params
from ..workload.memory import MemoryEstimate, memory_estimate
from ..workload.volumes import expected_rank_bytes, rank_params


@dataclass(frozen=True)
class DimVolume:
    dim: str
    ops: int
    transfers: int
    net_bytes: int             # all ranks, one iteration x iterations
    nvlink_bytes: int
    net_messages: int          # NCCL network messages (RDMA writes) on the fabric
    max_rank_sent_bytes: int   # busiest rank
    formula_rank_bytes: int    # closed form, per rank (-1: not applicable)
    formula: str


@dataclass(frozen=True)
class Report:
    job: Job
    params: int
    s_act_bytes: int
    s_theta_rank_bytes: int
    s_grad_rank_bytes: int
    dims: list[DimVolume]
    nic_tx_bytes: np.ndarray
    nic_rx_bytes: np.ndarray
    rank_sent: dict             # Dim name -> bytes each rank sends [world]
    rank_net_bytes: np.ndarray  # per rank: sent on the fabric
    rank_nvlink_bytes: np.ndarray
    iteration_ns: int
    transfers: int
    net_transfers: int
    memory: MemoryEstimate | None = None
    link_bytes: np.ndarray | None = None   # per fabric link direction: bytes on the wire (headers included)
    link_gbps: np.ndarray | None = None
    link_names: list | None = None
    link_tier: np.ndarray | None = None     # per link direction: tier label index (see LINK_TIERS)
    link_peak: np.ndarray | None = None     # per link direction: busiest 1/UTIL_BINS of the iteration
    pcap_packets: int = -1
    pcap_bytes: int = -1
    notes: list[str] = field(default_factory=list)


def build_report(job: Job, fabric: Fabric, flows: Flows) -> Report:
    m, par = job.model, job.parallelism
    r = flows.rows
    ops = flows.ops.rows
    dim_of = ops["dim"][r["op_id"]]
    net = r["link"] == LinkKind.NET
    copies = flows.row_copies if flows.row_copies is not None else np.ones(len(r), np.int64)
    op_copies = flows.ops.copies()
    n_tr = (flows.row_transfers if flows.row_transfers is not None else np.ones(len(r), np.int64)) * copies
    per_rank = lambda mask: _rank_sums(flows, r["src_rank"], r["bytes"], mask, fabric.world)
    steps = 2 * len(Dim) + 2               # the CLI's bar: each dimension twice, NICs and ranks, links
    dims = []
    for k, dim in enumerate(Dim):
        progress.report(k, steps)
        sel = dim_of == dim
        n_ops = int(op_copies[ops["dim"] == dim].sum())
        if n_ops == 0 or dim == Dim.NONE:
            continue
        sent = per_rank(sel)
        busiest = int(np.argmax(sent))
        on_net = r[sel & net]
        if flows.row_messages is not None:
            msgs = int(flows.row_messages[sel & net].sum())
        else:
            msgs = int(np.maximum(1, -(-on_net["wire_bytes"] // np.maximum(on_net["max_msg_bytes"], 1))).sum())
        dims.append(DimVolume(dim.name, n_ops, int(n_tr[sel].sum()), int(on_net["bytes"].sum()),
                              int((r["bytes"][sel & ~net] * copies[sel & ~net]).sum()), msgs, int(sent[busiest]),
                              round(expected_rank_bytes(job, busiest).get(dim, 0)), DIM_FORMULAS[dim]))
    rank_sent = {}
    for k, dim in enumerate(Dim):
        progress.report(len(Dim) + k, steps)
        sel = dim_of == dim
        if sel.any():
            rank_sent[dim.name] = per_rank(sel)
    progress.report(2 * len(Dim), steps)
    tx = np.bincount(r["src_nic"][net], weights=r["bytes"][net], minlength=fabric.n_nics).astype(np.int64)
    one = net & (r["dst_nic"] >= 0)         # AllToAlls timed per sender: receivers beside the rows
    rx = np.bincount(r["dst_nic"][one], weights=r["bytes"][one], minlength=fabric.n_nics).astype(np.int64)
    if flows.agg_rx_nic_bytes is not None:
        rx += flows.agg_rx_nic_bytes
    B = m.bytes_per_elem
    g = grad_elem_bytes(m, par)
    worst = max(rank_params(job, st).dense + rank_params(job, st).expert for st in range(par.pp))
    end = flows.op_end_ns
    memory = memory_estimate(job)
    warning = memory.warning(job)
    rank_net, rank_nvlink = per_rank(net), per_rank(~net)
    progress.report(2 * len(Dim) + 1, steps)
    links = _link_loads(fabric, flows)
    progress.report(steps, steps)
    return Report(
        job=job, params=params.param_count(m),
        s_act_bytes=par.micro_batch * m.seq_len * m.hidden * B,
        s_theta_rank_bytes=worst * B, s_grad_rank_bytes=worst * g, dims=dims,
        nic_tx_bytes=tx, nic_rx_bytes=rx, rank_sent=rank_sent,
        rank_net_bytes=rank_net, rank_nvlink_bytes=rank_nvlink,
        iteration_ns=int(end.max()) if end is not None and len(end) else
        (int(r["end_ns"].max()) if len(r) else 0),
        transfers=int(n_tr.sum()), net_transfers=int(n_tr[net].sum()), memory=memory,
        notes=[warning] if warning else [], **links)


def _rank_sums(flows: Flows, rank, w, mask, world: int) -> np.ndarray:
    """Per rank: sum of w over the rows in mask, by `rank`; a folded job's rows that stand for
    every DP replica (row_copies) count for each replica's rank (rank + d x stride)."""
    if flows.row_copies is None:
        return np.bincount(rank[mask], weights=w[mask], minlength=world).astype(np.int64)
    many = mask & (flows.row_copies > 1)
    out = np.bincount(rank[mask & ~many], weights=w[mask & ~many], minlength=world).astype(np.int64)
    base = np.bincount(rank[many], weights=w[many], minlength=world).astype(np.int64)
    at = np.flatnonzero(base)
    for d in range(flows.ops.replicas):
        out[at + d * flows.ops.replica_stride] += base[at]
    return out.astype(np.int64)


# Tiers of link directions, as shown in plan and summary.md.
LINK_TIERS = ["NIC -> leaf", "leaf -> NIC", "leaf -> spine", "spine -> leaf", "spine -> core", "core -> spine"]


def _link_loads(fabric: Fabric, flows: Flows) -> dict:
    """Bytes every fabric link direction carries (each NET row's wire bytes spread over its
    connection's QP routes), with rates, names and tiers."""
    if flows.conns is None or flows.row_conn is None or flows.row_net_wire is None:
        return {}
    n_dirs = 2 * len(fabric.links)
    net = flows.row_conn >= 0
    conn_bytes = np.bincount(flows.row_conn[net], weights=flows.row_net_wire[net], minlength=len(flows.conns))
    ptr, link, w = flows.conns.link_csr()
    owner = np.repeat(np.arange(len(flows.conns)), np.diff(ptr))
    loads = np.bincount(link, weights=conn_bytes[owner] * w, minlength=n_dirs)
    if flows.agg_link_wire is not None:
        loads = loads + flows.agg_link_wire
    tier = np.repeat(fabric.link_tier(), 2) * 2 + np.tile([0, 1], len(fabric.links))
    names = [fabric.link_dir_name(d) for d in range(n_dirs)] if n_dirs <= 200_000 else None
    peak = np.zeros(n_dirs)
    end = int(flows.op_end_ns.max()) if flows.op_end_ns is not None and len(flows.op_end_ns) else 0
    if flows.link_load is not None and end > 0:
        width = max(1, -(-end // UTIL_BINS))
        used, busy = flows.link_load.binned_used(width, UTIL_BINS)     # (bounded by the links used)
        peak[used] = (busy * 8 / (np.repeat(fabric.links["gbps"], 2)[used, None] * width)).max(axis=1)
    return dict(link_bytes=np.rint(loads).astype(np.int64), link_gbps=np.repeat(fabric.links["gbps"], 2),
                link_names=names, link_tier=tier, link_peak=peak)


UTIL_BINS = 200     # the iteration in this many bins for peak utilisation (plan, link_utilisation.png)


DIM_FORMULAS = {
    Dim.DP: "2(n−1)/n·S_grad, n = dp·cp (ZeRO-1/2: RS + AG; ZeRO-3: 3·(n−1)/n·Ψ per micro-batch)",
    Dim.TP: "per layer per micro-batch 4 AllReduce of S_act: 8·b·s·h·(t−1)/t·B (+embedding, head, CE, "
            "batch broadcast, model-parallel flags)",
    Dim.SP: "per layer per micro-batch 6 AllGather + 4 ReduceScatter of S_act: 10·(t−1)/t·S_act "
            "(+embedding, LM head; LayerNorm grads AllReduce once per iteration)",
    Dim.PP: "b·s·h·B forward + backward per micro-batch per chunk (÷t with SP / scatter-gather)",
    Dim.CP: "(c−1) steps × 2·b·(s/c)·h_kv·B/t per attention layer forward, ×2 backward",
    Dim.EP: "4 AllToAll per MoE layer per micro-batch of tokens·top_k·cf·h·B, (e−1)/e leaves the rank; "
            "with expert TP 2 AllGather + 2 ReduceScatter of etp× that over the expert-TP group",
    Dim.EDP: "routed-expert gradients over the expert-data-parallel group, as DP",
    Dim.EMB: "word-embedding gradient AllReduce between first and last stage: V_pad·h/t·B_grad",
    Dim.NONE: "—",
}
