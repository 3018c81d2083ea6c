"""Expected switch counters (issue 24, capability 4): per port of the switch view and 802.1p
priority, what that switch should report for the trace - frames and bytes it sent and received
on the port, the data packets it marked CE there (output.ecn_marking=queue: the egress port
that set CE - a switch-to-switch port or the leaf's port to the receiving NIC, queue_marks.py;
the seeded fraction marks no switch port: 0), and the PFC frames (PAUSE and XON) it sent and
received there (0 without PFC; pfc.py).

Counted from the items each capture file records (items.windows: the same packets, time window
included), so the counters and the captures tell one story. Bytes are frames with their FCS, as
a port's octet counters count them (ifHCOutOctets: no preamble, no inter-frame gap).
"""
from __future__ import annotations

import numpy as np

from ..packets import items, queue_marks
from ..packets.plan import DATA, Plan
from .files import FileSet, switch_index

COLUMNS = ("switch", "port", "peer", "priority", "tx_frames", "tx_bytes", "rx_frames", "rx_bytes",
           "ecn_marked", "pfc_pause_tx", "pfc_pause_rx")
FCS = queue_marks.FCS_BYTES


def _kind_bytes_pcp(p: Plan):
    """Per control kind: its frame bytes (FCS included) and 802.1p priority (all frames of a kind
    have one size)."""
    nb, pcp = np.zeros(8, np.int64), np.full(8, p.out.pcp, np.int64)
    for kind in np.unique(p.k_kind).tolist():
        i = np.flatnonzero(p.k_kind == kind)[:1]
        nb[kind] = int(p.k_frame[i[0]]) + FCS
        pcp[kind] = int(queue_marks.control_pcp(p, i)[0])
    return nb, pcp


def _peer_links(fabric, node: int) -> dict[str, tuple[int, bool]]:
    """Per peer switch name: (the link to it, is this switch the link's end a)."""
    L = fabric.links
    out = {}
    for link in np.flatnonzero((L["a"] == node) | (L["b"] == node)).tolist():
        a = int(L["a"][link]) == node
        other = int(L["b"][link] if a else L["a"][link])
        if other >= fabric.n_nics:
            out[fabric.node_name(other)] = (link, a)
    return out


def switch_counters(p: Plan, fabric, fset: FileSet) -> list[tuple]:
    """Rows (COLUMNS) of every port file of the switch view (p.out.switch), one per priority with
    a frame."""
    sw = switch_index(fabric, p.out.switch)
    name, node = fabric.sw_name[sw], fabric.node_id(sw)
    kind_bytes, kind_pcp = _kind_bytes_pcp(p)
    peers = _peer_links(fabric, node)
    rows = []
    for spec in fset.specs:
        peer = spec.name[len(name) + 1:]
        is_a = peers[peer][1] if peer in peers else None
        it = items.Items.gather(p, spec.parts)
        acc = np.zeros((8, 5), np.int64)       # tx frames, tx bytes, rx frames, rx bytes, CE set here
        for pos, li, j, _t in items.windows(p, it, 1 << 16, 64 << 20, spec.t0_ns):
            g = pos[li]
            kind, m, link = it.kind[g], it.msg[g], it.link[g]
            data = kind == DATA
            ck = np.minimum(kind, 7)
            nbytes = np.where(data, queue_marks.data_bytes(p, m, j), kind_bytes[ck])
            pcp = np.where(data, p.out.pcp, kind_pcp[ck]) if p.c_pcp is None else queue_marks.frame_pcp(p, kind, m)
            # a NIC port: the NIC's received copies are what the switch sent; a switch link: the
            # direction leaving this switch (queue 0: end a -> end b)
            tx = it.rx[g].astype(bool) if is_a is None else (it.queue[g] == 0) == is_a
            marked = np.zeros(len(g), bool)
            if len(p.ce_g) and p.ce_pos is not None:      # a NIC port's: the route's last position
                gl = p.m_pkt0[m] + j
                at = np.minimum(np.searchsorted(p.ce_g, gl), len(p.ce_g) - 1)
                marked = data & tx & (p.ce_g[at] == gl) & (p.ce_pos[at] == link)
            for col, sel, w in ((0, tx, 1), (1, tx, nbytes), (2, ~tx, 1), (3, ~tx, nbytes), (4, marked, 1)):
                np.add.at(acc[:, col], pcp[sel], np.broadcast_to(w, len(g))[sel])
        ptx, prx = np.zeros(8, np.int64), np.zeros(8, np.int64)
        mac = bytes(fabric.sw_mac[sw])
        for _t, fr, _i in spec.pauses:          # PFC frames (pfc.py): sent by this switch or by its peer
            prio = int.from_bytes(fr[16:18], "big").bit_length() - 1
            (ptx if fr[6:12] == mac else prx)[prio] += 1
        for prio in range(8):
            if acc[prio].any() or ptx[prio] or prx[prio]:
                rows.append((name, spec.name, peer, prio, *(int(x) for x in acc[prio]), int(ptx[prio]), int(prx[prio])))
    return rows
