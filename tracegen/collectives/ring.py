"""Ring collectives as NCCL runs them: AllReduce, ReduceScatter, AllGather, Broadcast, Reduce.

Per-channel rings. NCCL's ring order comes from its topology search and differs per channel; we
model it as: channel c visits the nodes in order 0..N-1 and, inside every node, starts at local
member (c mod L) and walks (c, c+1, .., c-1 mod L). So channel c enters each node on rail c and
leaves it from rail c-1: every channel's inter-node hop leaves from a different rail (with PXN the
cross-rail hop becomes NVLink to rail c, then NET on rail c). With one member per node
(L = 1) or a flat group every channel is the identity ring.

Chunking (Simple): the buffer is processed in loops of (channels x n x chunk) elements for
AllReduce, (channels x chunk) per shard for ReduceScatter/AllGather and (channels x chunk) for
Broadcast/Reduce; the last loop shrinks its chunks evenly, as NCCL does (realChunkSize =
min(chunkSize, divUp(remaining, nChannels*nRanks))). The chunk is 2 MiB (4 Simple steps) for
AllReduce/ReduceScatter/AllGather, one step (512 KiB) for Broadcast/Reduce, and one LL / LL128
step of data under those protocols (tuning.py, protocol.py).

Steps and dependencies (ring index i = place in the channel's ring):
- AllReduce: 2(n-1) steps; at step k < n-1 (reduce-scatter) i sends chunk (i-k) mod n, at
  k' = k-(n-1) (all-gather) chunk (i+1-k') mod n. Step k of i needs step k-1 of i-1.
- ReduceScatter: n-1 steps; i sends the partial of shard owned by ring member (i-1-k); the last
  step lands it at its owner. AllGather: n-1 steps; i forwards the shard of member (i-k).
- Broadcast: a chain from the root (position 0) around the ring, n-1 hops per chunk; Reduce: the
  chain that starts after the root and ends at it.
ReduceScatter/AllGather buffers hold n equal shards (ceil(elems/n) elements each: flat buffers are
padded to a multiple of the group size, as FSDP/ZeRO do); position p owns shard p.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from .template import Builder, Template, chunk_loops


def ring_orders(nodes: int, local: int, channels: int) -> np.ndarray:
    """[channels, n] positions in ring order for each channel (see module doc)."""
    c = np.arange(channels)[:, None, None]
    k = np.arange(nodes)[None, :, None]
    j = np.arange(local)[None, None, :]
    return (k * local + (j + c) % local).reshape(channels, nodes * local)


def shard_elems(elems: int, n: int) -> int:
    return -(-elems // n)


def _ring_rows(b: Builder, order, k_steps, n, lo, hi, chunk, reduce_of_step, send_idx=None):
    """Rows for all (loop, channel, step, ring index) with the ring dependency rule.

    lo/hi/chunk: [loops, channels, steps, n] (broadcastable). send_idx: ring index of the sender per
    (channel, step, slot) when only some ring members send (chains); default every member."""
    loops = lo.shape[0]
    channels = order.shape[0]
    if send_idx is None:
        send_idx = np.broadcast_to(np.arange(n), (channels, k_steps, n))
    slots = send_idx.shape[-1]
    ch = np.arange(channels)[:, None, None]
    src = order[ch, send_idx]
    dst = order[ch, (send_idx + 1) % n]
    step = np.broadcast_to(np.arange(k_steps)[None, :, None], (channels, k_steps, slots))
    ids = (np.arange(loops * channels * k_steps * slots, dtype=np.int64)
           .reshape(loops, channels, k_steps, slots))
    dep = np.full(ids.shape, -1, dtype=np.int64)
    if slots == n:
        dep[:, :, 1:] = np.roll(ids[:, :, :-1], 1, axis=3)     # step k-1, ring index i-1
    else:
        dep[:, :, 1:] = ids[:, :, :-1]                          # chain: previous hop
    dep += b.n
    b.add(src=src[None], dst=dst[None], channel=ch[None], step=step[None], chunk=chunk, lo=lo,
          hi=hi, reduce=reduce_of_step[None, None, :, None], deps=dep[..., None])


@lru_cache(maxsize=32)
def allreduce(nodes: int, local: int, elems: int, elem_bytes: int, channels: int,
              chunk_bytes: int) -> Template:
    n = nodes * local
    b = Builder()
    if n > 1 and elems > 0:
        order = ring_orders(nodes, local, channels)
        chunk = max(1, chunk_bytes // elem_bytes)
        offs, real = chunk_loops(elems, channels * n, chunk)
        steps = 2 * (n - 1)
        i, k = np.arange(n), np.arange(steps)[:, None]
        blk = np.where(k < n - 1, (i - k) % n, (i + 1 - (k - (n - 1))) % n)    # [steps, n]
        c = np.arange(channels)[None, :, None, None]
        L = np.arange(len(offs))[:, None, None, None]
        lo = offs[L] + (c * n + blk) * real[L]
        hi = np.minimum(lo + real[L], elems)
        label = (L * channels + c) * n + blk
        _ring_rows(b, order, steps, n, np.minimum(lo, elems), hi, label, k[:, 0] < n - 1)
    return b.build(elem_bytes)


def _shard_rows(b, nodes, local, elems, elem_bytes, channels, chunk_bytes, reduce_scatter):
    n = nodes * local
    order = ring_orders(nodes, local, channels)
    sh = shard_elems(elems, n)
    chunk = max(1, chunk_bytes // elem_bytes)
    offs, real = chunk_loops(sh, channels, chunk)
    i, k = np.arange(n), np.arange(n - 1)[:, None]
    owner_idx = (i - 1 - k) % n if reduce_scatter else (i - k) % n          # [steps, n] ring idx
    shard = order[np.arange(channels)[:, None, None], owner_idx[None]]     # [channels, steps, n]
    c = np.arange(channels)[None, :, None, None]
    L = np.arange(len(offs))[:, None, None, None]
    start = offs[L] + c * real[L]
    lo = shard[None] * sh + np.minimum(start, sh)
    hi = shard[None] * sh + np.minimum(start + real[L], sh)
    label = (L * channels + c) * n + shard[None]
    _ring_rows(b, order, n - 1, n, lo, hi, label,
               np.full(n - 1, reduce_scatter))


@lru_cache(maxsize=32)
def reducescatter(nodes, local, elems, elem_bytes, channels, chunk_bytes) -> Template:
    b = Builder()
    if nodes * local > 1 and elems > 0:
        _shard_rows(b, nodes, local, elems, elem_bytes, channels, chunk_bytes, True)
    return b.build(elem_bytes)


@lru_cache(maxsize=32)
def allgather(nodes, local, elems, elem_bytes, channels, chunk_bytes) -> Template:
    b = Builder()
    if nodes * local > 1 and elems > 0:
        _shard_rows(b, nodes, local, elems, elem_bytes, channels, chunk_bytes, False)
    return b.build(elem_bytes)


def _chain(nodes, local, elems, elem_bytes, channels, chunk_bytes, reduce: bool) -> Template:
    n = nodes * local
    b = Builder()
    if n > 1 and elems > 0:
        order = ring_orders(nodes, local, channels)
        root_idx = np.argmax(order == 0, axis=1)                          # ring index of position 0
        first = root_idx + (1 if reduce else 0)                           # Reduce ends at the root
        send_idx = (first[:, None, None] + np.arange(n - 1)[None, :, None]) % n   # [ch, hops, 1]
        chunk = max(1, chunk_bytes // elem_bytes)
        offs, real = chunk_loops(elems, channels, chunk)
        c = np.arange(channels)[None, :, None, None]
        L = np.arange(len(offs))[:, None, None, None]
        lo = np.minimum(offs[L] + c * real[L], elems)
        hi = np.minimum(lo + real[L], elems)
        _ring_rows(b, order, n - 1, n, lo, hi, L * channels + c, np.full(n - 1, reduce), send_idx)
    return b.build(elem_bytes)


@lru_cache(maxsize=32)
def broadcast(nodes, local, elems, elem_bytes, channels, chunk_bytes) -> Template:
    return _chain(nodes, local, elems, elem_bytes, channels, chunk_bytes, False)


@lru_cache(maxsize=32)
def reduce(nodes, local, elems, elem_bytes, channels, chunk_bytes) -> Template:
    return _chain(nodes, local, elems, elem_bytes, channels, chunk_bytes, True)


def ring_allreduce_template(n: int, elems: int, elem_bytes: int, channels: int, chunk_bytes: int):
    """The flat ring AllReduce in the original single-dependency column form (pos, channel, step,
    chunk, bytes, dep): pos is the sender's ring position, dst = (pos+1) % n, dep = -1 or the row
    this one needs."""
    t = allreduce(n, 1, elems, elem_bytes, channels, chunk_bytes)
    lens = np.diff(t.deps.ptr)
    dep = np.full(len(t), -1, dtype=np.int64)
    dep[lens > 0] = t.deps.values
    return {"pos": t.src.astype(np.int64), "channel": t.channel.astype(np.int64),
            "step": t.step.astype(np.int64), "chunk": t.chunk, "bytes": t.bytes, "dep": dep}
