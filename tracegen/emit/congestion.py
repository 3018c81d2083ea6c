"""Congestion artefacts for switch labs: ECN-CE marks on data packets and the CNPs they trigger.

  * Marks: a deterministic set of data packets, numbered globally in plan order (message by
    message, packet by packet), carries CE (ECN 0b11) in its *receiver's* copy - the switch marked
    it on the way; the sender's copy keeps ECT. `random`: packet g is marked when a seeded
    splitmix64 hash of g falls below fraction * 2^64; `periodic`: every 1/fraction-th packet.
  * CNPs (DCQCN notification point): the receiver NIC answers a CE-marked packet with a CNP to the
    sender's QP once it has fully arrived, at most one per QP per CNP_MIN_GAP_NS
    (mlx5 `min_time_between_cnps`, 4 us by default); marks inside that gap are absorbed.
    CNP frame: BTH opcode 0x81, BECN, P_Key, DestQP = sender's QP, PSN 0, 16 reserved zero bytes,
    ICRC; IP DSCP 48, PCP 6, TTL 64, UDP source port 0 (WIRE.md, ConnectX-4 Lx capture).
Memory stays proportional to the marks, never to the packets.
"""
from __future__ import annotations

import numpy as np

CNP_DSCP = 48
CNP_PCP = 6
CNP_TTL = 64                 # made by the NIC, not by NCCL's QP: the ConnectX-4 Lx CNP of WIRE.md
CNP_MIN_GAP_NS = 4000
ECN_CE = 3
_CHUNK = 1 << 22     # packets hashed at a time (bounded memory)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def ce_marks(n_packets: int, fraction: float, pattern: str, seed: int) -> np.ndarray:
    """Sorted global indices (int64) of the CE-marked data packets among n_packets."""
    if fraction <= 0 or n_packets == 0:
        return np.zeros(0, np.int64)
    if pattern == "periodic":
        k = np.arange(1, int(n_packets * fraction) + 1, dtype=np.float64)
        g = np.ceil(k / fraction).astype(np.int64) - 1
        return np.unique(g[(g >= 0) & (g < n_packets)])
    threshold = np.uint64(min(int(fraction * 2.0**64), 2**64 - 1))
    salt = np.uint64((seed * 0xD1B54A32D192ED03) & (2**64 - 1))
    out = []
    with np.errstate(over="ignore"):
        for a in range(0, n_packets, _CHUNK):
            g = np.arange(a, min(a + _CHUNK, n_packets), dtype=np.uint64)
            out.append(g[_splitmix64(g ^ salt) < threshold].astype(np.int64))
    return np.concatenate(out)


def rate_limit(qp: np.ndarray, t_ns: np.ndarray, gap_ns: int = CNP_MIN_GAP_NS) -> np.ndarray:
    """Bool per candidate: kept when it comes gap_ns or more after the last kept one of its QP
    (greedy in time order, as the NIC's per-QP timer works)."""
    keep = np.zeros(len(qp), bool)
    order = np.lexsort((np.arange(len(qp)), t_ns, qp))
    last_qp, last_t = None, 0
    for i, q, t in zip(order.tolist(), qp[order].tolist(), t_ns[order].tolist()):
        if q != last_qp or t - last_t >= gap_ns:
            keep[i], last_qp, last_t = True, q, t
    return keep
