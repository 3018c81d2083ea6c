"""The nccl section's keys: NCCL's algorithm, protocol, channels and chunk sizes."""
from __future__ import annotations

from dataclasses import dataclass

from .declare import G, K, key


@dataclass(frozen=True)
class NcclKeys:
    algorithm: str = key("ring", "NCCL_ALGO", choices=("ring", "tree", "halving_doubling", "hierarchical", "auto"))
    channels: int = key(2, "NCCL's MAXCHANNELS", 1, 64)
    ring_msg_bytes: int = key(1 << 20, "network message of the Simple protocol", 256, G)
    ring_chunk_bytes: int = key(2 << 20, "ring chunk per step", 1 * K, G)
    p2p_chunk_bytes: int = key(128 << 10, "send/recv network chunk", 1 * K, G)
    qps_per_connection: int = key(1, "NCCL_IB_QPS_PER_CONNECTION", 1, 128)
    protocol: str = key("simple", "NCCL_PROTO", choices=("simple", "ll", "ll128", "auto"))
    simple_step_bytes: int = key(512 << 10, "NCCL_BUFFSIZE / NCCL_STEPS", 1 * K, G)
    pxn: bool = key(True, "a cross-rail send hops over NVLink to the GPU on the destination's rail first "
                          "(NCCL >= 2.12: rail-aligned)")
    fifo_tc: int = key(-1, "NCCL_IB_FIFO_TC; -1: the data's", -1, 255)
