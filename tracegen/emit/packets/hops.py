"""Frames through the switches: every direction of every switch-to-switch link an egress port at
its own rate, in the schedule itself, so that every view tells one story.

A frame leaves its NIC port (position 0 of its route: timing.schedule). At each switch link of
its route (positions 1 .. hops-2) it reaches the link's egress port one link latency after it
started on the link before (cut-through, as data-centre switch ASICs forward) and leaves in
arrival order when the port is free - the rule of a NIC port (ports.serialize: a run of one
message's packets goes whole, control frames slip in at packet boundaries), at the link's rate.
A message's packets never leave a port closer than the slowest link they crossed allows (after a
200 Gb/s uplink they stay 200 Gb/s apart), so each message carries the rate of its slowest link
so far. The receiving NIC port (position hops-1) takes a sent segment when its packets have all
come through: its nominal arrival is the latest over its pieces of (leaving the last switch link
+ the latencies of the last two links), less the piece's place in the segment at the NIC's
spacing - every packet arrives after it left the last switch, ACKs and CTS after what they answer.

Switch views write the frames of a link at these times (emit/views/files.py); with no switch link on any
route (one leaf, or NICs of one leaf talking) nothing changes: arrival = sent + the route's
latencies.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .plan import PerPacket, Plan, Segs, wire_ns
from .ports import running_max, serialize


RATE_ROUNDS = 4      # a scenario's rate changes: re-serialise a layer at the rates its frames meet


@dataclass
class Hop:
    """The frames leaving the switch links of one layer (link_layers): data segments (t: the
    first packet's start, w: their spacing, seg_pos: route position) and control frames (k_t
    per control frame, -1 where it does not leave a link of this layer; k_pos its position)."""
    segs: Segs
    seg_port: np.ndarray     # link direction (2 l: a -> b of fabric link l, 2 l + 1: b -> a)
    seg_pos: np.ndarray
    k_t: np.ndarray
    k_port: np.ndarray
    k_pos: np.ndarray


def spacing(p: Plan, gbps: np.ndarray) -> PerPacket:
    """Per message: its data frames' wire times at rate gbps[m]."""
    first, mid, last, only = p.frame_bytes
    return PerPacket(wire_ns(first, gbps), wire_ns(mid, gbps), wire_ns(last, gbps), wire_ns(only, gbps))


def _lat(p: Plan, d: np.ndarray) -> np.ndarray:
    return np.where(d >= 0, p.link_lat[np.maximum(d, 0) >> 1], 0)


def link_layers(routes: list[np.ndarray], n_dirs: int) -> np.ndarray | None:
    """Per link direction: its layer - the most switch links any route crosses before it - so
    that every route meets its switch links in increasing layers and a port's frames, whatever
    their route position (a fat-tree's spine-to-leaf link is the 2nd switch link of a route in the
    pod and the 4th of one across pods), are queued together. Up-down fabrics (leaf-spine,
    fat-tree) always layer; routes that chase each other round a ring of links (a fabric file's
    ring) cannot: None (through() then takes route positions as layers)."""
    edges = []
    for r in routes:
        links = (r >= 0).sum(axis=1)
        for k in range(1, r.shape[1] - 2):        # switch links at positions k and k + 1
            ok = k + 1 <= links - 2
            edges.append(np.stack([r[ok, k], r[ok, k + 1]], axis=1))
    layer = np.zeros(n_dirs, np.int64)
    e = np.unique(np.concatenate(edges), axis=0) if edges else np.zeros((0, 2), np.int64)
    for _ in range(n_dirs + 1):                   # longest path: one relaxation per layer
        new = layer.copy()
        np.maximum.at(new, e[:, 1], layer[e[:, 0]] + 1)
        if np.array_equal(new, layer):
            return layer
        layer = new
    return None


def through(p: Plan, tx: Segs, k_tx: np.ndarray):
    """From what left the NIC ports (tx, k_tx) to what reaches the receiving NIC ports: (per tx
    segment its nominal arrival, per control frame its nominal arrival, [Hop per link layer])."""
    M, K = p.n_msgs, len(k_tx)
    m_route = p.m_route                                   # [M, L]
    m_links = (m_route >= 0).sum(axis=1)
    k_links = (p.k_route >= 0).sum(axis=1)
    # no switch link (two links: NIC -> leaf -> NIC): the route's latency
    seg_arrive = tx.t + _lat(p, m_route[tx.msg, 0]) + _lat(p, m_route[tx.msg, 1])
    k_arrive = k_tx + _lat(p, p.k_route[:, 0]) + _lat(p, p.k_route[:, 1])
    if int(max(m_links.max(initial=2), k_links.max(initial=2))) <= 2:
        return seg_arrive, k_arrive, []
    layer = link_layers([p.c_route, p.m_route, p.c_rroute, p.k_route], 2 * len(p.link_gbps))
    width = int(p.m_npk.max()) + 1
    tx_key = tx.msg * width + tx.ka
    tx_order = np.argsort(tx_key, kind="stable")
    gbps = np.full(M, p.line_gbps, np.int64)              # per message: its slowest link so far
    cur = Segs(tx.msg, tx.ka, tx.kb, tx.t)                  # segments leaving position cur_pos - 1
    cur_pos = np.ones(len(tx.msg), np.int64)
    keep = cur_pos <= m_links[cur.msg] - 2
    cur, cur_pos = Segs(cur.msg[keep], cur.ka[keep], cur.kb[keep], cur.t[keep]), cur_pos[keep]
    kc = np.flatnonzero(k_links >= 3)                        # control frames crossing a switch link
    kc_pos = np.ones(len(kc), np.int64)
    k_dep = k_tx.copy()
    hops = []
    levels = int(layer.max()) + 1 if layer is not None else int(max(m_links.max(), k_links.max())) - 2
    for lv in range(levels):
        if not len(cur.msg) and not len(kc):
            break
        d_all = m_route[cur.msg, cur_pos]
        on = (layer[d_all] if layer is not None else cur_pos - 1) == lv
        cm, pos, d = cur.msg[on], cur_pos[on], d_all[on]
        nominal = cur.t[on] + _lat(p, m_route[cm, pos - 1])
        gbps[cm] = np.minimum(gbps[cm], p.link_gbps_at(d, nominal))
        w = spacing(p, gbps)
        kd_all = p.k_route[kc, kc_pos]
        kon = (layer[kd_all] if layer is not None else kc_pos - 1) == lv
        kk, kpos, kd = kc[kon], kc_pos[kon], kd_all[kon]
        k_nom = k_dep[kk] + _lat(p, p.k_route[kk, kpos - 1])
        k_w = wire_ns(p.k_frame[kk], p.link_gbps_at(kd, k_nom))
        if len(cm):
            segs, k_t = serialize(p, Segs(cm, cur.ka[on], cur.kb[on], nominal), d, kd, k_nom, k_w, w)
            for _ in range(RATE_ROUNDS if p.epoch_ns is not None else 0):
                # a link whose rate drops while frames queue for it or cross it: they leave at the
                # new rate (frames, not segments, have a rate: the whole piece at the slowest it meets)
                src_key = cm * width + cur.ka[on]
                so = np.argsort(src_key, kind="stable")
                dp = d[so[np.searchsorted(src_key[so], segs.msg * width + segs.ka, "right") - 1]]
                end = segs.t + p.offset(segs.msg, segs.kb, w) - p.offset(segs.msg, segs.ka, w)
                slow = p.link_gbps_min(dp, segs.t, end)
                k_slow = wire_ns(p.k_frame[kk], p.link_gbps_min(kd, k_t, k_t + k_w))
                if not ((slow < gbps[segs.msg]).any() or (k_slow > k_w).any()):
                    break
                np.minimum.at(gbps, segs.msg, slow)
                w, k_w = spacing(p, gbps), np.maximum(k_w, k_slow)
                segs, k_t = serialize(p, Segs(cm, cur.ka[on], cur.kb[on], nominal), d, kd, k_nom, k_w, w)
            # each piece's route position: that of the segment it was cut from (same message and
            # position: pieces of one segment stay on its port)
            src_key = cm * width + cur.ka[on]
            so = np.argsort(src_key, kind="stable")
            piece = so[np.searchsorted(src_key[so], segs.msg * width + segs.ka, "right") - 1]
            spos = pos[piece]
        else:                                     # control frames only: one after the other per port
            segs, spos = Segs(cm, cm, cm, cm, w=w), pos
            k_t = running_max(np.lexsort((np.arange(len(kd)), k_nom, kd)), kd, k_nom, k_w) if len(kd) else k_nom
        full_t, full_port, full_pos = (np.full(K, -1, np.int64) for _ in range(3))
        full_t[kk], full_port[kk], full_pos[kk] = k_t, kd, kpos
        sport = m_route[segs.msg, spos]
        hops.append(Hop(segs, sport, spos, full_t, full_port, full_pos))
        # pieces whose last switch link this was: on to the receiving NIC; the others on
        last = spos == m_links[segs.msg] - 2
        if last.any():
            lm, la, lb, lt, lp = segs.msg[last], segs.ka[last], segs.kb[last], segs.t[last], spos[last]
            # its sent segment (pieces only ever split further) must start arriving late enough
            # that this piece's last packet arrives after it came through (it left at its slowest
            # link's spacing; at the NIC it sits at the plan's): the latest over its pieces
            seg = tx_order[np.searchsorted(tx_key[tx_order], lm * width + la, "right") - 1]
            at = (lt + _lat(p, m_route[lm, lp]) + _lat(p, m_route[lm, lp + 1])
                  + (p.offset(lm, lb - 1, w) - p.offset(lm, la, w)) - (p.offset(lm, lb - 1) - p.offset(lm, tx.ka[seg])))
            np.maximum.at(seg_arrive, seg, at)
        klast = kpos == k_links[kk] - 2
        k_arrive[kk[klast]] = k_t[klast] + _lat(p, kd[klast]) + _lat(p, p.k_route[kk[klast], kpos[klast] + 1])
        k_dep[kk] = k_t
        # everything not in this layer waits; what left a link moves one position on
        rest = ~on
        cur = Segs(np.r_[cur.msg[rest], segs.msg[~last]], np.r_[cur.ka[rest], segs.ka[~last]],
                   np.r_[cur.kb[rest], segs.kb[~last]], np.r_[cur.t[rest], segs.t[~last]])
        cur_pos = np.r_[cur_pos[rest], spos[~last] + 1]
        kc, kc_pos = np.r_[kc[~kon], kk[~klast]], np.r_[kc_pos[~kon], kpos[~klast] + 1]
    assert not len(cur.msg) and not len(kc), "frames left inside the fabric"
    return seg_arrive, k_arrive, hops
