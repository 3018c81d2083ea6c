"""The wire plan's packet-exact schedule, per NIC and direction (see plan.py for the rules).

Timing, per NIC and direction: t_i = max(nominal_i, t_{i-1} + wire_{i-1}) over frames in order.
A message's packets go back to back unless a control frame (CTS/ACK/CNP) is due: it slips in at
the next packet boundary. Computed for all NICs at once on segments (runs of a message's packets
between two control frames), so memory scales with messages and control frames, never packets.
"""
from __future__ import annotations

import numpy as np

from ... import progress
from . import epoch_paths, hops, roce
from .ports import running_max, serialize
from .plan import ACK_CTS, ACK_DATA, ACK_ROUNDS, CNP, CTS, PROXY_POST_NS, FIX_ROUNDS, Plan, Segs


MIN_TRAIN_PACKETS, MAX_TRAIN_PACKETS = 8, 64
COARSE_TRAIN_PACKETS, COARSE_ABOVE_PACKETS = 32, 1 << 22


def paced_trains(p: Plan, m_nominal: np.ndarray) -> Segs:
    """Each message's packets as trains for serialize(): a message at line rate is one train; a
    paced one (p.m_pace > 1: the schedule gave its flow less than the NIC's rate) is cut into
    trains of B packets, B ~ 1 / (pace - 1) within [MIN_TRAIN_PACKETS, MAX_TRAIN_PACKETS], each
    starting where the paced message has reached: the gap after a train is (pace - 1) x B packets,
    at least one, where other QPs' trains go in - the NIC serves QPs with pending work in turn, a
    burst of packets each. Trains of at least 8 packets keep the plan's size near the messages',
    not the packets'; plans of more than COARSE_ABOVE_PACKETS packets (a big job's NICs over a
    whole iteration) use trains of at least 32 (2.2x faster to write, coarser interleaving)."""
    M = p.n_msgs
    B = train_packets(p)
    if B is None:
        return Segs(np.arange(M), np.zeros(M, np.int64), p.m_npk, m_nominal)
    nb = -(-p.m_npk // B)
    msg = np.repeat(np.arange(M), nb)
    b = np.arange(len(msg)) - np.repeat(np.cumsum(nb) - nb, nb)
    ka = b * B[msg]
    kb = np.minimum(ka + B[msg], p.m_npk[msg])
    t = m_nominal[msg] + p.paced_offset(msg, p.offset(msg, ka))
    return Segs(msg, ka, kb, t)


def train_packets(p: Plan) -> np.ndarray | None:
    """Per message: packets per train (paced_trains), or None when no message is paced."""
    f = p.pace_of(np.arange(p.n_msgs))
    if (f <= 1).all():
        return None
    least = COARSE_TRAIN_PACKETS if int(p.m_npk.sum()) > COARSE_ABOVE_PACKETS else MIN_TRAIN_PACKETS
    B = np.where(f > 1, np.clip(np.ceil(1 / np.maximum(f - 1, 1e-9)), least, MAX_TRAIN_PACKETS),
                 p.m_npk).astype(np.int64)
    return np.maximum(np.minimum(B, p.m_npk), 1)


def qp_in_order(p: Plan, m_nominal: np.ndarray) -> np.ndarray:
    """Message nominal times such that each QP sends its messages one after the other, packet
    after packet. An RC send queue executes its work requests in order (IBA Vol 1 10.8.3; mlx5
    processes a QP's WQEs in order), and NCCL posts a connection's messages in order:
    ncclIbIsend sends only the request of CTS FIFO slot fifoHead + 1, and ncclIbMultiSend posts
    its WRITEs with one ibv_post_send per QP (nccl src/transport/net_ib/p2p.cc). serialize()
    keeps trains in nominal order per NIC port (ties in plan order), so it is enough that
    message n+1 of a QP (plan order: the order NCCL posts them) starts no earlier than the
    nominal start of message n's last train: the QP's packets then leave in PSN order whatever
    the contention, pacing and rate changes included."""
    M = p.n_msgs
    m = np.arange(M)
    B = train_packets(p)
    last_train = np.zeros(M, np.int64) if B is None else p.paced_offset(m, p.offset(m, (p.m_npk - 1) // B * B))
    return running_max(np.lexsort((m, p.m_conn)), p.m_conn, m_nominal, last_train)


def control_in_order(p: Plan, k_nominal: np.ndarray) -> np.ndarray:
    """Control frame nominal times in order per QP and kind: a responder acknowledges a QP's
    packets in PSN order (ACKs of data, ACKs of CTS), a receiver posts a connection's CTS in
    FIFO order; each no earlier than its predecessor (serialize keeps ties in plan order)."""
    kind, m = p.k_kind, p.k_msg
    qp0 = (kind == CTS) | (kind == ACK_CTS)
    qp = np.where(qp0, p.m_conn[m] - p.m_q[m], p.m_conn[m])
    ordered = np.flatnonzero(kind != CNP)
    key = qp[ordered] * 3 + np.select([kind[ordered] == ACK_CTS, kind[ordered] == ACK_DATA], [0, 1], 2)
    o = np.lexsort((np.arange(len(ordered)), key))
    out = k_nominal.copy()
    out[ordered] = running_max(o, key, k_nominal[ordered], np.zeros(len(ordered), np.int64))
    return out


def ports(p: Plan):
    """The NIC port (nic x planes + plane of the QP) each message and control frame leaves and
    enters by: every port is its own transmitter at nic_gbps / planes (NIC ids when one plane).
    CTS and their ACKs use the connection's first QP, ACKs of data and CNPs the message's QP."""
    P = p.planes
    m_plane = p.c_plane[p.m_conn]
    m = p.k_msg
    qp0 = (p.k_kind == CTS) | (p.k_kind == ACK_CTS)
    k_plane = p.c_plane[np.where(qp0, p.m_conn[m] - p.m_q[m], p.m_conn[m])]
    return p.m_src * P + m_plane, p.m_dst * P + m_plane, p.k_tx_nic * P + k_plane, p.k_rx_nic * P + k_plane


def schedule(p: Plan) -> None:
    M, C = p.n_msgs, len(p.cts_msg)
    n_ack = len(p.k_kind) - C
    acked_m, acked_j = p.k_msg[C:n_ack], p.k_pkt[C:n_ack]
    acked_wire = np.r_[p.k_wire_ns[n_ack:], p.wire.span(p.m_npk[acked_m], acked_m, acked_j, acked_j + 1)]
    burst = p.wire.span(p.m_npk, np.arange(M), 0, p.m_npk)
    m_nominal, k_nominal = p.m_nominal_ns.copy(), p.k_nominal_ns.copy()
    cts_wait = p.m_wait[p.cts_msg]
    cts_conn = (p.m_conn - p.m_q)[p.cts_msg]
    last = p.m_npk - 1
    windowed = bool((cts_wait >= 0).any())
    paced = np.ceil(burst * p.pace_of(np.arange(M))).astype(np.int64)     # first packet to last one done
    if windowed:                 # idle fabric: a message's parts back to back, a CTS one flight away
        nccl_burst = np.zeros(int(p.m_nccl.max()) + 1, np.int64)
        np.add.at(nccl_burst, p.m_nccl, paced)
        span = nccl_burst[p.m_nccl[p.cts_msg]]
        flight = p.m_flight_ns[p.cts_msg]
        m_nominal, k_nominal[n_ack:] = _window_bounds(p, m_nominal, k_nominal[n_ack:], span, span + flight,
                                                      flight + p.k_wire_ns[n_ack:])
    # Nominal times assume an idle fabric. Where an ACK would leave before its packet has arrived,
    # a message before its CTS has, or a CTS before NCCL_STEPS let its receive be posted (the
    # message NCCL_STEPS steps back has not fully arrived), move that nominal time later (and the
    # flow's following messages with it) and reschedule. Nominal times only grow.
    m_port_tx, m_port_rx, k_port_tx, k_port_rx = ports(p)
    for fix in range(FIX_ROUNDS + ACK_ROUNDS):
        # After FIX_ROUNDS, rounds that move only what the wire shows out of order - late ACKs, and
        # messages that would leave before their CTS arrived: the CTSs keep their nominal times (one
        # posted before NCCL freed its slot is invisible on the wire), so what the ACKs and messages
        # wait for stops chasing the window's moves and settles
        acks_only = fix >= FIX_ROUNDS
        progress.report(min(fix, FIX_ROUNDS - 1), FIX_ROUNDS)     # the CLI's bar: rounds, at most FIX_ROUNDS
        m_nominal = qp_in_order(p, m_nominal)
        if p.m_cap is not None:      # ACKs of DCQCN-paced messages: no earlier than their packets on an idle fabric
            capped = np.flatnonzero(p.m_cap[acked_m] > 1)
            cm, cj = acked_m[capped], acked_j[capped]
            k_nominal[C + capped] = np.maximum(k_nominal[C + capped], m_nominal[cm] + p.paced_offset(cm, p.offset(cm, cj))
                                               + p.m_flight_ns[cm] + p.wire.span(p.m_npk[cm], cm, cj, cj + 1))
        k_nominal = control_in_order(p, k_nominal)
        bursts = paced_trains(p, m_nominal)
        tx, k_tx = serialize(p, bursts, m_port_tx[bursts.msg], k_port_tx, k_nominal, p.k_wire_ns)
        # the switch links on the way (a scenario's epochs: on each frame's epoch route, epoch_paths.py)
        seg_arrive, k_arrive, hop_list = (epoch_paths.through if p.paths is not None else hops.through)(p, tx, k_tx)
        rx, k_rx = serialize(p, Segs(tx.msg, tx.ka, tx.kb, seg_arrive), m_port_rx[tx.msg], k_port_rx, k_arrive,
                             p.k_wire_ns)
        ack_ready = np.r_[k_rx[n_ack:], arrival(p, rx, acked_m, acked_j)] + acked_wire
        data_ready = np.zeros(M, np.int64)       # messages without a CTS (later parts) wait for none
        data_ready[p.cts_msg] = k_rx[n_ack:] + p.k_wire_ns[n_ack:]
        m_start = arrival(p, tx, np.arange(M), np.zeros(M, np.int64))
        late_ack, late_data = k_tx[:n_ack] < ack_ready, m_start < data_ready
        cts_ready = np.zeros(C, np.int64)
        if windowed:
            m_end = arrival(p, rx, np.arange(M), last) + p.wire.span(p.m_npk, np.arange(M), last, p.m_npk)
            nccl_end = np.zeros(int(p.m_nccl.max()) + 1, np.int64)
            np.maximum.at(nccl_end, p.m_nccl, m_end)
            cts_ready = np.where(cts_wait >= 0, nccl_end[np.maximum(cts_wait, 0)], 0)
        late_cts = k_nominal[n_ack:] < cts_ready
        if not (late_ack.any() or late_data.any() or (not acks_only and late_cts.any())):
            break
        k_nominal[:n_ack] = np.where(late_ack, ack_ready, k_nominal[:n_ack])
        if acks_only:
            if late_data.any():
                m_nominal = running_max(np.arange(M), p.m_row, np.maximum(m_nominal, data_ready), paced)
            continue
        if windowed and (late_cts.any() or late_data.any()):     # the window, with measured spans
            tx_end = arrival(p, tx, np.arange(M), last) + p.wire.span(p.m_npk, np.arange(M), last, p.m_npk)
            nccl_tx = np.zeros(len(nccl_end), np.int64)
            np.maximum.at(nccl_tx, p.m_nccl, tx_end)
            s0 = m_start[p.cts_msg]
            cts_lat = np.maximum(k_rx[n_ack:] + p.k_wire_ns[n_ack:] - k_nominal[n_ack:], 0)
            m_nominal, k_nominal[n_ack:] = _window_bounds(
                p, m_nominal, k_nominal[n_ack:], nccl_tx[p.m_nccl[p.cts_msg]] - s0,
                nccl_end[p.m_nccl[p.cts_msg]] - s0, cts_lat, floor=s0)
        # a connection posts its receives in order; a late one a little after its slot freed (the
        # receiver's proxy polls for the arrival), so that small shifts of arrivals in the next
        # round do not make it late again
        post = np.where(late_cts, cts_ready + PROXY_POST_NS, k_nominal[n_ack:])
        k_nominal[n_ack:] = running_max(np.arange(C), cts_conn, np.maximum(k_nominal[n_ack:], post),
                                        np.zeros(C, np.int64))
        m_nominal = running_max(np.arange(M), p.m_row, np.maximum(m_nominal, data_ready), paced)
    p.late = int(late_ack.sum() + late_data.sum() + late_cts.sum())
    p.late_acks = int(late_ack.sum())
    p.late_data = int(late_data.sum())
    p.tx, p.rx, p.k_tx_ns, p.k_rx_ns, p.hops = tx, rx, k_tx, k_rx, hop_list
    ip_ids(p)

    # PSNs and MSNs follow the order messages really left on their QP.
    m_psn, m_done, _ = per_qp_running(p.m_conn, m_start, p.m_npk, p.m_size)
    p.m_psn, p.m_done = m_psn & roce.PSN_MASK, m_done
    # CTSs travel on the connection's QP 0, receiver to sender.
    ones = np.ones(C, np.int64)
    cts_psn, _, _ = per_qp_running(cts_conn, k_tx[n_ack:], ones, ones)
    p.m_cts_psn = np.zeros(M, np.int64)
    p.m_cts_psn[p.cts_msg] = cts_psn & roce.PSN_MASK


def _window_bounds(p: Plan, m_nominal, cts_nominal, tx_span, arr_span, cts_lat, floor=None):
    """Raise message and CTS nominal times to what NCCL's receive window allows: a connection's
    messages one after the other, each after its CTS has arrived, each CTS after the message
    NCCL_STEPS steps back has arrived. Per NCCL message (at its CTS): tx_span (first packet sent
    to last one done), arr_span (first packet sent to last one arrived) and cts_lat (CTS posted
    to arrived) - on an idle fabric, or as the last schedule measured them. One pass over the
    message ordinals of all connections at once carries a delay down a whole window-limited
    connection (small messages, long round trip), where the fixed-point rounds of schedule()
    would move one window per round."""
    cm, C = p.cts_msg, len(p.cts_msg)
    conn = (p.m_conn - p.m_q)[cm]
    pos_of = np.full(int(p.m_nccl.max()) + 1, -1, np.int64)
    pos_of[p.m_nccl[cm]] = np.arange(C)
    wait = p.m_wait[cm]
    wpos = np.where(wait >= 0, pos_of[np.maximum(wait, 0)], -1)
    first = np.r_[True, conn[1:] != conn[:-1]]
    level = np.arange(C) - np.maximum.accumulate(np.where(first, np.arange(C), 0))
    order = np.argsort(level, kind="stable")
    bounds = np.searchsorted(level[order], np.arange(int(level.max()) + 2))
    nom, cts = m_nominal[cm], cts_nominal.copy()
    if floor is not None:           # where the last schedule started them (contention included)
        nom = np.maximum(nom, floor)
    start, end = np.zeros(C, np.int64), np.zeros(C, np.int64)
    for lv in range(int(level.max()) + 1):
        i = order[bounds[lv]:bounds[lv + 1]]
        w = wpos[i]
        cts[i] = np.where(w >= 0, np.maximum(cts[i], end[np.maximum(w, 0)] + PROXY_POST_NS), cts[i])
        st = np.maximum(nom[i], cts[i] + cts_lat[i])
        if lv:
            st = np.maximum(st, start[i - 1] + tx_span[i - 1])
        start[i], end[i] = st, st + arr_span[i]
    m_nominal = m_nominal.copy()
    m_nominal[cm] = np.maximum(m_nominal[cm], start)
    m = np.arange(p.n_msgs)
    paced = np.ceil(p.wire.span(p.m_npk, m, 0, p.m_npk) * p.pace_of(m)).astype(np.int64)
    return running_max(m, p.m_row, m_nominal, paced), cts


def ip_ids(p: Plan) -> None:
    """IPv4 identification: per sending NIC a 16-bit counter from 0, +1 for every frame the NIC
    sends (data packets, CTS, ACKs, CNPs) in send order. A segment's packets are consecutive
    frames of its NIC, so a segment needs only its first packet's; a received segment lies
    inside one sent segment (arrivals are only ever split further) and takes its numbers."""
    tx, S = p.tx, len(p.tx.msg)
    nic = np.r_[p.m_src[tx.msg], p.k_tx_nic]
    n = np.r_[tx.kb - tx.ka, np.ones(len(p.k_tx_nic), np.int64)]
    order = np.lexsort((np.r_[tx.t, p.k_tx_ns], nic))
    c = np.cumsum(n[order]) - n[order]
    s_nic = nic[order]
    first = np.r_[True, s_nic[1:] != s_nic[:-1]]
    ids = np.empty(len(c), np.int64)
    ids[order] = (c - c[np.maximum.accumulate(np.where(first, np.arange(len(c)), 0))]) & 0xFFFF
    tx.ip_id, p.k_ip_id = ids[:S], ids[S:]
    width = int(p.m_npk.max()) + 1
    key = tx.msg * width + tx.ka
    o = np.argsort(key, kind="stable")
    for segs in [p.rx] + [h.segs for h in p.hops or []]:       # at the receiver, and at each switch link
        seg = o[np.searchsorted(key[o], segs.msg * width + segs.ka, "right") - 1]
        segs.ip_id = (tx.ip_id[seg] + segs.ka - tx.ka[seg]) & 0xFFFF


def arrival(p: Plan, rx: Segs, m, j):
    """Time packet j of message m starts in a direction's segments (sent or received)."""
    width = int(p.m_npk.max()) + 1
    key = rx.msg * width + rx.ka
    order = np.argsort(key, kind="stable")
    seg = order[np.searchsorted(key[order], m * width + j, side="right") - 1]
    return rx.t[seg] + p.offset(m, j) - p.offset(m, rx.ka[seg])


def per_qp_running(conn, t, npk, size):
    """In send order per connection: packets before, messages before, bytes before."""
    order = np.lexsort((t, conn))
    c = conn[order]
    first = np.r_[True, c[1:] != c[:-1]]
    start = np.maximum.accumulate(np.where(first, np.arange(len(c)), 0))
    res = []
    for x in (npk[order], np.ones(len(c), np.int64), size[order]):
        cx = np.cumsum(x) - x
        r = np.empty(len(c), np.int64)
        r[order] = cx - cx[start]
        res.append(r)
    return res
