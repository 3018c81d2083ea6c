"""Routes of the wire plan's packets through the fabric, per item: the one place views and frames
ask which links and switches a packet crosses.

Every route is routing.Router's: shortest paths, ECMP by the 5-tuple hash at every switch - the
same choice the schedule made for the connection (timing/connections.py) and the ns-3 manifest pins.
A QP's plane (multi-plane fabrics) is its sender QPN mod planes (timing/connections.py); its control
frames use the same plane. Control frames travel their own way: CTS and ACKs from the receiver
with the QP's source port (their 5-tuple has the addresses swapped, so they may take another
spine), CNPs with port 0.
"""
from __future__ import annotations

import numpy as np

from ...fabric.topology import Fabric


def link_dirs(fabric: Fabric, tx_nic, rx_nic, sport, plane, dest_qpn) -> np.ndarray:
    """[n, max_links] link-direction ids (2*l: a -> b of fabric.links[l], 2*l + 1: b -> a) of
    each packet's route, -1 padded; computed once per distinct (tx, rx, sport, plane, DestQP).
    sport and dest_qpn are the packet's UDP source port and BTH DestQP (the ECMP hash reads one
    of them, `fabric.ecmp_hash`)."""
    tx = np.atleast_1d(np.asarray(tx_nic, np.int64))
    rx = np.broadcast_to(np.atleast_1d(np.asarray(rx_nic, np.int64)), tx.shape)
    sport = np.broadcast_to(np.atleast_1d(np.asarray(sport, np.int64)), tx.shape)
    plane = np.broadcast_to(np.atleast_1d(np.asarray(plane, np.int64)), tx.shape)
    dqp = np.broadcast_to(np.atleast_1d(np.asarray(dest_qpn, np.int64)), tx.shape)
    r = fabric.router
    if not len(tx):
        return np.zeros((0, r.max_links), np.int64)
    key = np.stack([tx, rx, sport, plane, dqp], axis=1)
    uk, inv = np.unique(key, axis=0, return_inverse=True)
    return r.routes(uk[:, 0], uk[:, 1], uk[:, 2], uk[:, 3], fabric.ip_version,
                    dest_qpn=uk[:, 4])[inv.reshape(-1)]


def dir_ends(fabric: Fabric, d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(from, to) node ids of link directions d (-1 where d < 0)."""
    d = np.asarray(d, np.int64)
    L = fabric.links
    safe = np.maximum(d, 0) >> 1
    a, b = L["a"][safe].astype(np.int64), L["b"][safe].astype(np.int64)
    odd = (d & 1).astype(bool)
    return np.where(d < 0, -1, np.where(odd, b, a)), np.where(d < 0, -1, np.where(odd, a, b))


def plane_of(fabric: Fabric, qpn_src) -> np.ndarray:
    """The plane a QP's packets use (timing/connections.py): its sender QPN mod planes."""
    return np.asarray(qpn_src, np.int64) % fabric.planes


def port_leaf_node(fabric: Fabric, nic, plane) -> np.ndarray:
    """Node id of the leaf a NIC's port on `plane` plugs into."""
    return fabric.n_nics + fabric.nic_port_leaf[np.asarray(nic, np.int64), np.asarray(plane, np.int64)].astype(np.int64)
