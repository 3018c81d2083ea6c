"""The scheduled plan through pfc_pass.forward and back (issue 24): from_plan puts every frame of
a scheduled plan on its path of egress ports (its NIC port, then the switch ports of its route),
ready when the schedule sends it and waiting for what the schedule made it wait for; segs_at,
rx_segs, hops_from_pass and control_times give the pass's times in the plan's forms (what
schedule.schedule sets: p.tx, p.rx, p.hops, p.k_tx_ns, p.k_rx_ns), which queue_rounds.apply_pass
writes into the plan.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .hops import Hop, link_layers, spacing
from .pfc import PAUSE_FRAME_BYTES, xoff_xon
from .pfc_pass import PassResult, forward
from .plan import ACK_CTS, ACK_DATA, CNP, CTS, DATA, Segs, wire_ns
from .queue_marks import FCS_BYTES, control_pcp, data_bytes, expand_segs, frame_pcp
from .roce import WIRE_OVERHEAD_BYTES
from .schedule import arrival, ports


@dataclass
class PlanPass:
    """forward() over a scheduled plan's frames (from_plan): ports 0 .. nic_ports - 1 are NIC
    ports (schedule.ports' numbering), nic_ports + d the egress port of link direction d."""
    res: PassResult
    path: np.ndarray
    wire_ns: np.ndarray
    ready_ns: np.ndarray      # when the schedule sends it (res.ready_ns: when the pass did)
    frame_bytes: np.ndarray   # with FCS
    port_gbps: np.ndarray
    nic_ports: int
    g: np.ndarray             # per frame: global data packet number, -1 for a control frame
    k: np.ndarray             # per frame: control frame index, -1 for a data packet
    qp: np.ndarray            # per frame: its QP direction (data: the QP pair; control frames: -1)
    lat_ns: np.ndarray        # [n, H]: latency of the link each port of its path sends on
    prio: np.ndarray          # per frame: its 802.1p priority


def from_plan(p, network) -> PlanPass:
    """Every frame of the scheduled plan p, ready at its NIC port when the schedule sends it,
    through its route's switch egress ports in one pass with PFC (network.pfc_xoff_bytes, ...).
    What the schedule made wait keeps waiting, with the schedule's slack (schedule.schedule's fixed
    point): an ACK of data and a CNP for their packet's arrival, an ACK of a CTS and a message's
    first packet for the CTS's; a QP's packets follow each other at the schedule's distance."""
    m_port_tx, _, k_port_tx, _ = ports(p)
    _, m, k, t = expand_segs(p, p.tx)
    K = len(p.k_kind)
    route = np.r_[p.m_route[m], p.k_route]
    fb = np.r_[data_bytes(p, m, k), p.k_frame + FCS_BYTES]
    nic = np.r_[m_port_tx[m], k_port_tx]
    NP = int(max(nic.max(initial=0), 0)) + 1
    links = (route >= 0).sum(axis=1)
    H = route.shape[1]
    h = np.arange(H)[None, :]
    on = h < links[:, None]
    path = np.where(on, np.where(h == 0, nic[:, None], NP + route), -1)
    # switch link rates at t = 0 (plan.link_gbps_at: the pass holds one rate per port, one epoch)
    gbps_of = np.where(on & (h > 0), p.link_gbps_at(np.maximum(route, 0), 0), p.line_gbps)
    wire = np.where(on, wire_ns(fb[:, None] - FCS_BYTES, gbps_of), 0)
    lat = np.where(on, p.link_lat[np.maximum(route, 0) >> 1], 0)
    port_gbps = np.r_[np.full(NP, p.line_gbps, np.int64), p.link_gbps_at(np.arange(2 * len(p.link_gbps)), 0)]
    prio = np.r_[frame_pcp(p, DATA, m), control_pcp(p, np.arange(K))]
    ready = np.r_[t, p.k_tx_ns]
    xoff, xon = xoff_xon(network)
    # PFC frames towards a NIC port go out by its leaf's port to it, towards a switch port by the
    # other direction of its link
    rev = np.r_[np.full(NP, -1, np.int64), NP + (np.arange(2 * len(p.link_gbps)) ^ 1)]
    rev[nic] = NP + (route[:, 0] ^ 1)
    # waits: frame indices (data: g -> row; control frame k: row n_data + k)
    nd = len(m)
    row_of_g = np.full(int(p.m_pkt0[-1] + p.m_npk[-1]) if len(p.m_pkt0) else 0, -1, np.int64)
    row_of_g[p.m_pkt0[m] + k] = np.arange(nd)
    after, slack = np.full(nd + K, -1, np.int64), np.zeros(nd + K, np.int64)
    kind = p.k_kind
    cts_k = np.flatnonzero(kind == CTS)
    cts_of_msg = np.full(p.n_msgs, -1, np.int64)
    cts_of_msg[p.k_msg[cts_k]] = cts_k
    cts_done = p.k_rx_ns + p.k_wire_ns                  # a control frame fully at its NIC (schedule)
    on_pkt = np.flatnonzero((kind == ACK_DATA) | (kind == CNP))
    am, aj = p.k_msg[on_pkt], p.k_pkt[on_pkt]
    after[nd + on_pkt] = row_of_g[p.m_pkt0[am] + aj]
    slack[nd + on_pkt] = p.k_tx_ns[on_pkt] - (arrival(p, p.rx, am, aj) + p.line_wire.span(p.m_npk[am], am, aj, aj + 1))
    on_cts = np.flatnonzero((kind == ACK_CTS) & (cts_of_msg[p.k_msg] >= 0))
    c = cts_of_msg[p.k_msg[on_cts]]
    after[nd + on_cts], slack[nd + on_cts] = nd + c, p.k_tx_ns[on_cts] - cts_done[c]
    first = np.flatnonzero((k == 0) & (cts_of_msg[m] >= 0))
    c = cts_of_msg[m[first]]
    after[first], slack[first] = nd + c, t[first] - cts_done[c]
    slack = np.maximum(slack, 0)
    prev = np.full(nd + K, -1, np.int64)
    o = np.lexsort((np.arange(nd), t, p.m_conn[m]))     # per QP pair, in the order they leave
    same = np.r_[False, p.m_conn[m][o][1:] == p.m_conn[m][o][:-1]]
    prev[o[same]] = o[np.flatnonzero(same) - 1]
    res = forward(path, wire, lat, ready, prio, fb, port_gbps, np.arange(len(port_gbps)) >= NP,
                  np.arange(8) == p.out.pcp, xoff, xon, network.pfc_pause_quanta,
                  PAUSE_FRAME_BYTES + WIRE_OVERHEAD_BYTES, rev, after, slack, prev)
    g = np.r_[p.m_pkt0[m] + k, np.full(K, -1, np.int64)]
    return PlanPass(res, path, wire, ready, fb, port_gbps, NP, g, np.r_[np.full(len(m), -1, np.int64), np.arange(K)],
                    np.r_[p.m_conn[m], np.full(K, -1, np.int64)], lat, prio)


def segs_at(p, pp: PlanPass, h: int, w=None):
    """The data packets' departures at path position h of a from_plan pass (0: their NIC port, h:
    the egress port of route link h) as the plan's Segs - runs of consecutive packets of one
    message that leave back to back at spacing w (a PerPacket; None: the plan's p.wire) - the form
    the schedule and the views read (plan.Segs), so the pass's times can replace theirs without a
    per-packet representation past this point. A pause (or a frame of another QP in between)
    breaks a run; a packet not on position h of its route is left out."""
    rows = np.flatnonzero((pp.g >= 0) & (pp.path[:, h] >= 0))
    return _runs(p, pp.g[rows], pp.res.depart_ns[rows, h], w)


def rx_segs(p, pp: PlanPass, w=None):
    """The data packets' arrivals (first bit) at their receiving NIC - the departure at the last
    port of the path plus that link's latency - as Segs runs at spacing w (see segs_at)."""
    rows = np.flatnonzero(pp.g >= 0)
    last = (pp.path[rows] >= 0).sum(axis=1) - 1
    route = p.m_route[np.searchsorted(p.m_pkt0, pp.g[rows], "right") - 1, last]
    return _runs(p, pp.g[rows], pp.res.depart_ns[rows, last] + p.link_lat[route >> 1], w)


def _runs(p, g, t, w):
    """Packets g (global numbers) at times t as Segs: a run ends where the message changes, a
    packet is missing or the next one does not follow back to back at spacing w."""
    w = w or p.wire
    m = np.searchsorted(p.m_pkt0, g, "right") - 1
    k = g - p.m_pkt0[m]
    o = np.lexsort((k, m))
    m, k, t = m[o], k[o], np.asarray(t, np.int64)[o]
    if not len(m):
        z = np.zeros(0, np.int64)
        return Segs(z, z, z, z, None, None if w is p.wire else w)
    gap = w.span(p.m_npk[m[:-1]], m[:-1], k[:-1], k[:-1] + 1)
    start = np.r_[True, (m[1:] != m[:-1]) | (k[1:] != k[:-1] + 1) | (t[1:] != t[:-1] + gap)]
    s = np.flatnonzero(start)
    kb = np.r_[k[s[1:] - 1], k[-1]] + 1
    return Segs(m[s].astype(np.int64), k[s].astype(np.int64), kb.astype(np.int64), t[s].astype(np.int64),
                None, None if w is p.wire else w)


def hops_from_pass(p, pp: PlanPass) -> list:
    """The pass's departures on the switch-to-switch links (route positions 1 .. links - 2) as
    hops.Hop per link layer (hops.link_layers; route positions where the fabric does not layer),
    the form the switch views read (p.hops): data as Segs runs at each link's own rate (the pass
    sends every frame at its port's rate; it keeps no slowest-link spacing), control frames one
    time each (-1 where a frame does not leave a link of that layer)."""
    layer = link_layers([p.c_route, p.m_route, p.c_rroute, p.k_route], 2 * len(p.link_gbps))   # as hops.through
    links = (pp.path >= 0).sum(axis=1)
    K = len(p.k_kind)
    h = np.arange(pp.path.shape[1])[None, :]
    f, pos = np.nonzero((h >= 1) & (h <= links[:, None] - 2))
    d = pp.path[f, pos] - pp.nic_ports                   # link direction
    lv = layer[d] if layer is not None else pos - 1
    out = []
    for v in range(int(lv.max()) + 1 if len(lv) else 0):
        on = lv == v
        data = on & (pp.g[f] >= 0)
        fd, pd, dd = f[data], pos[data], d[data]
        m = np.searchsorted(p.m_pkt0, pp.g[fd], "right") - 1
        gbps = np.full(p.n_msgs, p.line_gbps, np.int64)
        gbps[m] = p.link_gbps[dd >> 1]                    # a message crosses one link per layer
        segs = _runs(p, pp.g[fd], pp.res.depart_ns[fd, pd], spacing(p, gbps))
        m_pos = np.zeros(p.n_msgs, np.int64)
        m_pos[m] = pd
        spos = m_pos[segs.msg]
        ctl = on & (pp.k[f] >= 0)
        fk, pk = f[ctl], pos[ctl]
        k_t, k_port, k_pos = (np.full(K, -1, np.int64) for _ in range(3))
        kk = pp.k[fk]
        k_t[kk], k_port[kk], k_pos[kk] = pp.res.depart_ns[fk, pk], d[ctl], pk
        out.append(Hop(segs, p.m_route[segs.msg, spos], spos, k_t, k_port, k_pos))
    return out


def control_times(p, pp: PlanPass):
    """Per control frame (plan order): when it leaves its NIC port and when its first bit reaches
    the other NIC (the last port's departure + that link's latency) in the pass - what
    schedule.schedule sets as p.k_tx_ns and p.k_rx_ns."""
    K = len(p.k_kind)
    rows = np.full(K, -1, np.int64)
    rows[pp.k[pp.k >= 0]] = np.flatnonzero(pp.k >= 0)
    last = (pp.path[rows] >= 0).sum(axis=1) - 1
    lat = p.link_lat[p.k_route[np.arange(K), last] >> 1]
    return pp.res.depart_ns[rows, 0], pp.res.depart_ns[rows, last] + lat
