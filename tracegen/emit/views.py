"""Switch views: one capture file per port of a chosen switch (`output.switch`, e.g. leaf3, spine0).

A port records every packet whose route crosses its link, in time order. Routes follow the
fabric (NIC -> leaf -> spine -> leaf -> NIC, or NIC -> leaf -> NIC under one leaf) with the
spine chosen by ECMP on the 5-tuple (routing.py, the schedule's routes; CNPs use source port 0).
  * a leaf's port to a NIC holds exactly that NIC's own capture (its sent and received copies,
    at the NIC's timestamps);
  * a port between leaf L and spine S holds the packets going up L -> S (route link 1) and down
    S -> L (route link 2), each stamped when it is put on that link: sent time + link index x
    link latency (switch queueing is not modelled; the NICs' serialization is), with the Ethernet
    addresses and TTL of that link (spine MACs 02:53:00:00:<hi>:<lo>, see pcap.spine_mac).
"""
from __future__ import annotations

import re

import numpy as np

from ..errors import ConfigError
from ..topology import Fabric
from .capture_file import Interface


def _switch(fabric: Fabric, name: str) -> tuple[str, int]:
    m = re.fullmatch(r"(leaf|spine)(\d+)", name.strip())
    count = {"leaf": fabric.n_leaves, "spine": fabric.n_spines}
    if not m or int(m.group(2)) >= count[m.group(1)]:
        raise ConfigError(f"output.switch={name!r}: use leaf0..leaf{fabric.n_leaves - 1}"
                          + (f" or spine0..spine{fabric.n_spines - 1}" if fabric.n_spines else "")
                          + " (this fabric's switches)")
    return m.group(1), int(m.group(2))


def _spine_of(fabric: Fabric, tx, rx, sport) -> np.ndarray:
    """The spine (index) each packet's route crosses (routing.Router's ECMP choice), -1 if none."""
    if not len(tx) or not fabric.n_spines:
        return np.full(len(tx), -1, np.int64)
    r = fabric.router
    sw = r.node_after(r.routes(tx, rx, sport, 0, fabric.ip_version), 1) - fabric.n_nics
    ok = (sw >= 0) & (fabric.sw_tier[np.maximum(sw, 0)] == 2)
    return np.where(ok, fabric.sw_index[np.maximum(sw, 0)], -1)


def switch_port_specs(p, fabric: Fabric, name: str):
    from . import pcap
    kind, sw = _switch(fabric, name)
    lat, specs = fabric.link_latency_ns, []
    ls_bps = fabric.leaf_spine_gbps * 10**9
    leaf_mac = lambda leaf: bytes(fabric.leaf_mac[leaf])
    if kind == "leaf":
        by_nic = pcap._by_nic(p)
        nics = np.flatnonzero((fabric.nic_leaf == sw) & p.sel.nic_mask[:fabric.n_nics])
        for nic in nics[np.isin(nics, p.nics)].tolist():
            nm = fabric.nic_name(nic)
            iface = Interface(f"leaf{sw}:{nm}", f"leaf{sw} port to NIC {nm} ({fabric.nic_ip_str(nic)})",
                              leaf_mac(sw), fabric.nic_gbps * 10**9)
            specs.append(pcap._FileSpec(f"leaf{sw}-{nm}", [iface], pcap._host_parts(p, by_nic, nic, 0)))
    pairs = ([(sw, s) for s in range(fabric.n_spines)] if kind == "leaf" else
             [(lf, sw) for lf in range(fabric.n_leaves)])
    for leaf, spine in pairs:
        parts = []
        for src in (0, 2):                                  # the sender's copies, moved down the route
            idx = np.flatnonzero(pcap._kept(p, src))
            tx, rx, sport, hops = pcap._item_endpoints(p, src, idx)
            on_spine = (hops == 4) & (_spine_of(fabric, tx, rx, sport) == spine)
            chosen = p.sel.nic_mask[tx] | p.sel.nic_mask[rx]
            up = on_spine & chosen & (fabric.nic_leaf[tx] == leaf)
            down = on_spine & chosen & (fabric.nic_leaf[rx] == leaf)
            parts.append(pcap._Part(src, idx[up], np.ones(int(up.sum()), np.int64), lat, 0))
            parts.append(pcap._Part(src, idx[down], np.full(int(down.sum()), 2, np.int64), 2 * lat, 0))
        if kind == "leaf":
            iface = Interface(f"leaf{leaf}:spine{spine}", f"leaf{leaf} port to spine{spine}",
                              leaf_mac(leaf), ls_bps)
            fname = f"leaf{leaf}-spine{spine}"
        else:
            iface = Interface(f"spine{spine}:leaf{leaf}", f"spine{spine} port to leaf{leaf}",
                              bytes(pcap.spine_mac(spine)), ls_bps)
            fname = f"spine{spine}-leaf{leaf}"
        specs.append(pcap._FileSpec(fname, [iface], parts))
    return specs
