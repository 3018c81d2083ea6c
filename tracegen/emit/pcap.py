"""Flows -> RoCEv2 packets -> one nanosecond pcap per NIC.

What goes on the wire for one NET flow (NCCL net_ib over RC, WIRE.md):
  * the flow is cut into messages of at most `max_msg_bytes`; each message is one RDMA WRITE with
    immediate (First, Middle..., Last-Imm, or Only-Imm), PMTU payload per packet, imm = size;
  * before each message the receiver writes a 64 B CTS (WRITE Only) into the sender's FIFO on the
    same QP pair, reverse direction;
  * every RC WRITE is acknowledged: one ACK per message (its A-bit packet), plus one after every
    `ack_every`-th packet of the message when that is > 0.

Timing, per NIC and direction: t_i = max(nominal_i, t_{i-1} + wire_{i-1}) over frames in order.
A message's packets go back to back unless a control frame (CTS/ACK) is due: it slips in at the
next packet boundary. Messages are not interleaved with each other, on send nor on receive (two
senders into one NIC: their messages arrive one after the other, in order of nominal arrival).
This packet-exact schedule is computed for all NICs at once on *segments* (runs of a message's
packets between two control frames), so memory scales with messages and control frames, never
with packets. Packets are made per NIC only, window by window in time, into a reused buffer.

Choices where NCCL/mlx5 leave freedom (all deterministic):
  * QPNs per NIC from 0x100 in sorted (src, dst, channel) order; PSNs and MSNs per QP direction
    follow the order messages actually leave; M (MigReq) = 1 as mlx5 QPs start MIGRATED.
  * Data VA = 0x7F00_0000_0000 + (receiver QPN << 32) + bytes written so far on that QP, R_Key =
    receiver QPN << 8 | 0x5D; CTS VA = sender's FIFO 0x7E00_0000_0000 + (sender QPN << 16) +
    slot * 512 (32 slots), R_Key = sender QPN << 8 | 0xF1.
  * Nominal times: a flow's messages back to back from start_ns; a CTS leaves so that it arrives
    two frames before its message starts (never before t = 0). Causality is then enforced: a
    message waits for its CTS, an ACK for the packet it acknowledges.
    Frame wire time (FCS, preamble, IFG included) is rounded up to whole ns per frame.
  * Receivers see src MAC = their leaf's router MAC and TTL 64 - (routers crossed).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from ..config import Output
from ..errors import ConfigError
from ..tables import Flows
from ..topology import Fabric
from . import roce
from .roce import Opcode

PCAP_MAGIC_NS = 0xA1B23C4D
LINKTYPE_ETHERNET = 1
PCAP_MAX_SNAPLEN = 262144
PCAP_FILE_HDR = np.dtype([("magic", "<u4"), ("version_major", "<u2"), ("version_minor", "<u2"),
                          ("thiszone", "<i4"), ("sigfigs", "<u4"), ("snaplen", "<u4"),
                          ("linktype", "<u4")])
PCAP_REC_HDR = np.dtype([("ts_sec", "<u4"), ("ts_nsec", "<u4"), ("incl_len", "<u4"),
                         ("orig_len", "<u4")])

FIRST_QPN = 0x100            # QP 0/1 are SMI/GSI; tshark decodes DestQP 1 as MADs
CTS_BYTES = 64               # one ncclIbSendFifo element (nreqs = 1)
FIFO_SLOTS = 32              # NCCL_NET_MAX_REQUESTS
FIFO_SLOT_BYTES = 8 * 64     # NCCL_NET_IB_MAX_RECVS elements per slot
MAX_MSG_BYTES = 1 << 31      # IBA limit on one RDMA message
DATA_VA_BASE = 0x7F00_0000_0000
FIFO_VA_BASE = 0x7E00_0000_0000
IP_TTL = 64
FIX_ROUNDS = 16              # fixed-point rounds that move ACKs / messages behind what they wait for
CTS_LEAD_FRAMES = 2          # a CTS is due this many full frames ahead of its message (slack for
                             # the packet-boundary waits on both NICs)

# Slice budget per write: bounds memory whatever the trace size.
WINDOW_PACKETS = 1 << 16
WINDOW_BYTES = 64 << 20

# Control frame kinds (their order is the tie-break at equal time), and DATA for message packets.
ACK_CTS, ACK_DATA, CTS, DATA = 0, 1, 2, 3

_PATTERN = (np.arange(8192) & 0xFF).astype(np.uint8)   # "pattern" payload: byte j of a payload = j


def _pad4(n):
    return (n + 3) & ~3


def _wire_ns(frame_bytes, gbps: int):
    """Integer ns a frame occupies the link, FCS + preamble + IFG included (rounded up)."""
    return ((np.asarray(frame_bytes, dtype=np.int64) + roce.WIRE_OVERHEAD_BYTES) * 8 + gbps - 1) // gbps


def _data_packet(m_size, m_npk, j, pmtu):
    """Opcode and payload bytes of packet j of a message (vectorized)."""
    last = j == m_npk - 1
    op = np.where(m_npk == 1, Opcode.RC_WRITE_ONLY_IMM,
                  np.where(j == 0, Opcode.RC_WRITE_FIRST,
                           np.where(last, Opcode.RC_WRITE_LAST_IMM, Opcode.RC_WRITE_MIDDLE)))
    payload = np.where(last, m_size - (m_npk - 1) * pmtu, pmtu)
    return op, payload


@dataclass
class _PerPacket:
    """A quantity per data packet: First and Middle are the same for every message; Last and
    Only depend on the message size."""
    first: int
    mid: int
    last: np.ndarray   # per message
    only: np.ndarray   # per message

    def span(self, npk, m, ka, kb):
        """Sum over packets [ka, kb) of messages m (npk = their packet counts)."""
        single = npk == 1
        s = np.where((ka == 0) & (kb > 0), np.where(single, self.only[m], self.first), 0)
        s = s + np.where((kb == npk) & (kb > ka) & ~single, self.last[m], 0)
        return s + self.mid * np.maximum(0, np.minimum(kb, npk - 1) - np.maximum(ka, 1))


@dataclass
class _Segs:
    """Runs of consecutive packets [ka, kb) of message msg, sent/received back to back from t."""
    msg: np.ndarray
    ka: np.ndarray
    kb: np.ndarray
    t: np.ndarray


@dataclass
class _Plan:
    """Everything about the wire per connection / message / control frame (never per packet)."""
    out: Output
    hdr_bytes: np.ndarray       # header length per opcode (256 entries)
    nics: np.ndarray            # NICs that get a file
    # connections: unique (src_nic, dst_nic, channel), sorted
    c_src: np.ndarray
    c_dst: np.ndarray
    c_qpn_src: np.ndarray       # QPN on the sender NIC (sends data, receives CTS)
    c_qpn_dst: np.ndarray       # QPN on the receiver NIC
    c_sport: np.ndarray
    c_hops: np.ndarray
    # messages
    m_conn: np.ndarray
    m_src: np.ndarray
    m_dst: np.ndarray
    m_size: np.ndarray
    m_npk: np.ndarray
    m_row: np.ndarray           # the flow it belongs to (messages of a flow are contiguous)
    m_flight_ns: np.ndarray     # propagation, sender to receiver
    m_nominal_ns: np.ndarray
    wire: _PerPacket            # ns on the link
    rec: _PerPacket             # bytes of the pcap record (header + captured frame)
    # control frames, in order ACK_CTS[M], ACK_DATA[A], CTS[M]
    k_kind: np.ndarray
    k_msg: np.ndarray
    k_pkt: np.ndarray           # ACK_DATA: index in its message of the packet acknowledged
    k_tx_nic: np.ndarray
    k_rx_nic: np.ndarray
    k_wire_ns: np.ndarray
    k_rec_bytes: np.ndarray
    k_nominal_ns: np.ndarray
    # filled by _schedule
    tx: _Segs | None = None
    rx: _Segs | None = None
    k_tx_ns: np.ndarray | None = None
    k_rx_ns: np.ndarray | None = None
    m_psn: np.ndarray | None = None        # PSN of the first packet
    m_done: np.ndarray | None = None       # messages before it on its QP direction
    m_va: np.ndarray | None = None
    m_cts_psn: np.ndarray | None = None
    m_cts_va: np.ndarray | None = None
    late: int = 0                          # ACKs/messages still ahead of what they wait for

    @property
    def n_msgs(self) -> int:
        return len(self.m_conn)

    def offset(self, m, k):
        """Start of packet k within message m's back-to-back burst (k = npk: the burst's end)."""
        return self.wire.span(self.m_npk[m], m, 0, k)

    def packets_before(self, m, ka, kb, x):
        """The first of packets [ka, kb) of messages m that starts at or after burst offset x (ns);
        kb if none does."""
        first, mid = self.wire.first, self.wire.mid
        k = np.where(x <= 0, 0, np.where(x <= first, 1, 1 + -(-(x - first) // mid)))
        return np.clip(k, ka, kb)


# --- plan: connections, QPs, messages, control frames -------------------------------------------

def _check_output(out: Output) -> None:
    if out.pmtu not in (256, 512, 1024, 2048, 4096):
        raise ConfigError(f"output.pmtu={out.pmtu} is not an IB MTU; use 1024 or 4096")
    if out.payload not in ("zero", "pattern"):
        raise ConfigError(f"output.payload={out.payload!r}; use 'zero' or 'pattern'")
    if out.snaplen < 0:
        raise ConfigError(f"output.snaplen={out.snaplen}; use 0 (whole frames) or a byte count")
    if out.ack_every < 0:
        raise ConfigError(f"output.ack_every={out.ack_every}; use 0 or a packet count")
    if not (0 <= out.vlan_id < 4096 and 0 <= out.pcp < 8 and 0 <= out.dscp < 64 and 0 <= out.ecn < 4):
        raise ConfigError("output: vlan_id 0..4095, pcp 0..7, dscp 0..63, ecn 0..3")


def _build(flows: Flows, fabric: Fabric, out: Output) -> _Plan | None:
    _check_output(out)
    rows = flows.rows[flows.net]
    if len(rows) == 0:
        return None
    src, dst = rows["src_nic"].astype(np.int64), rows["dst_nic"].astype(np.int64)
    if (src < 0).any() or (dst < 0).any() or (src == dst).any():
        raise ValueError("NET flow rows need two different NICs (src_nic, dst_nic >= 0)")
    if (rows["start_ns"] < 0).any():
        raise ValueError("flow start_ns must be >= 0")
    ch = rows["channel"].astype(np.int64)
    order = np.lexsort((np.arange(len(rows)), rows["start_ns"], ch, dst, src))
    rows, src, dst, ch = rows[order], src[order], dst[order], ch[order]

    # Connections and QPNs: per NIC counting up from FIRST_QPN in sorted connection order.
    new_conn = np.r_[True, (src[1:] != src[:-1]) | (dst[1:] != dst[:-1]) | (ch[1:] != ch[:-1])]
    row_conn = np.cumsum(new_conn) - 1
    c_src, c_dst = src[new_conn], dst[new_conn]
    ev_nic = np.column_stack([c_src, c_dst]).ravel()
    ev_order = np.argsort(ev_nic, kind="stable")
    ev_sorted = ev_nic[ev_order]
    qpn = np.empty(len(ev_nic), dtype=np.int64)
    qpn[ev_order] = FIRST_QPN + np.arange(len(ev_nic)) - np.searchsorted(ev_sorted, ev_sorted)
    if qpn.max() > roce.PSN_MASK:
        raise ConfigError("more than 2^24 QPs on one NIC; use fewer channels")
    c_qpn_src, c_qpn_dst = qpn[0::2], qpn[1::2]
    c_hops = np.asarray(fabric.hops(c_src, c_dst), dtype=np.int64)

    # Messages: NCCL cuts a transfer into network messages of at most max_msg_bytes. What the NIC
    # carries is wire_bytes (payload + LL/LL128 flags) where the table has it.
    size = rows["wire_bytes" if "wire_bytes" in rows.dtype.names else "bytes"].astype(np.int64)
    cap = np.where(rows["max_msg_bytes"] > 0, rows["max_msg_bytes"], np.maximum(size, 1))
    n_msg = np.maximum(1, -(-size // cap))
    m_row = np.repeat(np.arange(len(rows)), n_msg)
    last_of_row = np.r_[m_row[1:] != m_row[:-1], True]
    m_size = np.where(last_of_row, size[m_row] - (n_msg[m_row] - 1) * cap[m_row], cap[m_row])
    if m_size.max() > MAX_MSG_BYTES:
        raise ConfigError(f"a network message of {m_size.max()} B exceeds the RDMA limit of 2 GiB")
    pmtu, M = out.pmtu, len(m_row)
    m_npk = np.maximum(1, -(-m_size // pmtu))
    m_conn = row_conn[m_row]

    hdr = np.zeros(256, dtype=np.int64)
    for op in Opcode:
        hdr[op] = roce.frame_dtype(op, out.vlan).itemsize
    frame = lambda op, payload: hdr[op] + _pad4(payload) + roce.ICRC_BYTES
    snap = out.snaplen if out.snaplen > 0 else np.iinfo(np.int64).max
    rec = lambda f: 16 + np.minimum(f, snap)
    gbps = fabric.nic_gbps
    _, last_payload = _data_packet(m_size, m_npk, m_npk - 1, pmtu)
    frames = [frame(Opcode.RC_WRITE_FIRST, pmtu), frame(Opcode.RC_WRITE_MIDDLE, pmtu),
              frame(Opcode.RC_WRITE_LAST_IMM, last_payload), frame(Opcode.RC_WRITE_ONLY_IMM, m_size)]
    w = [_wire_ns(f, gbps) for f in frames]
    wire = _PerPacket(int(w[0]), int(w[1]), w[2], w[3])
    recb = _PerPacket(int(rec(frames[0])), int(rec(frames[1])), rec(frames[2]), rec(frames[3]))

    # Nominal: a flow's messages back to back from its start_ns.
    burst = wire.span(m_npk, np.arange(M), 0, m_npk)
    excl = np.cumsum(burst) - burst
    first_of_row = np.r_[True, m_row[1:] != m_row[:-1]]
    row_base = np.maximum.accumulate(np.where(first_of_row, np.arange(M), 0))
    m_nominal = rows["start_ns"].astype(np.int64)[m_row] + excl - excl[row_base]
    flight = (c_hops * fabric.link_latency_ns)[m_conn]

    # ACKs of data: the A-bit packet, plus every ack_every-th packet of the message.
    n_ack = 1 + ((m_npk - 1) // out.ack_every if out.ack_every > 0 else 0 * m_npk)
    a_msg = np.repeat(np.arange(M), n_ack)
    i = np.arange(len(a_msg)) - np.repeat(np.cumsum(n_ack) - n_ack, n_ack)
    a_pkt = np.where(i == n_ack[a_msg] - 1, m_npk[a_msg] - 1, (i + 1) * max(out.ack_every, 1) - 1)
    A = len(a_msg)

    # A CTS is due at the sender a little before its message; an ACK once its packet has arrived.
    f_cts, f_ack = frame(Opcode.RC_WRITE_ONLY, CTS_BYTES), frame(Opcode.RC_ACK, 0)
    w_cts, w_ack = int(_wire_ns(f_cts, gbps)), int(_wire_ns(f_ack, gbps))
    cts_nominal = np.maximum(0, m_nominal - flight - w_cts - CTS_LEAD_FRAMES * wire.first)
    a_off = wire.span(m_npk[a_msg], a_msg, 0, a_pkt)
    a_wire = wire.span(m_npk[a_msg], a_msg, a_pkt, a_pkt + 1)
    s, d = c_src[m_conn], c_dst[m_conn]
    per_kind = lambda v_ack, v_cts: np.repeat([v_ack, v_ack, v_cts], [M, A, M])
    return _Plan(
        out=out, hdr_bytes=hdr, nics=np.unique(np.r_[c_src, c_dst]),
        c_src=c_src, c_dst=c_dst, c_qpn_src=c_qpn_src, c_qpn_dst=c_qpn_dst,
        c_sport=roce.udp_sport(c_qpn_src, c_qpn_dst).astype(np.int64), c_hops=c_hops,
        m_conn=m_conn, m_src=s, m_dst=d, m_size=m_size, m_npk=m_npk, m_row=m_row, m_flight_ns=flight,
        m_nominal_ns=m_nominal, wire=wire, rec=recb,
        k_kind=np.repeat([ACK_CTS, ACK_DATA, CTS], [M, A, M]).astype(np.int8),
        k_msg=np.r_[np.arange(M), a_msg, np.arange(M)],
        k_pkt=np.r_[np.zeros(M, np.int64), a_pkt, np.zeros(M, np.int64)],
        k_tx_nic=np.r_[s, d[a_msg], d], k_rx_nic=np.r_[d, s[a_msg], s],
        k_wire_ns=per_kind(w_ack, w_cts), k_rec_bytes=per_kind(int(rec(f_ack)), int(rec(f_cts))),
        k_nominal_ns=np.r_[cts_nominal + flight + w_cts,
                           m_nominal[a_msg] + a_off + flight[a_msg] + a_wire, cts_nominal],
    )


# --- schedule -----------------------------------------------------------------------------------

def _running_max(order: np.ndarray, nic: np.ndarray, nominal: np.ndarray, wire: np.ndarray):
    """Items in `order` (grouped by NIC): t_i = max(nominal_i, t_{i-1} + wire_{i-1}) per NIC.
    With C_i = wire of earlier items, t_i - C_i is a running max of nominal - C: one accumulate."""
    s, n, w = nic[order], nominal[order], wire[order]
    first = np.r_[True, s[1:] != s[:-1]]
    cw = np.cumsum(w) - w
    before = cw - cw[np.maximum.accumulate(np.where(first, np.arange(len(s)), 0))]
    v = n - before
    seg_id = np.cumsum(first) - 1
    span = int(v.max() - v.min()) + 1
    if span * (int(seg_id[-1]) + 1) < 2 ** 62:
        lift = seg_id * span     # each NIC above the previous: one accumulate restarts per NIC
        u = np.maximum.accumulate(v + lift) - lift
    else:
        u = np.empty_like(v)
        for a, b in zip(np.flatnonzero(first), np.r_[np.flatnonzero(first)[1:], len(s)]):
            u[a:b] = np.maximum.accumulate(v[a:b])
    t = np.empty_like(nominal)
    t[order] = u + before
    return t


def _serialize(p: _Plan, trains: _Segs, train_nic, ctl_nic, ctl_nominal, ctl_wire):
    """One direction of every NIC: trains (runs of a message's packets, nominally back to back
    from trains.t) and single control frames. Trains keep their order by nominal start and are
    never interleaved; a control frame goes in at the first packet boundary at or after its
    nominal time. Returns the trains split at those boundaries (with times) and control times."""
    T, C = len(train_nic), len(ctl_nic)
    data_order = np.lexsort((trains.t, train_nic))      # lexsort is stable: ties keep index order
    rank = np.empty(T, np.int64)
    rank[data_order] = np.arange(T)
    # The last train on the same NIC that starts at or before each control frame.
    nic_all, t_all = np.r_[train_nic, ctl_nic], np.r_[trains.t, ctl_nominal]
    is_ctl = np.r_[np.zeros(T, bool), np.ones(C, bool)]
    o = np.lexsort((is_ctl, t_all, nic_all))
    last = np.maximum.accumulate(np.where(is_ctl[o], -1, np.r_[rank, np.zeros(C, np.int64)][o]))
    pos = np.empty(T + C, np.int64)
    pos[o] = np.arange(T + C)
    r = last[pos[T:]]
    tr = data_order[np.maximum(r, 0)]
    r = np.where((r >= 0) & (train_nic[tr] == ctl_nic), r, -1)
    m, ka, kb = trains.msg[tr], trains.ka[tr], trains.kb[tr]
    x = ctl_nominal - trains.t[tr] + p.offset(m, ka)
    k = np.where(r >= 0, p.packets_before(m, ka, kb, x), 0)
    # Split trains where a control frame goes in between two of their packets.
    inside = (r >= 0) & (k > ka) & (k < kb)
    cut_r = np.r_[rank, r[inside]]
    cut_k = np.r_[trains.ka, k[inside]]
    width = int(trains.kb.max()) + 1
    cuts = np.sort(cut_r * width + cut_k)
    cuts = cuts[np.r_[True, cuts[1:] != cuts[:-1]]]
    seg_r, seg_ka = np.divmod(cuts, width)
    seg_tr = data_order[seg_r]
    same_next = np.r_[seg_r[1:] == seg_r[:-1], False]
    seg_kb = np.where(same_next, np.r_[seg_ka[1:], 0], trains.kb[seg_tr])
    seg_m = trains.msg[seg_tr]
    seg_nominal = trains.t[seg_tr] + p.offset(seg_m, seg_ka) - p.offset(seg_m, trains.ka[seg_tr])
    seg_wire = p.wire.span(p.m_npk[seg_m], seg_m, seg_ka, seg_kb)
    # One sequence per NIC: by train rank, packet index, control frames first, nominal time.
    S = len(seg_r)
    nic = np.r_[train_nic[seg_tr], ctl_nic]
    is_seg = np.r_[np.ones(S, np.int64), np.zeros(C, np.int64)]
    place = ((np.r_[seg_r, r] + 1) * width + np.r_[seg_ka, k]) * 2 + is_seg
    order = np.lexsort((np.r_[seg_nominal, ctl_nominal], place, nic))
    t = _running_max(order, nic, np.r_[seg_nominal, ctl_nominal], np.r_[seg_wire, ctl_wire])
    return _Segs(seg_m, seg_ka, seg_kb, t[:S]), t[S:]


def _schedule(p: _Plan) -> None:
    M = p.n_msgs
    n_ack = len(p.k_kind) - M
    k_flight = p.m_flight_ns[p.k_msg]
    acked_m, acked_j = p.k_msg[M:n_ack], p.k_pkt[M:n_ack]
    acked_wire = np.r_[p.k_wire_ns[n_ack:], p.wire.span(p.m_npk[acked_m], acked_m, acked_j, acked_j + 1)]
    burst = p.wire.span(p.m_npk, np.arange(M), 0, p.m_npk)
    m_nominal, k_nominal = p.m_nominal_ns.copy(), p.k_nominal_ns.copy()
    # Nominal times assume an idle fabric. Where an ACK would leave before its packet has arrived,
    # or a message before its CTS has, move that nominal time later (and the flow's following
    # messages with it) and reschedule. Nominal times only grow; a few rounds in practice.
    for _ in range(FIX_ROUNDS):
        bursts = _Segs(np.arange(M), np.zeros(M, np.int64), p.m_npk, m_nominal)
        tx, k_tx = _serialize(p, bursts, p.m_src, p.k_tx_nic, k_nominal, p.k_wire_ns)
        arriving = _Segs(tx.msg, tx.ka, tx.kb, tx.t + p.m_flight_ns[tx.msg])
        rx, k_rx = _serialize(p, arriving, p.m_dst[tx.msg], p.k_rx_nic, k_tx + k_flight, p.k_wire_ns)
        ack_ready = np.r_[k_rx[n_ack:], _arrival(p, rx, acked_m, acked_j)] + acked_wire
        data_ready = k_rx[n_ack:] + p.k_wire_ns[n_ack:]
        m_start = _arrival(p, tx, np.arange(M), np.zeros(M, np.int64))
        late_ack, late_data = k_tx[:n_ack] < ack_ready, m_start < data_ready
        if not (late_ack.any() or late_data.any()):
            break
        k_nominal[:n_ack] = np.where(late_ack, ack_ready, k_nominal[:n_ack])
        m_nominal = _running_max(np.arange(M), p.m_row, np.maximum(m_nominal, data_ready), burst)
    p.late = int(late_ack.sum() + late_data.sum())
    p.tx, p.rx, p.k_tx_ns, p.k_rx_ns = tx, rx, k_tx, k_rx

    # PSNs, MSNs and VAs follow the order messages really left on their QP.
    m_psn, m_done, m_va = _per_qp_running(p.m_conn, m_start, p.m_npk, p.m_size)
    p.m_psn, p.m_done = m_psn & roce.PSN_MASK, m_done
    p.m_va = DATA_VA_BASE + (p.c_qpn_dst[p.m_conn] << 32) + m_va
    ones = np.ones(M, np.int64)
    cts_psn, _, _ = _per_qp_running(p.m_conn, k_tx[n_ack:], ones, ones)
    p.m_cts_psn = cts_psn & roce.PSN_MASK
    p.m_cts_va = (FIFO_VA_BASE + (p.c_qpn_src[p.m_conn] << 16)
                  + (cts_psn % FIFO_SLOTS) * FIFO_SLOT_BYTES)


def _arrival(p: _Plan, rx: _Segs, m, j):
    """Time packet j of message m starts in a direction's segments (sent or received)."""
    width = int(p.m_npk.max()) + 1
    key = rx.msg * width + rx.ka
    order = np.argsort(key, kind="stable")
    seg = order[np.searchsorted(key[order], m * width + j, side="right") - 1]
    return rx.t[seg] + p.offset(m, j) - p.offset(m, rx.ka[seg])


def _per_qp_running(conn, t, npk, size):
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


# --- public -------------------------------------------------------------------------------------

def estimate_pcap(flows: Flows, fabric: Fabric, out: Output) -> tuple[int, int]:
    """(packet records, bytes on disk) over all files write_pcaps would write; exact.
    Every packet is recorded twice: in its sender's file and in its receiver's."""
    p = _build(flows, fabric, out)
    if p is None:
        return 0, 0
    m = np.arange(p.n_msgs)
    data_bytes = int(p.rec.span(p.m_npk, m, 0, p.m_npk).sum())
    return (2 * (int(p.m_npk.sum()) + len(p.k_kind)),
            2 * (data_bytes + int(p.k_rec_bytes.sum())) + PCAP_FILE_HDR.itemsize * len(p.nics))


def write_pcaps(flows: Flows, fabric: Fabric, out: Output, dest_dir: Path,
                progress: Callable[[int, int], None] | None = None) -> list[Path]:
    """Write dest_dir/<nic name>.pcap for every NIC on a NET flow; returns the paths."""
    p = _build(flows, fabric, out)
    if p is None:
        return []
    _schedule(p)
    paths = []
    for n_done, (nic, slices) in enumerate(_files(p, fabric), start=1):
        path = Path(dest_dir) / f"{fabric.nic_name(nic)}.pcap"
        tmp = path.with_name(path.name + ".part")
        with open(tmp, "wb") as f:
            f.write(_file_header(out).tobytes())
            for buf in slices:
                f.write(buf.data)
        os.replace(tmp, path)
        paths.append(path)
        if progress is not None:
            progress(n_done, len(p.nics))
    return paths


def _files(p: _Plan, fabric: Fabric):
    """(nic, its records as a stream of byte slices) for every NIC, in NIC order."""
    # Per NIC: what it sends (tx segments, control frames) and what it receives.
    sources = [(p.m_src[p.tx.msg], False, p.tx), (p.m_dst[p.rx.msg], True, p.rx),
               (p.k_tx_nic, False, p.k_tx_ns), (p.k_rx_nic, True, p.k_rx_ns)]
    by_nic = [(np.argsort(nic, kind="stable"), np.sort(nic, kind="stable"), rx, what)
              for nic, rx, what in sources]
    scratch = _Scratch()
    for nic in p.nics.tolist():
        picks = [(order[np.searchsorted(s, nic):np.searchsorted(s, nic, "right")], rx, what)
                 for order, s, rx, what in by_nic]
        yield nic, _nic_slices(p, fabric, nic, _Items.gather(p, picks), scratch)


def _file_header(out: Output) -> np.ndarray:
    h = np.zeros(1, PCAP_FILE_HDR)
    h["magic"], h["version_major"], h["version_minor"] = PCAP_MAGIC_NS, 2, 4
    h["snaplen"] = out.snaplen if out.snaplen > 0 else PCAP_MAX_SNAPLEN
    h["linktype"] = LINKTYPE_ETHERNET
    return h


# --- one NIC's file, window by window -----------------------------------------------------------

@dataclass
class _Items:
    """A NIC's scheduled segments and control frames, both directions, sorted by start time."""
    kind: np.ndarray
    msg: np.ndarray
    ka: np.ndarray       # first packet of a segment (0 for control frames)
    pkt: np.ndarray      # ACK_DATA: the packet it acknowledges
    npk: np.ndarray
    start: np.ndarray
    end: np.ndarray
    rec_bytes: np.ndarray
    rx: np.ndarray

    @staticmethod
    def gather(p: _Plan, picks) -> "_Items":
        cols = {k: [] for k in _Items.__dataclass_fields__}
        for idx, rx, what in picks:
            if isinstance(what, _Segs):
                m, ka, kb = what.msg[idx], what.ka[idx], what.kb[idx]
                npk = p.m_npk[m]
                vals = dict(kind=np.full(len(idx), DATA, np.int8), msg=m, ka=ka, pkt=ka, npk=kb - ka,
                            start=what.t[idx], end=what.t[idx] + p.wire.span(npk, m, ka, kb),
                            rec_bytes=p.rec.span(npk, m, ka, kb))
            else:
                vals = dict(kind=p.k_kind[idx], msg=p.k_msg[idx], ka=np.zeros(len(idx), np.int64),
                            pkt=p.k_pkt[idx], npk=np.ones(len(idx), np.int64), start=what[idx],
                            end=what[idx] + p.k_wire_ns[idx], rec_bytes=p.k_rec_bytes[idx])
            vals["rx"] = np.full(len(idx), rx)
            for k, v in vals.items():
                cols[k].append(v)
        items = _Items(**{k: np.concatenate(v) for k, v in cols.items()})
        order = np.lexsort((items.rx, items.start))      # stable: ties keep gather order
        return _Items(**{k: v[order] for k, v in vars(items).items()})


class _Scratch:
    """One byte buffer reused by every slice: re-zeroing it is far cheaper than faulting in
    fresh pages for each slice."""

    def __init__(self):
        self.buf = np.zeros(0, dtype=np.uint8)

    def zeros(self, n: int) -> np.ndarray:
        if n > len(self.buf):
            self.buf = np.zeros(max(n, 2 * len(self.buf)), dtype=np.uint8)
            return self.buf[:n]
        view = self.buf[:n]
        view.fill(0)
        return view


def _nic_slices(p: _Plan, fabric: Fabric, nic: int, it: _Items, scratch: _Scratch):
    """Yield the file's records in time order, in slices of bounded size.

    A NIC's tx items never overlap each other in time, nor do its rx items, so a window
    [t_a, t_b) holds the items starting in it plus at most one earlier item per direction."""
    cum_pk, cum_b = np.cumsum(it.npk), np.cumsum(it.rec_bytes)
    marks = np.r_[np.searchsorted(cum_pk, np.arange(WINDOW_PACKETS, cum_pk[-1], WINDOW_PACKETS), "right"),
                  np.searchsorted(cum_b, np.arange(WINDOW_BYTES, cum_b[-1], WINDOW_BYTES), "right")]
    cuts = np.unique(np.r_[it.start[0], it.start[marks[marks < len(it.start)]]])
    cuts = np.r_[cuts, np.iinfo(np.int64).max]
    idx = np.arange(len(it.start))
    last_of = [np.maximum.accumulate(np.where(it.rx == d, idx, -1)) for d in (False, True)]
    for t_a, t_b in zip(cuts[:-1], cuts[1:]):
        a, b = np.searchsorted(it.start, [t_a, t_b])
        carry = [int(lo[a - 1]) for lo in last_of] if a > 0 else []
        pos = np.r_[[c for c in carry if c >= 0 and it.end[c] > t_a], np.arange(a, b)].astype(np.int64)
        # Expand items into packets; keep those starting inside the window.
        n = it.npk[pos]
        rep = np.repeat(pos, n)
        j = it.ka[rep] + np.arange(len(rep)) - np.repeat(np.cumsum(n) - n, n)
        m = it.msg[rep]
        t = it.start[rep] + np.where(it.kind[rep] == DATA, p.offset(m, j) - p.offset(m, it.ka[rep]), 0)
        keep = (t >= t_a) & (t < t_b)
        rep, j, t = rep[keep], j[keep], t[keep]
        sel = np.lexsort((j, rep, t))
        rep, j, t = rep[sel], j[sel], t[sel]
        yield _records(p, fabric, nic, it.kind[rep], it.msg[rep], it.pkt[rep], j, t, it.rx[rep], scratch)


def _records(p: _Plan, fabric: Fabric, nic: int, kind, m, acked, j, t, rx, scratch: _Scratch):
    """pcap records (header + frame) of packets in file order, as one byte buffer."""
    out, pmtu, l2 = p.out, p.out.pmtu, roce.l2_bytes(p.out.vlan)
    c = p.m_conn[m]
    size, npk = p.m_size[m], p.m_npk[m]
    is_data, is_cts = kind == DATA, kind == CTS
    data_op, data_payload = _data_packet(size, npk, j, pmtu)
    op = np.where(is_data, data_op, np.where(is_cts, Opcode.RC_WRITE_ONLY, Opcode.RC_ACK))
    payload = np.where(is_data, data_payload, np.where(is_cts, CTS_BYTES, 0))
    frame_len = p.hdr_bytes[op] + _pad4(payload) + roce.ICRC_BYTES
    incl = np.minimum(frame_len, out.snaplen) if out.snaplen > 0 else frame_len
    rec_off = np.cumsum(16 + incl) - (16 + incl)
    buf = scratch.zeros(int(rec_off[-1] + 16 + incl[-1]))

    # Who sends: data from the connection's sender, CTS and data ACKs from its receiver.
    from_dst = (kind == CTS) | (kind == ACK_DATA)
    tx_nic, rx_nic = np.where(from_dst, p.c_dst[c], p.c_src[c]), np.where(from_dst, p.c_src[c], p.c_dst[c])
    on_cts_qp = (kind == CTS) | (kind == ACK_CTS)
    acked = np.where(kind == ACK_DATA, acked, j)
    fields = dict(
        src_ip=fabric.nic_ip[tx_nic], dst_ip=fabric.nic_ip[rx_nic], payload=payload, frame_len=frame_len,
        ttl=np.where(rx, IP_TTL - (p.c_hops[c] - 1), IP_TTL), sport=p.c_sport[c],
        dest_qp=np.where(rx_nic == p.c_dst[c], p.c_qpn_dst[c], p.c_qpn_src[c]),
        psn=np.where(on_cts_qp, p.m_cts_psn[m], (p.m_psn[m] + acked) & roce.PSN_MASK),
        ack_req=np.where(is_data, j == npk - 1, is_cts),
        va=np.where(is_cts, p.m_cts_va[m], p.m_va[m]).astype(np.uint64),
        rkey=np.where(is_cts, (p.c_qpn_src[c] << 8) | 0xF1, (p.c_qpn_dst[c] << 8) | 0x5D),
        dma_len=np.where(is_cts, CTS_BYTES, size), imm=size,
        msn=np.where(kind == ACK_CTS, p.m_cts_psn[m] + 1, p.m_done[m] + (acked == npk - 1)) & roce.PSN_MASK,
    )
    # Ethernet as seen at this NIC: to/from its leaf's router MAC.
    mac, leaf_mac = fabric.nic_mac[nic], fabric.leaf_mac[fabric.nic_leaf[nic]]
    eth_dst = np.where(rx[:, None], mac, leaf_mac)
    eth_src = np.where(rx[:, None], leaf_mac, mac)
    rec_hdr = np.zeros(len(t), PCAP_REC_HDR)
    rec_hdr["ts_sec"], rec_hdr["ts_nsec"] = np.divmod(t, 1_000_000_000)
    rec_hdr["incl_len"], rec_hdr["orig_len"] = incl, frame_len

    if out.payload == "pattern":
        _fill_pattern(buf, rec_off + 16 + p.hdr_bytes[op], np.minimum(payload, incl - p.hdr_bytes[op]))
    for code in np.unique(op):
        g = np.flatnonzero(op == code)
        hdrs = _headers(int(code), out, {k: v[g] for k, v in fields.items()}, eth_dst[g], eth_src[g])
        hb = hdrs.view(np.uint8).reshape(len(g), -1)
        block = np.concatenate([rec_hdr[g].view(np.uint8).reshape(len(g), 16), hb], axis=1)
        _scatter(buf, rec_off[g], block, 16 + incl[g])
        full = np.flatnonzero(incl[g] == frame_len[g])     # the ICRC is only there if captured
        if len(full):
            crc = np.empty(len(full), np.uint32)
            lens = payload[g][full]
            for n in np.unique(lens):
                s = lens == n
                crc[s] = roce.icrc(hb[full[s], l2:], _payload_bytes(out.payload, int(n)))
            icrc_bytes = crc.astype("<u4").view(np.uint8).reshape(-1, 4)
            _scatter(buf, rec_off[g][full] + 16 + frame_len[g][full] - roce.ICRC_BYTES, icrc_bytes)
    return buf


def _headers(code: int, out: Output, f: dict, eth_dst, eth_src) -> np.ndarray:
    """Fill one structured header array for packets that share an opcode."""
    h = np.zeros(len(f["psn"]), roce.frame_dtype(code, out.vlan))
    h["eth"]["dst"], h["eth"]["src"] = eth_dst, eth_src
    if out.vlan:
        h["eth"]["ethertype"] = roce.ETHERTYPE_DOT1Q
        h["vlan"]["tci"] = (out.pcp << 13) | out.vlan_id
        h["vlan"]["ethertype"] = roce.ETHERTYPE_IPV4
    else:
        h["eth"]["ethertype"] = roce.ETHERTYPE_IPV4
    ip = h["ip"]
    ip["ver_ihl"], ip["tos"] = 0x45, (out.dscp << 2) | out.ecn
    ip["total_len"] = f["frame_len"] - roce.l2_bytes(out.vlan)
    ip["flags_frag"], ip["ttl"], ip["proto"] = roce.IPV4_DF, f["ttl"], roce.IPPROTO_UDP
    ip["src"], ip["dst"] = f["src_ip"], f["dst_ip"]
    ip["csum"] = roce.ipv4_checksum(ip)
    udp = h["udp"]
    udp["sport"], udp["dport"] = f["sport"], roce.ROCEV2_UDP_PORT
    udp["len"] = ip["total_len"] - roce.IPV4.itemsize
    bth = h["bth"]
    bth["opcode"] = code
    bth["flags"] = roce.BTH_MIGREQ | ((-f["payload"] & 3) << 4)
    bth["pkey"] = roce.PKEY_DEFAULT
    roce.put_u24(bth["dest_qp"], f["dest_qp"])
    bth["ack_req"] = np.where(f["ack_req"], roce.BTH_ACKREQ, 0)
    roce.put_u24(bth["psn"], f["psn"])
    names = h.dtype.names
    if "reth" in names:
        h["reth"]["va"], h["reth"]["rkey"], h["reth"]["dma_len"] = f["va"], f["rkey"], f["dma_len"]
    if "immdt" in names:
        h["immdt"]["imm"] = f["imm"]        # NCCL puts the message size in the immediate
    if "aeth" in names:
        h["aeth"]["syndrome"] = roce.AETH_ACK
        roce.put_u24(h["aeth"]["msn"], f["msn"])
    return h


def _scatter(buf: np.ndarray, at: np.ndarray, block: np.ndarray, limit=None) -> None:
    """buf[at_k + i] = block[k, i] for every row k (i < limit_k when records are truncated)."""
    pos = at[:, None] + np.arange(block.shape[1])
    if limit is None or (limit >= block.shape[1]).all():
        buf[pos] = block
    else:
        inside = np.arange(block.shape[1]) < limit[:, None]
        buf[pos[inside]] = block[inside]


def _payload_bytes(kind: str, n: int) -> bytes:
    data = _PATTERN[:n].tobytes() if kind == "pattern" else bytes(n)
    return data + bytes(-n & 3)


def _fill_pattern(buf: np.ndarray, at: np.ndarray, count: np.ndarray) -> None:
    # Constant per payload length, so the ICRC stays a table lookup; this is a plain memcpy.
    mv, pat = memoryview(buf), memoryview(_PATTERN)
    for a, n in zip(at.tolist(), count.tolist()):
        if n > 0:
            mv[a:a + n] = pat[:n]
