"""Hierarchical (2-D) collectives: intra-node rings over NVLink, inter-node rings per rail.

Position k*L + j is local member j of node k; "rail j" is the set of local members j of all nodes,
so every NET hop below stays on one rail. The buffer is cut into pipeline units (loops of
channels x unit, last loop shrinking evenly; `chunk` = unit id); each unit runs the phases below,
and a phase's first send waits for the previous phase's data into the sender.

- AllReduce (unit = chunk x n elements): (A) ring reduce-scatter inside each node, local j ends
  with piece j (1/L of the unit) summed over the node; (B) ring AllReduce of piece j across nodes
  on rail j (N sub-pieces); (C) ring all-gather inside each node.
  Per member: NVLink 2(L-1)/L * S, NET 2(N-1)/N * S/L.
- ReduceScatter (member p owns shard p): (A) ring reduce-scatter inside each node of the strided
  piece j = shards {k'L + j} for every node k'; (B) ring reduce-scatter across nodes on rail j, node
  k ending with shard kL + j. Per member: NVLink (L-1)/L * S, NET (N-1)/N * S/L.
- AllGather: the mirror: (B) ring all-gather across nodes on rail j of shards {k'L + j}, then (A)
  ring all-gather of those strided pieces inside each node. Same bytes as ReduceScatter.
- Broadcast (root = position 0): a chain over the nodes on rail 0, then a chain inside each node
  from local 0; Reduce: chains inside each node toward local 0, then a chain over nodes toward node
  0 on rail 0. Members that forward on both levels send 2S (local 0 of inner nodes), others S.
- AllToAll (rail-aligned, like PXN aggregation): (1) member (k,a) sends, over NVLink, to each local
  g != a of its node every block bound for rail g (N blocks); (2) member (k,g) sends to (m,g),
  m != k, the L blocks of node k bound for (m,g) — after its phase-1 inputs arrived.
  Per member: NVLink (L-1)*N blocks, NET (N-1)*L blocks (block = S/n).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from .alltoall import channel_split
from .template import Builder, Template, chunk_loops


def _units(total: int, channels: int, unit: int):
    """Flattened (loop, channel) units: start, end, channel, nominal size."""
    offs, real = chunk_loops(total, channels, unit)
    c = np.arange(channels)
    lo = (offs[:, None] + c * real[:, None]).ravel()
    size = np.repeat(real, channels)
    hi = np.minimum(lo + size, total)
    return np.minimum(lo, total), hi, np.tile(c, len(offs)), size


def _next_ids(b: Builder, shape) -> np.ndarray:
    return b.n + np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)


def _ring_dep(ids: np.ndarray, ring_axis: int) -> np.ndarray:
    """Dep of step k (axis 1) on step k-1 of the ring predecessor (ring_axis); -1 at step 0."""
    dep = np.full(ids.shape, -1, np.int64)
    dep[:, 1:] = np.roll(ids[:, :-1], 1, axis=ring_axis)
    return dep


def _stack(*cols) -> np.ndarray:
    return np.stack(np.broadcast_arrays(*cols), axis=-1)


@lru_cache(maxsize=32)
def allreduce(nodes, local, elems, elem_bytes, channels, chunk_bytes) -> Template:
    N, L = nodes, local
    n, b = N * L, Builder()
    if n <= 1 or elems <= 0:
        return b.build(elem_bytes)
    ulo, uhi, uch, usize = _units(elems, channels, max(1, chunk_bytes // elem_bytes) * n)
    U = len(ulo)
    u = np.arange(U)[:, None, None, None]
    P = -(-usize // L)[:, None]
    Q = -(-P // N)
    plo = np.minimum(ulo[:, None] + np.arange(L) * P, uhi[:, None])           # [U, L]
    phi = np.minimum(plo + P, uhi[:, None])
    slo = np.minimum(plo[:, :, None] + np.arange(N) * Q[:, :, None], phi[:, :, None])   # [U, L, N]
    shi = np.minimum(slo + Q[:, :, None], phi[:, :, None])
    k = np.arange(N)[None, None, :, None]
    i = np.arange(L)[None, None, None, :]
    final_a = np.full((U, N, L), -1, np.int64)                 # phase-A arrival into (k, j)
    if L > 1:                                                  # A: intra-node reduce-scatter
        kA = np.arange(L - 1)[None, :, None, None]
        piece = (i - 1 - kA) % L
        ids_a = _next_ids(b, (U, L - 1, N, L))
        b.add(src=k * L + i, dst=k * L + (i + 1) % L, channel=uch[u], step=kA, chunk=u,
              lo=plo[u, piece], hi=phi[u, piece], reduce=True, deps=_ring_dep(ids_a, 3)[..., None])
        final_a = np.roll(ids_a[:, -1], 1, axis=2)
    fa = final_a[:, None]                                      # [U, 1, N, L]
    last_b = None
    if N > 1:                                                  # B: per-rail AllReduce over nodes
        kB = np.arange(2 * (N - 1))[None, :, None, None]
        kk = np.arange(N)[None, None, None, :]                 # axes [U, step, rail j, node k]
        j = np.arange(L)[None, None, :, None]
        sub = np.where(kB < N - 1, (kk - kB) % N, (kk + 1 - (kB - (N - 1))) % N)
        ids_b = _next_ids(b, (U, 2 * (N - 1), L, N))
        own_a = np.swapaxes(final_a, 1, 2)[:, None]            # [U, 1, L, N]
        b.add(src=kk * L + j, dst=(kk + 1) % N * L + j, channel=uch[u], step=L - 1 + kB,
              chunk=u, lo=slo[u, j, sub], hi=shi[u, j, sub], reduce=kB < N - 1,
              deps=_stack(_ring_dep(ids_b, 3), own_a))
        # arrivals into (k, j) of the last RS step and every AG step: [U, N, L, N-steps]
        last_b = np.roll(ids_b[:, N - 2:], 1, axis=3).transpose(0, 3, 2, 1)
    if L > 1:                                                  # C: intra-node all-gather
        kC = np.arange(L - 1)[None, :, None, None]
        piece = (i - kC) % L
        ids_c = _next_ids(b, (U, L - 1, N, L))
        dep = _ring_dep(ids_c, 3)[..., None]
        first = np.concatenate([fa[..., None]] + ([last_b[:, None]] if last_b is not None else []),
                               axis=-1)                         # [U, 1, N, L, deps]
        pad = np.full(dep.shape[:-1] + (first.shape[-1],), -1, np.int64)
        pad[:, :1] = first
        pad[:, 1:, ..., :1] = dep[:, 1:]
        b.add(src=k * L + i, dst=k * L + (i + 1) % L, channel=uch[u],
              step=L - 1 + 2 * (N - 1) + kC, chunk=u, lo=plo[u, piece], hi=phi[u, piece],
              reduce=False, deps=pad.reshape(-1, pad.shape[-1]))
    return b.build(elem_bytes)


def _strided(nodes, local, elems, elem_bytes, channels, chunk_bytes, reduce_scatter: bool):
    N, L = nodes, local
    n, b = N * L, Builder()
    if n <= 1 or elems <= 0:
        return b.build(elem_bytes)
    sh = -(-elems // n)
    a_lo, a_hi, uch, _ = _units(sh, channels, max(1, chunk_bytes // elem_bytes))
    U = len(a_lo)
    u = np.arange(U)[:, None, None, None]
    ln = (a_hi - a_lo)[:, None, None, None]
    a = a_lo[:, None, None, None]
    k = np.arange(N)[None, None, :, None]
    i = np.arange(L)[None, None, None, :]
    kk = np.arange(N)[None, None, None, :]                     # phase B axes [U, step, rail, node]
    j = np.arange(L)[None, None, :, None]

    def intra(first_deps, step0):                              # ring over locals, strided pieces
        kA = np.arange(L - 1)[None, :, None, None]
        piece = (i - 1 - kA) % L if reduce_scatter else (i - kA) % L
        ids = _next_ids(b, (U, L - 1, N, L))
        dep = _ring_dep(ids, 3)[..., None]
        if first_deps is not None:
            pad = np.full(dep.shape[:-1] + (first_deps.shape[-1],), -1, np.int64)
            pad[:, :1] = first_deps[:, None]
            pad[:, 1:, ..., :1] = dep[:, 1:]
            dep = pad
        lo = piece * sh + a
        b.add(src=k * L + i, dst=k * L + (i + 1) % L, channel=uch[u], step=step0 + kA, chunk=u,
              lo=lo, hi=lo + ln, stride=L * sh, count=N, reduce=reduce_scatter,
              deps=dep.reshape(-1, dep.shape[-1]))
        return ids

    def inter(own, step0):                                     # ring over nodes on rail j
        kB = np.arange(N - 1)[None, :, None, None]
        owner = (kk - 1 - kB) % N if reduce_scatter else (kk - kB) % N
        ids = _next_ids(b, (U, N - 1, L, N))
        lo = (owner * L + j) * sh + a
        deps = _ring_dep(ids, 3)[..., None] if own is None else _stack(_ring_dep(ids, 3), own)
        b.add(src=kk * L + j, dst=(kk + 1) % N * L + j, channel=uch[u], step=step0 + kB,
              chunk=u, lo=lo, hi=lo + ln, reduce=reduce_scatter, deps=deps)
        return ids

    if reduce_scatter:
        own = None
        if L > 1:
            ids_a = intra(None, 0)
            own = np.swapaxes(np.roll(ids_a[:, -1], 1, axis=2), 1, 2)[:, None]   # [U, 1, L, N]
        if N > 1:
            inter(own, L - 1)
    else:
        first = None
        if N > 1:
            ids_b = inter(None, 0)
            # every arrival into (k, j): from node k-1 at each step -> [U, N, L, N-1]
            first = np.roll(ids_b, 1, axis=3).transpose(0, 3, 2, 1)
        if L > 1:
            intra(first, N - 1)
    return b.build(elem_bytes)


@lru_cache(maxsize=32)
def reducescatter(nodes, local, elems, elem_bytes, channels, chunk_bytes) -> Template:
    return _strided(nodes, local, elems, elem_bytes, channels, chunk_bytes, True)


@lru_cache(maxsize=32)
def allgather(nodes, local, elems, elem_bytes, channels, chunk_bytes) -> Template:
    return _strided(nodes, local, elems, elem_bytes, channels, chunk_bytes, False)


def _chains(nodes, local, elems, elem_bytes, channels, chunk_bytes, reduce: bool) -> Template:
    N, L = nodes, local
    b = Builder()
    if N * L <= 1 or elems <= 0:
        return b.build(elem_bytes)
    ulo, uhi, uch, _ = _units(elems, channels, max(1, chunk_bytes // elem_bytes))
    U = len(ulo)
    u = np.arange(U)[:, None, None]
    lo, hi, ch = ulo[:, None, None], uhi[:, None, None], uch[:, None, None]
    k = np.arange(N)[None, :, None]
    g = np.arange(L - 1)[None, None, :]
    into_head = np.full((U, N), -1, np.int64)                  # what reached local 0 of node k
    if not reduce:                                             # Broadcast: nodes, then locals
        if N > 1:
            h = np.arange(N - 1)[None, :, None]
            ids = _next_ids(b, (U, N - 1, 1))
            dep = np.concatenate([np.full((U, 1, 1), -1), ids[:, :-1]], axis=1)
            b.add(src=h * L, dst=(h + 1) * L, channel=ch, step=h, chunk=u, lo=lo, hi=hi,
                  reduce=False, deps=dep[..., None])
            into_head[:, 1:] = ids[:, :, 0]
        if L > 1:
            ids = _next_ids(b, (U, N, L - 1))
            dep = np.concatenate([into_head[:, :, None], ids[:, :, :-1]], axis=2)
            b.add(src=k * L + g, dst=k * L + g + 1, channel=ch, step=N - 1 + g, chunk=u, lo=lo,
                  hi=hi, reduce=False, deps=dep[..., None])
        return b.build(elem_bytes)
    if L > 1:                                                  # Reduce: locals, then nodes
        ids = _next_ids(b, (U, N, L - 1))
        dep = np.concatenate([np.full((U, N, 1), -1), ids[:, :, :-1]], axis=2)
        b.add(src=k * L + L - 1 - g, dst=k * L + L - 2 - g, channel=ch, step=g, chunk=u, lo=lo,
              hi=hi, reduce=True, deps=dep[..., None])
        into_head = ids[:, :, -1]
    if N > 1:
        h = np.arange(N - 1)[None, :, None]
        ids = _next_ids(b, (U, N - 1, 1))
        prev = np.concatenate([np.full((U, 1, 1), -1), ids[:, :-1]], axis=1)
        head = into_head[:, ::-1][:, :N - 1, None]             # local arrival at node N-1-h
        b.add(src=(N - 1 - h) * L, dst=(N - 2 - h) * L, channel=ch, step=L - 1 + h, chunk=u,
              lo=lo, hi=hi, reduce=True, deps=_stack(prev, head))
    return b.build(elem_bytes)


@lru_cache(maxsize=32)
def broadcast(nodes, local, elems, elem_bytes, channels, chunk_bytes) -> Template:
    return _chains(nodes, local, elems, elem_bytes, channels, chunk_bytes, False)


@lru_cache(maxsize=32)
def reduce(nodes, local, elems, elem_bytes, channels, chunk_bytes) -> Template:
    return _chains(nodes, local, elems, elem_bytes, channels, chunk_bytes, True)


@lru_cache(maxsize=32)
def alltoall(nodes, local, elems, elem_bytes, channels, chunk_bytes=0) -> Template:
    N, L = nodes, local
    n, b = N * L, Builder()
    if n <= 1 or elems <= 0:
        return b.build(elem_bytes)
    blk = -(-elems // n)
    E = n * blk
    off, size = channel_split(blk, channels)
    c = np.arange(channels)
    into = np.full((N, L, L, channels), -1, np.int64)          # phase-1 arrival at (k,g) from a
    if L > 1:                                                  # 1: to the local on the dest rail
        k = np.arange(N)[:, None, None, None]
        a = np.arange(L)[None, :, None, None]
        g = (a + np.arange(1, L)[None, None, :, None]) % L
        lo = (k * L + a) * E + g * blk + off
        ids = _next_ids(b, (N, L, L - 1, channels))
        b.add(src=k * L + a, dst=k * L + g, channel=c, step=0, chunk=g, lo=lo, hi=lo + size,
              stride=L * blk, count=N, reduce=False)
        into[np.broadcast_to(k, ids.shape), np.broadcast_to(g, ids.shape),
             np.broadcast_to(a, ids.shape), np.broadcast_to(c, ids.shape)] = ids
    if N > 1:                                                  # 2: over the rail to the dest node
        k = np.arange(N)[:, None, None, None]
        g = np.arange(L)[None, :, None, None]
        m = (k + np.arange(1, N)[None, None, :, None]) % N
        dst = m * L + g
        lo = k * L * E + dst * blk + off
        deps = np.moveaxis(into, 2, 3)[:, :, None]             # [N, L, 1, channels, L]
        deps = np.broadcast_to(deps, (N, L, N - 1, channels, L))
        b.add(src=k * L + g, dst=dst, channel=c, step=1, chunk=dst, lo=lo, hi=lo + size,
              stride=E, count=L, reduce=False, deps=deps.reshape(-1, L))
    return b.build(elem_bytes)
