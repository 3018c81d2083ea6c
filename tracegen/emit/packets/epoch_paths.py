"""A scenario whose links change during the run (fabric/timeline.py): every frame on the route and
at the rates of its epoch.

The routes are fabric.timeline.epoch_routes' - the tables the fluid engine moved its flows with
(timing/epochs.py: rehash, or resilient with its memory) - per QP pair for its data (sender to
receiver), its way back (CTS and ACKs: addresses swapped, same UDP source port) and its CNPs
(receiver to sender, UDP source port 0), so the frames cross exactly the links the schedule
loaded in each epoch. A link degraded in an epoch carries its frames at that epoch's rate
(Plan.link_gbps_at).

Which epoch: a message takes the route of the epoch in which its first packet leaves its NIC port
(the packet schedule's time), a control frame that of its own send time. A message is never split
between two routes (its packets are one RDMA WRITE on one QP). What a real switch does at the
instant a link goes down: the frames in flight on it, or queued for it, are lost, the switch
rehashes the ECMP group and RoCE's go-back-N resends the lost PSNs from the last one acknowledged
(mlx5 RC retransmission). A capture of ours cannot show a loss nor a retransmission, so we choose:
no frame is ever drawn on a link while it is down. A message whose frames would cross its route's
link after that link went down (it started before the instant, or queued across it) takes, as a
whole, the route of the epoch in which its first frame would have met the link down - as if the
switch had rehashed it up to one message time early (a message paced by the schedule may take
tens of µs: its frames before the instant run on the new route, which is up then too unless
another link came back at that very instant). The check is on the times the frames leave each switch link's egress (hops.py), and is
repeated until no frame of the schedule is on a link down (at most MOVE_ROUNDS; what is still left
is counted in EpochPaths.on_down; tests/test_scenario_epoch_views.py finds no frame on a link
while down in the captures). A QP's frames reach its receiver in the order they left (through).

The plan's nominal flight times (plan_build: m_flight_ns, a CTS's way back) stay those of the t=0
routes - equal in up-down fabrics, where every path between two leaves has as many links. The
tables are kept once per distinct set of routes (a flap alternates two): QP pairs x width x 8 B
each, three kinds.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import hops
from .plan import ACK_CTS, CNP, CTS, Plan, Segs
from .ports import running_max

MOVE_ROUNDS = 8       # reroute passes per schedule round: each moves a message at most to a later epoch


@dataclass
class EpochPaths:
    epoch_ns: np.ndarray      # [E] epoch starts (epoch 0 at 0)
    gbps: np.ndarray          # [E, links] each link's rate, 0 while down
    table: np.ndarray         # [E] the routing table each epoch uses (index into fwd/rev/cnp)
    fwd: np.ndarray           # [T, QP pairs, W] data route (and the ACK of a CTS: same 5-tuple)
    rev: np.ndarray           # [T, QP pairs, W] the way back: CTS, ACKs of data
    cnp: np.ndarray           # [T, QP pairs, W] the receiver's CNPs (UDP source port 0)
    next_down: np.ndarray     # [E + 1, links] the first epoch >= e in which the link is down (E: none)
    on_down: int = 0          # frames the last schedule round left on a link down (0 expected)

    def epoch_of(self, t_ns) -> np.ndarray:
        return np.maximum(np.searchsorted(self.epoch_ns, t_ns, "right") - 1, 0)


def _pad(tables: list, w: int) -> np.ndarray:
    return np.stack([np.pad(t, ((0, 0), (0, w - t.shape[1])), constant_values=-1) for t in tables])


def build(fabric, c_src, c_dst, c_sport, c_plane, c_qpn_src, c_qpn_dst, ip_version: int) -> EpochPaths | None:
    """The epochs' routes of every QP pair; None without timed events (fabric.epochs empty)."""
    epochs = getattr(fabric, "epochs", ())
    if not epochs:
        return None
    from ...fabric.timeline import epoch_routes
    zero = np.zeros(len(c_src), np.int64)
    kinds = [list(epoch_routes(fabric, c_src, c_dst, c_sport, c_plane, ip_version, dest_qpn=c_qpn_dst)),
             list(epoch_routes(fabric, c_dst, c_src, c_sport, c_plane, ip_version, dest_qpn=c_qpn_src)),
             list(epoch_routes(fabric, c_dst, c_src, zero, c_plane, ip_version, dest_qpn=c_qpn_src))]
    E = len(epochs) + 1
    # one table per distinct (fwd, rev, cnp) of an epoch (a flap alternates two)
    seen: dict = {}
    table = np.zeros(E, np.int64)
    keep = []
    for e in range(E):
        key = b"".join(k[e].tobytes() + bytes(str(k[e].shape), "ascii") for k in kinds)
        if key not in seen:
            seen[key] = len(keep)
            keep.append(e)
        table[e] = seen[key]
    w = max(t.shape[1] for k in kinds for t in k)
    fwd, rev, cnp = (_pad([k[e] for e in keep], w) for k in kinds)
    gbps = np.stack([fabric.links["gbps"].astype(np.int64)] + [ep.gbps.astype(np.int64) for ep in epochs])
    down = gbps == 0
    nxt = np.full((E + 1, down.shape[1]), E, np.int64)
    for e in range(E - 1, -1, -1):
        nxt[e] = np.where(down[e], e, nxt[e + 1])
    return EpochPaths(np.array([0] + [int(ep.at_ns) for ep in epochs], np.int64), gbps, table, fwd, rev, cnp, nxt)


def _control_pairs(p: Plan):
    """Per control frame: which table (0 fwd, 1 rev, 2 cnp) and QP pair its route is in (plan_build:
    an ACK of a CTS on QP 0's data route, a CTS on its way back, ACKs of data on their QP's way
    back, CNPs from the receiver with source port 0)."""
    m = p.k_msg
    qp0 = p.m_conn[m] - p.m_q[m]
    kind = np.where(p.k_kind == ACK_CTS, 0, np.where(p.k_kind == CNP, 2, 1))
    pair = np.where((p.k_kind == ACK_CTS) | (p.k_kind == CTS), qp0, p.m_conn[m])
    return kind, pair


def _set_routes(p: Plan, ep: EpochPaths, m_ep, k_ep, k_kind, k_pair) -> None:
    t = ep.table
    p.m_route = ep.fwd[t[m_ep], p.m_conn]
    k_route = ep.rev[t[k_ep], k_pair]
    for kind, tables in ((0, ep.fwd), (2, ep.cnp)):
        s = np.flatnonzero(k_kind == kind)
        k_route[s] = tables[t[k_ep[s]], k_pair[s]]
    p.k_route = k_route


def _first_down(ep: EpochPaths, d: np.ndarray, a_ns: np.ndarray, b_ns: np.ndarray):
    """Frames on link directions d over [a_ns, b_ns): (on a link down, the first epoch they meet it down)."""
    ea, eb = ep.epoch_of(a_ns), ep.epoch_of(np.maximum(b_ns - 1, a_ns))
    first = ep.next_down[ea, d >> 1]
    return first <= eb, first


def through(p: Plan, tx: Segs, k_tx: np.ndarray):
    """hops.through with every message and control frame on the route of its epoch (module doc);
    sets p.m_route and p.k_route to the routes the frames took."""
    ep = p.paths
    M = p.n_msgs
    starts = tx.ka == 0
    m_t0 = np.zeros(M, np.int64)
    m_t0[tx.msg[starts]] = tx.t[starts]                  # each message's first packet leaves its NIC
    m_ep, k_ep = ep.epoch_of(m_t0), ep.epoch_of(k_tx)
    k_kind, k_pair = _control_pairs(p)
    for _ in range(MOVE_ROUNDS):
        _set_routes(p, ep, m_ep, k_ep, k_kind, k_pair)
        out = hops.through(p, tx, k_tx)
        moved, left = False, 0
        for h in out[2]:
            s = h.segs
            w = s.w if s.w is not None else p.wire
            end = s.t + p.offset(s.msg, s.kb, w) - p.offset(s.msg, s.ka, w)
            hit, e = _first_down(ep, h.seg_port, s.t, end)
            kon = np.flatnonzero(h.k_port >= 0)
            k_hit, k_e = _first_down(ep, h.k_port[kon], h.k_t[kon], h.k_t[kon] + p.k_wire_ns[kon])
            left += int((s.kb - s.ka)[hit].sum() + k_hit.sum())         # frames (a segment's packets)
            before_m, before_k = m_ep.copy(), k_ep.copy()
            np.maximum.at(m_ep, s.msg[hit], e[hit])
            np.maximum.at(k_ep, kon[k_hit], k_e[k_hit])
            moved |= not (np.array_equal(before_m, m_ep) and np.array_equal(before_k, k_ep))
        ep.on_down = left
        if not moved:
            break
    seg_arrive, k_arrive, hop_list = out
    # A QP's frames reach its receiver in the order they left (RC: a later PSN first would be
    # out of sequence - a NAK and go-back-N on a real NIC); two routes of different epochs (or
    # speeds) could swap them: a frame that would overtake one sent before it on its QP arrives
    # just after it, as behind it in one queue.
    # one group per QP direction: data and ACKs of CTS sender -> receiver, CTS, ACKs and CNPs back
    qp_dir = np.r_[p.m_conn[tx.msg], np.where(k_kind == 0, 0, len(p.c_src)) + k_pair]
    sent = np.r_[tx.t, k_tx]
    arrive = np.r_[seg_arrive, k_arrive]
    order = np.lexsort((np.r_[tx.ka, np.zeros(len(k_tx), np.int64)], sent, qp_dir))
    arrive = running_max(order, qp_dir, arrive, np.ones(len(arrive), np.int64))
    return arrive[:len(seg_arrive)], arrive[len(seg_arrive):], hop_list

