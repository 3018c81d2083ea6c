"""The connection-level schedule's edge table (schedule_conn.py): every op's edges (collectives/
edges.py: the bytes one NCCL connection carries for the op) mapped to ranks, PXN applied, a folded
job's network edges unfolded over its DP replicas, sorted by op."""
from __future__ import annotations

import numpy as np

from .. import progress
from ..collectives import op_templates
from ..collectives.edges import pxn_split_columns, template_edges
from ..collectives.ring_edges import RingShape, ShardShape, ring_allreduce_edges, ring_shard_edges
from ..config import Job
from ..fabric.topology import Fabric
from ..tables import CommOps, LinkKind
from .order import stable_order

# A ring AllReduce listing more chunks than this (a whole 16k-GPU job's grad-norm AllReduce: half a
# billion) has its edges and its time alone in closed form (collectives/ring_edges.py).
CLOSED_FORM_ROWS = 16_000_000
# A ring ReduceScatter / AllGather listing more chunks than this has its edges in closed form
# (ring_edges.ring_shard_edges: the template's edges exactly, in its order). Its chunks grow 4x per
# doubling of the group: ZeRO-1's DP ones are 0.1 M a shape at 16k GPUs, 2.1 M at 131k.
SHARD_EDGE_ROWS = 1 << 16
CLOSED_FORMS = {RingShape: ring_allreduce_edges, ShardShape: ring_shard_edges}


# Narrow columns of the edge table (a 64k-GPU job's has ~11 M rows): ranks < world (config caps
# it far below 2^31), channels < 1024 (edges.py packs them in 10 bits), algorithm and protocol ids.
# Every user widens them before arithmetic (connections._pack, send_queues) or stores them in FLOW_DTYPE.
RANK_DTYPE = np.int32


def edge_table(ops: CommOps, fabric: Fabric, job: Job, which=None, per_op: dict | None = None) -> dict:
    """Every op's edges mapped to ranks (PXN applied), sorted by op: a dict of columns (ranks
    RANK_DTYPE, channel int16, algo and proto uint8, the rest int64). per_op (a dict): algo,
    proto and max_msg_bytes - one NCCL plan per op - go there, one entry per op, not per row,
    and no `copies` column (the rows a folded job's row stands for)."""
    if fabric.world >= np.iinfo(RANK_DTYPE).max:
        raise ValueError(f"{fabric.world:,} ranks do not fit the edge table's {np.dtype(RANK_DTYPE)} ranks")
    nccl, pmtu = job.nccl, job.output.pmtu
    groups: dict[tuple, list] = {}
    for i, group, t, plan in op_templates(ops, fabric, nccl, which, max_rows=CLOSED_FORM_ROWS,
                                          shard_rows=SHARD_EDGE_ROWS):
        tkey = t if type(t) in CLOSED_FORMS else id(t)
        groups.setdefault((tkey, plan), [t, plan, [], []])
        g = groups[(tkey, plan)]
        g[2].append(i)
        g[3].append(group)
    cols: dict[str, list] = {k: [] for k in ("op_id", "src_rank", "dst_rank", "channel", "transfers",
                                             "messages", "packets", "payload", "nvl_wire", "net_wire",
                                             "algo", "proto", "max_msg_bytes")}
    # the CLI's bar, in % of the work (about a quarter each at 2k-16k GPUs): the op shapes' edges,
    # PXN, the replicas' network edges, sorting by op
    shapes = list(groups.values())
    for k, (t, plan, op_ids, grps) in enumerate(shapes):
        progress.report(40 * k // len(shapes), 100)
        e = CLOSED_FORMS.get(type(t), template_edges)(
            t, int(plan.proto), plan.max_msg_bytes, pmtu, job.output.vlan, job.output.ip_version)
        G = np.asarray(grps, dtype=RANK_DTYPE)                    # [k, n] ranks by position
        k, m = len(op_ids), len(e)
        cols["op_id"].append(np.repeat(np.asarray(op_ids, np.int64), m))
        cols["src_rank"].append(G[:, e.src].reshape(-1))
        cols["dst_rank"].append(G[:, e.dst].reshape(-1))
        cols["channel"].append(np.tile(e.channel.astype(np.int16), k))
        for name, v in (("transfers", e.transfers), ("messages", e.messages),
                        ("packets", e.packets), ("payload", e.payload),
                        ("nvl_wire", e.nvl_wire), ("net_wire", e.net_wire)):
            cols[name].append(np.tile(v, k))
        for name, v, dt in (("algo", int(plan.algo_id), np.uint8), ("proto", int(plan.proto), np.uint8),
                            ("max_msg_bytes", plan.max_msg_bytes, np.int64)):
            if per_op is None:
                cols[name].append(np.full(k * m, v, dt))
            else:
                per_op.setdefault(name, np.zeros(len(ops), dt))[op_ids] = v
    empty = {"src_rank": RANK_DTYPE, "dst_rank": RANK_DTYPE, "channel": np.int16, "algo": np.uint8, "proto": np.uint8}
    if per_op is not None:
        for name, dt in (("algo", np.uint8), ("proto", np.uint8), ("max_msg_bytes", np.int64)):
            per_op.setdefault(name, np.zeros(len(ops), dt))
            del cols[name]
    out = {}
    for k in list(cols):                    # one column at a time: its parts freed as it is made
        parts = cols.pop(k)
        out[k] = np.concatenate(parts) if parts else np.zeros(0, empty.get(k, np.int64))
        del parts
    link = np.where(fabric.same_node(out["src_rank"], out["dst_rank"]), LinkKind.NVLINK,
                    LinkKind.NET).astype(np.uint8)
    progress.report(40, 100)
    if nccl.pxn and len(link):
        link = pxn_split_columns(out, link, fabric)
    progress.report(60, 100)
    out["link"] = link
    out["copies"] = np.ones(len(link), np.int64)
    sel, rep_of = np.arange(len(link)), None
    if ops.replicas > 1 and len(link):
        sel, rep_of = _unfold_net_edges(out, ops)
    if per_op is not None:                  # the caller makes `copies` again where it needs them
        del out["copies"]
    progress.report(80, 100)
    # one gather per column, unfolded and sorted by op at once (a folded 32k-GPU job's table is
    # ~10 M rows: gathering the replicas' rows, concatenating, then sorting cost three copies)
    order = stable_order(out["op_id"][sel])        # counting: O(rows), as argsort(kind="stable")
    sel = sel[order]
    shift = None
    if rep_of is not None:
        shift = rep_of[order]
        del rep_of, order
        shift *= ops.replica_stride
    for k in list(out):                     # column by column: one old column held at a time
        out[k] = out[k][sel]
    del sel
    if shift is not None:                   # in place: the ranks stay RANK_DTYPE (< world)
        np.add(out["src_rank"], shift, out=out["src_rank"], casting="unsafe")
        np.add(out["dst_rank"], shift, out=out["dst_rank"], casting="unsafe")
    progress.report(100, 100)
    return out


def _unfold_net_edges(out: dict, ops: CommOps) -> tuple[np.ndarray, np.ndarray]:
    """A folded job's edges (CommOps.replicas): an op of replica 0 gets its NET edges once per
    replica, ranks shifted by d x stride - they share the fabric with every other replica's and
    their routes differ (ECMP) - while its NVLink edges stay once, standing for all replicas
    (`copies`, set here). Returns the rows of the unfolded table (replica 0's rows, then each
    further replica's NET rows) as rows of `out`, and the replica d of each."""
    tiled = ops.tiled()[out["op_id"]]
    net = out["link"] == LinkKind.NET
    out["copies"] = np.where(tiled & ~net, ops.replicas, 1)
    idx = np.flatnonzero(tiled & net)
    n = len(net)
    if not len(idx):
        return np.arange(n), None
    sel = np.concatenate([np.arange(n), np.tile(idx, ops.replicas - 1)])
    rep_of = np.concatenate([np.zeros(n, np.int64), np.repeat(np.arange(1, ops.replicas, dtype=np.int64), len(idx))])
    return sel, rep_of
