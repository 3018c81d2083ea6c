"""Flows -> the wire plan: QPs, messages, control frames (CTS, ACK, CNP), never per packet.
timing.py gives the plan its packet-exact schedule per NIC and direction; views.py / items.py /
frames.py turn it into the records of each capture file.

What goes on the wire for one NET flow (NCCL net_ib over RC, WIRE.md):
  * the flow is cut into messages of at most `max_msg_bytes`; each message is one RDMA WRITE with
    immediate (First, Middle..., Last-Imm, or Only-Imm), PMTU payload per packet, imm = size;
  * for each message the receiver writes a 64 B CTS (WRITE Only: the ncclIbSendFifo element with
    the receive slot's address, size, rkey, its rank and the FIFO counter) into the sender's CTS
    FIFO on the connection's first QP pair, reverse direction (nccl_net.py);
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
  * One NCCL connection per (sender, receiver, communicator, channel): communicators (the
    parallelism dimension's group: DP, TP (+SP), PP, CP, EP, EDP, embedding) never share QPs.
  * QPNs per NIC from 0x100 in sorted (src, dst, communicator, channel, QP index) order; PSNs and MSNs per QP
    direction follow the order messages actually leave; M (MigReq) = 1 as mlx5 QPs start MIGRATED.
  * nccl.qps_per_connection > 1: whole messages round-robin over the connection's QPs, or with
    output.qp_split each message in ceil(size / nqps) parts rounded up to 128 B, one
    WRITE-with-imm per QP (imm = the whole size); the CTS always travels on QP index 0.
  * CE marks and CNPs (congestion.py): a CNP is a control frame like an ACK, due when its
    CE-marked packet has fully arrived.
  * RETH of data: the receive slot NCCL posted (a ring of NCCL_STEPS slots in the connection's
    registered buffer, below 2^47), R_Key = that buffer's MR key; RETH of a CTS: the sender's
    FIFO slot (256 slots), R_Key = the FIFO's MR key (nccl_net.py).
  * Nominal times: a flow's messages back to back from start_ns; a CTS when the receiver posts
    the receive: at its op's release (an op opens with a burst of CTS), but no later than to
    arrive two frames before its message starts, and not before PROXY_POST_NS after the message
    NCCL_STEPS steps back on its connection has arrived (so later CTS arrive well ahead). Causality is then
    enforced: a message waits for its CTS, an ACK for the packet it acknowledges.
    Frame wire time (FCS, preamble, IFG included) is rounded up to whole ns per frame.
  * TTL / hop limit 255 (NCCL's GRH hop_limit; ACKs are sent with the responder QP's), CNPs 64
    (made by the NIC; WIRE.md's ConnectX capture). Receivers see src MAC = their leaf's router MAC
    and TTL - (routers crossed)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...config import Nccl, Output, parse_start_time
from ...errors import ConfigError
from ...tables import CollKind, Dim, Flows
from ...fabric.topology import Fabric
from . import congestion, nccl_net, roce, routes
from . import select
from .capture_file import Format, comment_option_bytes
from .roce import Opcode

FIRST_QPN = 0x100            # QP 0/1 are SMI/GSI; tshark decodes DestQP 1 as MADs
CTS_BYTES = nccl_net.FIFO_ELEM_BYTES     # one ncclIbSendFifo element (nreqs = 1)
MAX_MSG_BYTES = 1 << 31      # IBA limit on one RDMA message
IP_TTL = 255                 # NCCL sets the GRH hop_limit to 255 on RoCE QPs (net_ib/connect.cc,
                             # ncclIbQpRtr); data, CTS and ACKs leave with it
FIX_ROUNDS = 16              # fixed-point rounds that move ACKs / messages behind what they wait for
CTS_LEAD_FRAMES = 2          # a CTS is due this many full frames ahead of its message (slack for
                             # the packet-boundary waits on both NICs)

# Control frame kinds (their order is the tie-break at equal time), and DATA for message packets.
ACK_CTS, ACK_DATA, CTS, DATA, CNP = 0, 1, 2, 3, 4
CNP_CHECK_ROUNDS = 8         # reschedules that drop CNPs pushed closer than the per-QP gap
PROXY_POST_NS = 200           # a receive NCCL_STEPS allow is posted this long after its slot freed
DCQCN_ROUNDS = 4             # output.dcqcn: pace from the CNPs, pick CNPs again on the paced schedule

PATTERN = (np.arange(8192) & 0xFF).astype(np.uint8)   # "pattern" payload: byte j of a payload = j


def pad4(n):
    return (n + 3) & ~3


def wire_ns(frame_bytes, gbps: int):
    """Integer ns a frame occupies the link, FCS + preamble + IFG included (rounded up)."""
    return ((np.asarray(frame_bytes, dtype=np.int64) + roce.WIRE_OVERHEAD_BYTES) * 8 + gbps - 1) // gbps


def stretch(burst_ns, m_row, n_rows: int, send_ns) -> np.ndarray:
    """Per flow: the pace of its packets, send_ns (the time the schedule gives the flow to send)
    over its line-rate time, when that is more than 1 % beyond it; else 1 (line rate)."""
    total = np.bincount(m_row, burst_ns, minlength=n_rows).astype(np.int64)
    slack = np.asarray(send_ns, np.int64) - total
    slow = (slack > 0) & (slack > total // 100)
    return np.where(slow, send_ns / np.maximum(total, 1), 1.0)


@dataclass
class RateCurve:
    """The cumulative sent-bytes curves of the flows whose rate changed while they sent (from
    fluid.ItemRates), piecewise linear, concatenated: piece k of row k_row[k] starts at k_t[k]
    (ns) with g0[k] bytes sent by all earlier pieces (earlier rows' included) and sends k_v[k]
    bytes/ns. A message position x (ns of line-rate wire time into its flow) is scaled to the
    flow's bytes: byte (m_x0[m] + x) * row_scale of its row."""
    m_row: np.ndarray        # per message: its flow row, -1 if its flow keeps one pace
    m_x0: np.ndarray         # per message: line-rate ns of its flow before it
    row_scale: np.ndarray    # per row: curve bytes per line-rate ns
    row_off: np.ndarray      # per row: g0 of its first piece
    row_lo: np.ndarray       # per row: its pieces [row_lo, row_hi]
    row_hi: np.ndarray
    g0: np.ndarray
    k_t: np.ndarray
    k_v: np.ndarray

    def at(self, m, x) -> np.ndarray:
        """When (float ns) the flow of messages m (on the curve) reaches line-rate offset x of m."""
        r = self.m_row[m]
        g = self.row_off[r] + (self.m_x0[m] + x) * self.row_scale[r]
        k = np.clip(np.searchsorted(self.g0, g, "right") - 1, self.row_lo[r], self.row_hi[r])
        v = self.k_v[k]
        return self.k_t[k] + np.where(v > 0, (g - self.g0[k]) / np.where(v > 0, v, 1), 0.0)


def follow_rates(rates, net_idx, start_ns, finish_ns, burst, excl, m_row, row_base):
    """Messages of the flows whose rate changed while they sent (fluid.ItemRates, item = flow
    row; net_idx: the plan's rows in the flow table, start_ns/finish_ns per plan row): each at
    the time the flow's cumulative sent-bytes curve (piecewise linear from its rate records)
    reaches its first byte - its share of the flow's line-rate time, scaled to the flow's bytes -
    and paced at its own part of the curve (its time on the curve over its line-rate time, 1
    within 1 %); the curve itself (RateCurve) places its packet trains (Plan.paced_offset).
    Returns (messages, nominal ns, pace, RateCurve), or None when no flow's rate changed.
    Flows with one rate keep the constant pace (stretch); so do flows whose records the engine's
    memory bound cut short (finish after ItemRates.complete_until)."""
    if rates is None or not len(rates.t):
        return None
    n_rows = len(net_idx)
    r = rates.take(net_idx)
    o = np.argsort(r.item, kind="stable")                 # per row, in time order
    k_row, k_t, k_v = r.item[o], r.t[o].astype(np.int64), r.bytes_per_ns[o]
    start_ns, finish_ns = np.asarray(start_ns, np.int64), np.asarray(finish_ns, np.int64)
    count = np.bincount(k_row, minlength=n_rows)
    traj = (count >= 2) & (finish_ns <= rates.complete_until)
    if not traj.any():
        return None
    keep = traj[k_row]
    k_row, k_t, k_v = k_row[keep], k_t[keep], k_v[keep]
    last = np.r_[k_row[1:] != k_row[:-1], True]
    k_end = np.where(last, finish_ns[k_row], np.r_[k_t[1:], 0])
    seg = k_v * np.maximum(k_end - k_t, 0)                  # bytes sent on each piece
    g0 = np.cumsum(seg) - seg                               # global cumulative bytes (rows concatenated)
    lo = np.flatnonzero(np.r_[True, k_row[1:] != k_row[:-1]])
    hi = np.r_[lo[1:], len(k_row)] - 1
    row_lo, row_hi = np.zeros(n_rows, np.int64), np.zeros(n_rows, np.int64)
    row_lo[k_row[lo]], row_hi[k_row[lo]] = lo, hi
    row_off = np.zeros(n_rows)
    row_off[k_row[lo]] = g0[lo]
    row_bytes = np.zeros(n_rows)
    np.add.at(row_bytes, k_row, seg)
    row_burst = np.bincount(m_row, burst, minlength=n_rows).astype(np.float64)
    curve = RateCurve(m_row=np.where(traj[m_row], m_row, -1), m_x0=(excl - excl[row_base]).astype(np.float64),
                      row_scale=row_bytes / np.maximum(row_burst, 1), row_off=row_off, row_lo=row_lo,
                      row_hi=row_hi, g0=g0, k_t=k_t, k_v=k_v)
    msgs = np.flatnonzero(traj[m_row])
    t0, t1 = curve.at(msgs, 0.0), curve.at(msgs, burst[msgs].astype(np.float64))
    b = burst[msgs].astype(np.int64)
    d = t1 - t0
    slow = (d - b > 0) & (d - b > b // 100)
    pace = np.where(slow, d / np.maximum(b, 1), 1.0)
    return msgs, np.maximum(np.floor(t0).astype(np.int64), start_ns[m_row[msgs]]), pace, curve


def _row_first(v, m_row, n_rows: int) -> np.ndarray:
    """Per flow: v of its first message."""
    out = np.zeros(n_rows, np.int64)
    out[m_row[::-1]] = np.asarray(v)[::-1]
    return out


def data_packet(m_size, m_npk, j, pmtu):
    """Opcode and payload bytes of packet j of a message (vectorized)."""
    last = j == m_npk - 1
    op = np.where(m_npk == 1, Opcode.RC_WRITE_ONLY_IMM,
                  np.where(j == 0, Opcode.RC_WRITE_FIRST,
                           np.where(last, Opcode.RC_WRITE_LAST_IMM, Opcode.RC_WRITE_MIDDLE)))
    payload = np.where(last, m_size - (m_npk - 1) * pmtu, pmtu)
    return op, payload


@dataclass
class PerPacket:
    """A quantity per data packet: First and Middle are the same for every message (or, paced,
    per message); Last and Only depend on the message size."""
    first: int | np.ndarray        # int, or per message
    mid: int | np.ndarray
    last: np.ndarray   # per message
    only: np.ndarray   # per message
    each: np.ndarray | None = None   # per message, added to every packet (pcapng comments)

    def first_of(self, m):
        return self.first[m] if isinstance(self.first, np.ndarray) else self.first

    def mid_of(self, m):
        return self.mid[m] if isinstance(self.mid, np.ndarray) else self.mid

    def span(self, npk, m, ka, kb):
        """Sum over packets [ka, kb) of messages m (npk = their packet counts)."""
        single = npk == 1
        s = np.where((ka == 0) & (kb > 0), np.where(single, self.only[m], self.first_of(m)), 0)
        s = s + np.where((kb == npk) & (kb > ka) & ~single, self.last[m], 0)
        s = s + self.mid_of(m) * np.maximum(0, np.minimum(kb, npk - 1) - np.maximum(ka, 1))
        return s if self.each is None else s + self.each[m] * np.maximum(0, kb - ka)


@dataclass
class Segs:
    """Runs of consecutive packets [ka, kb) of message msg, sent/received back to back from t."""
    msg: np.ndarray
    ka: np.ndarray
    kb: np.ndarray
    t: np.ndarray
    ip_id: np.ndarray | None = None    # IPv4 identification of packet ka (+1 per packet after it)
    w: PerPacket | None = None         # its packets' spacing (a switch link's, hops.py); None: the plan's


@dataclass
class Plan:
    """Everything about the wire per QP pair / message / control frame (never per packet)."""
    out: Output
    sel: select.Selection
    fmt: Format
    row_comment: list | None    # pcapng comments: text per flow row (None: off)
    hdr_bytes: np.ndarray       # header length per opcode (256 entries)
    nics: np.ndarray            # NICs on a NET flow (candidates for a file)
    # QP pairs ("c"): unique (src_nic, dst_nic, channel, qp index), sorted; the QPs of one NCCL
    # connection are consecutive, its QP index 0 first
    c_src: np.ndarray
    c_dst: np.ndarray
    c_qpn_src: np.ndarray       # QPN on the sender NIC (sends data, receives CTS)
    c_qpn_dst: np.ndarray       # QPN on the receiver NIC
    c_sport: np.ndarray
    c_hops: np.ndarray
    c_plane: np.ndarray         # the plane its QP uses (routes.plane_of): a NIC port of its own
    # messages: one RDMA WRITE-with-imm each (a whole NCCL message, or one QP's part of it)
    m_conn: np.ndarray          # its QP pair
    m_q: np.ndarray             # QP index within the connection (its QP 0 pair is m_conn - m_q)
    m_imm: np.ndarray           # immediate: the NCCL message size (all parts carry the whole size)
    m_keep: np.ndarray          # passes the collective/iteration filters
    m_src: np.ndarray
    m_dst: np.ndarray
    m_size: np.ndarray
    m_npk: np.ndarray
    m_row: np.ndarray           # the flow it belongs to (messages of a flow are contiguous)
    m_flight_ns: np.ndarray     # propagation, sender to receiver
    m_nominal_ns: np.ndarray
    wire: PerPacket            # ns a packet holds its link (paced: until the QP's next packet)
    rec: PerPacket             # bytes of the pcap record (header + captured frame)
    cts_msg: np.ndarray         # messages preceded by a CTS (all, or the first part of a split one)
    # NCCL's buffers (nccl_net.py): per message, from its NCCL message's entry
    m_nccl: np.ndarray          # its NCCL message (QP parts of one share it)
    m_va: np.ndarray            # RETH virtual address (receive slot + the QP part's offset)
    m_rkey: np.ndarray          # RETH R_Key: the receive buffer's MR key
    m_cts_va: np.ndarray        # its CTS's RETH: the sender's FIFO slot, and the FIFO's key
    m_cts_rkey: np.ndarray
    m_cts_body: np.ndarray      # (M, 64) the ncclIbSendFifo element the CTS writes
    m_wait: np.ndarray          # NCCL message whose arrival frees its receive slots (-1: none)
    cts_base_ns: np.ndarray     # per CTS: when NCCL would post it, before waiting for slots
    m_pkt0: np.ndarray          # global number of each message's first data packet (CE marks)
    ce_g: np.ndarray            # sorted global numbers of CE-marked data packets
    # control frames, in order ACK_CTS[C], ACK_DATA[A], CNP[N], CTS[C] (CNPs wait, like ACKs,
    # for the packet in k_pkt to arrive)
    k_kind: np.ndarray
    k_msg: np.ndarray
    k_pkt: np.ndarray           # ACK_DATA: index in its message of the packet acknowledged
    k_tx_nic: np.ndarray
    k_rx_nic: np.ndarray
    k_wire_ns: np.ndarray
    k_rec_bytes: np.ndarray
    k_nominal_ns: np.ndarray
    # filled by schedule
    tx: Segs | None = None
    rx: Segs | None = None
    k_tx_ns: np.ndarray | None = None
    k_rx_ns: np.ndarray | None = None
    m_psn: np.ndarray | None = None        # PSN of the first packet
    m_done: np.ndarray | None = None       # messages before it on its QP direction
    m_cts_psn: np.ndarray | None = None
    k_ip_id: np.ndarray | None = None      # IPv4 identification of each control frame
    late: int = 0                          # ACKs/messages still ahead of what they wait for
    fifo_tc: int = -1                      # nccl.fifo_tc (NCCL_IB_FIFO_TC): -1 = the data's class
    line_wire: PerPacket | None = None     # ns a frame holds a link at line rate (never paced)
    line_gbps: int = 0                     # that line rate: a NIC port's (nic_gbps / planes)
    planes: int = 1                        # NIC ports per NIC (fabric.planes), each its own transmitter
    # routes (routes.link_dirs: link directions, -1 padded) and the links they cross (hops.py)
    c_route: np.ndarray | None = None      # per QP pair: the data's route, sender to receiver
    c_rroute: np.ndarray | None = None     # per QP pair: the way back (CTS, ACKs of data)
    k_route: np.ndarray | None = None      # per control frame: its route
    link_gbps: np.ndarray | None = None    # per fabric link
    link_lat: np.ndarray | None = None
    frame_bytes: tuple | None = None       # data frames (no FCS): (First, Middle, Last per message, Only per message)
    k_frame: np.ndarray | None = None      # per control frame: its bytes (no FCS)
    hops: list | None = None               # filled by schedule: the frames at each switch link (hops.Hop)
    m_pace: np.ndarray | None = None       # per message: its packets' spacing / line rate (>= 1): the
                                           # rate the schedule gave its flow (timing.paced_trains)
    m_curve: RateCurve | None = None       # flows whose rate changed while they sent: their rate curves
    m_cap: np.ndarray | None = None        # per message: line rate / the rate DCQCN lets its QP send
                                           # at (>= 1; timing.pace), None: no DCQCN reaction
    ce_pos: np.ndarray | None = None  # output.ecn_marking=queue: per mark, the route position that set CE
    pfc: object = None                     # output.ecn_marking=queue, network.pfc: pfc.Pauses (the NICs paused)
    pfc_shown: np.ndarray | None = None    # per pause: written in the captures (pacing._pauses_shown)
    queue_rounds: int = 0                  # output.ecn_marking=queue: mark rounds (pacing.queue_marks_and_cnps)
    queue_stable: bool = True
    m_op: np.ndarray | None = None         # per message: its flow row's CommOp (op_id; the OTG export groups by it)

    def pace_of(self, m) -> np.ndarray:
        """Per message: its packets' spacing / line rate, the schedule's pace or DCQCN's cap."""
        f = np.ones(len(m)) if self.m_pace is None else self.m_pace[m]
        return f if self.m_cap is None else np.maximum(f, self.m_cap[m])

    def paced_offset(self, m, x) -> np.ndarray:
        """Integer ns after its first packet that paced message m reaches line-rate offset x (ns):
        x stretched by the message's pace, or on its flow's rate curve (follow_rates); never
        faster than DCQCN's cap."""
        m = np.asarray(m)
        out = np.floor(x * (np.ones(len(m)) if self.m_pace is None else self.m_pace[m])).astype(np.int64)
        if self.m_curve is not None:
            c = self.m_curve.m_row[m] >= 0
            if c.any():
                mc = m[c]
                xc = np.asarray(x, np.float64)[c]
                out[c] = np.floor(self.m_curve.at(mc, xc) - self.m_curve.at(mc, np.zeros(len(mc)))).astype(np.int64)
        if self.m_cap is not None:
            out = np.maximum(out, np.floor(x * self.m_cap[m]).astype(np.int64))
        return out

    @property
    def n_msgs(self) -> int:
        return len(self.m_conn)

    def offset(self, m, k, w: PerPacket | None = None):
        """Start of packet k within message m's back-to-back burst (k = npk: the burst's end), at
        the plan's spacing or w's."""
        return (w or self.wire).span(self.m_npk[m], m, 0, k)

    def packets_before(self, m, ka, kb, x, w: PerPacket | None = None):
        """The first of packets [ka, kb) of messages m that starts at or after burst offset x (ns);
        kb if none does."""
        w = w or self.wire
        first, mid = w.first_of(m), w.mid_of(m)
        k = np.where(x <= 0, 0, np.where(x <= first, 1, 1 + -(-(x - first) // mid)))
        return np.clip(k, ka, kb)


# --- plan: connections, QPs, messages, control frames -------------------------------------------

def check_output(out: Output) -> None:
    if out.pmtu not in (256, 512, 1024, 2048, 4096):
        raise ConfigError(f"output.pmtu={out.pmtu} is not an IB MTU; use 1024 or 4096")
    if out.payload not in ("zero", "pattern", "none"):
        raise ConfigError(f"output.payload={out.payload!r}; use 'zero', 'pattern' or 'none'")
    if out.ip_version not in (4, 6):
        raise ConfigError(f"output.ip_version={out.ip_version}; use 4 or 6")
    if not 0 < out.pkey <= 0xFFFF:
        raise ConfigError(f"output.pkey={out.pkey:#x}; use 0x0001..0xFFFF")
    if sum(map(bool, (out.merge, out.switch, out.lab))) > 1:
        raise ConfigError("output: choose one view - merge, switch or lab")
    if out.comments and out.format != "pcapng":
        raise ConfigError("output.comments=true needs output.format=pcapng (pcap has no comments)")
    if out.snaplen < 0:
        raise ConfigError(f"output.snaplen={out.snaplen}; use 0 (whole frames) or a byte count")
    if out.ack_every < 0:
        raise ConfigError(f"output.ack_every={out.ack_every}; use 0 or a packet count")
    if not (0 <= out.vlan_id < 4096 and 0 <= out.pcp < 8 and 0 <= out.dscp < 64 and 0 <= out.ecn < 4):
        raise ConfigError("output: vlan_id 0..4095, pcp 0..7, dscp 0..63, ecn 0..3")


def communicator(flows: Flows, rows: np.ndarray) -> np.ndarray:
    """Per flow row, which NCCL communicator carries it: the parallelism dimension of its op
    (+1; 0 for rows without an op). Sequence parallelism runs on the tensor-parallel group's
    communicator, as in Megatron-LM."""
    ops = flows.ops.rows
    comm = np.zeros(len(rows), np.int64)
    op = rows["op_id"].astype(np.int64)
    known = (op >= 0) & (op < len(ops))
    if known.any():
        dim = ops["dim"][op[known]].astype(np.int64)
        comm[known] = np.where(dim == Dim.SP, Dim.TP, dim) + 1
    return comm


def build(flows: Flows, fabric: Fabric, out: Output, qps: int = 1, nccl: Nccl | None = None) -> Plan | None:
    """The wire plan of flows' NET rows; None if there are none. nccl: the job's NCCL settings
    (qps_per_connection, buffer steps, fifo_tc); default Nccl() with `qps` QPs per connection."""
    nccl = Nccl(qps_per_connection=qps) if nccl is None else nccl
    qps = nccl.qps_per_connection
    check_output(out)
    if not 1 <= qps <= 128:
        raise ConfigError(f"nccl.qps_per_connection={qps}; NCCL accepts 1..128")
    sel = select.parse(out, fabric)
    net_idx = np.flatnonzero(flows.net)
    rows = flows.rows[net_idx]
    if len(rows) == 0:
        return None
    src, dst = rows["src_nic"].astype(np.int64), rows["dst_nic"].astype(np.int64)
    if (src < 0).any() or (dst < 0).any() or (src == dst).any():
        raise ValueError("NET flow rows need two different NICs (src_nic, dst_nic >= 0)")
    if (rows["start_ns"] < 0).any():
        raise ValueError("flow start_ns must be >= 0")
    ch = rows["channel"].astype(np.int64)
    # GPUs sharing a NIC keep their own NCCL connections: ranks are part of the connection key;
    # so is the communicator (each opens its own connections, even between the same two ranks).
    sr, dr = rows["src_rank"].astype(np.int64), rows["dst_rank"].astype(np.int64)
    comm = communicator(flows, rows)
    order = np.lexsort((np.arange(len(rows)), rows["start_ns"], ch, comm, dr, sr, dst, src))
    rows, src, dst, ch, sr, dr, comm, net_idx = (a[order] for a in (rows, src, dst, ch, sr, dr, comm, net_idx))

    # Connections, their QPs and QPNs: per NIC counting up from FIRST_QPN in sorted
    # (src NIC, dst NIC, src rank, dst rank, communicator, channel, qp index) order.
    new_conn = np.r_[True, (src[1:] != src[:-1]) | (dst[1:] != dst[:-1]) | (ch[1:] != ch[:-1])
                     | (sr[1:] != sr[:-1]) | (dr[1:] != dr[:-1]) | (comm[1:] != comm[:-1])]
    row_conn = np.cumsum(new_conn) - 1
    c_src, c_dst = np.repeat(src[new_conn], qps), np.repeat(dst[new_conn], qps)
    ev_nic = np.column_stack([c_src, c_dst]).ravel()
    ev_order = np.argsort(ev_nic, kind="stable")
    ev_sorted = ev_nic[ev_order]
    qpn = np.empty(len(ev_nic), dtype=np.int64)
    qpn[ev_order] = FIRST_QPN + np.arange(len(ev_nic)) - np.searchsorted(ev_sorted, ev_sorted)
    if qpn.max() > roce.PSN_MASK:
        raise ConfigError("more than 2^24 QPs on one NIC; use fewer channels")
    c_qpn_src, c_qpn_dst = qpn[0::2], qpn[1::2]
    if flows.detail == "placed":
        # chunks of some connections only (emit/views/placed.py): the whole job's QP numbers
        ci = flows.conns.lookup(sr[new_conn], dr[new_conn], comm[new_conn], ch[new_conn])
        q = (ci[:, None] * flows.conns.qps + np.arange(qps)[None, :]).ravel()
        c_qpn_src, c_qpn_dst = flows.conns.qpn_src[q], flows.conns.qpn_dst[q]
    c_hops = np.asarray(fabric.hops(c_src, c_dst), dtype=np.int64)
    c_plane = routes.plane_of(fabric, c_qpn_src)
    c_sport = roce.udp_sport(c_qpn_src, c_qpn_dst).astype(np.int64)
    c_route = routes.link_dirs(fabric, c_src, c_dst, c_sport, c_plane, c_qpn_dst)
    c_rroute = routes.link_dirs(fabric, c_dst, c_src, c_sport, c_plane, c_qpn_src)
    link_lat = fabric.links["latency_ns"].astype(np.int64)
    route_lat = lambda r: np.where(r >= 0, link_lat[np.maximum(r, 0) >> 1], 0).sum(axis=1)     # noqa: E731

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
    m_conn = row_conn[m_row]
    # Where each NCCL message lands, its CTS, and which earlier message it waits for.
    bufs = nccl_net.buffers(rows, cap, m_row, m_conn, src[new_conn], dst[new_conn], nccl)
    # Several QPs per connection (NCCL net_ib): whole messages round-robin over the QPs in the
    # order the connection sends them, or (qp_split) every message cut in nqps parts of
    # ceil(size / nqps) rounded up to 128 B, one WRITE-with-imm per QP (empty parts included).
    m_imm, m_nccl, m_part_off = m_size, np.arange(len(m_size)), 0
    if qps > 1 and out.qp_split:
        chunk = -(-(-(-m_size // qps)) // 128) * 128
        m_row, m_conn, m_imm, m_nccl = (np.repeat(a, qps) for a in (m_row, m_conn, m_size, m_nccl))
        m_q = np.tile(np.arange(qps), len(m_size))
        m_part_off = m_q * np.repeat(chunk, qps)
        m_size = np.clip(m_imm - m_part_off, 0, np.repeat(chunk, qps))
    else:
        first_of_conn = np.r_[True, m_conn[1:] != m_conn[:-1]]
        ordinal = np.arange(len(m_conn)) - np.maximum.accumulate(
            np.where(first_of_conn, np.arange(len(m_conn)), 0))
        m_q = ordinal % qps
    m_conn = m_conn * qps + m_q
    cts_msg = np.flatnonzero(m_q == 0) if out.qp_split else np.arange(len(m_conn))
    pmtu, M = out.pmtu, len(m_row)
    m_npk = np.maximum(1, -(-m_size // pmtu))

    hdr = np.zeros(256, dtype=np.int64)
    for op in Opcode:
        hdr[op] = roce.frame_dtype(op, out.vlan, out.ip_version).itemsize
    frame = lambda op, payload: hdr[op] + pad4(payload) + roce.ICRC_BYTES
    cap = incl_cap(out, hdr)
    fmt = Format(out.format == "pcapng", out.snaplen, parse_start_time(out.start_time))
    rec = lambda op, f: fmt.rec_bytes(np.minimum(f, cap[op]))
    gbps = fabric.port_gbps          # a multi-plane NIC: each plane's port at nic_gbps / planes
    _, last_payload = data_packet(m_size, m_npk, m_npk - 1, pmtu)
    frames = [frame(Opcode.RC_WRITE_FIRST, pmtu), frame(Opcode.RC_WRITE_MIDDLE, pmtu),
              frame(Opcode.RC_WRITE_LAST_IMM, last_payload), frame(Opcode.RC_WRITE_ONLY_IMM, m_size)]
    w = [wire_ns(f, gbps) for f in frames]
    wire = PerPacket(int(w[0]), int(w[1]), w[2], w[3])
    row_comment = row_comments(flows, rows) if fmt.pcapng and out.comments else None
    row_clen = np.array([len(x) for x in row_comment] if row_comment else [0] * len(rows), np.int64)
    ctl_opt = lambda kind, msgs: comment_option_bytes(
        (len(COMMENT_PREFIX[kind]) + row_clen[m_row[msgs]]) * (row_comment is not None))
    recb = PerPacket(int(rec(Opcode.RC_WRITE_FIRST, frames[0])), int(rec(Opcode.RC_WRITE_MIDDLE, frames[1])),
                      rec(Opcode.RC_WRITE_LAST_IMM, frames[2]), rec(Opcode.RC_WRITE_ONLY_IMM, frames[3]),
                      each=ctl_opt(DATA, np.arange(M)) if row_comment else None)

    # Nominal: a flow's messages from its start_ns, each a line-rate burst, spread over the time
    # the schedule gives the flow to send (or, when its rate changed meanwhile, along its rate
    # curve: follow_rates) (its end less the route's flight and store-and-forward
    # packet times) in proportion to their bytes: a flow that shares a link at half its NIC's
    # rate sends a message every two message times, so its messages interleave with the other
    # QPs' on the NIC (timing.py) and no link carries more than the schedule gave it, averaged
    # over a message. A flow alone at line rate keeps its messages back to back.
    burst = wire.span(m_npk, np.arange(M), 0, m_npk)
    excl = np.cumsum(burst) - burst
    first_of_row = np.r_[True, m_row[1:] != m_row[:-1]]
    row_base = np.maximum.accumulate(np.where(first_of_row, np.arange(M), 0))
    flight = route_lat(c_route)[m_conn]          # propagation over the links of its route
    cts_flight = route_lat(c_rroute)[m_conn - m_q]   # a CTS's: the way back, on the QP 0 pair
    if flows.finish_ns is not None:            # when the schedule's last byte left the sender
        send_ns = flows.finish_ns[net_idx].astype(np.int64) - rows["start_ns"].astype(np.int64)
    else:
        send_ns = ((rows["end_ns"] - rows["start_ns"]).astype(np.int64) - _row_first(flight, m_row, len(rows))
                   - (_row_first(c_hops[m_conn], m_row, len(rows)) - 1) * int(wire.first))
    row_pace = stretch(burst, m_row, len(rows), send_ns)
    curve = None
    m_pace = row_pace[m_row]
    m_nominal = rows["start_ns"].astype(np.int64)[m_row] + np.floor((excl - excl[row_base]) * m_pace).astype(np.int64)
    # A flow whose rate changed while it sent (other flows joined or left a link it crosses) has
    # each message follow the rate it had then, not one average pace: a flow alone for its first
    # half and sharing a link for its second sends back to back, then at half rate.
    if flows.finish_ns is not None and getattr(flows, "item_rates", None) is not None:
        got = follow_rates(flows.item_rates, net_idx, rows["start_ns"], flows.finish_ns[net_idx], burst, excl,
                           m_row, row_base)
        if got is not None:
            msgs, nominal, pace, curve = got
            m_nominal[msgs], m_pace[msgs] = nominal, pace

    # ACKs of data: the A-bit packet, plus every ack_every-th packet of the message.
    n_ack = 1 + ((m_npk - 1) // out.ack_every if out.ack_every > 0 else 0 * m_npk)
    a_msg = np.repeat(np.arange(M), n_ack)
    i = np.arange(len(a_msg)) - np.repeat(np.cumsum(n_ack) - n_ack, n_ack)
    a_pkt = np.where(i == n_ack[a_msg] - 1, m_npk[a_msg] - 1, (i + 1) * max(out.ack_every, 1) - 1)
    A = len(a_msg)

    # A CTS is posted when the receiver's proxy sees the op (its release) - but never so late
    # that its message could not start on time (the schedule has no CTS round trip) - and once
    # NCCL_STEPS allow it (timing.py waits for the slots); an ACK once its packet has arrived.
    f_cts, f_ack = frame(Opcode.RC_WRITE_ONLY, CTS_BYTES), frame(Opcode.RC_ACK, 0)
    w_cts, w_ack = int(wire_ns(f_cts, gbps)), int(wire_ns(f_ack, gbps))
    latest = m_nominal - cts_flight - w_cts - CTS_LEAD_FRAMES * wire.first
    cts_nominal = np.maximum(0, np.minimum(op_release(flows, rows)[m_row], latest))[cts_msg]
    C = len(cts_msg)
    a_off = wire.span(m_npk[a_msg], a_msg, 0, a_pkt)
    a_wire = wire.span(m_npk[a_msg], a_msg, a_pkt, a_pkt + 1)
    s, d = c_src[m_conn], c_dst[m_conn]
    per_kind = lambda v_ack, v_cts: np.repeat([v_ack, v_ack, v_cts], [C, A, C])
    m_keep = sel.keep_rows(flows, rows)[m_row]
    m_pkt0 = np.cumsum(m_npk) - m_npk
    ce_g = congestion.ce_marks(int(m_npk.sum()), out.ecn_mark_fraction, out.ecn_pattern, out.ecn_seed)
    return Plan(
        out=out, sel=sel, fmt=fmt, row_comment=row_comment, hdr_bytes=hdr, nics=np.unique(np.r_[c_src, c_dst]),
        c_src=c_src, c_dst=c_dst, c_qpn_src=c_qpn_src, c_qpn_dst=c_qpn_dst,
        c_sport=c_sport, c_hops=c_hops, c_plane=c_plane, planes=fabric.planes,
        c_route=c_route, c_rroute=c_rroute, link_gbps=fabric.links["gbps"].astype(np.int64), link_lat=link_lat,
        frame_bytes=tuple(frames), k_route=np.concatenate([c_route[(m_conn - m_q)[cts_msg]], c_rroute[m_conn[a_msg]],
                                                           c_rroute[(m_conn - m_q)[cts_msg]]]),
        k_frame=np.repeat([f_ack, f_ack, f_cts], [C, A, C]).astype(np.int64),
        m_conn=m_conn, m_q=m_q, m_imm=m_imm, m_keep=m_keep,
        m_src=s, m_dst=d, m_size=m_size, m_npk=m_npk, m_row=m_row, m_flight_ns=flight,
        m_nominal_ns=m_nominal, wire=wire, line_wire=wire, line_gbps=gbps, m_pace=m_pace, m_curve=curve, rec=recb, cts_msg=cts_msg, m_pkt0=m_pkt0, ce_g=ce_g,
        m_nccl=m_nccl, m_va=bufs.addr[m_nccl] + m_part_off, m_rkey=bufs.rkey[m_nccl],
        m_cts_va=bufs.cts_va[m_nccl], m_cts_rkey=bufs.cts_rkey[m_nccl],
        m_cts_body=nccl_net.cts_payload(bufs.addr, bufs.size, bufs.rkey, bufs.tag, bufs.idx)[m_nccl],
        m_wait=bufs.wait[m_nccl], cts_base_ns=cts_nominal, fifo_tc=nccl.fifo_tc,
        m_op=rows["op_id"].astype(np.int64)[m_row],
        k_kind=np.repeat([ACK_CTS, ACK_DATA, CTS], [C, A, C]).astype(np.int8),
        k_msg=np.r_[cts_msg, a_msg, cts_msg],
        k_pkt=np.r_[np.zeros(C, np.int64), a_pkt, np.zeros(C, np.int64)],
        k_tx_nic=np.r_[s[cts_msg], d[a_msg], d[cts_msg]], k_rx_nic=np.r_[d[cts_msg], s[a_msg], s[cts_msg]],
        k_wire_ns=per_kind(w_ack, w_cts),
        k_rec_bytes=per_kind(int(rec(Opcode.RC_ACK, f_ack)), int(rec(Opcode.RC_WRITE_ONLY, f_cts)))
        + np.r_[ctl_opt(ACK_CTS, cts_msg), ctl_opt(ACK_DATA, a_msg), ctl_opt(CTS, cts_msg)],
        k_nominal_ns=np.r_[cts_nominal + cts_flight[cts_msg] + w_cts,
                           m_nominal[a_msg] + a_off + flight[a_msg] + a_wire, cts_nominal],
    )


def op_release(flows: Flows, rows: np.ndarray) -> np.ndarray:
    """Per flow row: when its CommOp was released (flows.op_start_ns), or its own start when the
    table has none."""
    start = rows["start_ns"].astype(np.int64)
    if flows.op_start_ns is None:
        return start
    op = rows["op_id"].astype(np.int64)
    known = (op >= 0) & (op < len(flows.op_start_ns))
    out = start.copy()
    out[known] = np.minimum(start[known], np.asarray(flows.op_start_ns, np.int64)[op[known]])
    return out


COMMENT_PREFIX = {k: (v + " |").encode() for k, v in
                  {DATA: "data", CTS: "CTS", ACK_DATA: "ACK", ACK_CTS: "ACK of CTS", CNP: "CNP"}.items()}


def row_comments(flows: Flows, rows: np.ndarray) -> list[bytes]:
    """Per flow row: the collective, op id, iteration, algorithm step, chunk and channel."""
    ops = flows.ops.rows
    out = []
    for r in rows:
        op = int(r["op_id"])
        what = ""
        if 0 <= op < len(ops):
            o = ops[op]
            what = f" {Dim(int(o['dim'])).name} {CollKind(int(o['kind'])).label} iter {int(o['iteration'])}"
        out.append(f"{what} op {op} step {int(r['step'])} chunk {int(r['chunk'])} "
                   f"channel {int(r['channel'])}".encode())
    return out


def incl_cap(out: Output, hdr_bytes: np.ndarray) -> np.ndarray:
    """Most bytes of a frame the file records, per opcode: snaplen, and with payload 'none' the
    headers only (like a snaplen at the header boundary; orig_len stays the real length)."""
    snap = out.snaplen if out.snaplen > 0 else np.iinfo(np.int64).max
    cap = np.full(256, snap, np.int64)
    return np.minimum(cap, hdr_bytes) if out.payload == "none" else cap

