"""The Ethernet addresses frames carry on each link of their route.

MAC plan (fabric/topology.py): NICs 02:00:<rail>:<node hi>:<node lo>:01, routers
02:<4c leaf | 53 spine | 43 core>:<plane>:00:<index hi>:<index lo>. A frame on a link carries the
MACs of the two nodes that link joins (every switch is an L3 router). Lab mode swaps in the lab's
addresses (emit/views/lab.py).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...fabric.topology import Fabric
from . import routes


@dataclass(frozen=True)
class Addressing:
    """The addresses frames carry: the fabric's (or a lab's, see emit/views/lab.py); whether a sender's
    frames go straight to the receiver's MAC (a bridged lab DUT) instead of its leaf router; or,
    per sending NIC, the MAC its frames go to (a routed lab DUT's port)."""
    fabric: Fabric
    peer_direct: bool = False
    first_hop: np.ndarray | None = None      # (n_nics, 6)

    def table(self) -> np.ndarray:
        """mac_table, then the first-hop MACs (rows n_nics + switches + NIC)."""
        macs = mac_table(self.fabric)
        return macs if self.first_hop is None else np.concatenate([macs, self.first_hop])


def spine_mac(spine) -> np.ndarray:
    """Plane 0's spine router MACs: 02:53:00:00:<spine hi>:<spine lo> (fabric/topology.py's router MACs)."""
    s = np.asarray(spine, dtype=np.int64)
    mac = np.zeros(s.shape + (6,), np.uint8)
    mac[..., 0], mac[..., 1], mac[..., 4], mac[..., 5] = 0x02, 0x53, s >> 8, s & 0xFF
    return mac


def mac_table(fabric: Fabric) -> np.ndarray:
    """Every MAC a frame can carry, one row per simulator node id: NICs, then every switch
    (leaves, spines, cores of every plane)."""
    return np.concatenate([fabric.nic_mac, fabric.sw_mac])


def link_macs(fabric: Fabric, tx_nic, rx_nic, sport, plane, hops, link, dest_qpn, route=None):
    """Rows of mac_table (eth_src, eth_dst) on link `link` of each packet's route: the two nodes
    that link joins (NIC -> leaf -> ... -> leaf -> NIC, the switches by ECMP, routes.py). The
    first and last links need no route: they join a NIC and its port's leaf. route: each packet's
    route when it is not the QP's t=0 one (a scenario's epochs, epoch_paths.py): a switch view's
    MACs are those of the spine the frame really crossed."""
    tx_nic, rx_nic = np.asarray(tx_nic, np.int64), np.asarray(rx_nic, np.int64)
    link, hops = np.asarray(link, np.int64), np.asarray(hops, np.int64)
    first, last = link == 0, link == hops - 1
    src = np.where(first, tx_nic, routes.port_leaf_node(fabric, rx_nic, plane))
    dst = np.where(first, routes.port_leaf_node(fabric, tx_nic, plane), rx_nic)
    mid = np.flatnonzero(~first & ~last)
    if len(mid):
        sel = lambda a: np.broadcast_to(np.asarray(a, np.int64), link.shape)[mid]
        d = (routes.link_dirs(fabric, tx_nic[mid], rx_nic[mid], sel(sport), sel(plane), sel(dest_qpn))
             if route is None else np.asarray(route)[mid])
        src[mid], dst[mid] = routes.dir_ends(fabric, d[np.arange(len(mid)), link[mid]])
    return src, dst
