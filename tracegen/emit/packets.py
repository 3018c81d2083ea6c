"""Flows -> the wire plan: QPs, messages, control frames (CTS, ACK, CNP) and their packet-exact
schedule per NIC and direction. Never per packet: pcap.py turns the plan into bytes.

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
  * One NCCL connection per (sender, receiver, communicator, channel): communicators (the
    parallelism dimension's group: DP, TP (+SP), PP, CP, EP, EDP, embedding) never share QPs.
  * QPNs per NIC from 0x100 in sorted (src, dst, communicator, channel, QP index) order; PSNs and MSNs per QP
    direction follow the order messages actually leave; M (MigReq) = 1 as mlx5 QPs start MIGRATED.
  * nccl.qps_per_connection > 1: whole messages round-robin over the connection's QPs, or with
    output.qp_split each message in ceil(size / nqps) parts rounded up to 128 B, one
    WRITE-with-imm per QP (imm = the whole size); the CTS always travels on QP index 0.
  * CE marks and CNPs (congestion.py): a CNP is a control frame like an ACK, due when its
    CE-marked packet has fully arrived.
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

from dataclasses import dataclass

import numpy as np

from ..config import Output
from ..errors import ConfigError
from ..tables import CollKind, Dim, Flows
from ..topology import Fabric
from . import congestion, roce, select
from .capture_file import Format, comment_option_bytes
from .roce import Opcode

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

# Control frame kinds (their order is the tie-break at equal time), and DATA for message packets.
ACK_CTS, ACK_DATA, CTS, DATA, CNP = 0, 1, 2, 3, 4
CNP_CHECK_ROUNDS = 8         # reschedules that drop CNPs pushed closer than the per-QP gap

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
    each: np.ndarray | None = None   # per message, added to every packet (pcapng comments)

    def span(self, npk, m, ka, kb):
        """Sum over packets [ka, kb) of messages m (npk = their packet counts)."""
        single = npk == 1
        s = np.where((ka == 0) & (kb > 0), np.where(single, self.only[m], self.first), 0)
        s = s + np.where((kb == npk) & (kb > ka) & ~single, self.last[m], 0)
        s = s + self.mid * np.maximum(0, np.minimum(kb, npk - 1) - np.maximum(ka, 1))
        return s if self.each is None else s + self.each[m] * np.maximum(0, kb - ka)


@dataclass
class _Segs:
    """Runs of consecutive packets [ka, kb) of message msg, sent/received back to back from t."""
    msg: np.ndarray
    ka: np.ndarray
    kb: np.ndarray
    t: np.ndarray


@dataclass
class _Plan:
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
    wire: _PerPacket            # ns on the link
    rec: _PerPacket             # bytes of the pcap record (header + captured frame)
    cts_msg: np.ndarray         # messages preceded by a CTS (all, or the first part of a split one)
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
    l2_direct: bool = False                # lab mode, bridged DUT: frames go to the peer's MAC
    lab: object = None                     # lab.LabPlan in lab mode

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


def _communicator(flows: Flows, rows: np.ndarray) -> np.ndarray:
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


def _build(flows: Flows, fabric: Fabric, out: Output, qps: int = 1) -> _Plan | None:
    _check_output(out)
    if not 1 <= qps <= 128:
        raise ConfigError(f"nccl.qps_per_connection={qps}; NCCL accepts 1..128")
    sel = select.parse(out, fabric)
    rows = flows.rows[flows.net]
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
    comm = _communicator(flows, rows)
    order = np.lexsort((np.arange(len(rows)), rows["start_ns"], ch, comm, dr, sr, dst, src))
    rows, src, dst, ch, sr, dr, comm = (a[order] for a in (rows, src, dst, ch, sr, dr, comm))

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
    m_conn = row_conn[m_row]
    # Several QPs per connection (NCCL net_ib): whole messages round-robin over the QPs in the
    # order the connection sends them, or (qp_split) every message cut in nqps parts of
    # ceil(size / nqps) rounded up to 128 B, one WRITE-with-imm per QP (empty parts included).
    m_imm = m_size
    if qps > 1 and out.qp_split:
        chunk = -(-(-(-m_size // qps)) // 128) * 128
        m_row, m_conn, m_imm = (np.repeat(a, qps) for a in (m_row, m_conn, m_size))
        m_q = np.tile(np.arange(qps), len(m_size))
        m_size = np.clip(m_imm - m_q * np.repeat(chunk, qps), 0, np.repeat(chunk, qps))
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
    frame = lambda op, payload: hdr[op] + _pad4(payload) + roce.ICRC_BYTES
    cap = _incl_cap(out, hdr)
    fmt = Format(out.format == "pcapng", out.snaplen)
    rec = lambda op, f: fmt.rec_bytes(np.minimum(f, cap[op]))
    gbps = fabric.nic_gbps
    _, last_payload = _data_packet(m_size, m_npk, m_npk - 1, pmtu)
    frames = [frame(Opcode.RC_WRITE_FIRST, pmtu), frame(Opcode.RC_WRITE_MIDDLE, pmtu),
              frame(Opcode.RC_WRITE_LAST_IMM, last_payload), frame(Opcode.RC_WRITE_ONLY_IMM, m_size)]
    w = [_wire_ns(f, gbps) for f in frames]
    wire = _PerPacket(int(w[0]), int(w[1]), w[2], w[3])
    row_comment = _row_comments(flows, rows) if fmt.pcapng and out.comments else None
    row_clen = np.array([len(x) for x in row_comment] if row_comment else [0] * len(rows), np.int64)
    ctl_opt = lambda kind, msgs: comment_option_bytes(
        (len(COMMENT_PREFIX[kind]) + row_clen[m_row[msgs]]) * (row_comment is not None))
    recb = _PerPacket(int(rec(Opcode.RC_WRITE_FIRST, frames[0])), int(rec(Opcode.RC_WRITE_MIDDLE, frames[1])),
                      rec(Opcode.RC_WRITE_LAST_IMM, frames[2]), rec(Opcode.RC_WRITE_ONLY_IMM, frames[3]),
                      each=ctl_opt(DATA, np.arange(M)) if row_comment else None)

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
    cts_nominal = np.maximum(0, m_nominal - flight - w_cts - CTS_LEAD_FRAMES * wire.first)[cts_msg]
    C = len(cts_msg)
    a_off = wire.span(m_npk[a_msg], a_msg, 0, a_pkt)
    a_wire = wire.span(m_npk[a_msg], a_msg, a_pkt, a_pkt + 1)
    s, d = c_src[m_conn], c_dst[m_conn]
    per_kind = lambda v_ack, v_cts: np.repeat([v_ack, v_ack, v_cts], [C, A, C])
    m_keep = sel.keep_rows(flows, rows)[m_row]
    m_pkt0 = np.cumsum(m_npk) - m_npk
    ce_g = congestion.ce_marks(int(m_npk.sum()), out.ecn_mark_fraction, out.ecn_pattern, out.ecn_seed)
    return _Plan(
        out=out, sel=sel, fmt=fmt, row_comment=row_comment, hdr_bytes=hdr, nics=np.unique(np.r_[c_src, c_dst]),
        c_src=c_src, c_dst=c_dst, c_qpn_src=c_qpn_src, c_qpn_dst=c_qpn_dst,
        c_sport=roce.udp_sport(c_qpn_src, c_qpn_dst).astype(np.int64), c_hops=c_hops,
        m_conn=m_conn, m_q=m_q, m_imm=m_imm, m_keep=m_keep,
        m_src=s, m_dst=d, m_size=m_size, m_npk=m_npk, m_row=m_row, m_flight_ns=flight,
        m_nominal_ns=m_nominal, wire=wire, rec=recb, cts_msg=cts_msg, m_pkt0=m_pkt0, ce_g=ce_g,
        k_kind=np.repeat([ACK_CTS, ACK_DATA, CTS], [C, A, C]).astype(np.int8),
        k_msg=np.r_[cts_msg, a_msg, cts_msg],
        k_pkt=np.r_[np.zeros(C, np.int64), a_pkt, np.zeros(C, np.int64)],
        k_tx_nic=np.r_[s[cts_msg], d[a_msg], d[cts_msg]], k_rx_nic=np.r_[d[cts_msg], s[a_msg], s[cts_msg]],
        k_wire_ns=per_kind(w_ack, w_cts),
        k_rec_bytes=per_kind(int(rec(Opcode.RC_ACK, f_ack)), int(rec(Opcode.RC_WRITE_ONLY, f_cts)))
        + np.r_[ctl_opt(ACK_CTS, cts_msg), ctl_opt(ACK_DATA, a_msg), ctl_opt(CTS, cts_msg)],
        k_nominal_ns=np.r_[cts_nominal + flight[cts_msg] + w_cts,
                           m_nominal[a_msg] + a_off + flight[a_msg] + a_wire, cts_nominal],
    )


COMMENT_PREFIX = {k: (v + " |").encode() for k, v in
                  {DATA: "data", CTS: "CTS", ACK_DATA: "ACK", ACK_CTS: "ACK of CTS", CNP: "CNP"}.items()}


def _row_comments(flows: Flows, rows: np.ndarray) -> list[bytes]:
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


def _incl_cap(out: Output, hdr_bytes: np.ndarray) -> np.ndarray:
    """Most bytes of a frame the file records, per opcode: snaplen, and with payload 'none' the
    headers only (like a snaplen at the header boundary; orig_len stays the real length)."""
    snap = out.snaplen if out.snaplen > 0 else np.iinfo(np.int64).max
    cap = np.full(256, snap, np.int64)
    return np.minimum(cap, hdr_bytes) if out.payload == "none" else cap


def _prepare(flows: Flows, fabric: Fabric, out: Output, qps: int, times: bool) -> _Plan | None:
    """The plan, scheduled when `times` or when CNPs need it (their rate limit is in time)."""
    p = _build(flows, fabric, out, qps)
    if p is None:
        return None
    if len(p.ce_g):
        _add_cnps(p, fabric)
    elif times:
        _schedule(p)
    return p


def _add_cnps(p: _Plan, fabric: Fabric) -> None:
    """CE marks -> CNPs: schedule without them, keep one per QP per gap at the marked packets'
    arrival, insert them as control frames and reschedule; drop any that the reschedule pushed
    closer than the gap to the previous one of their QP, until none is."""
    _schedule(p)
    g = p.ce_g
    m = np.searchsorted(p.m_pkt0, g, "right") - 1
    j = g - p.m_pkt0[m]
    ready = _arrival(p, p.rx, m, j) + p.wire.span(p.m_npk[m], m, j, j + 1)
    keep = congestion.rate_limit(p.m_conn[m], ready)
    m, j, ready = m[keep], j[keep], ready[keep]
    frame = p.hdr_bytes[Opcode.CNP] + roce.ICRC_BYTES
    w_cnp = int(_wire_ns(frame, fabric.nic_gbps))
    rec_cnp = int(p.fmt.rec_bytes(min(frame, _incl_cap(p.out, p.hdr_bytes)[Opcode.CNP])))
    base = {k: getattr(p, k) for k in ("k_kind", "k_msg", "k_pkt", "k_tx_nic", "k_rx_nic", "k_wire_ns",
                                       "k_rec_bytes", "k_nominal_ns")}
    at = len(base["k_kind"]) - len(p.cts_msg)
    for _ in range(CNP_CHECK_ROUNDS):
        n = len(m)
        opt = (comment_option_bytes(len(COMMENT_PREFIX[CNP]) + np.array([len(p.row_comment[r]) for r in p.m_row[m]],
                                                                        np.int64)) if p.row_comment else 0)
        new = dict(k_kind=np.full(n, CNP, np.int8), k_msg=m, k_pkt=j, k_tx_nic=p.m_dst[m],
                   k_rx_nic=p.m_src[m], k_wire_ns=np.full(n, w_cnp), k_rec_bytes=rec_cnp + opt + 0 * m,
                   k_nominal_ns=ready)
        for k, v in base.items():
            setattr(p, k, np.concatenate([v[:at], new[k].astype(v.dtype), v[at:]]))
        _schedule(p)
        t = p.k_tx_ns[at:at + n]
        ok = congestion.rate_limit(p.m_conn[m], t)
        if ok.all():
            break
        m, j, ready = m[ok], j[ok], ready[ok]


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
    M, C = p.n_msgs, len(p.cts_msg)
    n_ack = len(p.k_kind) - C
    k_flight = p.m_flight_ns[p.k_msg]
    acked_m, acked_j = p.k_msg[C:n_ack], p.k_pkt[C:n_ack]
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
        data_ready = np.zeros(M, np.int64)       # messages without a CTS (later parts) wait for none
        data_ready[p.cts_msg] = k_rx[n_ack:] + p.k_wire_ns[n_ack:]
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
    # CTSs travel on the connection's QP 0, receiver to sender.
    ones = np.ones(C, np.int64)
    cts_qp = (p.m_conn - p.m_q)[p.cts_msg]
    cts_psn, _, _ = _per_qp_running(cts_qp, k_tx[n_ack:], ones, ones)
    p.m_cts_psn, p.m_cts_va = np.zeros(M, np.int64), np.zeros(M, np.int64)
    p.m_cts_psn[p.cts_msg] = cts_psn & roce.PSN_MASK
    p.m_cts_va[p.cts_msg] = (FIFO_VA_BASE + (p.c_qpn_src[cts_qp] << 16)
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
