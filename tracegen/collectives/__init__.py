"""collectives stage: CommOps + Fabric -> Transfers (who sends what to whom, step by step).

For every op: `tuning.plan` picks algorithm, protocol, channels and chunk size; the registry
`ALGORITHMS[(algorithm, CollKind)]` maps to a template builder
`fn(nodes, local, elems, elem_bytes, channels, chunk_bytes) -> Template`, cached per shape, over
the op's member positions (see template.py: node-major members, row-local CSR deps); `expand`
maps positions to ranks with array indexing, labels links (NVLink inside a node, NET across),
applies PXN, and renumbers the deps into one table. No per-transfer Python loop.

Which builder runs: `nccl.algorithm` for AllReduce/ReduceScatter/AllGather/Broadcast/Reduce,
except that Tree exists for AllReduce only (the others run the ring, as in NCCL) and `auto`
asks tuning.py; AllToAll is the direct exchange (NCCL's grouped send/recv) unless the algorithm
is `hierarchical`; send/recv is always p2p. Markers and ops with fewer than 2 members or no bytes
move nothing.

Member layout: when the group is node-major (ranks of a node adjacent, as sorted groups are) with
the same count L on each of its N nodes, templates see (N, L) and use the node structure (ring
rotation per channel, tree chain per node, rails); otherwise the group is flat (N = n, L = 1).

PXN (`nccl.pxn`): a NET transfer whose source and destination NICs are on different rails
becomes two: an NVLink hop to the GPU of the sender's node on the destination's rail, then a NET
hop on that rail, which depends on the first. Afterwards no NET transfer crosses rails.

May import: config, workload, fabric and the shared modules. Must not import timing, report,
pipeline, output, emit, corpus or cli.
"""
from __future__ import annotations

import numpy as np

from ..config import Nccl
from ..tables import TRANSFER_DTYPE, CollKind, CommOps, LinkKind, Proto, Ragged, Transfers
from ..fabric.topology import Fabric
from . import alltoall, halving_doubling, hierarchical, p2p, ring, tree, tuning
from .protocol import wire_bytes
from .template import Template

K = CollKind
ALGORITHMS = {
    ("ring", K.ALLREDUCE): ring.allreduce,
    ("ring", K.REDUCESCATTER): ring.reducescatter,
    ("ring", K.ALLGATHER): ring.allgather,
    ("ring", K.BROADCAST): ring.broadcast,
    ("ring", K.REDUCE): ring.reduce,
    ("tree", K.ALLREDUCE): tree.allreduce,
    ("halving_doubling", K.ALLREDUCE): halving_doubling.allreduce,
    ("halving_doubling", K.REDUCESCATTER): halving_doubling.reducescatter,
    ("halving_doubling", K.ALLGATHER): halving_doubling.allgather,
    ("halving_doubling", K.BROADCAST): halving_doubling.broadcast,
    ("halving_doubling", K.REDUCE): halving_doubling.reduce,
    ("hierarchical", K.ALLREDUCE): hierarchical.allreduce,
    ("hierarchical", K.REDUCESCATTER): hierarchical.reducescatter,
    ("hierarchical", K.ALLGATHER): hierarchical.allgather,
    ("hierarchical", K.BROADCAST): hierarchical.broadcast,
    ("hierarchical", K.REDUCE): hierarchical.reduce,
    ("hierarchical", K.ALLTOALL): hierarchical.alltoall,
    ("direct", K.ALLTOALL): alltoall.direct,
    ("p2p", K.SENDRECV): p2p.sendrecv,
}
DATA_KINDS = frozenset(kind for _, kind in ALGORITHMS)


from .ring_edges import RingShape, ShardShape  # noqa: E402


def node_layout(group: np.ndarray, fabric: Fabric) -> tuple[int, int]:
    """(N, L) if the group is node-major with L members on each of N nodes, else (n, 1)."""
    n = len(group)
    nodes = fabric.rank_node[group]
    if n <= 1:
        return n, 1
    starts = np.flatnonzero(np.r_[True, nodes[1:] != nodes[:-1]])
    N = len(starts)
    if n % N or len(np.unique(nodes)) != N or (np.diff(np.r_[starts, n]) != n // N).any():
        return n, 1
    return N, n // N


def build_template(kind: CollKind, nodes: int, local: int, nbytes: int, elem_bytes: int,
                   nccl: Nccl, nic_gbps: int = 400, nvlink_gbps: int = 3600):
    """(Plan, Template) of one op on (N, L) positions: the cached unit `expand` maps to ranks."""
    plan = tuning.plan(kind, nccl, nodes * local, nodes, local, nbytes, nic_gbps, nvlink_gbps)
    fn = ALGORITHMS[(plan.algo, kind)]
    return plan, fn(nodes, local, nbytes // elem_bytes, elem_bytes, plan.channels,
                    plan.chunk_bytes)


def op_templates(ops: CommOps, fabric: Fabric, nccl: Nccl, which=None, max_rows: int = 0, shard_rows: int = 0):
    """(op index, group, Template, Plan) of every op that moves data (or of ops `which`).
    max_rows > 0: a ring AllReduce whose template would list more chunks than that comes as a
    ring_edges.RingShape instead (its edges in closed form; for the connection-level schedule);
    shard_rows > 0: so does a ring ReduceScatter / AllGather, as a ring_edges.ShardShape."""
    tuning.check(nccl)
    parts: list[tuple[int, np.ndarray, Template, tuning.Plan]] = []
    layouts: dict[bytes, tuple[int, int]] = {}     # a job has few distinct groups, used many times
    kinds, nbytes, elem = ops.rows["kind"], ops.rows["bytes"], ops.rows["elem_bytes"]
    ptr, values = ops.groups.ptr, ops.groups.values
    for i in (range(len(ops)) if which is None else which):
        kind = CollKind(int(kinds[i]))
        group = values[ptr[i]:ptr[i + 1]]
        if kind not in DATA_KINDS or len(group) < 2 or nbytes[i] < elem[i]:
            continue                        # markers and empty ops move nothing
        key = group.tobytes()
        if key not in layouts:
            layouts[key] = node_layout(group, fabric)
        N, L = layouts[key]
        if max_rows and kind == CollKind.ALLREDUCE:
            plan = tuning.plan(kind, nccl, N * L, N, L, int(nbytes[i]), fabric.nic_gbps, fabric.nvlink_gbps)
            shape = RingShape(N, L, int(nbytes[i]) // int(elem[i]), int(elem[i]), plan.channels, plan.chunk_bytes)
            if plan.algo == "ring" and shape.rows() > max_rows:
                parts.append((int(i), group, shape, plan))
                continue
        if shard_rows and kind in (CollKind.REDUCESCATTER, CollKind.ALLGATHER):
            plan = tuning.plan(kind, nccl, N * L, N, L, int(nbytes[i]), fabric.nic_gbps, fabric.nvlink_gbps)
            shard = ShardShape(N, L, int(nbytes[i]) // int(elem[i]), int(elem[i]), plan.channels, plan.chunk_bytes,
                               kind == CollKind.REDUCESCATTER)
            if plan.algo == "ring" and shard.rows() > shard_rows:
                parts.append((int(i), group, shard, plan))
                continue
        plan, t = build_template(kind, N, L, int(nbytes[i]), int(elem[i]), nccl, fabric.nic_gbps,
                                 fabric.nvlink_gbps)
        if len(t):
            parts.append((int(i), group, t, plan))
    return parts


def expand(ops: CommOps, fabric: Fabric, nccl: Nccl, which=None) -> Transfers:
    """Every transfer of the ops (or of ops `which`: op ids stay the job's)."""
    return expand_parts(op_templates(ops, fabric, nccl, which), fabric, nccl)


def expand_parts(parts, fabric: Fabric, nccl: Nccl) -> Transfers:
    """The transfers of op_templates' parts (a block of them: emit/views/placed.py)."""
    cols, deps = _columns(parts, fabric)
    if nccl.pxn:
        cols, deps = _pxn(cols, deps, fabric)
    return _table(cols, deps)


def _columns(parts, fabric: Fabric) -> tuple[dict, Ragged]:
    """Plain per-column arrays of all ops' transfers (cheap to index, unlike structured rows)."""
    if not parts:
        return {}, Ragged.empty(0)
    lens = np.array([len(t) for _, _, t, _ in parts], dtype=np.int64)
    cols = {
        "op_id": np.repeat([i for i, _, _, _ in parts], lens),
        "algo": np.repeat(np.array([int(p.algo_id) for _, _, _, p in parts], np.uint8), lens),
        "proto": np.repeat(np.array([int(p.proto) for _, _, _, p in parts], np.uint8), lens),
        "max_msg_bytes": np.repeat([p.max_msg_bytes for _, _, _, p in parts], lens),
        "src_rank": np.concatenate([g[t.src] for _, g, t, _ in parts]),
        "dst_rank": np.concatenate([g[t.dst] for _, g, t, _ in parts]),
    }
    for col in ("channel", "step", "chunk", "bytes"):
        cols[col] = np.concatenate([getattr(t, col) for _, _, t, _ in parts])
    cols["link"] = np.where(fabric.same_node(cols["src_rank"], cols["dst_rank"]),
                            LinkKind.NVLINK, LinkKind.NET).astype(np.uint8)
    if len(parts) == 1:
        deps = Ragged(parts[0][2].deps.ptr.copy(), parts[0][2].deps.values.copy())
    else:
        base = np.r_[0, np.cumsum(lens)[:-1]]
        deps = Ragged.concat([t.deps for _, _, t, _ in parts], offsets=[int(b) for b in base])
    return cols, deps


def _table(cols: dict, deps: Ragged) -> Transfers:
    total = len(deps)
    rows = np.zeros(total, dtype=TRANSFER_DTYPE)
    rows["transfer_id"] = np.arange(total)
    if not cols:
        return Transfers(rows, deps)
    for name, col in cols.items():
        rows[name] = col
    simple = cols["proto"] == Proto.SIMPLE
    rows["wire_bytes"] = cols["bytes"] if simple.all() else wire_bytes(cols["bytes"], cols["proto"])
    return Transfers(rows, deps)


def _rail(fabric: Fabric, ranks: np.ndarray) -> np.ndarray:
    return fabric.nic_rail[fabric.rank_nic[ranks]]


def _pxn(cols: dict, deps: Ragged, fabric: Fabric) -> tuple[dict, Ragged]:
    if not cols:
        return cols, deps
    src_rail, dst_rail = _rail(fabric, cols["src_rank"]), _rail(fabric, cols["dst_rank"])
    cross = (cols["link"] == LinkKind.NET) & (src_rail != dst_rail)
    if not cross.any():
        return cols, deps
    # rank of each (node, rail): the proxy that sends on the destination's rail
    proxy_of = np.full((fabric.nodes, int(fabric.nic_rail.max()) + 1), -1, np.int64)
    proxy_of[fabric.rank_node, _rail(fabric, np.arange(fabric.world))] = np.arange(fabric.world)
    m, c = len(cross), int(cross.sum())
    new_idx = np.arange(m) + np.cumsum(cross)                  # original row -> its NET delivery
    hop_idx = new_idx[cross] - 1                               # the NVLink hop just before it
    proxy = proxy_of[fabric.rank_node[cols["src_rank"][cross]], dst_rail[cross]]
    out = {}
    for name, col in cols.items():
        o = np.empty(m + c, dtype=col.dtype)
        o[new_idx] = col
        o[hop_idx] = col[cross]
        out[name] = o
    out["dst_rank"][hop_idx] = proxy
    out["link"][hop_idx] = LinkKind.NVLINK
    out["src_rank"][new_idx[cross]] = proxy
    # deps: a split row's deps move to its hop (renumbered); its NET part needs just the hop
    lens = np.diff(deps.ptr)
    owner = np.where(cross, new_idx - 1, new_idx)              # who inherits row i's deps
    new_lens = np.zeros(m + c, np.int64)
    new_lens[owner] = lens
    new_lens[new_idx[cross]] = 1
    ptr = np.zeros(m + c + 1, np.int64)
    np.cumsum(new_lens, out=ptr[1:])
    vals = np.empty(int(ptr[-1]), np.int64)
    vals[np.repeat(ptr[owner] - deps.ptr[:-1], lens) + np.arange(len(deps.values))] = \
        new_idx[deps.values]
    vals[ptr[new_idx[cross]]] = hop_idx
    return out, Ragged(ptr, vals)
