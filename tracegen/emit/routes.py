"""Routes of the wire plan's packets through the fabric, per item: the one place views and frames
ask which switches a packet crosses.

Every route is routing.Router's: shortest paths, ECMP by the 5-tuple hash at every switch - the
same choice the schedule made for the connection (connections.py) and the ns-3 manifest pins.
Control frames travel their own way: CTS and ACKs from the receiver with the QP's source port
(their 5-tuple has the addresses swapped, so they may take another spine), CNPs with port 0.
"""
from __future__ import annotations

import numpy as np

from ..topology import Fabric


def spine_of(fabric: Fabric, tx_nic, rx_nic, sport) -> np.ndarray:
    """The spine (its index among plane 0's spines) a route from tx_nic to rx_nic with UDP
    source port `sport` crosses; 0 when it crosses none (same leaf) or the fabric has none."""
    tx = np.atleast_1d(np.asarray(tx_nic, np.int64))
    rx = np.atleast_1d(np.asarray(rx_nic, np.int64))
    sport = np.broadcast_to(np.atleast_1d(np.asarray(sport, np.int64)), tx.shape)
    out = np.zeros(tx.shape, np.int64)
    if fabric.n_spines == 0 or not len(tx):
        return out
    far = fabric.nic_leaf[tx] != fabric.nic_leaf[rx]
    if far.any():
        key = np.stack([tx[far], rx[far], sport[far]], axis=1)
        uk, inv = np.unique(key, axis=0, return_inverse=True)
        r = fabric.router
        sw = r.node_after(r.routes(uk[:, 0], uk[:, 1], uk[:, 2], 0, fabric.ip_version), 1) - fabric.n_nics
        out[far] = fabric.sw_index[sw][inv.reshape(-1)]
    return out
