"""Flow table -> the volume table a network engineer sizes a fabric with (plan output, summary.md).

Every measured number sits beside the closed form it must equal (../shared/FORMULAS.md), so a
reader can check the schedule against the paper quantities at a glance.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .config import DTYPE_BYTES, Job
from .tables import CollKind, Dim, Flows, LinkKind
from .topology import Fabric
from .workload import params


@dataclass(frozen=True)
class DimVolume:
    dim: str
    ops: int
    transfers: int
    net_bytes: int             # all ranks, one iteration x iterations
    nvlink_bytes: int
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
    iteration_ns: int
    transfers: int
    net_transfers: int
    pcap_packets: int = -1
    pcap_bytes: int = -1
    notes: list[str] = field(default_factory=list)


def closed_form_rank_bytes(job: Job, dim: Dim) -> tuple[int, str]:
    """Per-rank bytes sent per iteration by the closed forms, for the dims this version models."""
    m, par = job.model, job.parallelism
    b, s, h, B = par.micro_batch, m.seq_len, m.hidden, m.bytes_per_elem
    t, d, p, mb = par.tp, par.dp, par.pp, par.microbatches
    lps = m.layers // p
    it = job.iterations
    if dim == Dim.TP and t > 1:
        per = 8 * b * s * h * (t - 1) * B * lps * mb * it
        return per // t, "8·b·s·h·(t−1)/t·B per layer per micro-batch × l/p × m"
    if dim == Dim.PP and p > 1:
        return 2 * b * s * h * B * mb * it, "b·s·h·B forward + backward per micro-batch × m (inner stage)"
    if dim == Dim.DP and d > 1:
        g = DTYPE_BYTES[par.grad_dtype] if par.grad_dtype else B
        worst = max(stage_rank_params(job, st) for st in range(p))
        return 2 * (d - 1) * worst * g * it // d, "2·(d−1)/d · S_grad (busiest stage)"
    return -1, "—"


def stage_rank_params(job: Job, stage: int) -> int:
    """Parameters (elements) one rank of `stage` holds: what its DP AllReduce reduces."""
    m, par = job.model, job.parallelism
    lps = m.layers // par.pp
    # the same per-layer rounding the workload's buckets use
    return lps * (params.layer_param_count(m) // par.tp) + params.stage_extra_param_count(m, stage, par.pp) // par.tp


def build_report(job: Job, fabric: Fabric, flows: Flows) -> Report:
    m, par = job.model, job.parallelism
    r = flows.rows
    ops = flows.ops.rows
    dim_of = ops["dim"][r["op_id"]]
    net = r["link"] == LinkKind.NET
    dims = []
    for dim in Dim:
        sel = dim_of == dim
        n_ops = int((ops["dim"] == dim).sum())
        if n_ops == 0:
            continue
        sent = np.bincount(r["src_rank"][sel], weights=r["bytes"][sel], minlength=fabric.world)
        f, txt = closed_form_rank_bytes(job, dim)
        dims.append(DimVolume(dim.name, n_ops, int(sel.sum()), int(r["bytes"][sel & net].sum()),
                              int(r["bytes"][sel & ~net].sum()), int(sent.max()), f, txt))
    tx = np.bincount(r["src_nic"][net], weights=r["bytes"][net], minlength=fabric.n_nics).astype(np.int64)
    rx = np.bincount(r["dst_nic"][net], weights=r["bytes"][net], minlength=fabric.n_nics).astype(np.int64)
    B = m.bytes_per_elem
    g = DTYPE_BYTES[par.grad_dtype] if par.grad_dtype else B
    worst = max(stage_rank_params(job, st) for st in range(par.pp))
    return Report(
        job=job, params=params.param_count(m),
        s_act_bytes=par.micro_batch * m.seq_len * m.hidden * B,
        s_theta_rank_bytes=worst * B, s_grad_rank_bytes=worst * g, dims=dims,
        nic_tx_bytes=tx, nic_rx_bytes=rx,
        iteration_ns=int(r["end_ns"].max()) if len(r) else 0,
        transfers=len(r), net_transfers=int(net.sum()))


def _fmt_bytes(n: int) -> str:
    if n < 0:
        return "—"
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            return f"{n / k:,.2f} {unit} ({n:,} B)"
    return f"{n:,} B"


def report_tables(rep: Report) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) tables shared by the Markdown and terminal renderings."""
    j, m, par = rep.job, rep.job.model, rep.job.parallelism
    job_rows = [
        ["model", f"{m.name}: l={m.layers} h={m.hidden} a={m.heads} V={m.vocab} s={m.seq_len} {m.dtype}"],
        ["parameters Ψ", f"{rep.params:,}"],
        ["parallelism", f"dp={par.dp} tp={par.tp} pp={par.pp}, b={par.micro_batch}, "
                        f"global batch {par.global_batch} → m={par.microbatches} micro-batches"],
        ["cluster", f"{j.nodes} nodes × {j.cluster.gpus_per_node} {j.cluster.gpu.upper()}, "
                    f"{j.cluster.nic_gbps} Gb/s NIC per GPU, NVLink {j.cluster.nvlink_gbps} Gb/s"],
        ["S_act = b·s·h·B (one micro-batch)", _fmt_bytes(rep.s_act_bytes)],
        ["S_θ per rank (busiest stage)", _fmt_bytes(rep.s_theta_rank_bytes)],
        ["S_grad per rank (busiest stage)", _fmt_bytes(rep.s_grad_rank_bytes)],
        ["iterations", str(j.iterations)],
        ["scheduled time (all iterations)", f"{rep.iteration_ns / 1e6:,.3f} ms ({rep.iteration_ns:,} ns)"],
        ["transfers (on the fabric)", f"{rep.transfers:,} ({rep.net_transfers:,})"],
    ]
    if rep.pcap_packets >= 0:
        job_rows.append(["pcap estimate", f"{rep.pcap_packets:,} packets, {_fmt_bytes(rep.pcap_bytes)}"])
    dim_rows = [[d.dim, f"{d.ops:,}", f"{d.transfers:,}", _fmt_bytes(d.net_bytes), _fmt_bytes(d.nvlink_bytes),
                 _fmt_bytes(d.max_rank_sent_bytes), _fmt_bytes(d.formula_rank_bytes), d.formula]
                for d in rep.dims]
    nic_rows = [[f"{i}", f"{rep.nic_tx_bytes[i]:,}", f"{rep.nic_rx_bytes[i]:,}"]
                for i in range(len(rep.nic_tx_bytes))]
    nic_rows.append(["all", f"{int(rep.nic_tx_bytes.sum()):,}", f"{int(rep.nic_rx_bytes.sum()):,}"])
    return [
        ("Job", ["quantity", "value"], job_rows),
        ("Bytes per parallelism dimension (per iteration × iterations)",
         ["dim", "ops", "transfers", "on the network", "on NVLink", "busiest rank sent",
          "closed form per rank", "formula"], dim_rows),
        ("Payload bytes per NIC", ["NIC", "tx bytes", "rx bytes"], nic_rows),
    ]


def render_markdown(rep: Report, nic_names: list[str] | None = None) -> str:
    out = [f"# tracegen summary: {rep.job.name}", ""]
    for title, header, rows in report_tables(rep):
        if title.startswith("Payload") and nic_names:
            rows = [[nic_names[int(r[0])] if r[0].isdigit() else r[0]] + r[1:] for r in rows]
        out += [f"## {title}", "", "| " + " | ".join(header) + " |",
                "|" + "---|" * len(header)]
        out += ["| " + " | ".join(r) + " |" for r in rows]
        out.append("")
    return "\n".join(out)
