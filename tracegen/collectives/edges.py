"""An op's transfers summed per NCCL connection: the unit the connection-level schedule times.

A Template (template.py) lists every chunk transfer of one collective shape; its *edges* are its
distinct (sender position, receiver position, channel) triples - a ring channel's neighbour
streams, a tree's parent/child links, a p2p pair - with the bytes each carries in total. Summed
per edge they are cached with the template, so a job's ops cost one array lookup each, whatever
the number of chunks; `op_edges` maps positions to ranks for many ops of one shape at once and
applies PXN the way `expand` does (a cross-rail NET edge becomes an NVLink hop to the sender
node's GPU on the destination's rail plus a NET edge on that rail).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..tables import LinkKind, Proto
from .protocol import wire_bytes as proto_wire_bytes
from .template import Template

def packet_overhead_bytes(vlan: bool = True, ip_version: int = 4) -> int:
    """Wire bytes a RoCEv2 data packet adds to its payload (WIRE.md): Ethernet 14 [+ 802.1Q 4] +
    IPv4 20 | IPv6 40 + UDP 8 + BTH 12 + ICRC 4, plus FCS 4 + preamble/SFD 8 + inter-frame gap 12."""
    return 14 + (4 if vlan else 0) + (20 if ip_version == 4 else 40) + 8 + 12 + 4 + 4 + 8 + 12


MSG_OVERHEAD_BYTES = 16 + 4   # RETH on the first packet, ImmDt on the last


def net_wire_bytes(nbytes, max_msg_bytes, pmtu: int, vlan: bool = True, ip_version: int = 4) -> np.ndarray:
    """Bytes a transfer occupies on the wire: its messages (at most max_msg_bytes each; an empty
    transfer is one empty WRITE-with-imm), their packets' headers, RETH + ImmDt, last-packet pad."""
    nbytes = np.asarray(nbytes, dtype=np.int64)
    max_msg = np.asarray(max_msg_bytes, dtype=np.int64)
    full_msgs, last_msg = nbytes // max_msg, nbytes % max_msg
    pkts_full = -(-max_msg // pmtu)
    pkts_last = np.where(nbytes == 0, 1, -(-last_msg // pmtu))
    msgs = full_msgs + ((last_msg > 0) | (nbytes == 0))
    pkts = full_msgs * pkts_full + pkts_last
    pad = (-(last_msg % pmtu)) % 4 + full_msgs * ((-(max_msg % pmtu)) % 4)
    return nbytes + pkts * packet_overhead_bytes(vlan, ip_version) + msgs * MSG_OVERHEAD_BYTES + pad


@dataclass(frozen=True)
class Edges:
    """Per edge of a template: positions, channel, transfers and bytes (payload, NVLink wire,
    network wire with RoCE headers)."""
    src: np.ndarray
    dst: np.ndarray
    channel: np.ndarray
    transfers: np.ndarray
    messages: np.ndarray      # NCCL network messages (RDMA writes) if it crosses the fabric
    packets: np.ndarray       # RoCE data packets then
    payload: np.ndarray
    nvl_wire: np.ndarray
    net_wire: np.ndarray

    def __len__(self) -> int:
        return len(self.src)


_CACHE: dict[tuple, tuple[Template, Edges]] = {}


def template_edges(t: Template, proto: int, max_msg_bytes: int, pmtu: int, vlan: bool = True,
                   ip_version: int = 4) -> Edges:
    key = (id(t), int(proto), int(max_msg_bytes), int(pmtu), bool(vlan), int(ip_version))
    hit = _CACHE.get(key)
    if hit is not None and hit[0] is t:
        return hit[1]
    n = int(max(t.src.max(), t.dst.max())) + 1
    k = (t.src.astype(np.int64) * n + t.dst) * 1024 + t.channel
    uk, inv = np.unique(k, return_inverse=True)
    wire = t.bytes if proto == Proto.SIMPLE else proto_wire_bytes(t.bytes, np.full(len(t), proto))
    net = net_wire_bytes(wire, max(int(max_msg_bytes), 1), pmtu, vlan, ip_version)
    m = len(uk)
    mm = max(int(max_msg_bytes), 1)
    msgs = np.maximum(1, -(-wire // mm))
    pkts = (wire // mm) * -(-mm // pmtu) + -(-(wire % mm) // pmtu)
    e = Edges(src=(uk // 1024) // n, dst=(uk // 1024) % n, channel=uk % 1024,
              transfers=np.bincount(inv, minlength=m).astype(np.int64),
              messages=np.bincount(inv, weights=msgs, minlength=m).astype(np.int64),
              packets=np.bincount(inv, weights=pkts, minlength=m).astype(np.int64),
              payload=np.bincount(inv, weights=t.bytes, minlength=m).astype(np.int64),
              nvl_wire=np.bincount(inv, weights=wire, minlength=m).astype(np.int64),
              net_wire=np.bincount(inv, weights=net, minlength=m).astype(np.int64))
    if len(_CACHE) > 4096:
        _CACHE.clear()
    _CACHE[key] = (t, e)
    return e


def pxn_split(src, dst, link, fabric, *cols):
    """Cross-rail NET edges -> (NVLink hop to the proxy, NET edge from it); other edges kept.
    Returns (src, dst, link, is_hop, cols...) with each split edge's hop right before it."""
    got = _pxn_index(src, dst, link, fabric)
    if got is None:
        return (src, dst, link, np.zeros(len(src), bool), *cols)
    idx, is_hop, after, proxy = got
    s, d, lk = src[idx].copy(), dst[idx].copy(), link[idx].copy()
    d[is_hop] = proxy[idx[is_hop]]
    lk[is_hop] = LinkKind.NVLINK
    s[after] = proxy[idx[after]]
    return (s, d, lk, is_hop, *(c[idx] for c in cols))


def pxn_split_columns(table: dict, link, fabric):
    """pxn_split on a table of columns (src_rank, dst_rank and any others), each column replaced in
    turn so that at most one old column is held beside the new ones (a 64k-GPU job's edge table
    is ~1.7 GB). Returns the new link column."""
    got = _pxn_index(table["src_rank"], table["dst_rank"], link, fabric)
    if got is None:
        return link
    idx, is_hop, after, proxy = got
    for name in list(table):
        table[name] = table[name][idx]
    table["dst_rank"][is_hop] = proxy[idx[is_hop]]
    table["src_rank"][after] = proxy[idx[after]]
    lk = link[idx]
    lk[is_hop] = LinkKind.NVLINK
    return lk


def _pxn_index(src, dst, link, fabric):
    """None (no cross-rail NET edge) or (rows taken, the hop rows, the NET part of a split edge,
    the proxy of each original row)."""
    rail = fabric.nic_rail[fabric.rank_nic]
    cross = (link == LinkKind.NET) & (rail[src] != rail[dst])
    if not cross.any():
        return None
    proxy_of = np.full((fabric.nodes, int(fabric.nic_rail.max()) + 1), -1, np.int64)
    proxy_of[fabric.rank_node, rail] = np.arange(fabric.world)
    proxy = proxy_of[fabric.rank_node[src], rail[dst]]
    rep = np.where(cross, 2, 1)
    idx = np.repeat(np.arange(len(src)), rep)
    first = np.r_[True, idx[1:] != idx[:-1]]
    return idx, first & cross[idx], ~first, proxy
