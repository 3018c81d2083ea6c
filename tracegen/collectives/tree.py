"""Double binary tree AllReduce as NCCL runs it: trees over nodes, a chain inside each node.

Trees over the N nodes (NCCL src/graph/trees.cc, re-derived):
- tree 0 (`btree_parent`): node 0 is the root and has one child, the largest power of two below N.
  Any other node r with lowest set bit b hangs under r+b when bit 2b of r is clear and r+b < N,
  otherwise under r-b. That gives an in-order binary tree whose leaves are the odd nodes.
- tree 1 (`dtree_parent`): with N even the mirror image (node r plays N-1-r), with N odd tree 0
  shifted by one (node r plays r-1 mod N). Most nodes are a leaf in one tree and inner in the other.
Channels: the first half of the channels (rounded up) run tree 0, the rest tree 1, and channel c
and c + ceil(C/2) share one chain head, hence one NIC (NCCL duplicates channel c into c+nChannels
and gives the copy the other tree): every NIC runs both trees. With one channel only tree 0 runs.

Inside a node (NCCL's TREE pattern, all of a channel's NIC traffic on one GPU): channel c's chain
starts at local member h = channel_head(c) and walks h, h+1, .., h-1; the head h talks to the
parent and child nodes, whose heads are also local h, so every NET hop of a tree stays on rail h.
(NCCL may also pick the SPLIT/BALANCED patterns; we keep the one that stays on rail.)

Pipelining: the buffer is cut into loops of (channels x chunk) elements, channel c taking the c-th
chunk of each loop (last loop shrinks evenly). For every chunk, each non-root member sends its
partial sum up once its children's partials have arrived (reduce), and the root's full sum comes
back down, each member forwarding what it received from its parent (broadcast). Steps: an up-send
from a member at depth d is step D-d, a down-send to a member at depth d is step D+d-1 (D = depth
of the deepest member), so a transfer's inputs always have smaller steps.
Flow control (NCCL's `runTreeSplit`, src/device/all_reduce.h, Simple: one 512 KiB step per
chunk): a sender may run only NCCL_STEPS = 8 chunks ahead of its receiver, whose buffer slots free
as it passes chunks on. Deps here are deliveries to the sender, so the credit is read where the
sender sees it: a member's up-send of chunk k waits until its parent's down-send of chunk
k - WINDOW has reached it. That comes a round trip after the slot was freed, hence WINDOW =
2·NCCL_STEPS. Without a window a list scheduler lets every chain tail push all its chunks over
NVLink first while the NICs idle.

Bytes per member per channel carrying B bytes: it sends B up (unless root) plus B to each child,
and receives the same: sent = received = B * (children + (0 if root else 1)). Summed over the
channels, with children counted in that channel's tree over positions (chain next + child heads).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..tables import Ragged
from .template import Builder, Template, chunk_loops, ragged_gather, tile_deps

NCCL_STEPS = 8      # buffer slots per connection (src/include/device.h); Tree: one chunk per slot
WINDOW = 2 * NCCL_STEPS   # credit, observed a round trip late (see module doc)


def btree_parent(nodes: int) -> np.ndarray:
    r = np.arange(nodes, dtype=np.int64)
    low = r & -r
    up = np.where(r & (low << 1), r - low, r + low)
    up = np.where(up >= nodes, r - low, up)
    up[:1] = -1
    return up


def dtree_parent(nodes: int) -> np.ndarray:
    r = np.arange(nodes, dtype=np.int64)
    if nodes % 2:                                   # shift: node r plays r-1 in tree 0
        p = btree_parent(nodes)[(r - 1) % nodes]
        return np.where(p < 0, -1, (p + 1) % nodes)
    p = btree_parent(nodes)[nodes - 1 - r]          # mirror: node r plays N-1-r
    return np.where(p < 0, -1, nodes - 1 - p)


def channel_tree(channels: int) -> np.ndarray:
    """Which tree (0 or 1) each channel runs: the first ceil(C/2) tree 0, the rest tree 1."""
    c = np.arange(channels)
    return np.zeros(channels, np.int64) if channels == 1 else (2 * c) // channels


def channel_head(channels: int, local: int) -> np.ndarray:
    """Local member (rail) that heads each channel's chain: channel c and c + ceil(C/2) share it.

    NCCL's `ncclTopoPreset` copies channel c to c + nChannels ("Duplicate channels trees", same
    intra-node chain, so the same NIC) and `connectTrees` gives the copy the second tree: every
    NIC carries both trees, which balances a node that is inner in one and a leaf in the other."""
    half = -(-channels // 2)
    return (np.arange(channels) % half) % local


def position_parents(nodes: int, local: int, channels: int) -> np.ndarray:
    """[channels, n] parent position of every member in the channel's tree (-1: root)."""
    trees = (btree_parent(nodes), dtree_parent(nodes))
    k, j = np.divmod(np.arange(nodes * local), local)
    out = []
    heads = channel_head(channels, local)
    for c, t in enumerate(channel_tree(channels)):
        h = int(heads[c])
        m = (j - h) % local                         # place in the node's chain, 0 = head
        pnode = trees[t][k]
        head_parent = np.where(pnode >= 0, pnode * local + h, -1)
        out.append(np.where(m > 0, k * local + (h + m - 1) % local, head_parent))
    return np.array(out, dtype=np.int64).reshape(channels, nodes * local)


def depths(parent: np.ndarray) -> np.ndarray:
    d = np.zeros(len(parent), dtype=np.int64)
    cur = parent.copy()
    while (cur >= 0).any():
        d += cur >= 0
        cur = np.where(cur >= 0, parent[np.maximum(cur, 0)], -1)
    return d


def tree_depth_estimate(nodes: int, local: int) -> int:
    """NCCL's tree depth approximation: nRanks/nNodes - 1 + log2i(nNodes)."""
    return local - 1 + int(nodes).bit_length() - 1


def tree_chunk_bytes(total_bytes: int, channels: int, depth: int, chunk_bytes: int) -> int:
    """NCCL's Tree/Simple chunk tuning: halve the chunk until the pipeline has enough chunks."""
    for mult, floor in ((8, 131072), (4, 65536), (1, 32768)):
        while total_bytes // (channels * chunk_bytes) < depth * mult and chunk_bytes > floor:
            chunk_bytes //= 2
    return chunk_bytes


def _pattern(parent: np.ndarray):
    """One chunk on one channel: (src, dst, step, reduce, deps) with local row ids.

    Up rows (children first), then down rows (parents first)."""
    n = len(parent)
    d = depths(parent)
    D = int(d.max()) if n else 0
    kids = np.flatnonzero(parent >= 0)
    up_rows = kids[np.argsort(-d[kids], kind="stable")]
    down_rows = kids[np.argsort(d[kids], kind="stable")]
    up_id = np.full(n, -1, np.int64)
    up_id[up_rows] = np.arange(len(up_rows))
    down_id = np.full(n, -1, np.int64)
    down_id[down_rows] = len(up_rows) + np.arange(len(down_rows))
    # children of every position as CSR over the up-row ids
    by_parent = kids[np.argsort(parent[kids], kind="stable")]
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(parent[kids], minlength=n), out=ptr[1:])
    child_up = up_id[by_parent]
    up_deps = ragged_gather(ptr, child_up, up_rows)                   # partials of my children
    root = int(np.flatnonzero(parent < 0)[0])
    p = parent[down_rows]
    from_root = p == root
    lens = np.where(from_root, ptr[root + 1] - ptr[root], 1)
    dptr = np.zeros(len(down_rows) + 1, np.int64)
    np.cumsum(lens, out=dptr[1:])
    vals = np.empty(int(dptr[-1]), np.int64)
    root_kids = child_up[ptr[root]:ptr[root + 1]]
    starts = dptr[:-1]
    for_root = np.flatnonzero(from_root)
    if len(for_root):
        vals[(starts[for_root][:, None] + np.arange(len(root_kids))).ravel()] = \
            np.tile(root_kids, len(for_root))
    vals[starts[~from_root]] = down_id[p[~from_root]]                # what my parent received
    deps = Ragged.concat([up_deps, Ragged(dptr, vals)])
    src = np.concatenate([up_rows, p])
    dst = np.concatenate([parent[up_rows], down_rows])
    step = np.concatenate([D - d[up_rows], D + d[down_rows] - 1])
    red = np.concatenate([np.ones(len(up_rows), bool), np.zeros(len(down_rows), bool)])
    # flow-control credit of an up-send: the parent's down-send to the same member (module doc)
    credit = Ragged(np.r_[0, np.cumsum(red)].astype(np.int64), down_id[src[red]])
    return src, dst, step, red, deps, credit


def _merge_rows(parts: list[Ragged]) -> Ragged:
    """Row i of the result = row i of every part, in part order."""
    lens = np.stack([p.lengths() for p in parts])
    ptr = np.zeros(lens.shape[1] + 1, np.int64)
    np.cumsum(lens.sum(axis=0), out=ptr[1:])
    vals = np.empty(int(ptr[-1]), np.int64)
    before = np.cumsum(lens, axis=0) - lens                          # earlier parts' share per row
    for k, p in enumerate(parts):
        ln = lens[k]
        at = np.repeat(ptr[:-1] + before[k], ln) + np.arange(len(p.values)) - np.repeat(p.ptr[:-1], ln)
        vals[at] = p.values
    return Ragged(ptr, vals)


def _shift_rows(deps: Ragged, loops: int, per_loop: int, back: int) -> Ragged:
    """`deps` (one loop's rows) tiled over the loops, each pointing `back` loops earlier; rows of
    the first `back` loops get none."""
    t = tile_deps(deps, loops, per_loop)
    keep = np.repeat(np.arange(loops) >= back, per_loop)
    lens = np.where(keep, t.lengths(), 0)
    ptr = np.zeros(len(lens) + 1, np.int64)
    np.cumsum(lens, out=ptr[1:])
    vals = t.values[np.repeat(keep, t.lengths())] - back * per_loop
    return Ragged(ptr, vals)


@lru_cache(maxsize=32)
def allreduce(nodes: int, local: int, elems: int, elem_bytes: int, channels: int,
              chunk_bytes: int) -> Template:
    n = nodes * local
    b = Builder()
    if n > 1 and elems > 0:
        parents = position_parents(nodes, local, channels)
        pats = [_pattern(parents[c]) for c in range(channels)]
        R = 2 * (n - 1)
        chunk = max(1, chunk_bytes // elem_bytes)
        offs, real = chunk_loops(elems, channels, chunk)
        loops = len(offs)
        # one pattern per channel, stacked: rows ordered (loop, channel, pattern row)
        offsets = [c * R for c in range(channels)]
        per_ch = Ragged.concat([p[4] for p in pats], offsets=offsets)
        rows = channels * R
        credit = Ragged.concat([p[5] for p in pats], offsets=offsets)
        deps = _merge_rows([tile_deps(per_ch, loops, rows),               # data it needs
                            _shift_rows(credit, loops, rows, WINDOW)])    # pipeline window
        deps = Ragged(deps.ptr, deps.values + b.n)
        names = ("src", "dst", "step", "red")
        col = {k: np.stack([p[i] for p in pats]) for i, k in enumerate(names)}
        c = np.arange(channels)[None, :, None]
        L = np.arange(loops)[:, None, None]
        lo = np.minimum(offs[L] + c * real[L], elems)
        hi = np.minimum(lo + real[L], elems)
        b.add(src=col["src"][None], dst=col["dst"][None], channel=c, step=col["step"][None],
              chunk=L * channels + c, lo=lo, hi=hi, reduce=col["red"][None], deps=deps)
    return b.build(elem_bytes)
