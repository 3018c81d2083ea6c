"""Which copies of the wire plan's items a capture file records: the shared vocabulary of the
views (emit/views/files.py, emit/views/lab.py) and of the per-file packet plan (items.py).

Every scheduled item has a sent copy (as it leaves the sender NIC) and a received copy (as it
arrives); a file records copies of items on one link of their route (0 = leaving the sender, hops-1
= into the receiver), shifted to the time they cross the file's port.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

import numpy as np

from ...fabric.topology import Fabric
from . import roce
from .capture_file import Interface
from .plan import ACK_CTS, CTS, Plan, Segs


DATA_SENT, DATA_RECEIVED, CTL_SENT, CTL_RECEIVED = range(4)     # indices into sources()
SENT = (DATA_SENT, CTL_SENT)


def sources(p: Plan):
    """Every scheduled copy: (nic per item, received?, what) for data segments sent, received,
    and control frames sent, received; then per layer of switch links (hops.py) the data
    segments and control frames leaving their egress ports (hop_source; control frames that do
    not leave a link of that layer have time -1 there)."""
    out = [(p.m_src[p.tx.msg], False, p.tx), (p.m_dst[p.rx.msg], True, p.rx),
           (p.k_tx_nic, False, p.k_tx_ns), (p.k_rx_nic, True, p.k_rx_ns)]
    for h in p.hops or []:
        out += [(p.m_src[h.segs.msg], False, h.segs), (p.k_tx_nic, False, h.k_t)]
    return out


def hop_source(layer: int, data: bool) -> int:
    """The sources() index of the data segments (or control frames) leaving the switch links of
    a layer (hops.py)."""
    return 4 + 2 * layer + (0 if data else 1)


@dataclass
class Part:
    """Items of one source that a file records, on which link of their path, shifted by dt_ns."""
    src: int                     # index into sources()
    idx: np.ndarray
    link: np.ndarray             # per item: 0 = leaving the sender NIC .. hops-1 = into the receiver
    dt_ns: int                   # source time -> time at the file's port
    iface: int                   # pcapng interface id
    queue: int = 0               # a fabric port's direction (its own egress queue, hops.py)


@dataclass
class FileSpec:
    name: str
    interfaces: list
    parts: list
    lead: list = field(default_factory=list)   # frames before the plan's: (t_ns in the file, bytes, iface)
    t0_ns: int = 0                              # subtracted from the plan's times (lab: the common t0)
    pauses: list = field(default_factory=list)  # PFC PAUSE frames the file shows (pfc.records_for):
                                                # (t_ns, frame), merged in time order
    port_gbps: int = 0                          # a lab tester port: one FIFO at this rate for what
                                                # the NIC's planes sent (port_queue.py); 0: times as
                                                # scheduled (NICs, switch links: hops.py)


def item_conn(p: Plan, src: int, idx) -> np.ndarray:
    """Per item of a source: the connection row (QP) its packets use - a CTS, and the ACK of a
    CTS, go on the connection's first QP."""
    what = sources(p)[src][2]
    if isinstance(what, Segs):
        return p.m_conn[what.msg[idx]]
    m, kind = p.k_msg[idx], p.k_kind[idx]
    return np.where((kind == CTS) | (kind == ACK_CTS), p.m_conn[m] - p.m_q[m], p.m_conn[m])


def item_dest_qpn(p: Plan, c, rx_nic) -> np.ndarray:
    """BTH DestQP of packets on connection rows c received by rx_nic: the receiver's QPN for
    data, the sender's for what the receiver returns (CTS, ACKs, CNPs)."""
    return np.where(rx_nic == p.c_dst[c], p.c_qpn_dst[c], p.c_qpn_src[c])


def item_endpoints(p: Plan, src: int, idx):
    """Per item of a source: (sending NIC, receiving NIC, hops) of its packets. (A packet's UDP
    source port and route come from frames.py and routes.py, not from here.)"""
    what = sources(p)[src][2]
    c = item_conn(p, src, idx)
    if isinstance(what, Segs):
        m = what.msg[idx]
        return p.m_src[m], p.m_dst[m], p.c_hops[c]
    return p.k_tx_nic[idx], p.k_rx_nic[idx], p.c_hops[c]


def first_time(p: Plan, parts: list[Part]) -> int | None:
    """When the first of these copies starts (None: no copy)."""
    t = [sources(p)[part.src][2] for part in parts]
    times = [(w.t if isinstance(w, Segs) else w)[part.idx] + part.dt_ns for w, part in zip(t, parts)]
    times = [x for x in times if len(x)]
    return int(min(x.min() for x in times)) if times else None


def kept(p: Plan, src: int) -> np.ndarray:
    """Items of a source that pass the collective/iteration filters (windows are per packet)."""
    what = sources(p)[src][2]
    return p.m_keep[what.msg] if isinstance(what, Segs) else p.m_keep[p.k_msg]


def host_parts(p: Plan, by_nic, nic: int, iface: int) -> list[Part]:
    """What a NIC's own capture holds: its sent copies (link 0) and received ones (last link).
    by_nic: index_by_nic(p)."""
    parts = []
    for src, (order, sorted_nic) in enumerate(by_nic):
        idx = order[np.searchsorted(sorted_nic, nic):np.searchsorted(sorted_nic, nic, "right")]
        hops = item_endpoints(p, src, idx)[2]
        parts.append(Part(src, idx, np.zeros(len(idx), np.int64) if src in SENT else hops - 1, 0, iface))
    return parts


def index_by_nic(p: Plan):
    """Per source: (kept items sorted by their NIC, those NICs) - host_parts looks NICs up in it."""
    out = []
    for src, (nic, _, _) in enumerate(sources(p)[:4]):
        idx = np.flatnonzero(kept(p, src))
        order = idx[np.argsort(nic[idx], kind="stable")]
        out.append((order, nic[order]))
    return out


def nic_ip_text(fabric: Fabric, nic: int, ip_version: int) -> str:
    """'IPv4 10.0.0.1' or 'IPv6 fd00::a00:1': the address the NIC's frames carry."""
    if ip_version == 6:
        return "IPv6 " + str(ipaddress.IPv6Address(bytes(roce.ipv6_from_ipv4(fabric.nic_ip[nic])[0])))
    return "IPv4 " + fabric.nic_ip_str(nic)


def nic_interface(fabric: Fabric, nic: int, ip_version: int = 4) -> Interface:
    """The pcapng interface of a NIC's own capture."""
    mac = bytes(fabric.nic_mac[nic])
    return Interface(fabric.nic_name(nic),
                     f"RoCEv2 NIC {fabric.nic_name(nic)} MAC {mac.hex(':')} {nic_ip_text(fabric, nic, ip_version)}",
                     mac, fabric.nic_gbps * 10**9)

