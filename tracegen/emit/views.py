"""Selecting files: which capture files a run writes and which copies each records (the view).

  * host (default): one file per selected NIC, its sent copies (as they leave, link 0) and its
    received copies (as they arrive, last link), at the NIC's timestamps;
  * merged (`output.merge`): pcapng: the selected NICs' captures in one file, one interface each
    (a frame between two selected NICs twice: sent and received, told apart by interface id);
    classic pcap: every frame of the selected NICs once, as sent (replays put it on the wire once);
  * switch ports (`output.switch`, e.g. leaf3, spine0): one file per port of that switch, every
    packet whose route (routes.py) crosses the port's link;
  * lab (`output.lab`): one file per tester port, what its host transmits (lab.py).

Switch views: a leaf's port to a NIC holds exactly that NIC's own capture (its sent and received
copies, at the NIC's timestamps); a port between leaf L and spine S holds the packets going up
L -> S (route link 1) and down S -> L (route link 2): each arrives at the port at sent time +
link index x link latency, then leaves through the port's egress FIFO per direction at the link's
rate (port_queue.py: two NICs bursting into one uplink queue there, as on a real port, so a
capture never holds more than the link's rate), with the Ethernet addresses and TTL of that link
(spine MACs 02:53:00:00:<hi>:<lo>, see
addresses.spine_mac). The spine is the route's ECMP choice (routes.py, routing.py).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..config import Output
from ..errors import ConfigError
from ..topology import Fabric
from . import lab, routes
from .capture_file import Interface
from .copies import (CTL_SENT, DATA_SENT, FileSpec, Part, host_parts, index_by_nic, item_endpoints, kept,
                     nic_interface, nic_ip_text)
from .addresses import Addressing, spine_mac
from .packets import Plan


@dataclass
class FileSet:
    """The files of a run, and the addresses their frames carry."""
    specs: list[FileSpec]
    addressing: Addressing


def view_name(out: Output) -> str:
    return "lab" if out.lab else "switch" if out.switch else "merge" if out.merge else "nic"


def needs_schedule(out: Output) -> bool:
    """Can this view be counted from the plan alone (host view, no time window)?"""
    return bool(out.time_window) or view_name(out) != "nic"


def files(p: Plan, fabric: Fabric) -> FileSet:
    """The capture files of p.out's view."""
    view = view_name(p.out)
    if view == "lab":
        plan = lab.load(p.out, fabric)
        lab_fabric = plan.remap(fabric)
        return FileSet(lab.lab_specs(p, lab_fabric, plan), plan.addressing(lab_fabric))
    if view == "switch":
        return FileSet(switch_port_specs(p, fabric, p.out.switch), Addressing(fabric))
    nics = np.flatnonzero(p.sel.nic_mask[:fabric.n_nics])
    nics = nics[np.isin(nics, p.nics)].tolist()
    v = p.out.ip_version
    if view == "merge" and not p.fmt.pcapng:
        return FileSet([FileSpec("merged", [nic_interface(fabric, n, v) for n in nics], _sent_once(p))],
                       Addressing(fabric))
    by_nic = index_by_nic(p)
    if view == "merge":
        parts = [part for k, nic in enumerate(nics) for part in host_parts(p, by_nic, nic, k)]
        specs = [FileSpec("merged", [nic_interface(fabric, n, v) for n in nics], parts)]
    else:
        specs = [FileSpec(fabric.nic_name(nic), [nic_interface(fabric, nic, v)], host_parts(p, by_nic, nic, 0))
                 for nic in nics]
    return FileSet(specs, Addressing(fabric))


def _sent_once(p: Plan) -> list[Part]:
    """Merged classic pcap (no interface ids to tell two copies apart): every frame a selected NIC
    sends or receives, once, as it is sent (the sender's timestamp, addresses and TTL) - so a
    replay puts each frame on the wire once."""
    parts = []
    for src in (DATA_SENT, CTL_SENT):
        idx = np.flatnonzero(kept(p, src))
        tx, rx, _, _ = item_endpoints(p, src, idx)
        mine = idx[p.sel.nic_mask[tx] | p.sel.nic_mask[rx]]
        parts.append(Part(src, mine, np.zeros(len(mine), np.int64), 0, 0))
    return parts


def _switch(fabric: Fabric, name: str) -> tuple[str, int]:
    m = re.fullmatch(r"(leaf|spine)(\d+)", name.strip())
    count = {"leaf": fabric.n_leaves, "spine": fabric.n_spines}
    if not m or int(m.group(2)) >= count[m.group(1)]:
        raise ConfigError(f"output.switch={name!r}: use leaf0..leaf{fabric.n_leaves - 1}"
                          + (f" or spine0..spine{fabric.n_spines - 1}" if fabric.n_spines else "")
                          + " (this fabric's switches)")
    return m.group(1), int(m.group(2))


def switch_port_specs(p: Plan, fabric: Fabric, name: str) -> list[FileSpec]:
    kind, sw = _switch(fabric, name)
    lat, specs = fabric.link_latency_ns, []
    ls_bps = fabric.leaf_spine_gbps * 10**9
    leaf_mac = lambda leaf: bytes(fabric.leaf_mac[leaf])
    if kind == "leaf":
        by_nic = index_by_nic(p)
        nics = np.flatnonzero((fabric.nic_leaf == sw) & p.sel.nic_mask[:fabric.n_nics])
        for nic in nics[np.isin(nics, p.nics)].tolist():
            nm = fabric.nic_name(nic)
            iface = Interface(f"leaf{sw}:{nm}", f"leaf{sw} port to NIC {nm} ({nic_ip_text(fabric, nic, p.out.ip_version)})",
                              leaf_mac(sw), fabric.nic_gbps * 10**9)
            specs.append(FileSpec(f"leaf{sw}-{nm}", [iface], host_parts(p, by_nic, nic, 0)))
    pairs = ([(sw, s) for s in range(fabric.n_spines)] if kind == "leaf" else
             [(lf, sw) for lf in range(fabric.n_leaves)])
    for leaf, spine in pairs:
        ls_bps = _link_gbps(fabric, leaf, spine) * 10**9
        parts = []
        for src in (DATA_SENT, CTL_SENT):                   # the sender's copies, moved down the route
            idx = np.flatnonzero(kept(p, src))
            tx, rx, sport, hops = item_endpoints(p, src, idx)
            on_spine = (hops == 4) & (routes.spine_of(fabric, tx, rx, sport) == spine)
            chosen = p.sel.nic_mask[tx] | p.sel.nic_mask[rx]
            up = on_spine & chosen & (fabric.nic_leaf[tx] == leaf)
            down = on_spine & chosen & (fabric.nic_leaf[rx] == leaf)
            parts.append(Part(src, idx[up], np.ones(int(up.sum()), np.int64), lat, 0))
            parts.append(Part(src, idx[down], np.full(int(down.sum()), 2, np.int64), 2 * lat, 0))
        if kind == "leaf":
            iface = Interface(f"leaf{leaf}:spine{spine}", f"leaf{leaf} port to spine{spine}",
                              leaf_mac(leaf), ls_bps)
            fname = f"leaf{leaf}-spine{spine}"
        else:
            iface = Interface(f"spine{spine}:leaf{leaf}", f"spine{spine} port to leaf{leaf}",
                              bytes(spine_mac(spine)), ls_bps)
            fname = f"spine{spine}-leaf{leaf}"
        specs.append(FileSpec(fname, [iface], parts, port_gbps=ls_bps // 10**9))
    return specs


def _link_gbps(fabric: Fabric, leaf: int, spine: int) -> int:
    """Rate of the leaf-spine link (the fabric's leaf-spine rate if a file fabric has none)."""
    a, b = fabric.leaf_node_id(leaf), fabric.spine_node_id(spine)
    L = fabric.links
    hit = ((L["a"] == a) & (L["b"] == b)) | ((L["a"] == b) & (L["b"] == a))
    return int(L["gbps"][hit][0]) if hit.any() else fabric.leaf_spine_gbps
