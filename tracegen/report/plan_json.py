"""`tracegen plan --json`: the plan as a document with stable keys (README "tracegen plan --json"),
and the per-(dim, collective, phase) op table in it."""
from __future__ import annotations

import numpy as np

from ..config import grad_elem_bytes
from ..tables import CollKind, Dim, LinkKind


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
