"""The Ethernet addresses frames carry on each link of their route.

MAC plan: NICs and leaves as topology.py (NIC 02:00:<rail>:<node hi>:<node lo>:01, leaf router
02:01:00:00:<leaf hi>:<leaf lo>), spine routers 02:02:00:00:<spine hi>:<spine lo> (the fabric has
none). Lab mode swaps in the lab's addresses (lab.py).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..topology import Fabric
from . import routes


@dataclass(frozen=True)
class Addressing:
    """The addresses frames carry: the fabric's (or a lab's, see lab.py); whether a sender's
    frames go straight to the receiver's MAC (a bridged lab DUT) instead of its leaf router; or,
    per sending NIC, the MAC its frames go to (a routed lab DUT's port)."""
    fabric: Fabric
    peer_direct: bool = False
    first_hop: np.ndarray | None = None      # (n_nics, 6)

    def table(self) -> np.ndarray:
        """mac_table, then the first-hop MACs (rows n_nics + leaves + spines + NIC)."""
        macs = mac_table(self.fabric)
        return macs if self.first_hop is None else np.concatenate([macs, self.first_hop])


def spine_mac(spine) -> np.ndarray:
    """Spine router MACs: 02:53:00:00:<spine hi>:<spine lo> (as topology.py's router MACs)."""
    s = np.asarray(spine, dtype=np.int64)
    mac = np.zeros(s.shape + (6,), np.uint8)
    mac[..., 0], mac[..., 1], mac[..., 4], mac[..., 5] = 0x02, 0x53, s >> 8, s & 0xFF
    return mac


def mac_table(fabric: Fabric) -> np.ndarray:
    """Every MAC a frame can carry, one row each: NICs, then leaves, then spines."""
    return np.concatenate([fabric.nic_mac, fabric.leaf_mac, spine_mac(np.arange(fabric.n_spines))])


def link_macs(fabric: Fabric, tx_nic, rx_nic, sport, hops, link):
    """Rows of mac_table (eth_src, eth_dst) on link `link` of each packet's route:
    NIC -> leaf (-> spine -> leaf) -> NIC; the spine from routes.spine_of."""
    n, n_leaves = fabric.n_nics, fabric.n_leaves
    leaf_a, leaf_b = n + fabric.nic_leaf[tx_nic], n + fabric.nic_leaf[rx_nic]
    spine = n + n_leaves + routes.spine_of(fabric, tx_nic, rx_nic, sport)
    first, last, up = link == 0, link == hops - 1, link == 1      # up: leaf -> spine (4-hop routes)
    src = np.where(first, tx_nic, np.where(last, leaf_b, np.where(up, leaf_a, spine)))
    dst = np.where(first, leaf_a, np.where(last, rx_nic, np.where(up, spine, leaf_b)))
    return src, dst


