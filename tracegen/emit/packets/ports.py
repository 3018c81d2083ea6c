"""One egress port's rule, for every port at once: a NIC port (pacing.py) or a switch link's
egress port (hops.py). Frames leave in order, each when it is due and the port is free:
t_i = max(nominal_i, t_{i-1} + wire_{i-1}); a run of one message's packets (a train) is never
interleaved with another, a control frame slips in at the next packet boundary."""
from __future__ import annotations

import numpy as np

from .plan import PerPacket, Plan, Segs


def running_max(order: np.ndarray, nic: np.ndarray, nominal: np.ndarray, wire: np.ndarray):
    """Items in `order` (grouped by NIC): t_i = max(nominal_i, t_{i-1} + wire_{i-1}) per NIC.
    With C_i = wire of earlier items, t_i - C_i is a running max of nominal - C: one accumulate."""
    s = nic[order]
    first = np.r_[True, s[1:] != s[:-1]]
    del s                    # (temporaries go as soon as they are used: the peak is per item)
    w = wire[order]
    cw = np.cumsum(w) - w
    del w
    before = cw - cw[np.maximum.accumulate(np.where(first, np.arange(len(first)), 0))]
    del cw
    v = nominal[order] - before
    seg_id = np.cumsum(first) - 1
    span = int(v.max() - v.min()) + 1
    if span * (int(seg_id[-1]) + 1) < 2 ** 62:
        lift = seg_id * span     # each NIC above the previous: one accumulate restarts per NIC
        del seg_id
        v += lift
        u = np.maximum.accumulate(v)
        u -= lift
        del v, lift
    else:
        u = np.empty_like(v)
        for a, b in zip(np.flatnonzero(first), np.r_[np.flatnonzero(first)[1:], len(first)]):
            u[a:b] = np.maximum.accumulate(v[a:b])
    t = np.empty_like(nominal)
    t[order] = u + before
    return t


def serialize(p: Plan, trains: Segs, train_nic, ctl_nic, ctl_nominal, ctl_wire, w: PerPacket | None = None,
              ctl_place=None):
    """One direction of every port (a NIC port, or a switch link's egress, hops.py): trains
    (runs of a message's packets, nominally back to back from trains.t at spacing w, the plan's
    by default) and single control frames. Trains keep their order by nominal start and are
    never interleaved; a control frame goes in at the first packet boundary at or after its
    nominal time. Returns the trains split at those boundaries (with times) and control times.
    ctl_place: the times that choose the boundary, when not the nominal times (pfc.serialize:
    a PAUSE goes in at the boundary the trains really reach, which a late train has passed)."""
    T, C = len(train_nic), len(ctl_nic)
    if ctl_place is None:
        ctl_place = ctl_nominal
    data_order = np.lexsort((trains.t, train_nic))      # lexsort is stable: ties keep index order
    rank = np.empty(T, np.int64)
    rank[data_order] = np.arange(T)
    # The last train on the same NIC that starts at or before each control frame. (Temporaries
    # are dropped as soon as they are used: this is the peak of the schedule's memory.)
    is_ctl = np.r_[np.zeros(T, bool), np.ones(C, bool)]
    o = np.lexsort((is_ctl, np.r_[trains.t, ctl_place], np.r_[train_nic, ctl_nic]))
    last = np.maximum.accumulate(np.where(is_ctl[o], -1, np.r_[rank, np.zeros(C, np.int64)][o]))
    del is_ctl
    pos = np.empty(T + C, np.int64)
    pos[o] = np.arange(T + C)
    del o
    r = last[pos[T:]]
    del last, pos
    tr = data_order[np.maximum(r, 0)]
    r = np.where((r >= 0) & (train_nic[tr] == ctl_nic), r, -1)
    m, ka, kb = trains.msg[tr], trains.ka[tr], trains.kb[tr]
    x = ctl_place - trains.t[tr] + p.offset(m, ka, w)
    k = np.where(r >= 0, p.packets_before(m, ka, kb, x, w), 0)
    # Split trains where a control frame goes in between two of their packets.
    inside = (r >= 0) & (k > ka) & (k < kb)
    width = int(trains.kb.max()) + 1
    cuts = np.r_[rank, r[inside]]
    del rank
    cuts *= width
    cuts += np.r_[trains.ka, k[inside]]
    cuts.sort()
    cuts = cuts[np.r_[True, cuts[1:] != cuts[:-1]]]
    seg_r, seg_ka = np.divmod(cuts, width)
    del cuts
    seg_tr = data_order[seg_r]
    del data_order
    same_next = np.r_[seg_r[1:] == seg_r[:-1], False]
    seg_kb = np.where(same_next, np.r_[seg_ka[1:], 0], trains.kb[seg_tr])
    del same_next
    seg_m = trains.msg[seg_tr]
    seg_nominal = trains.t[seg_tr] + p.offset(seg_m, seg_ka, w) - p.offset(seg_m, trains.ka[seg_tr], w)
    seg_wire = (w or p.wire).span(p.m_npk[seg_m], seg_m, seg_ka, seg_kb)
    # One sequence per NIC: by train rank, packet index, control frames first, nominal time.
    S = len(seg_r)
    nic = np.r_[train_nic[seg_tr], ctl_nic]
    del seg_tr
    place = np.r_[seg_r, r] + 1
    del seg_r
    place *= width
    place += np.r_[seg_ka, k]
    place *= 2
    place[:S] += 1
    nominal = np.r_[seg_nominal, ctl_nominal]
    del seg_nominal
    order = np.lexsort((nominal, place, nic))
    del place
    t = running_max(order, nic, nominal, np.r_[seg_wire, ctl_wire])
    return Segs(seg_m, seg_ka, seg_kb, t[:S], w=w), t[S:]
