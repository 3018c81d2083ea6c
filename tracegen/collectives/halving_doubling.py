"""Halving-doubling collectives (Rabenseifner / MPICH style), on channel 0, one transfer per step.

Not an NCCL algorithm (NCCL has ring and tree); it is here for what-if studies. Positions are
used flat (node structure ignored). Non-power-of-two n: with p2 = largest power of two <= n and
r = n - p2, the first 2r positions pair up (2t, 2t+1); 2t hands its data to 2t+1 first (pre step)
and gets the result back last (post step); the p2 "active" members are 2t+1 (t < r) and r+t..n-1.

- AllReduce: reduce-scatter by recursive halving with partner distance 1, 2, 4, .. (the largest
  halves go to the nearest partners, inside a node), then all-gather in the mirror order.
  Active member sends 2(p2-1)/p2 * S; pre/post add S each way between a pair.
- ReduceScatter: recursive halving with distance p2/2, .., 1 over p2 "super-blocks" (an active
  pair-member's super-block holds both shards of its pair), so member q ends with its shard; the
  pre step moves the whole buffer S, the post step the even member's shard.
- AllGather: the mirror: pre step gives the odd member the even one's shard, recursive doubling
  with distance 1, .., p2/2, the post step returns everything the even member lacks.
- Broadcast / Reduce: binomial tree rooted at position 0 (whole buffer per edge, log2 n steps):
  member q sends S to q + 2^s for every 2^s > q (Broadcast); Reduce is the mirror.
Dependencies: a send needs every transfer that arrived at the sender before it in the algorithm
(its data is the running reduction / gathered range), so deps lists all earlier arrivals.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from .template import Builder, Template


def _active(n: int):
    p2 = 1 << (n.bit_length() - 1)
    r = n - p2
    q = np.arange(p2)
    return p2, r, np.where(q < r, 2 * q + 1, q + r)


class _Steps:
    """Adds one step at a time and remembers what arrived where (for the deps)."""

    def __init__(self, b: Builder, size: int):
        self.b, self.size, self.step, self.inbox = b, size, 0, []

    def arrived(self, members) -> np.ndarray | None:
        if not self.inbox:
            return None
        return np.stack(self.inbox, axis=1)[members]

    def add(self, src, dst, lo, hi, reduce, deps, inbox_of=None, chunk=0):
        ids = self.b.add(src=src, dst=dst, channel=0, step=self.step, chunk=chunk, lo=lo, hi=hi,
                         reduce=reduce, deps=deps)
        if inbox_of is not None:                     # record arrivals, indexed by member id
            col = np.full(self.size, -1, np.int64)
            col[inbox_of] = ids
            self.inbox.append(col)
        self.step += 1
        return ids


def _halving(st: _Steps, real, bounds, masks, reduce_scatter: bool):
    """Recursive halving (reduce) or doubling (gather) over p2 active members and block bounds."""
    p2 = len(real)
    q = np.arange(p2)
    if reduce_scatter:
        lo_b, hi_b = np.zeros(p2, np.int64), np.full(p2, p2, np.int64)
    else:
        lo_b, hi_b = st.range_lo, st.range_hi
    for m in masks:
        partner = q ^ m
        if reduce_scatter:
            half = (hi_b - lo_b) // 2
            upper = (q & m) != 0
            s_lo = np.where(upper, lo_b, lo_b + half)
            keep_lo = np.where(upper, lo_b + half, lo_b)
            s_hi, lo_b, hi_b = s_lo + half, keep_lo, keep_lo + half
        else:
            s_lo, s_hi = lo_b, hi_b
            lo_b, hi_b = np.minimum(lo_b, lo_b[partner]), np.maximum(hi_b, hi_b[partner])
        st.add(real[q], real[partner], bounds[s_lo], bounds[s_hi], reduce_scatter,
               st.arrived(q), inbox_of=partner, chunk=s_lo)
    st.range_lo, st.range_hi = lo_b, hi_b


def _masks(p2: int, far_first: bool) -> list[int]:
    m = [1 << s for s in range(p2.bit_length() - 1)]
    return m[::-1] if far_first else m


@lru_cache(maxsize=32)
def allreduce(nodes, local, elems, elem_bytes, channels=1, chunk_bytes=0) -> Template:
    n, b = nodes * local, Builder()
    if n > 1 and elems > 0:
        p2, r, real = _active(n)
        st = _Steps(b, p2)
        t = np.arange(r)
        if r:
            st.add(2 * t, 2 * t + 1, 0, elems, True, None, inbox_of=t)
        bounds = np.arange(p2 + 1) * elems // p2
        _halving(st, real, bounds, _masks(p2, False), True)
        _halving(st, real, bounds, _masks(p2, True), False)
        if r:
            st.add(2 * t + 1, 2 * t, 0, elems, False, st.arrived(t))
    return b.build(elem_bytes)


def _super_bounds(n: int, sh: int) -> np.ndarray:
    p2, r, _ = _active(n)
    q = np.arange(p2 + 1)
    first_shard = np.where(q < r, 2 * q, q + r)
    return first_shard * sh


@lru_cache(maxsize=32)
def reducescatter(nodes, local, elems, elem_bytes, channels=1, chunk_bytes=0) -> Template:
    n, b = nodes * local, Builder()
    if n > 1 and elems > 0:
        sh = -(-elems // n)
        p2, r, real = _active(n)
        st = _Steps(b, p2)
        t = np.arange(r)
        if r:
            st.add(2 * t, 2 * t + 1, 0, n * sh, True, None, inbox_of=t)
        _halving(st, real, _super_bounds(n, sh), _masks(p2, True), True)
        if r:
            st.add(2 * t + 1, 2 * t, 2 * t * sh, (2 * t + 1) * sh, False, st.arrived(t))
    return b.build(elem_bytes)


@lru_cache(maxsize=32)
def allgather(nodes, local, elems, elem_bytes, channels=1, chunk_bytes=0) -> Template:
    n, b = nodes * local, Builder()
    if n > 1 and elems > 0:
        sh = -(-elems // n)
        p2, r, real = _active(n)
        st = _Steps(b, p2)
        t = np.arange(r)
        if r:
            st.add(2 * t, 2 * t + 1, 2 * t * sh, (2 * t + 1) * sh, False, None, inbox_of=t)
        st.range_lo, st.range_hi = np.arange(p2), np.arange(p2) + 1
        _halving(st, real, _super_bounds(n, sh), _masks(p2, False), False)
        if r:
            deps = st.arrived(t)
            for lo, hi in ((0, 2 * t * sh), ((2 * t + 1) * sh, n * sh)):   # all but its shard
                b.add(src=2 * t + 1, dst=2 * t, channel=0, step=st.step, chunk=lo // sh, lo=lo,
                      hi=hi, reduce=False, deps=deps)
    return b.build(elem_bytes)


@lru_cache(maxsize=32)
def broadcast(nodes, local, elems, elem_bytes, channels=1, chunk_bytes=0) -> Template:
    n, b = nodes * local, Builder()
    if n > 1 and elems > 0:
        got = np.full(n, -1, np.int64)                 # the transfer that brought the data
        for s in range((n - 1).bit_length()):
            m = 1 << s
            q = np.arange(min(m, n - m))
            got[q + m] = b.add(src=q, dst=q + m, channel=0, step=s, chunk=0, lo=0, hi=elems,
                               reduce=False, deps=got[q][:, None])
    return b.build(elem_bytes)


@lru_cache(maxsize=32)
def reduce(nodes, local, elems, elem_bytes, channels=1, chunk_bytes=0) -> Template:
    n, b = nodes * local, Builder()
    if n > 1 and elems > 0:
        st = _Steps(b, n)
        for s in range((n - 1).bit_length()):
            m = 1 << s
            q = np.arange(m, n, 2 * m)
            st.add(q, q - m, 0, elems, True, st.arrived(q), inbox_of=q - m)
    return b.build(elem_bytes)
