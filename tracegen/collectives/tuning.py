"""Which algorithm, protocol, channel count and chunk size an op runs with (`nccl.algorithm: auto`).

The auto rule is a simplified copy of NCCL's cost model (src/graph/tuning.cc, 2.18 era, values
re-typed below): time_us = latency_us + bytes / (1000 * algbw_GBps), minimised over the enabled
(algorithm, protocol) pairs. NCCL only offers Tree for AllReduce, so auto picks Tree or Ring for
AllReduce and Ring for the other collectives; halving-doubling and hierarchical are never chosen
automatically (they are not NCCL algorithms).
- latency = base[algo][proto] + per-hop hardware latency:
  ring: (nsteps - nInterSteps) * intra + nInterSteps * inter, nsteps = 2(n-1) AllReduce, n-1
  ReduceScatter/AllGather, n Broadcast/Reduce; nInterSteps = 2N (AllReduce, N > 1), N-1, N.
  On several nodes intra is at least the 1 us network post overhead (3 us for Simple).
  tree: 2 * ((L-1) * intra + log2(N) * inter).
- bus bandwidth = NVLink per GPU on one node, else min(NVLink, min(L, channels) NICs); then NCCL's
  refinements: ring LL x1/4 (x1/3 single-node ReduceScatter/AllGather/Broadcast), ring LL128
  x0.92 (x0.7 with one GPU per node); tree x0.92 x0.85 (TREE pattern), tree LL x1/3.8, tree LL128
  x120/128 (x7/9 on one node). Algorithm bandwidth = bus x n/nsteps (ring), bus x 1/2 (tree).
Left out: NCCL's per-channel bandwidth caps, the tree correction factors for mid sizes and the
ring plateau factor, CollNet/NVLS/PAT.

Channel trimming (NCCL enqueue.cc, applied to every collective, not to send/recv): a small op uses
fewer channels, the largest nc <= channels with bytes >= nc * threads * threshold (Simple 512 x 64,
LL 512 x 8 (ring: x n), LL128 640 x 8), at least 1.
Send/recv and AllToAll use LL up to 16 KiB per peer under `protocol: auto` (NCCL_P2P_LL_THRESHOLD).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..config import Nccl
from ..errors import ConfigError
from ..tables import Algo, CollKind, Proto
from . import protocol
from .tree import tree_chunk_bytes, tree_depth_estimate

ALGORITHM_NAMES = ("ring", "tree", "halving_doubling", "hierarchical", "auto")
PROTOCOL_NAMES = ("simple", "ll", "ll128", "auto")
ALGO_ID = {"ring": Algo.RING, "tree": Algo.TREE, "halving_doubling": Algo.HALVING_DOUBLING,
           "hierarchical": Algo.HIERARCHICAL, "direct": Algo.P2P, "p2p": Algo.P2P}

S, LL, LL128 = Proto.SIMPLE, Proto.LL, Proto.LL128
BASE_LAT_US = {("tree", LL): 6.8, ("tree", LL128): 14.0, ("tree", S): 0.0,
               ("ring", LL): 6.6, ("ring", LL128): 14.0, ("ring", S): 8.4}
NVLINK_LAT_US = {("tree", LL): 0.6, ("tree", LL128): 1.25, ("tree", S): 28.0,
                 ("ring", LL): 0.6, ("ring", LL128): 1.9, ("ring", S): 3.4}
NET_LAT_US = {("tree", LL): 5.0, ("tree", LL128): 8.5, ("tree", S): 28.0,
              ("ring", LL): 2.7, ("ring", LL128): 4.0, ("ring", S): 14.0}
NET_POST_OVERHEAD_US = 1.0
THREADS_X_THRESHOLD = {S: 512 * 64, LL: 512 * 8, LL128: 640 * 8}
P2P_LL_THRESHOLD_BYTES = 16384


@dataclass(frozen=True)
class Plan:
    algo: str             # registry key: ring tree halving_doubling hierarchical direct p2p
    proto: Proto
    channels: int
    chunk_bytes: int      # pipeline chunk (payload bytes)
    max_msg_bytes: int    # largest network message, wire bytes

    @property
    def algo_id(self) -> Algo:
        return ALGO_ID[self.algo]


def check(nccl: Nccl) -> None:
    if nccl.algorithm not in ALGORITHM_NAMES:
        raise ConfigError(f"nccl.algorithm: {nccl.algorithm!r} is not accepted — use one of "
                          + ", ".join(repr(a) for a in ALGORITHM_NAMES))
    if nccl.protocol not in PROTOCOL_NAMES:
        raise ConfigError(f"nccl.protocol: {nccl.protocol!r} is not accepted — use one of "
                          + ", ".join(repr(p) for p in PROTOCOL_NAMES))
    if nccl.channels < 1:
        raise ConfigError(f"nccl.channels: must be at least 1, got {nccl.channels}")


def _nsteps(kind: CollKind, n: int, nodes: int) -> tuple[int, int]:
    if kind == CollKind.ALLREDUCE:
        return 2 * (n - 1), (2 * nodes if nodes > 1 else 0)
    if kind in (CollKind.REDUCESCATTER, CollKind.ALLGATHER):
        return n - 1, nodes - 1
    return n, nodes


def predict_us(algo: str, proto: Proto, kind: CollKind, n: int, nodes: int, local: int,
               nbytes: int, channels: int, nic_gbps: int, nvlink_gbps: int) -> float:
    """NCCL-like time estimate of one collective (see module doc)."""
    nvl = nvlink_gbps / 8
    bus = nvl if nodes == 1 else min(nvl, min(local, channels) * nic_gbps / 8)
    nsteps, ninter = _nsteps(kind, n, nodes)
    intra, inter = NVLINK_LAT_US[algo, proto], NET_LAT_US[algo, proto]
    if algo == "ring":
        if proto == LL:
            single = nodes == 1 and kind not in (CollKind.ALLREDUCE, CollKind.REDUCE)
            bus *= 1 / 3 if single else 1 / 4
        elif proto == LL128:
            bus *= 0.92 if local >= 2 else 0.7
        algbw = bus * n / nsteps
        if nodes > 1:
            intra = max(intra, NET_POST_OVERHEAD_US * (3 if proto == S else 1))
        lat = BASE_LAT_US[algo, proto] + (nsteps - ninter) * intra + ninter * inter
    else:
        bus *= 0.92 * 0.85
        if proto == LL:
            bus /= 3.8
        elif proto == LL128:
            bus *= 7 / 9 if nodes == 1 else 120 / 128
        algbw = bus * 0.5
        lat = BASE_LAT_US[algo, proto] + 2 * ((local - 1) * intra
                                              + (nodes.bit_length() - 1) * inter)
    return lat + nbytes / (1000 * algbw)


def trim_channels(algo: str, proto: Proto, n: int, nbytes: int, channels: int) -> int:
    per = THREADS_X_THRESHOLD[proto] * (n if (algo == "ring" and proto == LL) else 1)
    return int(max(1, min(channels, nbytes // per)))


@lru_cache(maxsize=4096)
def plan(kind: CollKind, nccl: Nccl, n: int, nodes: int, local: int, nbytes: int,
         nic_gbps: int, nvlink_gbps: int) -> Plan:
    """Resolve algorithm, protocol, channels, chunk and message size for one op."""
    want = nccl.algorithm
    protos = (S, LL, LL128) if nccl.protocol == "auto" else (protocol.NAMES[nccl.protocol],)
    if kind in (CollKind.SENDRECV, CollKind.ALLTOALL):
        algo = "p2p" if kind == CollKind.SENDRECV else (
            "hierarchical" if want == "hierarchical" else "direct")
        per_peer = nbytes if kind == CollKind.SENDRECV else nbytes // max(n, 1)
        proto = protos[0] if len(protos) == 1 else (LL if per_peer <= P2P_LL_THRESHOLD_BYTES else S)
        proto = S if proto == LL128 else proto                  # p2p has no LL128
        msg = nccl.p2p_chunk_bytes if proto == S else protocol.step_wire_bytes(proto, nccl)
        return Plan(algo, proto, nccl.channels, nccl.p2p_chunk_bytes, msg)
    if want == "tree" and kind != CollKind.ALLREDUCE:
        want = "ring"                                           # NCCL: Tree is AllReduce only
    if want == "auto":
        algos = ("ring", "tree") if kind == CollKind.ALLREDUCE else ("ring",)
    else:
        algos = (want,)
    if algos[0] in ("ring", "tree"):
        cost = {(a, p): predict_us(a, p, kind, n, nodes, local, nbytes,
                                   trim_channels(a, p, n, nbytes, nccl.channels),
                                   nic_gbps, nvlink_gbps)
                for a in algos for p in protos}
        algo, proto = min(cost, key=cost.get)
    else:
        algo, proto = algos[0], (S if len(protos) > 1 else protos[0])
    channels = trim_channels(algo, proto, n, nbytes, nccl.channels)
    chain = kind in (CollKind.BROADCAST, CollKind.REDUCE)
    if proto != S:
        chunk = protocol.step_data_bytes(proto, nccl)
        msg = protocol.step_wire_bytes(proto, nccl)
    elif algo == "tree":
        chunk = tree_chunk_bytes(nbytes, channels, tree_depth_estimate(nodes, local),
                                 nccl.simple_step_bytes)
        msg = chunk
    elif chain:
        chunk = msg = nccl.simple_step_bytes
    else:
        chunk, msg = nccl.ring_chunk_bytes, nccl.ring_msg_bytes
    if algo == "halving_doubling":
        channels = 1                                            # one transfer per step
    return Plan(algo, proto, channels, chunk, msg)
