"""CE marks from the switch egress queues (output.ecn_marking=queue), beside congestion.py's
seeded fraction.

Every direction of a switch-to-switch link is an egress port of the schedule (hops.py), and so
is the leaf's port to each receiving NIC (its queue drains at the receiving NIC port's
serialisation, schedule.schedule's rx: the incast's congestion point, N senders -> 1 NIC): a frame
reaches a port one link latency after it started on the link before (cut-through) and leaves
when the port sends it (a leaf-to-NIC port: one link latency before the NIC's timestamp). Per port and priority, the queue a frame sees on arrival is the bytes of the
frames that arrived before it and have not started to leave:

    queue_i = sum of bytes_j over j with (a_j, d_j) < (a_i, d_i) and d_j > a_i

(a: arrival, d: departure = the frame's first bit on the link - its capture timestamp; bytes:
the frame with its FCS, as the switch buffers it). A data packet (ECN-capable) is marked CE on
enqueue as RED with an instantaneous queue does (weight 1, as DCQCN configures switches, Zhu
et al. SIGCOMM 2015 §3; ns-3 RedQueueDisc marks on enqueue; HPCC's SwitchMmu::ShouldSendCN has
the same curve): p = 0 up to Kmin, pmax (q - Kmin) / (Kmax - Kmin) up to Kmax, 1 above -
drawn from a seeded hash of (packet, route position), so the same input marks the same
packets. A packet stays CE after the first port that marked it.

Per packet arrays: memory is proportional to the packets the schedule holds.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import congestion
from .plan import ACK_DATA, CNP, CTS, DATA, Plan, Segs

FCS_BYTES = 4


@dataclass
class PortFrames:
    """Every frame entering a switch egress port (switch-to-switch or leaf-to-NIC), one row per (frame, port)."""
    port: np.ndarray        # link direction (2 l: a -> b of fabric link l, 2 l + 1: b -> a)
    prio: np.ndarray        # 802.1p priority it is queued in
    pos: np.ndarray         # route position of that link
    arrive_ns: np.ndarray
    depart_ns: np.ndarray
    frame_bytes: np.ndarray  # with FCS
    g: np.ndarray           # data: global packet number (plan.m_pkt0 + j); control frames: -1
    k: np.ndarray           # control frame index; data: -1
    queue_bytes: np.ndarray  # the queue of its port and priority at its arrival


def expand_segs(p: Plan, segs: Segs):
    """Per packet of segs: (segment, message, packet index, start ns), at the segments' spacing."""
    n = segs.kb - segs.ka
    seg = np.repeat(np.arange(len(n)), n)
    first = np.cumsum(n) - n
    k = segs.ka[seg] + np.arange(int(n.sum())) - first[seg]
    m = segs.msg[seg]
    t = segs.t[seg] + p.offset(m, k, segs.w) - p.offset(m, segs.ka[seg], segs.w)
    return seg, m, k, t


def data_bytes(p: Plan, m, k) -> np.ndarray:
    first, mid, last, only = p.frame_bytes
    npk = p.m_npk[m]
    return np.where(npk == 1, only[m], np.where(k == 0, first, np.where(k == npk - 1, last[m], mid))) + FCS_BYTES


def control_pcp(p: Plan, idx) -> np.ndarray:
    """802.1p priority of control frames idx, as frames.py writes it (CNPs 6; CTS and ACKs of
    data in nccl.fifo_tc's class when set)."""
    return frame_pcp(p, p.k_kind[idx], p.k_msg[idx])


def frame_pcp(p: Plan, kind, m) -> np.ndarray:
    """802.1p priority of frames of `kind` (DATA or a control kind) of messages m, as frames.py
    writes it: CNPs 6, CTS and ACKs of data in nccl.fifo_tc's class when set, the rest their
    QP pair's class (output.pcp, or the scenario job's)."""
    kind, m = np.asarray(kind), np.asarray(m)
    fifo = ((kind == CTS) | (kind == ACK_DATA)) & (p.fifo_tc >= 0)
    own = p.out.pcp if p.c_pcp is None else p.c_pcp[p.m_conn[m]]     # a CTS's QP pair is its connection's: one class
    pcp = np.where(kind == CNP, congestion.CNP_PCP, np.where(fifo, p.fifo_tc >> 5, own))
    return np.broadcast_to(pcp, np.broadcast(kind, m).shape).astype(np.int64)


def port_frames(p: Plan) -> PortFrames:
    """The frames at every switch egress port of the scheduled plan, with their queue."""
    L = p.m_route.shape[1]
    m_route = p.m_route
    lat = lambda d: np.where(d >= 0, p.link_lat[np.maximum(d, 0) >> 1], 0)      # noqa: E731
    # departures of data packets and control frames at each route position (0: the NIC's)
    _, m0, k0, t0 = expand_segs(p, p.tx)
    dkey, dt = [(p.m_pkt0[m0] + k0) * L], [t0]
    K = len(p.k_kind)
    ckey, ct = [np.arange(K) * L], [p.k_tx_ns]
    rows = []
    for h in p.hops or []:
        seg, m, k, t = expand_segs(p, h.segs)
        pos = h.seg_pos[seg]
        g = p.m_pkt0[m] + k
        dkey.append(g * L + pos)
        dt.append(t)
        rows.append((True, h.seg_port[seg], pos, g, m, k, t))
        kk = np.flatnonzero(h.k_port >= 0)
        ckey.append(kk * L + h.k_pos[kk])
        ct.append(h.k_t[kk])
        rows.append((False, h.k_port[kk], h.k_pos[kk], kk, None, None, h.k_t[kk]))
    # the leaf's port to the receiving NIC (the route's last link): its egress queue drains at the
    # receiving NIC port's serialisation (schedule.schedule's rx), a frame leaving it one link
    # latency before the NIC's timestamp - the incast's congestion point (N senders -> 1 NIC)
    seg, m, k, t = expand_segs(p, p.rx)
    pos = (m_route[m] >= 0).sum(axis=1) - 1
    d = m_route[m, pos]
    rows.append((True, d, pos, p.m_pkt0[m] + k, m, k, t - lat(d)))
    kk = np.arange(K)
    kpos = (p.k_route >= 0).sum(axis=1) - 1
    kd = p.k_route[kk, kpos]
    rows.append((False, kd, kpos, kk, None, None, p.k_rx_ns - lat(kd)))
    dkey, dt, ckey, ct = (np.concatenate(x) for x in (dkey, dt, ckey, ct))
    do, co = np.argsort(dkey, kind="stable"), np.argsort(ckey, kind="stable")
    dkey, dt, ckey, ct = dkey[do], dt[do], ckey[co], ct[co]
    cols = {c: [] for c in ("port", "prio", "pos", "arrive_ns", "depart_ns", "frame_bytes", "g", "k")}
    for data, port, pos, ident, m, k, t in rows:
        if data:
            prev = dt[np.searchsorted(dkey, ident * L + pos - 1)]
            arrive = prev + lat(m_route[m, pos - 1])
            vals = dict(prio=frame_pcp(p, DATA, m), frame_bytes=data_bytes(p, m, k), g=ident,
                        k=np.full(len(t), -1, np.int64))
        else:
            prev = ct[np.searchsorted(ckey, ident * L + pos - 1)]
            arrive = prev + lat(p.k_route[ident, pos - 1])
            vals = dict(prio=control_pcp(p, ident), frame_bytes=p.k_frame[ident] + FCS_BYTES,
                        g=np.full(len(t), -1, np.int64), k=ident)
        vals.update(port=port, pos=pos, arrive_ns=arrive, depart_ns=t)
        for c, v in vals.items():
            cols[c].append(np.asarray(v, np.int64))
    f = {c: np.concatenate(v) if v else np.zeros(0, np.int64) for c, v in cols.items()}
    f["queue_bytes"] = queue_at_arrival(f["port"] * 8 + f["prio"], f["arrive_ns"], f["depart_ns"], f["frame_bytes"])
    return PortFrames(**f)


def queue_at_arrival(group, a, d, b) -> np.ndarray:
    """Per frame: bytes of its group's frames that arrived before it ((a, d) order) and have not
    started to leave at its arrival (d > a_i) - the egress queue it is enqueued behind."""
    n = len(a)
    if not n:
        return np.zeros(0, np.int64)
    _, grp = np.unique(group, return_inverse=True)
    t0, span = int(min(a.min(), d.min())), int(max(a.max(), d.max()) - min(a.min(), d.min())) + 2
    assert (int(grp.max()) + 1) * span < 2 ** 62, "queue replay: time span x ports too large"
    o = np.lexsort((d, a, grp))
    cb = np.cumsum(b[o]) - b[o]
    first = np.r_[True, grp[o][1:] != grp[o][:-1]]
    before = np.empty(n, np.int64)
    before[o] = cb - cb[np.maximum.accumulate(np.where(first, np.arange(n), 0))]
    # bytes of the group that left at or before a_i (all of them arrived before i)
    dk = grp * span + (d - t0)
    od = np.argsort(dk, kind="stable")
    cd = np.r_[0, np.cumsum(b[od])]
    base = np.searchsorted(dk[od], grp * span, "left")
    gone = cd[np.searchsorted(dk[od], grp * span + (a - t0), "right")] - cd[base]
    gone -= np.where(d <= a, b, 0)
    return before - gone


def red_probability(q, kmin: int, kmax: int, pmax: float) -> np.ndarray:
    """RED's marking probability at instantaneous queue q (bytes)."""
    q = np.asarray(q, np.float64)
    ramp = pmax * (q - kmin) / max(kmax - kmin, 1)
    return np.where(q <= kmin, 0.0, np.where(q <= kmax, ramp, 1.0))


def _uniform(key: np.ndarray, seed: int) -> np.ndarray:
    salt = np.uint64((seed * 0xD1B54A32D192ED03 + 0x5851F42D4C957F2D) & (2**64 - 1))
    with np.errstate(over="ignore"):          # splitmix64 (Steele et al.), as congestion.ce_marks
        x = (key.astype(np.uint64) ^ salt) + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        h = x ^ (x >> np.uint64(31))
    return (h >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def marks(p: Plan, f: PortFrames, kmin: int, kmax: int, pmax: float, seed: int):
    """(ce_g, ce_pos): sorted global numbers of the CE-marked data packets and the route position
    of the first port that marked each."""
    data = np.flatnonzero(f.g >= 0)
    L = p.m_route.shape[1]
    u = _uniform(f.g[data] * L + f.pos[data], seed)
    hit = data[u < red_probability(f.queue_bytes[data], kmin, kmax, pmax)]
    if not len(hit):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    o = np.lexsort((f.pos[hit], f.g[hit]))
    g, pos = f.g[hit][o], f.pos[hit][o]
    first = np.r_[True, g[1:] != g[:-1]]
    return g[first], pos[first]
