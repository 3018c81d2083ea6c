"""AllToAll as NCCL runs it: grouped send/recv, every pair directly.

Member i's send buffer holds n blocks (block j goes to member j, ceil(elems/n) elements each);
NCCL issues the sends in rounds delta = 1..n-1 (i sends to i+delta while receiving from i-delta;
the local block is a copy and never moves). Each block is spread over the p2p channels like a
send/recv. No dependencies: every block is the sender's own input. Each member sends and receives
(n-1) blocks = (n-1)/n * S.

Element space (see template.py): item i*elems_padded + e is element e of member i's send buffer,
so block (i -> j) is items [i*E + j*blk, i*E + (j+1)*blk) with E = n*blk.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from .template import Builder, Template


def channel_split(blk: int, channels: int) -> tuple[np.ndarray, np.ndarray]:
    """Offsets and lengths of a block's pieces over the channels (ceil split, element aligned)."""
    per = -(-blk // channels)
    off = np.arange(channels, dtype=np.int64) * per
    return off, np.clip(blk - off, 0, per)


@lru_cache(maxsize=32)
def direct(nodes, local, elems, elem_bytes, channels, chunk_bytes=0) -> Template:
    n, b = nodes * local, Builder()
    if n > 1 and elems > 0:
        blk = -(-elems // n)
        E = n * blk
        off, size = channel_split(blk, channels)
        delta = np.arange(1, n)[:, None, None]                  # [rounds, n, channels]
        i = np.arange(n)[None, :, None]
        j = (i + delta) % n
        lo = i * E + j * blk + off
        b.add(src=i, dst=j, channel=np.arange(channels), step=delta - 1, chunk=j, lo=lo,
              hi=lo + size, reduce=False)
    return b.build(elem_bytes)
