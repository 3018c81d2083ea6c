"""The Report as tables: the terminal's (`tracegen plan`, bytes summarised) and summary.md's (exact
bytes, every NIC and rank, the options that shaped the trace). Per-NIC tables are summarised
(min / median / max, busiest NICs) for the terminal."""
from __future__ import annotations

import numpy as np

from ..config import Job
from .build import LINK_TIERS, Report


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
