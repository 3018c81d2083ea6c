"""Flows -> the wire plan: QPs, messages, control frames (CTS, ACK, CNP), never per packet.
pacing.py gives the plan its packet-exact schedule per NIC and direction; emit/views/files.py / items.py /
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

from ...config import Output
from . import nccl_net, roce
from . import select
from .capture_file import Format
from .rate_curve import RateCurve
from .roce import Opcode

FIRST_QPN = 0x100            # QP 0/1 are SMI/GSI; tshark decodes DestQP 1 as MADs
CTS_BYTES = nccl_net.FIFO_ELEM_BYTES     # one ncclIbSendFifo element (nreqs = 1)
MAX_MSG_BYTES = 1 << 31      # IBA limit on one RDMA message
IP_TTL = 255                 # NCCL sets the GRH hop_limit to 255 on RoCE QPs (net_ib/connect.cc,
                             # ncclIbQpRtr); data, CTS and ACKs leave with it
FIX_ROUNDS = 16              # fixed-point rounds that move ACKs / messages behind what they wait for
ACK_ROUNDS = 16              # then rounds that move late ACKs and messages only (schedule.schedule), if any
CTS_LEAD_FRAMES = 2          # a CTS is due this many full frames ahead of its message (slack for
                             # the packet-boundary waits on both NICs)

# Control frame kinds (their order is the tie-break at equal time), and DATA for message packets.
ACK_CTS, ACK_DATA, CTS, DATA, CNP = 0, 1, 2, 3, 4
CNP_CHECK_ROUNDS = 8         # reschedules that drop CNPs pushed closer than the per-QP gap
PROXY_POST_NS = 200           # a receive NCCL_STEPS allow is posted this long after its slot freed
DCQCN_ROUNDS = 4             # output.dcqcn: pace from the CNPs, pick CNPs again on the paced schedule

# pcapng comments: what each frame kind says before its flow row's text
COMMENT_PREFIX = {k: (v + " |").encode() for k, v in
                  {DATA: "data", CTS: "CTS", ACK_DATA: "ACK", ACK_CTS: "ACK of CTS", CNP: "CNP"}.items()}

PATTERN = (np.arange(8192) & 0xFF).astype(np.uint8)   # "pattern" payload: byte j of a payload = j


def pad4(n):
    return (n + 3) & ~3


def wire_ns(frame_bytes, gbps: int):
    """Integer ns a frame occupies the link, FCS + preamble + IFG included (rounded up)."""
    return ((np.asarray(frame_bytes, dtype=np.int64) + roce.WIRE_OVERHEAD_BYTES) * 8 + gbps - 1) // gbps


def data_packet(m_size, m_npk, j, pmtu):
    """Opcode and payload bytes of packet j of a message (vectorized)."""
    last = j == m_npk - 1
    op = np.where(m_npk == 1, Opcode.RC_WRITE_ONLY_IMM,
                  np.where(j == 0, Opcode.RC_WRITE_FIRST,
                           np.where(last, Opcode.RC_WRITE_LAST_IMM, Opcode.RC_WRITE_MIDDLE)))
    payload = np.where(last, m_size - (m_npk - 1) * pmtu, pmtu)
    return op, payload


def incl_cap(out: Output, hdr_bytes: np.ndarray) -> np.ndarray:
    """Most bytes of a frame the file records, per opcode: snaplen, and with payload 'none' the
    headers only (like a snaplen at the header boundary; orig_len stays the real length)."""
    snap = out.snaplen if out.snaplen > 0 else np.iinfo(np.int64).max
    cap = np.full(256, snap, np.int64)
    return np.minimum(cap, hdr_bytes) if out.payload == "none" else cap


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
    late_acks: int = 0                     # of them ACKs (schedule.schedule: ACK-only rounds settle them)
    late_data: int = 0                     # messages whose first packet leaves before their CTS arrived;
                                           # the rest CTSs posted before NCCL_STEPS freed their slot
    fifo_tc: int = -1                      # nccl.fifo_tc (NCCL_IB_FIFO_TC): -1 = the data's class
    line_wire: PerPacket | None = None     # ns a frame holds a link at line rate (never paced)
    line_gbps: int = 0                     # that line rate: a NIC port's (nic_gbps / planes)
    planes: int = 1                        # NIC ports per NIC (fabric.planes), each its own transmitter
    # routes (routes.link_dirs: link directions, -1 padded) and the links they cross (hops.py)
    c_route: np.ndarray | None = None      # per QP pair: the data's route, sender to receiver
    c_rroute: np.ndarray | None = None     # per QP pair: the way back (CTS, ACKs of data)
    m_route: np.ndarray | None = None      # per message: the route its data takes (its QP pair's; the
                                           # one place a message's route is read - hops, marks, pauses)
    k_route: np.ndarray | None = None      # per control frame: its route
    link_gbps: np.ndarray | None = None    # per fabric link (at t=0)
    # a scenario whose links change mid-run (fabric/timeline.py): epoch e starts at epoch_ns[e] with
    # link rates link_gbps_ep[e] (0: down); None: one epoch, link_gbps throughout
    epoch_ns: np.ndarray | None = None
    link_gbps_ep: np.ndarray | None = None
    paths: object = None                   # its epochs' routes (epoch_paths.EpochPaths; None: one epoch)
    link_lat: np.ndarray | None = None
    frame_bytes: tuple | None = None       # data frames (no FCS): (First, Middle, Last per message, Only per message)
    k_frame: np.ndarray | None = None      # per control frame: its bytes (no FCS)
    hops: list | None = None               # filled by schedule: the frames at each switch link (hops.Hop)
    m_pace: np.ndarray | None = None       # per message: its packets' spacing / line rate (>= 1): the
                                           # rate the schedule gave its flow (schedule.paced_trains)
    m_curve: RateCurve | None = None       # flows whose rate changed while they sent: their rate curves
    m_cap: np.ndarray | None = None        # per message: line rate / the rate DCQCN lets its QP send
                                           # at (>= 1; pacing.pace), None: no DCQCN reaction
    ce_pos: np.ndarray | None = None  # output.ecn_marking=queue: per mark, the route position that set CE
    pfc: object = None                     # output.ecn_marking=queue, network.pfc: pfc.PfcFrames (pfc_pass.py's)
    queue_rounds: int = 0                  # output.ecn_marking=queue: mark rounds (queue_rounds.queue_marks_and_cnps)
    queue_stable: bool = True
    queue_max_rounds: int = 0              # the rounds it may use (QUEUE_ROUNDS)
    m_op: np.ndarray | None = None         # per message: its flow row's CommOp (op_id; the OTG export groups by it)
    c_dscp: np.ndarray | None = None       # per QP pair: its DSCP and 802.1Q priority (Flows.op_tc: a
    c_pcp: np.ndarray | None = None        # scenario job's class); None: output.dscp / output.pcp

    def data_pcp(self, c) -> np.ndarray:
        """802.1Q priority of QP pairs c's frames (output.pcp, or the scenario job's)."""
        return np.full(len(c), self.out.pcp, np.int64) if self.c_pcp is None else self.c_pcp[c]

    def data_dscp(self, c) -> np.ndarray:
        """DSCP of QP pairs c's frames (output.dscp, or the scenario job's)."""
        return np.full(len(c), self.out.dscp, np.int64) if self.c_dscp is None else self.c_dscp[c]

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

    def link_gbps_at(self, d, t_ns) -> np.ndarray:
        """The rate of link directions d (their link's) when a frame enters them at t_ns: the one
        place the packet stages read a switch link's rate (hops, marks, pauses)."""
        d = np.asarray(d)
        if self.epoch_ns is None:
            return self.link_gbps[d >> 1]
        e = np.searchsorted(self.epoch_ns, t_ns, "right") - 1
        gbps = self.link_gbps_ep[np.maximum(e, 0), d >> 1]
        # 0: down - only in the pass that finds a frame there, before epoch_paths moves it away
        return np.where(gbps > 0, gbps, self.link_gbps[d >> 1])

    def link_gbps_min(self, d, a_ns, b_ns) -> np.ndarray:
        """The slowest rate of link directions d over [a_ns, b_ns] (frames on them then): a
        degraded link's frames after its instant at its new rate, wherever they entered."""
        d = np.asarray(d)
        if self.epoch_ns is None:
            return self.link_gbps[d >> 1]
        ea = np.maximum(np.searchsorted(self.epoch_ns, a_ns, "right") - 1, 0)
        eb = np.maximum(np.searchsorted(self.epoch_ns, b_ns, "right") - 1, ea)
        out = self.link_gbps_at(d, a_ns)
        for k in range(1, int((eb - ea).max(initial=0)) + 1):
            e = np.minimum(ea + k, eb)
            g = self.link_gbps_ep[e, d >> 1]
            out = np.minimum(out, np.where(g > 0, g, self.link_gbps[d >> 1]))
        return out

    def route_of(self, kind, m, pkt) -> np.ndarray | None:
        """The routes frames took (kind, message, packet: data by its message, a control frame by
        its (kind, message, packet)); None when every frame of a QP pair takes one route
        (no epochs: addresses.link_macs computes it)."""
        if self.paths is None:
            return None
        kind, m, pkt = (np.asarray(x, np.int64) for x in (kind, m, pkt))
        out = self.m_route[m].copy()
        ctl = np.flatnonzero(kind != DATA)
        if len(ctl):
            span = int(max(self.m_npk.max(), 1)) + 1
            key = (self.k_kind.astype(np.int64) * self.n_msgs + self.k_msg) * span + self.k_pkt
            order = np.argsort(key, kind="stable")
            want = (kind[ctl] * self.n_msgs + m[ctl]) * span + pkt[ctl]
            k = order[np.minimum(np.searchsorted(key[order], want), len(key) - 1)]
            assert np.array_equal(key[k], want), "a control frame not in the plan"
            out[ctl] = self.k_route[k]
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
