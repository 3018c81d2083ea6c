"""collectives stage: CommOps + Fabric -> Transfers (who sends what to whom, step by step).

One registry maps each CommOp kind to the algorithm that expands it; each expansion is a cached
template over ring positions, mapped onto the op's ranks with array indexing.
"""
from __future__ import annotations

import numpy as np

from ..config import Nccl
from ..errors import ConfigError
from ..tables import TRANSFER_DTYPE, Algo, CollKind, CommOps, LinkKind, Ragged, Transfers
from ..topology import Fabric
from .p2p import p2p_template
from .ring import ring_allreduce_template


def _ring_allreduce(group: np.ndarray, row, nccl: Nccl):
    t = ring_allreduce_template(len(group), int(row["bytes"]) // int(row["elem_bytes"]),
                                int(row["elem_bytes"]), nccl.channels, nccl.ring_chunk_bytes)
    return dict(src=group[t["pos"]], dst=group[(t["pos"] + 1) % len(group)], channel=t["channel"],
                step=t["step"], chunk=t["chunk"], bytes=t["bytes"], dep=t["dep"],
                algo=Algo.RING, max_msg=nccl.ring_msg_bytes)


def _sendrecv(group: np.ndarray, row, nccl: Nccl):
    t = p2p_template(int(row["bytes"]) // int(row["elem_bytes"]), int(row["elem_bytes"]), nccl.channels)
    n = len(t["channel"])
    return dict(src=np.full(n, group[0]), dst=np.full(n, group[1]), channel=t["channel"],
                step=np.zeros(n, np.int64), chunk=np.arange(n), bytes=t["bytes"],
                dep=np.full(n, -1, np.int64), algo=Algo.P2P, max_msg=nccl.p2p_chunk_bytes)


ALGORITHMS = {
    ("ring", CollKind.ALLREDUCE): _ring_allreduce,
    ("ring", CollKind.SENDRECV): _sendrecv,
}


def expand(ops: CommOps, fabric: Fabric, nccl: Nccl) -> Transfers:
    parts, base = [], 0
    for i in range(len(ops)):
        row = ops.rows[i]
        kind = CollKind(int(row["kind"]))
        fn = ALGORITHMS.get((nccl.algorithm, kind))
        if fn is None:
            raise ConfigError(f"nccl.algorithm={nccl.algorithm} has no {kind.label} implementation yet")
        p = fn(np.asarray(ops.groups[i]), row, nccl)
        p["op"] = i
        p["base"] = base
        parts.append(p)
        base += len(p["bytes"])
    rows = np.zeros(base, dtype=TRANSFER_DTYPE)
    rows["transfer_id"] = np.arange(base)
    if not parts:
        return Transfers(rows, Ragged.empty(0))
    lens = [len(p["bytes"]) for p in parts]
    rows["op_id"] = np.repeat([p["op"] for p in parts], lens)
    rows["algo"] = np.repeat([int(p["algo"]) for p in parts], lens)
    rows["max_msg_bytes"] = np.repeat([p["max_msg"] for p in parts], lens)
    for col, key in (("src_rank", "src"), ("dst_rank", "dst"), ("channel", "channel"),
                     ("step", "step"), ("chunk", "chunk"), ("bytes", "bytes")):
        rows[col] = np.concatenate([p[key] for p in parts])
    rows["link"] = np.where(fabric.same_node(rows["src_rank"], rows["dst_rank"]),
                            LinkKind.NVLINK, LinkKind.NET)
    dep = np.concatenate([np.where(p["dep"] >= 0, p["dep"] + p["base"], -1) for p in parts])
    has = dep >= 0
    ptr = np.zeros(base + 1, dtype=np.int64)
    np.cumsum(has, out=ptr[1:])
    return Transfers(rows, Ragged(ptr, dep[has]))
