"""Ring AllReduce as NCCL's Simple protocol runs it: reduce-scatter then all-gather, 2(n-1) steps.

The buffer is processed in loops of (channels x n x chunk) bytes; in each loop, channel c owns n
chunks and rank i of the ring sends, at step k, chunk (i-k) mod n during reduce-scatter
(k < n-1) and chunk (i+1-k') mod n during all-gather (k' = k-(n-1)). A step's transfer needs the
previous step's transfer into this rank (its data), so step k on rank i depends on step k-1 on
rank i-1. Chunks are split on element boundaries; the last loop shrinks its chunks evenly, as
NCCL does (realChunkSize = min(chunkSize, divUp(remaining, nChannels*nRanks))).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np


@lru_cache(maxsize=256)
def ring_allreduce_template(n: int, elems: int, elem_bytes: int, channels: int, chunk_bytes: int):
    """Transfers of one ring AllReduce, ranks as ring positions 0..n-1.

    Returns columns (pos_src, channel, step, chunk, bytes, dep) where dep is the row index of the
    transfer this one needs (-1: none). Rows are ordered (loop, channel, step, position), so a
    dependency always points to an earlier row.
    """
    chunk_elems = max(1, chunk_bytes // elem_bytes)
    loop_elems = channels * n * chunk_elems
    steps = 2 * (n - 1)
    pos = np.arange(n)
    k = np.arange(steps)
    # chunk index sent by position i at step k
    rs = (pos[None, :] - k[:, None]) % n
    ag = (pos[None, :] + 1 - (k[:, None] - (n - 1))) % n
    chunk_of = np.where(k[:, None] < n - 1, rs, ag)                      # [steps, n]
    cols = {key: [] for key in ("pos", "channel", "step", "chunk", "bytes", "dep")}
    base = 0
    for off in range(0, elems, loop_elems):
        rem = elems - off
        real = min(chunk_elems, -(-rem // (channels * n)))
        for c in range(channels):
            # element span of chunk i in this channel: [start, start+real) clipped to the buffer
            starts = off + (c * n + np.arange(n)) * real
            sizes = np.clip(elems - starts, 0, real)
            nbytes = sizes[chunk_of] * elem_bytes                           # [steps, n]
            idx = base + np.arange(steps * n).reshape(steps, n)
            dep = np.full((steps, n), -1, dtype=np.int64)
            dep[1:] = np.roll(idx[:-1], 1, axis=1)                        # from position i-1, step k-1
            keep = nbytes > 0
            # dropping empty chunks must keep dependencies pointing at kept rows: an empty
            # chunk is empty at every step, so its whole chain is dropped together.
            cols["pos"].append(np.broadcast_to(pos, (steps, n))[keep])
            cols["channel"].append(np.full(int(keep.sum()), c))
            cols["step"].append(np.broadcast_to(k[:, None], (steps, n))[keep])
            cols["chunk"].append(chunk_of[keep] + (off // loop_elems) * channels * n + c * n)
            cols["bytes"].append(nbytes[keep])
            cols["dep"].append(np.where(keep, dep, -1)[keep])
            # renumber: rows kept so far
            kept_idx = np.full(steps * n, -1, dtype=np.int64)
            kept_idx[keep.ravel()] = base + np.arange(int(keep.sum()))
            d = cols["dep"][-1]
            d[d >= 0] = kept_idx[d[d >= 0] - base]
            base += int(keep.sum())
    out = {key: np.concatenate(v).astype(np.int64) for key, v in cols.items()}
    for v in out.values():
        v.flags.writeable = False
    return out
