"""A ring AllReduce's edges in closed form, for groups too large to list their chunks.

A ring AllReduce on n ranks moves loops x channels x 2(n-1) x n chunks: on the 16,384 ranks of a
whole LLaMA-3 405B job a 4-byte grad-norm AllReduce is half a billion of them, while its edges -
what the connection-level schedule times - are n per channel. ring.allreduce's rule gives them
directly: at reduce-scatter step k ring index i sends block (i - k) mod n, at all-gather step k
block (i + 1 - k) mod n, so over the 2(n-1) steps i sends every block of every loop twice except
block (i + 1) mod n once and (i + 2) mod n once. Any per-transfer quantity f (bytes, wire bytes,
messages, packets; 0 for an empty chunk, which carries no data and is not a transfer) summed over
an edge is

    2 x sum_L sum_b f(size[L, c, b]) - sum_L f(size[L, c, i+1]) - sum_L f(size[L, c, i+2])

with size[L, c, b] the bytes of block b of channel c in loop L (ring.allreduce's lo/hi).
tests/test_ring_edges.py checks it against template_edges of the chunk template.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..tables import Proto
from .edges import Edges, net_wire_bytes
from .protocol import wire_bytes as proto_wire_bytes
from .ring import ring_orders
from .template import chunk_loops


@dataclass(frozen=True)
class RingShape:
    """A ring AllReduce left unexpanded (op_templates with max_rows): what ring.allreduce takes."""
    nodes: int
    local: int
    elems: int
    elem_bytes: int
    channels: int
    chunk_bytes: int

    @property
    def n(self) -> int:
        return self.nodes * self.local

    def rows(self) -> int:
        """Chunk transfers ring.allreduce would list (empty ones included: an upper bound)."""
        chunk = max(1, self.chunk_bytes // self.elem_bytes)
        loops = -(-self.elems // (self.channels * self.n * chunk))
        return loops * self.channels * 2 * (self.n - 1) * self.n

    def __len__(self) -> int:
        return self.rows() if self.n > 1 and self.elems > 0 else 0

    def block_bytes(self) -> np.ndarray:
        """[loops, channels, n] payload bytes of each block."""
        n, C = self.n, self.channels
        chunk = max(1, self.chunk_bytes // self.elem_bytes)
        offs, real = chunk_loops(self.elems, C * n, chunk)
        lo = offs[:, None, None] + (np.arange(C)[None, :, None] * n + np.arange(n)[None, None, :]) * real[:, None, None]
        hi = np.minimum(lo + real[:, None, None], self.elems)
        return np.maximum(hi - np.minimum(lo, self.elems), 0) * self.elem_bytes


def ring_allreduce_edges(shape: RingShape, proto: int, max_msg_bytes: int, pmtu: int, vlan: bool = True,
                         ip_version: int = 4) -> Edges:
    """The Edges template_edges would give for ring.allreduce(*shape), without its chunks."""
    n, C = shape.n, shape.channels
    size = shape.block_bytes()
    live = size > 0
    wire = size if proto == Proto.SIMPLE else proto_wire_bytes(size, np.full(size.shape, proto))
    mm = max(int(max_msg_bytes), 1)
    per_send = {
        "transfers": live.astype(np.int64),
        "messages": np.where(live, np.maximum(1, -(-wire // mm)), 0),
        "packets": np.where(live, (wire // mm) * -(-mm // pmtu) + -(-(wire % mm) // pmtu), 0),
        "payload": size,
        "nvl_wire": np.where(live, wire, 0),
        "net_wire": np.where(live, net_wire_bytes(wire, mm, pmtu, vlan, ip_version), 0),
    }
    i = np.arange(n)
    cols = {}
    for name, f in per_send.items():
        by_block = f.sum(axis=0)                                   # [C, n]: over loops
        total = by_block.sum(axis=1, keepdims=True)                 # [C, 1]
        cols[name] = (2 * total - by_block[:, (i + 1) % n] - by_block[:, (i + 2) % n]).reshape(-1)
    order = ring_orders(shape.nodes, shape.local, C)                 # [C, n] positions in ring order
    src, dst = order, np.roll(order, -1, axis=1)
    channel = np.repeat(np.arange(C), n)
    keep = cols["transfers"] > 0
    return Edges(src=src.reshape(-1)[keep], dst=dst.reshape(-1)[keep], channel=channel[keep],
                 **{k: v[keep].astype(np.int64) for k, v in cols.items()})


def ring_allreduce_alone_ns(shape: RingShape, edges: Edges, rate_gbps: float, latency_ns: int) -> int:
    """The op alone: its 2(n-1) steps one after the other (step k of i waits for step k-1 of
    i-1), each the largest chunk's wire time at rate_gbps plus the hop latency, loop after loop
    (a bound for the chunk-level pipeline, which overlaps loops; the big groups this serves are
    latency-bound)."""
    size = shape.block_bytes()
    largest = size.max(axis=(1, 2)) if size.size else np.zeros(0)
    wire = largest.astype(np.float64) * 8 / rate_gbps
    return int(np.ceil(((wire + latency_ns) * 2 * (shape.n - 1)).sum()))


@dataclass(frozen=True)
class ShardShape:
    """A ring ReduceScatter / AllGather left unexpanded (op_templates with shard_rows): what
    ring.reducescatter / ring.allgather take. Their n - 1 steps move n equal shards (padded,
    ring.py), so every chunk of (loop L, channel c) has the same bytes whatever its step and
    sender, and ring index i sends n - 1 of them to i + 1 on each channel: an edge carries
    (n - 1) x sum_L f(size[L, c]) of any per-transfer quantity f. Its template would list
    loops x channels x (n - 1) x n chunks - 4x per doubling of a DP group (ZeRO-1's gradient
    ReduceScatter and parameter AllGather over 1,024 replicas: 2.1 M a shape)."""
    nodes: int
    local: int
    elems: int
    elem_bytes: int
    channels: int
    chunk_bytes: int
    reduce_scatter: bool

    @property
    def n(self) -> int:
        return self.nodes * self.local

    def rows(self) -> int:
        """Chunk transfers the template would list (empty ones included: an upper bound)."""
        chunk = max(1, self.chunk_bytes // self.elem_bytes)
        loops = -(-(-(-self.elems // self.n)) // (self.channels * chunk))
        return loops * self.channels * (self.n - 1) * self.n

    def __len__(self) -> int:
        return self.rows() if self.n > 1 and self.elems > 0 else 0

    def chunk_bytes_of(self) -> np.ndarray:
        """[loops, channels] payload bytes of each chunk (ring._shard_rows' lo / hi within a shard)."""
        sh = -(-self.elems // self.n)
        chunk = max(1, self.chunk_bytes // self.elem_bytes)
        offs, real = chunk_loops(sh, self.channels, chunk)
        start = offs[:, None] + np.arange(self.channels)[None, :] * real[:, None]
        return (np.minimum(start + real[:, None], sh) - np.minimum(start, sh)) * self.elem_bytes


def ring_shard_edges(shape: ShardShape, proto: int, max_msg_bytes: int, pmtu: int, vlan: bool = True,
                     ip_version: int = 4) -> Edges:
    """The Edges template_edges would give for ring.reducescatter / allgather(*shape), in its
    order (sender, receiver, channel), without the chunks."""
    n, C = shape.n, shape.channels
    size = shape.chunk_bytes_of()                                   # [loops, C]
    live = size > 0
    wire = size if proto == Proto.SIMPLE else proto_wire_bytes(size, np.full(size.shape, proto))
    mm = max(int(max_msg_bytes), 1)
    per_send = {
        "transfers": live.astype(np.int64),
        "messages": np.where(live, np.maximum(1, -(-wire // mm)), 0),
        "packets": np.where(live, (wire // mm) * -(-mm // pmtu) + -(-(wire % mm) // pmtu), 0),
        "payload": size,
        "nvl_wire": np.where(live, wire, 0),
        "net_wire": np.where(live, net_wire_bytes(wire, mm, pmtu, vlan, ip_version), 0),
    }
    order = ring_orders(shape.nodes, shape.local, C)                 # [C, n] positions in ring order
    src, dst = order.reshape(-1), np.roll(order, -1, axis=1).reshape(-1)
    channel = np.repeat(np.arange(C), n)
    cols = {k: np.repeat((n - 1) * f.sum(axis=0), n) for k, f in per_send.items()}   # per (c, i)
    keep = cols["transfers"] > 0
    key = (src.astype(np.int64) * n + dst) * 1024 + channel
    o = np.flatnonzero(keep)[np.argsort(key[keep], kind="stable")]
    return Edges(src=src[o].astype(np.int64), dst=dst[o].astype(np.int64), channel=channel[o].astype(np.int64),
                 **{k: v[o].astype(np.int64) for k, v in cols.items()})


def ring_shard_alone_ns(shape: ShardShape, proto: int, max_msg_bytes: int, pmtu: int, vlan: bool, ip_version: int,
                        nic_gbps: float, edge_latency_ns: np.ndarray) -> int | None:
    """A ring ReduceScatter / AllGather of one loop, one member per node (a DP group across
    nodes), alone on an ideal fabric: each of its n - 1 steps is the channels' chunks through the
    sender's NIC port (they share it: every channel of a one-member-per-node ring leaves from the
    rank's NIC) then the hop latency, and step k of ring index i waits for step k - 1 of i - 1 - so
    the op ends (n - 1) steps after it starts plus the latencies of the slowest n - 1 consecutive
    edges of a channel. edge_latency_ns: per edge of ring_shard_edges, in its order (sender,
    receiver, channel). What the chunk-level schedule gives for it up to the float rounding of
    the steps' finishes (tests/test_ring_edges.py); None for other shapes (more loops overlap in
    a pipeline; with several members per node channels leave from different NICs)."""
    size = shape.chunk_bytes_of()
    if shape.local != 1 or size.shape[0] != 1 or shape.n < 2 or len(edge_latency_ns) != shape.n * shape.channels:
        return None
    wire = size if proto == Proto.SIMPLE else proto_wire_bytes(size, np.full(size.shape, proto))
    net = np.where(size > 0, net_wire_bytes(wire, max(int(max_msg_bytes), 1), pmtu, vlan, ip_version), 0)
    step_ns = int(np.ceil(float(net.sum()) * 8 / nic_gbps))
    lat = np.asarray(edge_latency_ns, np.int64).reshape(shape.n, shape.channels).T   # one member per node:
    # ring index = position, so sender i's channels are edges [i C, (i + 1) C)
    chain = lat.sum(axis=1) - lat.min(axis=1)                   # n - 1 consecutive edges: all but one
    return (shape.n - 1) * step_ns + int(chain.max())
