"""output.ecn_marking=queue: the rounds that mark CE from the switch egress queues
(queue_marks.py), answer with CNPs (cnps.py) and reschedule until the marks stay the same; with
network.pfc each round's frames go through pfc_pass.py's one pass over every switch egress port
(the one PFC model, through pfc_plan.py: switches pause NICs and switches, PAUSE/refresh/XON), whose departures are
the trace's and whose queues mark."""
from __future__ import annotations

import numpy as np

from ...config import Network
from ...fabric.topology import Fabric
from . import pfc, pfc_plan, queue_marks
from .cnps import add_cnps
from .plan import CNP, Plan, Segs
from .schedule import ip_ids, schedule


QUEUE_ROUNDS = 6     # output.ecn_marking=queue: mark, answer with CNPs, reschedule, mark again


def queue_marks_and_cnps(p: Plan, fabric: Fabric, network: Network, dcqcn) -> None:
    """CE marks from the switch egress queues: schedule, mark, insert the CNPs (and with dcqcn
    pace after them), reschedule, and mark again on the new schedule until the marks stay the
    same. The CNPs move frames a little (they slip in between packets), so the marks are re-drawn
    on the schedule the trace is written from; p.queue_rounds and p.queue_stable say how it ended
    (stable: every CNP answers a mark of the final schedule).
    With network.pfc, every round runs the schedule's frames through pfc_pass (pfc_plan.from_plan: ready at
    their NIC ports when the schedule sends them, what waits for a frame waiting for it) and the
    trace takes its times from the pass (apply_pass): the schedule itself has no pauses, so a NIC
    is paused once, by the pass; marks come from the pass's queues (pass_frames)."""
    base = {k: getattr(p, k) for k in ("k_kind", "k_msg", "k_pkt", "k_tx_nic", "k_rx_nic", "k_wire_ns",
                                       "k_rec_bytes", "k_nominal_ns", "k_route", "k_frame")}
    args = (network.kmin_bytes, network.kmax_bytes, network.pmax, p.out.ecn_seed)
    p.pfc = None
    schedule(p)
    p.ce_g, p.ce_pos = np.zeros(0, np.int64), np.zeros(0, np.int64)
    rounds = QUEUE_ROUNDS
    p.queue_max_rounds = rounds
    for r in range(rounds):
        if network.pfc:
            pp = pfc_plan.from_plan(p, network)
            apply_pass(p, pp)
            f = pass_frames(p, pp)
        else:
            f = queue_marks.port_frames(p)
        g, pos = queue_marks.marks(p, f, *args)
        p.queue_rounds = r + 1
        if np.array_equal(g, p.ce_g) and np.array_equal(pos, p.ce_pos):
            p.queue_stable = True
            return
        if r == rounds - 1:
            break
        for k, v in base.items():
            setattr(p, k, v)
        p.m_cap = None
        p.ce_g, p.ce_pos = g, pos
        if len(g):
            add_cnps(p, fabric, dcqcn)
        else:
            schedule(p)
    # Not settled: the marks drawn on the written schedule, and those the CNPs of the trace
    # answer where their port's queue is still above Kmin (marks only ever above Kmin; a CNP
    # whose mark the last reschedule moved below Kmin is left unanswered: p.queue_stable False).
    cnp = np.flatnonzero(p.k_kind == CNP)
    ans = p.m_pkt0[p.k_msg[cnp]] + p.k_pkt[cnp]
    at = np.flatnonzero((f.g >= 0) & (f.queue_bytes > network.kmin_bytes))
    L = p.m_route.shape[1]
    prev = np.isin(f.g[at] * L + f.pos[at], (p.ce_g * L + p.ce_pos)[np.isin(p.ce_g, ans)])
    g2, pos2 = np.r_[g, f.g[at][prev]], np.r_[pos, f.pos[at][prev]]
    o = np.lexsort((pos2, g2))
    g2, pos2 = g2[o], pos2[o]
    first = np.r_[True, g2[1:] != g2[:-1]] if len(g2) else np.zeros(0, bool)
    p.ce_g, p.ce_pos = g2[first], pos2[first]
    p.queue_stable = False


def apply_pass(p: Plan, pp: pfc_plan.PlanPass) -> None:
    """The trace's times from the pass (what schedule.schedule sets, from pfc_plan's converters):
    each frame's departure from its NIC port (p.tx, p.k_tx_ns), at every switch-to-switch link
    (p.hops) and its arrival at the receiving NIC (p.rx, p.k_rx_ns); IPv4 identifications again
    in the order the NICs now send (a pause reorders priorities); the PFC frames (p.pfc). PSNs
    stay: the pass keeps each QP's packets in order."""
    p.tx = pfc_plan.segs_at(p, pp, 0)
    # ip_ids numbers a run from its sent run's first packet: cut the other runs where a sent one starts
    starts = np.sort(p.m_pkt0[p.tx.msg] + p.tx.ka)
    p.rx = _cut(p, pfc_plan.rx_segs(p, pp), starts)[0]
    p.hops = pfc_plan.hops_from_pass(p, pp)
    for h in p.hops:
        h.segs, parent = _cut(p, h.segs, starts)
        h.seg_port, h.seg_pos = h.seg_port[parent], h.seg_pos[parent]
    p.k_tx_ns, p.k_rx_ns = pfc_plan.control_times(p, pp)
    ip_ids(p)
    p.pfc = pfc.PfcFrames.from_pass(p, pp)


def _cut(p: Plan, segs, starts: np.ndarray):
    """segs with a new run at every packet whose global number is in starts (sorted); the runs
    keep their spacing (segs.w). Returns them and, per new run, the run it came from."""
    seg, m, k, t = queue_marks.expand_segs(p, segs)
    g = p.m_pkt0[m] + k
    i = np.minimum(np.searchsorted(starts, g), max(len(starts) - 1, 0))
    new = (k == segs.ka[seg]) | ((starts[i] == g) if len(starts) else False)
    s = np.flatnonzero(new)
    kb = np.r_[k[s[1:] - 1], k[-1]] + 1 if len(s) else np.zeros(0, np.int64)
    return Segs(m[s], k[s], kb.astype(np.int64), t[s], None, segs.w), seg[s]


def pass_frames(p: Plan, pp: pfc_plan.PlanPass) -> queue_marks.PortFrames:
    """The frames at every switch egress port of the pass (path positions >= 1: route position h
    leaves by the egress port of route link h) with the queue the pass found on their arrival -
    what queue_marks.marks draws RED from (queue_marks.port_frames' form)."""
    path, dep = pp.path, pp.res.depart_ns
    f, h = np.nonzero(path[:, 1:] >= 0)
    h = h + 1
    return queue_marks.PortFrames(path[f, h] - pp.nic_ports, pp.prio[f], h, dep[f, h - 1] + pp.lat_ns[f, h - 1],
                                  dep[f, h], pp.frame_bytes[f], pp.g[f], pp.k[f], pp.res.queue_bytes[f, h])
