"""Selecting files: which capture files a run writes and which copies each records (the view).

  * host (default): one file per selected NIC, its sent copies (as they leave, link 0) and its
    received copies (as they arrive, last link), at the NIC's timestamps;
  * merged (`output.merge`): pcapng: the selected NICs' captures in one file, one interface each
    (a frame between two selected NICs twice: sent and received, told apart by interface id);
    classic pcap: every frame of the selected NICs once, as sent (replays put it on the wire once);
    PFC frames (PAUSE, XON) the NICs receive (pfc.py) on the NIC's interface at its time, in classic
    pcap as the leaf sends them;
  * switch ports (`output.switch`, e.g. leaf3, spine0): one file per port of that switch, every
    packet whose route (emit/packets/routes.py) crosses the port's link, and the PFC frames on it;
  * lab (`output.lab`): one file per tester port, what its host transmits (lab.py).

Switch views: a leaf's port to a NIC holds exactly that NIC's own capture (its sent and received
copies, at the NIC's timestamps; on a multi-plane fabric the QPs of the leaf's plane). A port
between two switches (leaf-spine, spine-core, any link of a file fabric) holds every packet whose
route crosses that link, in either direction, at the times the schedule gave it there (emit/packets/hops.py:
it reaches route position k one link latency after it started on the link before - cut-through,
as data-centre switch ASICs forward - and leaves the port's egress queue for its direction at
the link's rate: two NICs bursting into one uplink queue there, as on a real port, so a capture
never holds more than the link's rate, and the receiver gets the frames after they came
through), with the Ethernet addresses (the two routers the link joins, fabric/topology.py's MAC plan)
and TTL (255 less the routers crossed) of that link. Routes are routing.Router's ECMP choices
(emit/packets/routes.py), the schedule's and ns-3's.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...config import Output
from ...errors import ConfigError
from ...fabric.topology import Fabric
from . import lab
from ..packets.select import switch_names
from ..packets.capture_file import Interface
from ..packets.copies import (CTL_SENT, DATA_SENT, FileSpec, Part, hop_source, host_parts, index_by_nic, item_conn,
                              item_endpoints, kept, nic_interface, nic_ip_text)
from ..packets import pfc
from ..packets.addresses import Addressing
from ..packets.plan import Plan


@dataclass
class FileSet:
    """The files of a run, and the addresses their frames carry."""
    specs: list[FileSpec]
    addressing: Addressing


def view_name(out: Output) -> str:
    return out.view


def needs_schedule(out: Output) -> bool:
    """Can this view be counted from the plan alone? (config's Output.pcap_needs_schedule: the
    work estimate below emit asks it too)"""
    return out.pcap_needs_schedule


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
        return FileSet([FileSpec("merged", [nic_interface(fabric, n, v) for n in nics], _sent_once(p),
                                 pauses=_merged_pauses(p, fabric, nics, as_sent=True))], Addressing(fabric))
    by_nic = index_by_nic(p)
    if view == "merge":
        parts = [part for k, nic in enumerate(nics) for part in host_parts(p, by_nic, nic, k)]
        specs = [FileSpec("merged", [nic_interface(fabric, n, v) for n in nics], parts,
                          pauses=_merged_pauses(p, fabric, nics))]
    else:
        specs = [FileSpec(fabric.nic_name(nic), [nic_interface(fabric, nic, v)], host_parts(p, by_nic, nic, 0),
                          pauses=pfc.records_for(p, fabric, nic)) for nic in nics]
    return FileSet(specs, Addressing(fabric))


def _merged_pauses(p: Plan, fabric: Fabric, nics: list[int], as_sent: bool = False) -> list:
    """The PFC PAUSE frames the selected NICs receive, in time order: pcapng on the NIC's
    interface at its timestamp; classic pcap once, as the leaf sends it (pfc.records_for)."""
    recs = [r for k, nic in enumerate(nics) for r in pfc.records_for(p, fabric, nic, iface=0 if as_sent else k,
                                                                       as_sent=as_sent)]
    return sorted(recs, key=lambda r: (r[0], r[2]))


def _sent_once(p: Plan) -> list[Part]:
    """Merged classic pcap (no interface ids to tell two copies apart): every frame a selected NIC
    sends or receives, once, as it is sent (the sender's timestamp, addresses and TTL) - so a
    replay puts each frame on the wire once."""
    parts = []
    for src in (DATA_SENT, CTL_SENT):
        idx = np.flatnonzero(kept(p, src))
        tx, rx, _ = item_endpoints(p, src, idx)
        mine = idx[p.sel.nic_mask[tx] | p.sel.nic_mask[rx]]
        parts.append(Part(src, mine, np.zeros(len(mine), np.int64), 0, 0))
    return parts


def switch_index(fabric: Fabric, name: str) -> int:
    """The switch index of a switch name (leaf3, spine0, core1, p1-leaf0), or a ConfigError
    listing this fabric's switches."""
    sw = fabric.switch_id(name.strip())
    if sw < 0:
        raise ConfigError(f"output.switch={name!r}: use one of this fabric's switches: {switch_names(fabric)}")
    return sw


def switch_port_specs(p: Plan, fabric: Fabric, name: str) -> list[FileSpec]:
    """One file per port of switch `name`: NIC ports hold their NIC's own capture (on a
    multi-plane fabric, the QPs of that plane), switch-to-switch ports what emit/packets/routes.py sends over
    that link in either direction (see the module doc)."""
    sw = switch_index(fabric, name)
    name, node, mac = fabric.sw_name[sw], fabric.node_id(sw), bytes(fabric.sw_mac[sw])
    L = fabric.links
    mine = np.flatnonzero((L["a"] == node) | (L["b"] == node))
    peer = np.where(L["a"][mine] == node, L["b"][mine], L["a"][mine]).astype(np.int64)
    order = np.lexsort((mine, peer))
    mine, peer = mine[order], peer[order]
    specs = []
    nic_port = peer < fabric.n_nics
    if nic_port.any():
        by_nic = index_by_nic(p)
        for nic in peer[nic_port].tolist():
            if not (p.sel.nic_mask[nic] and np.isin(nic, p.nics)):
                continue
            nm = fabric.nic_name(nic)
            iface = Interface(f"{name}:{nm}", f"{name} port to NIC {nm} ({nic_ip_text(fabric, nic, p.out.ip_version)})",
                              mac, fabric.port_gbps * 10**9)
            parts = host_parts(p, by_nic, nic, 0)
            plane = -1
            if fabric.planes > 1:
                plane = int(fabric.sw_plane[sw])
                parts = [_on_plane(p, part, plane, fabric.planes) for part in parts]
            specs.append(FileSpec(f"{name}-{nm}", [iface], parts, pauses=pfc.records_for(p, fabric, nic, plane)))
    for link, other in zip(mine[~nic_port].tolist(), peer[~nic_port].tolist()):
        gbps = int(L["gbps"][link])
        parts = []
        for lv, h in enumerate(p.hops or []):         # the frames leaving this link's two egress ports
            for src, port, pos in ((hop_source(lv, True), h.seg_port, h.seg_pos),
                                   (hop_source(lv, False), h.k_port, h.k_pos)):
                idx = np.flatnonzero((port >= 0) & (port >> 1 == link))
                idx = idx[kept(p, src)[idx]]
                tx, rx, _ = item_endpoints(p, src, idx)
                idx = idx[p.sel.nic_mask[tx] | p.sel.nic_mask[rx]]
                for q in (0, 1):                      # the link's two directions
                    sel = idx[(port[idx] & 1) == q]
                    if len(sel):
                        parts.append(Part(src, sel, pos[sel], 0, 0, queue=q))
        other_name = fabric.node_name(other)
        iface = Interface(f"{name}:{other_name}", f"{name} port to {other_name}", mac, gbps * 10**9)
        specs.append(FileSpec(f"{name}-{other_name}", [iface], parts, pauses=pfc.link_records(p, fabric, link)))
    return specs


def _on_plane(p: Plan, part: Part, plane: int, planes: int) -> Part:
    """The items of a part whose QP is on `plane` (timing/connections.py: sender QPN mod planes)."""
    keep = p.c_qpn_src[item_conn(p, part.src, part.idx)] % planes == plane
    link = np.asarray(part.link)[keep] if np.ndim(part.link) else part.link
    return Part(part.src, part.idx[keep], link, part.dt_ns, part.iface, part.queue)
