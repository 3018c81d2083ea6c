"""NCCL protocols on the wire: how much a payload grows, how big a step / network message is.

- Simple: payload as is. Network messages of one slice (ring AllReduce/ReduceScatter/AllGather:
  `ring_msg_bytes`, 2 steps) or one step (`simple_step_bytes`: Tree, Broadcast, Reduce); p2p
  messages of `p2p_chunk_bytes`.
- LL: 16-byte lines of 8 B data + 8 B flags (two 4 B data / 4 B flag pairs): wire = 2 x payload
  (rounded up to whole lines). A step is 64 KiB on the wire (NCCL_LL buffer 512 KiB / 8 steps),
  i.e. 32 KiB of data, and every step is one network message.
- LL128: 128-byte lines carrying 120 B of data and an 8 B flag. A step is 614,400 B on the wire
  (NCCL_LL128 buffer / 8 steps) = 576,000 B of data, one network message per step.
`max_msg_bytes` is always in wire bytes; the TRANSFER row's `bytes` stays the payload.
"""
from __future__ import annotations

import numpy as np

from ..config import Nccl
from ..tables import Proto

NAMES = {"simple": Proto.SIMPLE, "ll": Proto.LL, "ll128": Proto.LL128}

LL_LINE_BYTES, LL_LINE_DATA_BYTES = 16, 8
LL128_LINE_BYTES, LL128_LINE_DATA_BYTES = 128, 120
LL_STEP_WIRE_BYTES = 64 << 10
LL128_STEP_WIRE_BYTES = 614_400
LL_STEP_DATA_BYTES = LL_STEP_WIRE_BYTES // LL_LINE_BYTES * LL_LINE_DATA_BYTES          # 32 KiB
LL128_STEP_DATA_BYTES = (LL128_STEP_WIRE_BYTES // LL128_LINE_BYTES
                         * LL128_LINE_DATA_BYTES)                                   # 576,000


def wire_bytes(payload: np.ndarray, proto: np.ndarray) -> np.ndarray:
    """Bytes on the wire for payloads under protocols (vectorized, both arrays)."""
    payload = np.asarray(payload, dtype=np.int64)
    proto = np.asarray(proto)
    ll = -(-payload // LL_LINE_DATA_BYTES) * LL_LINE_BYTES
    ll128 = -(-payload // LL128_LINE_DATA_BYTES) * LL128_LINE_BYTES
    return np.where(proto == Proto.LL, ll, np.where(proto == Proto.LL128, ll128, payload))


def step_data_bytes(proto: Proto, nccl: Nccl) -> int:
    """Payload of one pipeline step (one buffer slot)."""
    return {Proto.SIMPLE: nccl.simple_step_bytes, Proto.LL: LL_STEP_DATA_BYTES,
            Proto.LL128: LL128_STEP_DATA_BYTES}[proto]


def step_wire_bytes(proto: Proto, nccl: Nccl) -> int:
    return {Proto.SIMPLE: nccl.simple_step_bytes, Proto.LL: LL_STEP_WIRE_BYTES,
            Proto.LL128: LL128_STEP_WIRE_BYTES}[proto]
