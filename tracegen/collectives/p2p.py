"""Point-to-point send/recv (pipeline activations and gradients) as NCCL moves it.

NCCL spreads a p2p operation over its p2p channels; each channel moves a contiguous part of the
buffer as network messages of at most NCCL_P2P_NET_CHUNKSIZE (128 KiB).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from .template import Builder, Template


@lru_cache(maxsize=256)
def p2p_template(elems: int, elem_bytes: int, channels: int):
    """Columns (channel, bytes) of one send, split evenly over channels on element boundaries."""
    per = -(-elems // channels)
    starts = np.arange(channels) * per
    sizes = np.clip(elems - starts, 0, per) * elem_bytes
    keep = sizes > 0
    out = {"channel": np.arange(channels)[keep].astype(np.int64), "bytes": sizes[keep].astype(np.int64)}
    for v in out.values():
        v.flags.writeable = False
    return out


@lru_cache(maxsize=256)
def sendrecv(nodes: int, local: int, elems: int, elem_bytes: int, channels: int,
             chunk_bytes: int = 0) -> Template:
    """Position 0 sends its buffer to position 1 (the group is [src, dst]); no dependencies."""
    b = Builder()
    if nodes * local >= 2 and elems > 0:
        per = -(-elems // channels)
        lo = np.arange(channels, dtype=np.int64) * per
        b.add(src=0, dst=1, channel=np.arange(channels), step=0, chunk=np.arange(channels), lo=lo,
              hi=np.minimum(lo + per, elems), reduce=False)
    return b.build(elem_bytes)
