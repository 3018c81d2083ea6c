"""Flow table -> the volume table a network engineer sizes a fabric with (plan output, summary.md).

Every measured number sits beside the closed form it must equal (tracegen/workload/volumes.py), so
a reader can check the schedule against the paper quantities at a glance. Numbers come with what
they count; per-NIC tables are summarised (min / median / max, busiest NICs) for the terminal.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import progress
from ..config import Job, grad_elem_bytes
from ..tables import CollKind, Dim, Flows, LinkKind
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
    rx = np.bincount(r["dst_nic"][net], weights=r["bytes"][net], minlength=fabric.n_nics).astype(np.int64)
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


def link_table(rep: Report, top: int = 3) -> tuple[str, list[str], list[list[str]]] | None:
    """Per tier: how many links carry traffic, their mean utilisation over the iteration, the
    highest any reaches in a 1/200 of it, and the busiest links (by mean)."""
    if rep.link_bytes is None or rep.iteration_ns <= 0:
        return None
    util = rep.link_bytes * 8 / (rep.link_gbps * rep.iteration_ns)
    peak = rep.link_peak if rep.link_peak is not None else util
    rows = []
    for t, label in enumerate(LINK_TIERS):
        sel = np.flatnonzero((rep.link_tier == t) & (rep.link_bytes > 0))
        if not len(sel):
            continue
        order = sel[np.argsort(-util[sel], kind="stable")][:top]
        busiest = ", ".join(f"{rep.link_names[d] if rep.link_names else d} {util[d]:.0%}" for d in order)
        rows.append([label, f"{len(sel):,} of {int((rep.link_tier == t).sum()):,}",
                     f"{util[sel].mean():.1%}", f"{peak[sel].max():.1%}", busiest])
    return ("Busiest links per tier (utilisation: bytes on the wire / (rate × time); mean over the "
            "iteration, peak in any 1/200 of it)",
            ["tier", "links used", "mean", "peak", f"busiest {top} (mean)"], rows)


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


def _fmt_bytes(n: int) -> str:
    if n < 0:
        return "—"
    for unit, k in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            return f"{n / k:,.2f} {unit} ({n:,} B)"
    return f"{n:,} B"


def _short_bytes(n: int) -> str:
    return _fmt_bytes(n).split(" (")[0]


# What the pcap writer sustains on a modest machine (bench/bench_pcap.py on 2 shared cores):
# headers ~2.5 M packets/s, and the file system ~0.5-2 GB/s for the bytes. For the plan only.
PCAP_WRITE_PACKETS_PER_S = 2_000_000
PCAP_WRITE_BYTES_PER_S = 500_000_000


def pcap_write_seconds(packets: int, nbytes: int) -> float:
    """A conservative estimate of the wall time write_pcaps needs."""
    return packets / PCAP_WRITE_PACKETS_PER_S + nbytes / PCAP_WRITE_BYTES_PER_S


def report_tables(rep: Report, exact: bool = True, nic_names: list[str] | None = None
                  ) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) tables shared by the Markdown (exact bytes) and terminal renderings.
    The terminal (exact=False) gets the per-NIC bytes summarised; Markdown also lists every NIC."""
    j, m, par = rep.job, rep.job.model, rep.job.parallelism
    _fmt = _fmt_bytes if exact else _short_bytes
    nvlink_transfers = rep.transfers - rep.net_transfers
    job_rows = [
        ["model", f"{m.name}: l={m.layers} h={m.hidden} a={m.heads} V={m.vocab} s={m.seq_len} {m.dtype}"],
        ["parameters Ψ", f"{rep.params:,}"],
        ["parallelism", _describe_parallelism(par)],
        ["cluster", f"{j.nodes} nodes × {j.cluster.gpus_per_node} {j.cluster.gpu.upper()}, NIC "
                    f"{j.cluster.nic_gbps} Gb/s per GPU, NVLink {j.cluster.nvlink_gbps} Gb/s"],
        ["S_act = b·s·h·B", _fmt(rep.s_act_bytes)],
        ["S_θ per rank (max stage)", _fmt(rep.s_theta_rank_bytes)],
        ["S_grad per rank (max stage)", _fmt(rep.s_grad_rank_bytes)],
        ["iterations", str(j.iterations)],
        *([["memory/GPU: model states (ZeRO-%d)" % par.zero, _fmt(int(rep.memory.model_states_bytes))],
           ["memory/GPU: activations", _fmt(int(rep.memory.activations_bytes))],
           ["memory/GPU: total / GPU", f"{rep.memory.total_bytes / 1e9:,.1f} GB / {rep.memory.gpu_bytes / 1e9:,.0f} GB"
                                       + ("" if rep.memory.fits else " — does not fit")]]
          if rep.memory else []),
        ["scheduled (all iterations)", f"{rep.iteration_ns / 1e6:,.3f} ms = {rep.iteration_ns:,} ns"],
        ["transfers", f"{rep.transfers:,}: {rep.net_transfers:,} on the fabric, {nvlink_transfers:,} on NVLink"],
    ]
    if rep.pcap_packets >= 0:
        write_s = pcap_write_seconds(rep.pcap_packets, rep.pcap_bytes)
        job_rows.append(["pcap estimate", f"{rep.pcap_packets:,} packets, {_fmt(rep.pcap_bytes)}, "
                                          f"~{write_s:,.1f} s to write"])
    dim_rows = [[d.dim, f"{d.ops:,}", f"{d.transfers:,}", f"{d.net_messages:,}", _fmt(d.net_bytes),
                 _fmt(d.nvlink_bytes), _fmt(d.max_rank_sent_bytes), _fmt(d.formula_rank_bytes)]
                for d in rep.dims]
    formula_rows = [[d.dim, d.formula] for d in rep.dims]
    n_nics = len(rep.nic_tx_bytes)
    tables = [
        ("Job", ["quantity", "value"], job_rows),
        ("Bytes per parallelism dimension (per iteration × iterations; busiest rank: what the rank "
         "sending most in that dimension sent, beside the closed form for it)",
         ["dim", "ops", "transfers", "net msgs", "network", "NVLink", "busiest rank", "closed form"], dim_rows),
        ("Closed forms (tracegen/workload/volumes.py)", ["dim", "formula"], formula_rows),
        (f"Payload bytes per NIC ({n_nics} NICs)", ["NICs", "tx bytes", "rx bytes"],
         nic_summary_rows(rep)),
        (f"Busiest {min(TOP_NICS, n_nics)} NICs (tx + rx)", ["NIC", "tx bytes", "rx bytes"], busiest_nic_rows(rep, nic_names)),
    ]
    if (lt := link_table(rep)) is not None:
        tables.append(lt)
    if exact:
        nic_rows = [[nic_names[i] if nic_names else str(i), f"{rep.nic_tx_bytes[i]:,}", f"{rep.nic_rx_bytes[i]:,}"]
                    for i in range(min(n_nics, NIC_ROWS_MAX))]
        more = f" (first {NIC_ROWS_MAX})" if n_nics > NIC_ROWS_MAX else ""
        tables.append((f"Payload bytes of each NIC{more}", ["NIC", "tx bytes", "rx bytes"], nic_rows))
    return tables


NIC_ROWS_MAX = 512
TOP_NICS = 5


def nic_summary_rows(rep: Report) -> list[list[str]]:
    """all / min / median / max of the per-NIC tx and rx payload bytes."""
    tx, rx = rep.nic_tx_bytes, rep.nic_rx_bytes
    if not len(tx):
        return [["all", "0", "0"]]
    stat = lambda f: [f"{int(f(tx)):,}", f"{int(f(rx)):,}"]
    return [["all (sum)", f"{int(tx.sum()):,}", f"{int(rx.sum()):,}"],
            ["min", *stat(np.min)], ["median", *stat(lambda a: np.median(a))], ["max", *stat(np.max)]]


def busiest_nic_rows(rep: Report, nic_names: list[str] | None = None, top: int = TOP_NICS) -> list[list[str]]:
    tx, rx = rep.nic_tx_bytes, rep.nic_rx_bytes
    order = np.argsort(-(tx + rx), kind="stable")[:top]
    name = (lambda i: nic_names[i]) if nic_names else (lambda i: f"NIC {i}")
    return [[name(int(i)), f"{int(tx[i]):,}", f"{int(rx[i]):,}"] for i in order]


RANK_ROWS_MAX = 512


def rank_table(rep: Report, fabric) -> tuple[str, list[str], list[list[str]]]:
    """Per accelerator: bytes it sends per dimension, on the network and on NVLink."""
    dims = list(rep.rank_sent)
    rows = []
    for rank in range(min(fabric.world, RANK_ROWS_MAX)):
        rows.append([str(rank), str(int(fabric.rank_node[rank])), str(int(fabric.rank_gpu[rank])),
                     fabric.nic_name(int(fabric.rank_nic[rank]))]
                    + [f"{int(rep.rank_sent[d][rank]):,}" for d in dims]
                    + [f"{int(rep.rank_net_bytes[rank]):,}", f"{int(rep.rank_nvlink_bytes[rank]):,}"])
    title = "Bytes each accelerator sends" + (f" (first {RANK_ROWS_MAX} ranks)" if fabric.world > RANK_ROWS_MAX else "")
    return title, ["rank", "node", "GPU", "NIC"] + dims + ["network", "NVLink"], rows


def _describe_parallelism(par) -> str:
    parts = [f"dp={par.dp}", f"tp={par.tp}", f"pp={par.pp}"]
    parts += [f"{k}={getattr(par, k)}" for k in ("cp", "ep", "vpp") if getattr(par, k) > 1]
    parts += [k for k in ("sp", "pp_scatter_gather") if getattr(par, k)]
    if par.zero:
        parts.append(f"ZeRO-{par.zero}")
    if par.recompute != "none":
        parts.append(f"{par.recompute} recompute")
    return (" ".join(parts) + f"; b={par.micro_batch}, global batch {par.global_batch} → "
            f"m={par.microbatches} micro-batches")


def options_rows(job: Job) -> list[list[str]]:
    """Every key of the job that differs from the built-in default job, plus the output options
    that shape the files (filters, snaplen, payload, view, format, tables) whatever their value."""
    from ..config import job_to_dict
    have, base = job_to_dict(job), job_to_dict(Job())
    rows, shown = [], set()
    for sec, values in have.items():
        if isinstance(values, dict):
            for k, v in values.items():
                if v != base[sec][k]:
                    rows.append([f"{sec}.{k}", _show_value(v)])
                    shown.add(f"{sec}.{k}")
        elif values != base[sec]:
            rows.append([sec, _show_value(values)])
    for k in SHAPING_OUTPUT_KEYS:
        if f"output.{k}" not in shown:
            rows.append([f"output.{k}", _show_value(have["output"][k]) + " (default)"])
    return rows


SHAPING_OUTPUT_KEYS = ("pcap", "format", "snaplen", "payload", "pmtu", "vlan", "ip_version", "nics", "ranks",
                       "collectives", "iteration", "time_window", "merge", "switch", "lab", "comments",
                       "ecn_mark_fraction", "max_bytes", "tables", "perfetto", "ns3")


def _show_value(v) -> str:
    if v == "":
        return "—"
    return str(v).lower() if isinstance(v, bool) else str(v)


def render_markdown(rep: Report, nic_names: list[str] | None = None, fabric=None,
                    files: list[str] | None = None) -> str:
    out = [f"# tracegen summary: {rep.job.name}", ""]
    tables = report_tables(rep, nic_names=nic_names) + ([rank_table(rep, fabric)] if fabric is not None else [])
    tables.insert(1, ("Options that shaped this trace (job.resolved.yaml has every key)", ["option", "value"],
                      options_rows(rep.job)))
    if files:
        tables.append(("Files", ["file"], [[f] for f in files]))
    for title, header, rows in tables:
        out += [f"## {title}", "", "| " + " | ".join(header) + " |",
                "|" + "---|" * len(header)]
        out += ["| " + " | ".join(r) + " |" for r in rows]
        out.append("")
    return "\n".join(out)


# ---- tracegen plan --json ------------------------------------------------------------------------

PLAN_JSON_SCHEMA = "tracegen.plan/1"
PHASE_NAMES = {0: "fwd", 1: "bwd", 2: "opt"}


def op_table(ops, world: int) -> list[dict]:
    """Per (dim, collective, phase): how many ops a rank takes part in and their logical bytes (the
    buffer size the caller passes; both ends of a send/recv), for the busiest rank and for rank 0."""
    rows = ops.rows
    lens = ops.groups.lengths()
    member = ops.groups.values
    op_of = np.repeat(np.arange(len(rows)), lens)
    keys = (rows["dim"].astype(np.int64) * 16 + rows["kind"]) * 4 + rows["phase"]
    out = []
    for key in np.unique(keys):
        dim, rest = divmod(int(key), 64)
        kind, phase = divmod(rest, 4)
        if Dim(dim) == Dim.NONE:
            continue
        sel = keys[op_of] == key
        count = np.bincount(member[sel], minlength=world)
        nbytes = np.bincount(member[sel], weights=rows["bytes"][op_of[sel]], minlength=world)
        busiest = int(np.argmax(nbytes))
        out.append({"dim": Dim(dim).name, "collective": CollKind(kind).label,
                    "phase": PHASE_NAMES[phase],
                    "busiest_rank": {"rank": busiest, "count": int(count[busiest]),
                                     "bytes": int(nbytes[busiest])},
                    "rank0": {"count": int(count[0]), "bytes": int(nbytes[0])}})
    return out


def plan_json(run) -> dict:
    """The plan as a document with stable keys (README "tracegen plan --json"); `run` is a Run."""
    rep, job, fabric = run.report, run.job, run.fabric
    m, par = job.model, job.parallelism
    r = run.flows.rows
    net = r["link"] == LinkKind.NET
    dim_of = run.ops.rows["dim"][r["op_id"]]
    dims = []
    for d in rep.dims:
        sel = dim_of == Dim[d.dim]
        dims.append({"dim": d.dim, "ops": d.ops, "transfers": d.transfers,
                     "net_bytes": d.net_bytes, "net_wire_bytes": int(r["wire_bytes"][sel & net].sum()),
                     "nvlink_bytes": d.nvlink_bytes, "net_messages": d.net_messages,
                     "busiest_rank_sent_bytes": d.max_rank_sent_bytes,
                     "closed_form_bytes": d.formula_rank_bytes})
    mem = rep.memory
    return {
        "schema": PLAN_JSON_SCHEMA,
        "job": {"name": job.name, "world": job.world, "nodes": job.nodes, "gpu": job.cluster.gpu,
                "model": m.name, "parameters": rep.params, "padded_vocab": m.padded_vocab(par.tp),
                "dtype": m.dtype, "grad_bytes": grad_elem_bytes(m, par),
                "tp": par.tp, "pp": par.pp, "dp": par.dp, "cp": par.cp, "ep": par.ep,
                "expert_tp": par.etp, "vpp": par.vpp, "sp": par.sp, "zero": par.zero,
                "recompute": par.recompute, "micro_batch": par.micro_batch,
                "global_batch": par.global_batch, "microbatches": par.microbatches,
                "iterations": job.iterations},
        "iteration_ns": rep.iteration_ns,
        "memory": None if mem is None else {
            "model_states_bytes": int(mem.model_states_bytes),
            "activations_bytes": int(mem.activations_bytes),
            "total_bytes": int(mem.total_bytes), "gpu_bytes": mem.gpu_bytes, "fits": mem.fits},
        "warnings": list(rep.notes),
        "ops": op_table(run.ops, fabric.world),
        "dims": dims,
        "transfers": rep.transfers, "net_transfers": rep.net_transfers,
        "pcap": {"packets": rep.pcap_packets, "bytes": rep.pcap_bytes},
    }
