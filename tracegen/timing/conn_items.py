"""The connection-level schedule's fluid items (schedule_conn.py): an op's edges grouped into items -
one per collective channel (its edges move in lockstep) or per send queue - with their links merged."""
from __future__ import annotations

import numpy as np

from .. import progress
from ..tables import CollKind

GROUP_STEPS = 5     # the links and items bar: item links, send queues, item keys, item links merged, done


# Rows whose links are merged at once in group_items: the (item, link) pairs of all rows at once
# held ~65 B per pair (keys, sort, inverse, weights; 32k GPUs: 1.8 GB over a 1.1 GB table).
GROUP_BLOCK_ROWS = 1 << 18


def group_items(op_id, channel, kind, queue, nbytes, links, width: int, block_rows: int | None = None,
                row_lens=None):
    """Rows -> fluid items. The edges of one channel of a collective move in lockstep (a ring step,
    a tree level or a halving-doubling round needs the one before it), so they form one item that
    crosses all their links, each edge's weight scaled by its share of the largest edge's bytes:
    the channel runs at the rate of its most loaded link. Send/recv and AllToAll pairs have no
    such coupling: an item per send queue (the pairs an op sends on one QP go one after the
    other). links: the rows' links as CSR (ptr, link, weight), or a function (lo, hi) -> that
    CSR for rows [lo, hi) (made block by block: never all at once) with row_lens, the number of
    links of each row; every link < width. Returns (item of each row, op, bytes, ptr, links, weights).

    An item lies within one op; with rows sorted by op, blocks of whole ops merge their items'
    links alone (each pair's weights summed in row order, as all at once). Item ids follow the
    sorted keys: per-queue items (negative keys) of later ops first, then the channels' in op
    order - so each block's pairs go straight to their place in one output (untouched pages of
    its upper bound are never resident), per-queue ones backwards from the end of theirs."""
    block_rows = GROUP_BLOCK_ROWS if block_rows is None else block_rows
    if isinstance(links, tuple):
        ptr0, lk0, w0 = links
        links = lambda lo, hi: (ptr0[lo:hi + 1] - ptr0[lo], lk0[ptr0[lo]:ptr0[hi]], w0[ptr0[lo]:ptr0[hi]])  # noqa: E731
        row_lens = np.diff(ptr0)
    coupled = (kind != CollKind.SENDRECV) & (kind != CollKind.ALLTOALL)
    key = np.where(coupled, op_id * 65536 + channel, -1 - (op_id * (int(queue.max(initial=0)) + 1) + queue))
    uk, item = np.unique(key, return_inverse=True)
    n_free = int(np.searchsorted(uk, 0))      # per-queue items: ids [0, n_free)
    del key, uk
    progress.report(3, GROUP_STEPS)
    n = len(op_id)
    m = int(item.max(initial=-1)) + 1
    big = np.zeros(m)
    np.maximum.at(big, item, nbytes)
    scale = np.where(big[item] > 0, nbytes / np.maximum(big[item], 1e-300), 1.0)
    ordered = n < 2 or bool((op_id[1:] >= op_id[:-1]).all())
    bounds = [0, n]
    if ordered and n > block_rows:            # cut between ops only
        cuts = np.searchsorted(op_id, op_id[np.arange(block_rows, n, block_rows)], "left")
        bounds = sorted({0, n, *cuts.tolist()})
    if len(bounds) > 2:
        e_free = int(row_lens[~coupled].sum())
        size = int(row_lens.sum())
        out_k, out_w = np.empty(size, np.int64), np.empty(size)
        u_lo, c_hi = e_free, e_free           # per-queue pairs fill [u_lo, e_free), channels' from e_free on
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        ptr, lk, w = links(lo, hi)
        lens = np.diff(ptr)
        pair = np.repeat(item[lo:hi].astype(np.int64), lens) * width + lk
        k2, inv = np.unique(pair, return_inverse=True)
        del pair
        ww = np.bincount(inv, weights=w * np.repeat(scale[lo:hi], lens), minlength=len(k2))
        del inv, ptr, lk, w
        if len(bounds) == 2:
            break
        split = int(np.searchsorted(k2, n_free * width))     # this block's per-queue pairs, then channels'
        out_k[u_lo - split:u_lo], out_w[u_lo - split:u_lo] = k2[:split], ww[:split]
        u_lo -= split
        c = len(k2) - split
        out_k[c_hi:c_hi + c], out_w[c_hi:c_hi + c] = k2[split:], ww[split:]
        c_hi += c
        del k2, ww
    if len(bounds) > 2:
        k2, ww = out_k[u_lo:c_hi], out_w[u_lo:c_hi]
    progress.report(4, GROUP_STEPS)
    it_ptr = np.searchsorted(k2, np.arange(m + 1, dtype=np.int64) * width).astype(np.int64)
    np.remainder(k2, width, out=k2)           # the pairs' links, in place
    it_op = np.zeros(m, np.int64)
    it_op[item] = op_id
    progress.report(GROUP_STEPS, GROUP_STEPS)
    return item, it_op, big, it_ptr, k2, ww
