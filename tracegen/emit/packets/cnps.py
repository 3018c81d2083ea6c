"""CE marks -> CNPs on the schedule (add_cnps), and with output.dcqcn the senders' pacing after
them (open loop: dcqcn_pacing, pace); cnp_estimate for a count without a schedule."""
from __future__ import annotations

import numpy as np

from ...fabric.topology import Fabric
from . import congestion, roce, routes
from .capture_file import comment_option_bytes
from .plan import CNP, CNP_CHECK_ROUNDS, COMMENT_PREFIX, DCQCN_ROUNDS, Plan, incl_cap, wire_ns
from .roce import Opcode
from .schedule import arrival, schedule


def cnp_estimate(p: Plan) -> np.ndarray:
    """Messages answered by a CNP, without a schedule (the pcap estimate): the CE marks rate
    limited per QP (congestion.rate_limit's rule, vectorized) at the times the marked packets
    would arrive on an idle fabric (nominal start + paced offset + flight + the packet's wire
    time). The written trace chooses them on its schedule (add_cnps): contention moves
    arrivals, so the count can differ by a few CNPs; never more than the marks."""
    g = p.ce_g
    if not len(g):
        return np.zeros(0, np.int64)
    m = np.searchsorted(p.m_pkt0, g, "right") - 1
    j = g - p.m_pkt0[m]
    ready = (p.m_nominal_ns[m] + p.paced_offset(m, p.offset(m, j)) + p.m_flight_ns[m]
             + p.wire.span(p.m_npk[m], m, j, j + 1))
    return m[congestion.rate_limit_fast(p.m_conn[m], ready)]


def pace(p: Plan, rate_factor: np.ndarray) -> None:
    """Per message: send at most at line rate / rate_factor (>= 1; DCQCN's reaction): its
    packets go in trains at line rate with gaps between (paced_trains), so the NIC port sends
    other QPs' packets meanwhile, as a rate limiter per QP does; 1 everywhere leaves the plan
    unpaced. Call schedule(p) after it."""
    f = np.asarray(rate_factor, dtype=np.float64)
    p.m_cap = np.maximum(f, 1) if (f > 1).any() else None


def dcqcn_pacing(p: Plan, d: congestion.Dcqcn) -> np.ndarray:
    """Open loop: per message, line rate / the rate DCQCN gives its QP when it starts, driven by
    the CNPs that QP received in the current schedule (1: no CNP before it)."""
    factor = np.ones(p.n_msgs)
    cnp = np.flatnonzero(p.k_kind == CNP)
    if not len(cnp):
        return factor
    qp = p.m_conn[p.k_msg[cnp]]                       # a CNP names the data sender's QP
    arrived = p.k_rx_ns[cnp] + p.k_wire_ns[cnp]
    start = arrival(p, p.tx, np.arange(p.n_msgs), np.zeros(p.n_msgs, np.int64))
    by_qp = np.lexsort((start, p.m_conn))                  # messages per QP, in send order
    lo, hi = np.searchsorted(p.m_conn[by_qp], np.unique(qp)), np.searchsorted(p.m_conn[by_qp], np.unique(qp), "right")
    c_order = np.lexsort((arrived, qp))
    c_lo = np.searchsorted(qp[c_order], np.unique(qp))
    c_hi = np.searchsorted(qp[c_order], np.unique(qp), "right")
    for a, b, ca, cb in zip(lo.tolist(), hi.tolist(), c_lo.tolist(), c_hi.tolist()):
        msgs = by_qp[a:b]
        factor[msgs] = d.line_bps / congestion.dcqcn_rates(arrived[c_order[ca:cb]], start[msgs], d)
    return factor


def add_cnps(p: Plan, fabric: Fabric, dcqcn: congestion.Dcqcn | None = None) -> None:
    """CE marks -> CNPs: schedule without them, keep one per QP per gap at the marked packets'
    arrival, insert them as control frames and reschedule; drop any that the reschedule pushed
    closer than the gap to the previous one of their QP, until none is.
    With dcqcn (open loop): pace each QP's messages as DCQCN reacts to the CNPs it got, and pick
    the CNPs again on the paced schedule, a few rounds or until the pacing stays the same; the
    CNPs in the trace are those of the final (paced) schedule."""
    base = {k: getattr(p, k) for k in ("k_kind", "k_msg", "k_pkt", "k_tx_nic", "k_rx_nic", "k_wire_ns",
                                       "k_rec_bytes", "k_nominal_ns", "k_route", "k_frame")}
    _insert_cnps(p, fabric, base)
    if dcqcn is None:
        return
    factor = np.ones(p.n_msgs)
    for _ in range(DCQCN_ROUNDS):
        new = dcqcn_pacing(p, dcqcn)
        if np.array_equal(new, factor):
            break
        factor = new
        for k, v in base.items():
            setattr(p, k, v)
        pace(p, factor)
        _insert_cnps(p, fabric, base)


def _insert_cnps(p: Plan, fabric: Fabric, base: dict) -> None:
    schedule(p)
    g = p.ce_g
    m = np.searchsorted(p.m_pkt0, g, "right") - 1
    j = g - p.m_pkt0[m]
    ready = arrival(p, p.rx, m, j) + p.wire.span(p.m_npk[m], m, j, j + 1)
    keep = congestion.rate_limit_fast(p.m_conn[m], ready)
    m, j, ready = m[keep], j[keep], ready[keep]
    f_cnp = int(p.hdr_bytes[Opcode.CNP] + roce.ICRC_BYTES)
    w_cnp = int(wire_ns(f_cnp, p.line_gbps))
    at = len(base["k_kind"]) - len(p.cts_msg)
    for _ in range(CNP_CHECK_ROUNDS):
        n = len(m)
        new = dict(k_kind=np.full(n, CNP, np.int8), k_msg=m, k_pkt=j, k_tx_nic=p.m_dst[m],
                   k_rx_nic=p.m_src[m], k_wire_ns=np.full(n, w_cnp), k_rec_bytes=cnp_record_bytes(p, m),
                   k_nominal_ns=ready, k_frame=np.full(n, f_cnp),
                   # the NIC's CNP: receiver to the sender's QP, UDP source port 0, the QP's plane
                   k_route=routes.link_dirs(fabric, p.m_dst[m], p.m_src[m], 0, p.c_plane[p.m_conn[m]],
                                            p.c_qpn_src[p.m_conn[m]]))
        for k, v in base.items():
            setattr(p, k, np.concatenate([v[:at], new[k].astype(v.dtype), v[at:]]))
        schedule(p)
        t = p.k_tx_ns[at:at + n]
        ok = congestion.rate_limit_fast(p.m_conn[m], t)
        if ok.all():
            break
        m, j, ready = m[ok], j[ok], ready[ok]


def cnp_record_bytes(p: Plan, m: np.ndarray) -> np.ndarray:
    """Bytes of the pcap record of a CNP answering message m (with its pcapng comment)."""
    frame = p.hdr_bytes[Opcode.CNP] + roce.ICRC_BYTES
    rec = int(p.fmt.rec_bytes(min(frame, incl_cap(p.out, p.hdr_bytes)[Opcode.CNP])))
    opt = (comment_option_bytes(len(COMMENT_PREFIX[CNP]) + np.array([len(p.row_comment[r]) for r in p.m_row[m]],
                                                                    np.int64)) if p.row_comment else 0)
    return (rec + opt + 0 * np.asarray(m)).astype(np.int64)
