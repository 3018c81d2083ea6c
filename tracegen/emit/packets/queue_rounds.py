"""output.ecn_marking=queue: the rounds that mark CE from the switch egress queues
(queue_marks.py), answer with CNPs (cnps.py), pause with PFC (pfc.py) and reschedule until the
marks and pauses stay the same."""
from __future__ import annotations

import numpy as np

from ...config import Network
from ...fabric.topology import Fabric
from . import pfc, queue_marks
from .cnps import add_cnps
from .plan import CNP, Plan
from .schedule import ports, schedule


QUEUE_ROUNDS = 6     # output.ecn_marking=queue: mark, answer with CNPs, reschedule, mark again
PFC_ROUNDS = 24      # more with PFC: pauses recomputed on the schedule they shaped until they stay the same


def queue_marks_and_cnps(p: Plan, fabric: Fabric, network: Network, dcqcn) -> None:
    """CE marks from the switch egress queues (queue_marks.py): schedule, mark, insert the CNPs
    (and with dcqcn pace after them), reschedule, and mark again on the new schedule until the
    marks stay the same. The CNPs move frames a little (they slip in between packets), so the
    marks are re-drawn on the schedule the trace is written from; p.queue_rounds and
    p.queue_stable say how it ended (stable: every CNP answers a mark of the final schedule)."""
    base = {k: getattr(p, k) for k in ("k_kind", "k_msg", "k_pkt", "k_tx_nic", "k_rx_nic", "k_wire_ns",
                                       "k_rec_bytes", "k_nominal_ns", "k_route", "k_frame")}
    args = (network.kmin_bytes, network.kmax_bytes, network.pmax, p.out.ecn_seed)
    p.pfc = pfc.Pauses.none() if network.pfc else None
    schedule(p)
    p.ce_g, p.ce_pos = np.zeros(0, np.int64), np.zeros(0, np.int64)
    # with DCQCN every round paces and picks CNPs again (add_cnps' own rounds): no PFC rounds more
    rounds = QUEUE_ROUNDS + (PFC_ROUNDS if network.pfc and dcqcn is None else 0)
    p.queue_max_rounds = rounds
    for r in range(rounds):
        f = queue_marks.port_frames(p)
        g, pos = queue_marks.marks(p, f, *args)
        settled, new_pfc = True, None
        if p.pfc is not None:
            m_port_tx, _, k_port_tx, _ = ports(p)
            new_pfc, settled = pfc.settle(p.pfc, pfc.pauses(p, f, network, m_port_tx, k_port_tx))
        p.queue_rounds = r + 1
        if np.array_equal(g, p.ce_g) and np.array_equal(pos, p.ce_pos) and settled:
            p.queue_stable = True
            _pauses_shown(p, new_pfc)
            return
        if r == rounds - 1:
            break
        for k, v in base.items():
            setattr(p, k, v)
        p.m_cap = None
        p.ce_g, p.ce_pos = g, pos
        if new_pfc is not None:
            p.pfc = new_pfc
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
    _pauses_shown(p, new_pfc)


def _pauses_shown(p: Plan, wanted) -> None:
    """The pauses the captures show (p.pfc_shown): those the written schedule's queues call for
    (pfc.agree with `wanted`) during which their NIC port starts no frame of the paused priority
    (pfc.serialize_paused places them so; this keeps any it could not out of the captures)."""
    if p.pfc is None:
        return
    m_port_tx, _, k_port_tx, _ = ports(p)
    at = p.pfc_at if p.pfc_at is not None else p.pfc.t_ns          # in its slot on the link
    first = pfc.next_start(p, p.pfc.at(at), p.tx, p.k_tx_ns, m_port_tx, k_port_tx, pfc.stopped(p))
    p.pfc_shown = pfc.agree(p.pfc, wanted) & (first >= at + p.pfc.block_ns)
