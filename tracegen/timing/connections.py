"""NCCL connections and their QPs: one table the schedule, every pcap view and the ns-3 scenario
share, so a QP's QPNs, UDP source port, plane and route are the same everywhere.

NCCL opens one connection per (sender, receiver, communicator, channel) - communicators are the
parallelism groups (DP, TP with SP riding it as in Megatron-LM, PP, CP, EP, EDP, the embedding
group), so different groups never share QPs even between the same two GPUs - with
`nccl.qps_per_connection` QPs each (net_ib). QPNs count up per NIC from FIRST_QPN over the NIC's
QPs in sorted (src NIC, dst NIC, src rank, dst rank, communicator, channel, QP index) order, as
sender and as receiver alike. The UDP source port follows from the two QPNs (mlx5, WIRE.md), a
QP's plane (multi-plane fabrics) is its sender QPN mod planes, and its route is routing.Router's
ECMP choice for that 5-tuple.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from ..tables import Dim

FIRST_QPN = 0x100            # QP 0/1 are SMI/GSI; tshark decodes DestQP 1 as MADs
QPN_MASK = (1 << 24) - 1


def udp_sport(lqpn, rqpn) -> np.ndarray:
    """mlx5's RoCEv2 source port from the two QPNs (flow label 0); symmetric, so both directions of
    a QP pair hash alike. WIRE.md: QPs 0x123, 0x456 -> 60881."""
    fl = np.asarray(lqpn, dtype=np.uint64) * np.asarray(rqpn, dtype=np.uint64)
    fl ^= fl >> np.uint64(20)
    fl ^= fl >> np.uint64(40)
    fl &= np.uint64(0xFFFFF)
    low, high = fl & np.uint64(0x3FFF), (fl & np.uint64(0xFC000)) >> np.uint64(14)
    return (np.uint64(0xC000) | (low ^ high)).astype(np.uint16)


def communicator(dim: np.ndarray) -> np.ndarray:
    """NCCL communicator id (1..) of ops of each parallelism dimension; SP runs on TP's."""
    dim = np.asarray(dim, dtype=np.int64)
    return np.where(dim == Dim.SP, Dim.TP, dim) + 1


def _pack(sr, dr, comm, ch, world: int) -> np.ndarray:
    return ((np.asarray(sr, np.int64) * world + np.asarray(dr, np.int64)) * 16
            + np.asarray(comm, np.int64)) * 128 + np.asarray(ch, np.int64)


@dataclass(frozen=True, eq=False)
class Connections:
    """Connections in sorted order; their QPs at [c * qps, (c + 1) * qps), QP index 0 first."""
    src_nic: np.ndarray
    dst_nic: np.ndarray
    src_rank: np.ndarray
    dst_rank: np.ndarray
    comm: np.ndarray
    channel: np.ndarray
    qps: int
    qpn_src: np.ndarray       # per QP: QPN on the sender NIC (sends data, receives CTS)
    qpn_dst: np.ndarray       # per QP: QPN on the receiver NIC
    sport: np.ndarray         # per QP
    plane: np.ndarray         # per QP
    route: np.ndarray         # per QP: [Q, max_links] link-direction ids, -1 padded (data direction)
    route_gbps: np.ndarray    # per QP: rate of each link of the route (0 padded)
    prop_ns: np.ndarray       # per QP: sum of the route's link latencies
    keys: np.ndarray          # packed (src rank, dst rank, comm, channel), sorted
    key_conn: np.ndarray      # connection of each sorted key
    world: int

    def __len__(self) -> int:
        return len(self.src_nic)

    @property
    def hops(self) -> np.ndarray:
        """Links per QP route."""
        return (self.route >= 0).sum(axis=1)

    def lookup(self, src_rank, dst_rank, comm, channel) -> np.ndarray:
        """Connection index of each (src rank, dst rank, communicator, channel)."""
        k = _pack(src_rank, dst_rank, comm, channel, self.world)
        i = np.searchsorted(self.keys, k)
        if len(k) and ((i >= len(self.keys)).any() or (self.keys[np.minimum(i, len(self.keys) - 1)] != k).any()):
            raise KeyError("connection not in the table")
        return self.key_conn[i]

    def latency_ns(self, qp: np.ndarray, last_pkt_bytes: np.ndarray) -> np.ndarray:
        """Propagation plus store-and-forward: every switch on the route receives the last packet
        whole before it sends it on, so the tail arrives one packet time (at the egress link's
        rate) per switch after the sender's last bit."""
        qp = np.asarray(qp, np.int64)
        gbps = self.route_gbps[qp, 1:]                       # egress links of the switches
        bits = np.asarray(last_pkt_bytes, np.int64)[:, None] * 8
        sf = np.where(gbps > 0, -(-bits // np.maximum(gbps, 1)), 0).sum(axis=1)
        return self.prop_ns[qp] + sf

    def link_csr(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per connection the link directions its bytes cross and the share of them on each
        (messages spread evenly over the QPs): (ptr, link_dir, weight)."""
        if self.qps == 1:
            # one QP a connection, whose route crosses a link once: its links sorted, weight 1 -
            # what the merge below gives, without sorting every (connection, link) pair at once
            r = np.sort(self.route, axis=1)                 # -1 padding first
            ok = r >= 0
            if not ((r[:, 1:] == r[:, :-1]) & ok[:, 1:]).any():
                ptr = np.zeros(len(self) + 1, np.int64)
                np.cumsum(ok.sum(axis=1), out=ptr[1:])
                clink = r[ok].astype(np.int64)
                return ptr, clink, np.ones(len(clink))
        q = len(self.qpn_src)
        rows = np.repeat(np.arange(q) // self.qps, self.route.shape[1])
        links = self.route.reshape(-1)
        ok = links >= 0
        rows, links = rows[ok], links[ok]
        key = rows * (int(links.max(initial=0)) + 1) + links
        uniq, counts = np.unique(key, return_counts=True)
        width = int(links.max(initial=0)) + 1
        crow, clink = uniq // width, uniq % width
        ptr = np.zeros(len(self) + 1, np.int64)
        np.cumsum(np.bincount(crow, minlength=len(self)), out=ptr[1:])
        return ptr, clink, counts / self.qps


def build_connections(src_rank, dst_rank, comm, channel, fabric, qps: int = 1, rows: bool = False):
    """The connections used by NET transfers (any number of repeats) and their QPs. rows: also
    each given transfer's connection - what lookup() gives for them, from the sort that finds the
    connections (no second search: 131k GPUs, 20 M transfers)."""
    if not 1 <= qps <= 128:
        raise ConfigError(f"nccl.qps_per_connection={qps}; NCCL accepts 1..128")
    world = fabric.world
    uk, first, inv = np.unique(_pack(src_rank, dst_rank, comm, channel, world), return_index=True,
                               return_inverse=True)
    sr = np.asarray(src_rank, np.int64)[first]
    dr = np.asarray(dst_rank, np.int64)[first]
    cm = np.asarray(comm, np.int64)[first]
    ch = np.asarray(channel, np.int64)[first]
    src, dst = fabric.rank_nic[sr].astype(np.int64), fabric.rank_nic[dr].astype(np.int64)
    if len(src) and (src == dst).any():
        raise ValueError("a NET connection needs two different NICs")
    order = np.lexsort((ch, cm, dr, sr, dst, src))
    key_conn = np.empty(len(uk), np.int64)
    key_conn[order] = np.arange(len(uk))
    sr, dr, cm, ch, src, dst = (a[order] for a in (sr, dr, cm, ch, src, dst))
    # QPNs: per NIC count up over its QPs, as sender and as receiver, in connection order.
    c_src, c_dst = np.repeat(src, qps), np.repeat(dst, qps)
    ev_nic = np.column_stack([c_src, c_dst]).ravel()
    ev_order = np.argsort(ev_nic, kind="stable")
    ev_sorted = ev_nic[ev_order]
    qpn = np.empty(len(ev_nic), dtype=np.int64)
    qpn[ev_order] = FIRST_QPN + np.arange(len(ev_nic)) - np.searchsorted(ev_sorted, ev_sorted)
    if len(qpn) and qpn.max() > QPN_MASK:
        raise ConfigError("more than 2^24 QPs on one NIC; use fewer channels")
    qpn_src, qpn_dst = qpn[0::2], qpn[1::2]
    sport = udp_sport(qpn_src, qpn_dst).astype(np.int64)
    plane = qpn_src % fabric.planes
    router = fabric.router
    route = router.routes(c_src, c_dst, sport, plane, fabric.ip_version, dest_qpn=qpn_dst)
    lk = fabric.links
    safe = np.maximum(route, 0) >> 1
    route_gbps = np.where(route >= 0, lk["gbps"][safe], 0).astype(np.int64)
    prop = np.where(route >= 0, lk["latency_ns"][safe], 0).sum(axis=1).astype(np.int64)
    conns = Connections(src, dst, sr, dr, cm, ch, qps, qpn_src, qpn_dst, sport, plane, route,
                        route_gbps, prop, uk, key_conn, world)
    return (conns, key_conn[inv.reshape(-1)]) if rows else conns
