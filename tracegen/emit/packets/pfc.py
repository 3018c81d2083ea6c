"""PFC PAUSE frames from the switch egress queues (output.ecn_marking=queue with network.pfc).

What is modelled: a switch egress port whose frame came straight from a NIC (route position 1:
a leaf's uplink, or the leaf's port to another NIC of the same leaf - the incast's congestion
point) and whose queue of the data's priority (queue_marks.py) exceeds Xoff once that frame is
enqueued pauses the port the frame came in by, the sending NIC's: the switch sends an 802.1Qbb
PFC frame (MAC control, ethertype 0x8808, opcode 0x0101, class-enable vector with the data's
priority, its time in quanta of 512 bit times at the NIC port's rate). 802.1Qbb and switch
MMUs count per ingress port and priority (HPCC's ns-3 SwitchMmu::CheckShouldPause(port, qIndex)
takes the ingress port; GetPauseClasses the priorities to pause): here the egress queue the
frame joins decides and the PAUSE goes to the port it came in by - the neighbour an ingress count
would pause when that ingress feeds the congested egress. The pause lasts until the queue,
drained at the port's rate, would be down to Xon = Xoff - network.pfc_resume_offset_bytes (at
most network.pfc_pause_quanta); while the queue stays above Xoff an arrival from a NIC whose
pause has run out pauses it again (refresh); pauses run out by themselves (no XON frame). Xoff:
network.pfc_xoff_bytes, 0: 1/8 of network.buffer_bytes.

The PAUSE frame has its own slot on the leaf-to-NIC link (pause_slots): the leaf sends it at the
first frame boundary of that link at or after the frame's arrival (a MAC control frame goes
ahead of queued data, never cutting a frame in flight) for 64 B + preamble + IFG, the frames
after it move later; it reaches the NIC one link latency after it started. The paused NIC port
sends no frame of the paused priority from the PAUSE's arrival until it ends (serialize_paused:
a pause is a silence of the port that goes in at the first packet boundary the trains really
reach, so the NIC finishes the frame on the wire and then waits); frames of other priorities
(CNPs at priority 6, nccl.fifo_tc's CTS/ACKs) that the silence held leave inside it, as 802.1Qbb
pauses only the class-enable vector's priorities. The pauses are chosen on the schedule they
shape (queue_rounds.queue_marks_and_cnps: recomputed from the queues of the schedule the last pauses
shaped, until they stay the same; with output.dcqcn they may not settle: summary.json
queue_marks says); the captures show those the written schedule's queues call for during which
their NIC starts no frame of the paused priority (queue_rounds._pauses_shown).
Not modelled: pauses towards a switch (a frame that came from another switch's egress port: a
spine's port to the leaf, a leaf's uplink to the spine). Tried: as silences of those switch ports
in hops.py, the pauses recomputed per round never settled on the 15:1 incast (each round's
PAUSE times and quanta moved with the last round's; grown instead of replaced they settle, but
few of the silences are pauses the final queues call for) - see the README.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .plan import Plan, Segs, wire_ns
from .ports import running_max, serialize
from .queue_marks import control_pcp

PAUSE_DST = bytes.fromhex("0180c2000001")   # IEEE 802.1Qbb / 802.3x MAC control address
ETHERTYPE_MAC_CONTROL = 0x8808
OPCODE_PFC = 0x0101
PAUSE_FRAME_BYTES = 60                       # the minimum frame, FCS not captured
QUANTUM_BITS = 512


@dataclass
class Pauses:
    """PAUSE frames, sorted by (nic port, time at the NIC)."""
    port: np.ndarray        # NIC port paused (nic x planes + plane: schedule.ports)
    nic: np.ndarray
    t_ns: np.ndarray        # when the PAUSE reaches the NIC (its timestamp in the captures)
    quanta: np.ndarray
    block_ns: np.ndarray    # the pause in ns at the NIC port's rate
    switch_port: np.ndarray  # the queue (link direction) that crossed Xoff: its switch sent it
    wire_dir: np.ndarray     # the link direction the PAUSE travels (the switch's towards the paused port)

    FIELDS = ("port", "nic", "t_ns", "quanta", "block_ns", "switch_port", "wire_dir")

    @staticmethod
    def none() -> "Pauses":
        z = np.zeros(0, np.int64)
        return Pauses(z, z, z, z, z, z, z)

    def take(self, sel) -> "Pauses":
        return Pauses(*(getattr(self, k)[sel] for k in self.FIELDS))

    def at(self, t_ns) -> "Pauses":
        """The same pauses reaching their NICs at t_ns."""
        return Pauses(self.port, self.nic, np.asarray(t_ns, np.int64), self.quanta, self.block_ns, self.switch_port,
                      self.wire_dir)

    def key(self) -> np.ndarray:
        return np.stack([self.port, self.t_ns, self.quanta]) if len(self.port) else np.zeros((3, 0), np.int64)


def xoff_xon(network) -> tuple[int, int]:
    xoff = network.pfc_xoff_bytes or network.buffer_bytes // 8
    return xoff, max(xoff - network.pfc_resume_offset_bytes, 0)


def pauses(p: Plan, f, network, m_port_tx: np.ndarray, k_port_tx: np.ndarray) -> Pauses:
    """The PAUSE frames the queues of port_frames f call for (see the module doc). m_port_tx /
    k_port_tx: the NIC port each message / control frame leaves by (schedule.ports)."""
    if not network.pfc:
        return Pauses.none()
    xoff, xon = xoff_xon(network)
    prio = p.out.pcp
    first = (f.pos == 1) & (f.prio == prio)
    over = np.flatnonzero(first & (f.queue_bytes + f.frame_bytes > xoff))
    if not len(over):
        return Pauses.none()
    m = np.searchsorted(p.m_pkt0, f.g, "right") - 1
    up = np.where(f.g >= 0, m_port_tx[np.maximum(m, 0)], k_port_tx[np.maximum(f.k, 0)])
    src_nic = np.where(f.g >= 0, p.m_src[np.maximum(m, 0)], p.k_tx_nic[np.maximum(f.k, 0)])
    route0 = np.where(f.g >= 0, p.m_route[np.maximum(m, 0), 0], p.k_route[np.maximum(f.k, 0), 0])
    lat0 = p.link_lat[route0 >> 1]
    port_gbps = p.link_gbps_at(f.port, f.arrive_ns)
    nic_gbps = p.line_gbps
    qmax = network.pfc_pause_quanta
    out = {k: [] for k in Pauses.FIELDS}
    until: dict[int, int] = {}
    for i in over[np.lexsort((f.depart_ns[over], f.arrive_ns[over]))].tolist():
        u = int(up[i])
        t_nic = int(f.arrive_ns[i] + lat0[i])
        if until.get(u, -1) > t_nic:            # still paused: no refresh before it runs out
            continue
        drain_ns = -(-(int(f.queue_bytes[i] + f.frame_bytes[i]) - xon) * 8 // int(port_gbps[i]))
        quanta = min(qmax, max(1, -(-drain_ns * nic_gbps // QUANTUM_BITS)))
        block = -(-quanta * QUANTUM_BITS // nic_gbps)
        until[u] = t_nic + block
        for k, v in (("port", u), ("nic", int(src_nic[i])), ("t_ns", t_nic), ("quanta", quanta),
                     ("block_ns", block), ("switch_port", int(f.port[i])), ("wire_dir", int(route0[i]) ^ 1)):
            out[k].append(v)
    res = Pauses(**{k: np.asarray(v, np.int64) for k, v in out.items()})
    return res.take(np.lexsort((res.t_ns, res.port)))


def settle(old: Pauses, new: Pauses) -> tuple[Pauses, bool]:
    """The pauses to schedule next (all of new's) and whether they are old's (settled)."""
    a, b = old.key(), new.key()
    return new, a.shape == b.shape and np.array_equal(a, b)


def agree(old: Pauses, new: Pauses) -> np.ndarray:
    """Per pause of old: is it one of new's (same port, time and quanta)?"""
    have = set(map(tuple, new.key().T.tolist()))
    return np.array([t in have for t in map(tuple, old.key().T.tolist())], bool)


PLACE_ROUNDS = 4     # serialize_paused: re-place a PAUSE that a late train had passed


def stopped(p: Plan) -> np.ndarray:
    """Per control frame: is it of the paused priority? 802.1Qbb pauses only the priorities of
    the class-enable vector (the data's, p.out.pcp): CNPs (priority 6, congestion.CNP_PCP) and
    nccl.fifo_tc's CTS/ACKs on another class still leave (mlx5 per-priority TX queues)."""
    return control_pcp(p, np.arange(len(p.k_kind))) == p.out.pcp


def next_start(p: Plan, pz: Pauses, tx: Segs, k_tx: np.ndarray, m_port_tx, k_port_tx, k_sel) -> np.ndarray:
    """Per pause: the first start at or after its arrival (pz.t_ns) of a frame of the paused
    priority on its NIC port (data packets of tx and control frames k_sel), int64 max if none.
    m_port_tx: each message's NIC port. Only the paused ports' trains are expanded to packets."""
    big = np.iinfo(np.int64).max
    if not len(pz.port):
        return np.zeros(0, np.int64)
    keep = np.flatnonzero(np.isin(m_port_tx[tx.msg], pz.port))
    n = tx.kb[keep] - tx.ka[keep]
    seg = np.repeat(keep, n)
    k = tx.ka[seg] + np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
    m = tx.msg[seg]
    kk = np.flatnonzero(k_sel & np.isin(k_port_tx, pz.port))
    t = np.r_[tx.t[seg] + p.offset(m, k, tx.w) - p.offset(m, tx.ka[seg], tx.w), k_tx[kk]]
    port = np.r_[m_port_tx[m], k_port_tx[kk]]
    if not len(t):
        return np.full(len(pz.port), big, np.int64)
    t0 = int(min(t.min(), pz.t_ns.min()))
    span = int(max(t.max(), pz.t_ns.max())) - t0 + 1
    key = np.sort(port * span + (t - t0))
    i = np.searchsorted(key, pz.port * span + (pz.t_ns - t0), "left")
    hit = key[np.minimum(i, len(key) - 1)]
    ok = (i < len(key)) & (hit // span == pz.port)
    return np.where(ok, hit - pz.port * span + t0, big)


def serialize_paused(p: Plan, pz: Pauses, trains: Segs, m_port, k_port, k_nominal, k_wire):
    """ports.serialize of every NIC port with the pauses pz: a pause is a silence of block_ns on
    its port that goes in at the first packet boundary at or after its arrival, so the NIC finishes
    the frame on the wire and then waits. The boundary is found from the times the trains really
    reach: a train running late has passed the boundary its nominal times give, so a pause whose
    silence starts after a frame of the paused priority started at or after its arrival is placed
    that much earlier and the ports serialized again (PLACE_ROUNDS). Then the control frames of
    other priorities (stopped() False) that the silence held leave inside it, in their order, as
    far as they fit before it ends (the frames after them keep their times). Returns the trains,
    the control times and each pause's start on the wire."""
    K = len(k_nominal)
    held = stopped(p)
    place = pz.t_ns.copy()
    for _ in range(PLACE_ROUNDS):
        tx, t = serialize(p, trains, m_port[trains.msg], np.r_[k_port, pz.port], np.r_[k_nominal, pz.t_ns],
                          np.r_[k_wire, pz.block_ns], ctl_place=np.r_[k_nominal, place])
        k_tx, start = t[:K], t[K:]
        first = next_start(p, pz, tx, k_tx, m_port, k_port, held)
        late = first < start
        if not late.any():
            break
        place[late] -= start[late] - first[late]
    return tx, _let_other_priorities_pass(pz, start, k_port, k_nominal, k_wire, k_tx, ~held), start


def _let_other_priorities_pass(pz: Pauses, start, k_port, k_nominal, k_wire, k_tx, other) -> np.ndarray:
    """k_tx with the control frames of other priorities that a pause held moved into it (see
    serialize_paused): a frame is held by the last pause on its port that ends at or before it
    leaves, if it was due before that pause ended."""
    end = start + pz.block_ns
    c = np.flatnonzero(other & np.isin(k_port, pz.port))
    if not len(c) or not len(pz.port):
        return k_tx
    o = np.lexsort((end, pz.port))                  # pauses by port, then end
    span = int(max(end.max(), k_tx[c].max())) + 1
    key = pz.port[o] * span + end[o]
    j = np.searchsorted(key, k_port[c] * span + k_tx[c], "right") - 1
    z = o[np.maximum(j, 0)]
    ok = (j >= 0) & (pz.port[z] == k_port[c]) & (k_nominal[c] < end[z])
    c, z = c[ok], z[ok]
    if not len(c):
        return k_tx
    order = np.lexsort((k_tx[c], z))                # in the order they left, per pause
    t = running_max(order, z, np.maximum(k_nominal[c], start[z]), k_wire[c])
    fits = t + k_wire[c] <= end[z]                  # t grows within a pause: a prefix of them fits
    out = k_tx.copy()
    out[c[fits]] = t[fits]
    return out


def pause_slots(p: Plan, pz: Pauses, rx: Segs, k_rx: np.ndarray, m_port_rx, k_port_rx):
    """The PAUSE frames' own slots on the leaf-to-NIC link: each goes on the wire at the first
    frame boundary of what the leaf sends that NIC port at or after pz.t_ns (a MAC sends a
    control frame next, ahead of the queued data - 802.1Qbb / 802.3 Annex 31B - but never cuts a
    frame in flight), for 64 B + preamble + IFG at the NIC port's rate; the frames after it on
    that link move later as far as they must. Returns (rx, k_rx, each pause's time at the NIC)."""
    if not len(pz.port):
        return rx, k_rx, pz.t_ns
    K = len(k_rx)
    w = int(wire_ns(PAUSE_FRAME_BYTES, p.line_gbps))
    # the scheduled frames are already apart on the wire: as nominal times, serialize keeps
    # them and only pushes what a PAUSE's slot overlaps
    segs, t = serialize(p, Segs(rx.msg, rx.ka, rx.kb, rx.t), m_port_rx[rx.msg], np.r_[k_port_rx, pz.port],
                        np.r_[k_rx, pz.t_ns], np.r_[p.k_wire_ns, np.full(len(pz.port), w, np.int64)])
    return segs, t[:K], t[K:]


def frame(src_mac: bytes, prio: int, quanta: int) -> bytes:
    """An 802.1Qbb PFC frame pausing priority prio for quanta (untagged: MAC control frames are
    not VLAN tagged), padded to the 60-byte minimum."""
    times = [0] * 8
    times[prio] = quanta
    body = (PAUSE_DST + src_mac + ETHERTYPE_MAC_CONTROL.to_bytes(2, "big") + OPCODE_PFC.to_bytes(2, "big")
            + (1 << prio).to_bytes(2, "big") + b"".join(t.to_bytes(2, "big") for t in times))
    return body + bytes(PAUSE_FRAME_BYTES - len(body))


def records_for(p: Plan, fabric, nic: int, plane: int = -1, iface: int = 0, as_sent: bool = False
                ) -> list[tuple[int, bytes, int]]:
    """(time at the NIC, frame, pcapng interface iface) of the PAUSE frames NIC `nic` receives
    (on NIC port plane `plane`; -1: every plane) that the captures show (p.pfc_shown), in time
    order; each from the router MAC of the NIC port's leaf. as_sent: at the time the leaf puts it
    on the link (one link latency earlier: the classic merged capture's sender timestamps)."""
    pz = p.pfc
    if pz is None or not len(pz.port):
        return []
    pz = pz.at(p.pfc_at if p.pfc_at is not None else pz.t_ns)      # their slots on the link
    P = fabric.planes
    keep = p.pfc_shown & (pz.nic == nic) & ((plane < 0) | (pz.port % P == plane))
    if p.sel.window_ns is not None:
        keep &= (pz.t_ns >= p.sel.window_ns[0]) & (pz.t_ns < p.sel.window_ns[1])
    sel = np.flatnonzero(keep)
    sel = sel[np.argsort(pz.t_ns[sel], kind="stable")]
    t = pz.t_ns - (p.link_lat[pz.wire_dir >> 1] if as_sent else 0)
    return [(int(t[i]), frame(bytes(fabric.sw_mac[int(fabric.nic_port_leaf[nic, int(pz.port[i]) % P])]),
                              p.out.pcp, int(pz.quanta[i])), iface) for i in sel.tolist()]
