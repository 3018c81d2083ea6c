"""Flows -> the wire plan (plan.py says what goes on the wire and why): the output settings
checked, NCCL connections, QPs and QPNs, messages (split over QPs), their nominal times along the
schedule's rates, CTS and ACK control frames, and pcapng comments per flow row."""
from __future__ import annotations

import numpy as np

from ...config import Nccl, Output, parse_start_time
from ...errors import ConfigError
from ...tables import CollKind, Dim, Flows
from ...fabric.topology import Fabric
from . import congestion, epoch_paths, nccl_net, roce, routes
from . import select
from .capture_file import Format, comment_option_bytes
from .plan import (ACK_CTS, ACK_DATA, COMMENT_PREFIX, CTS, CTS_BYTES, CTS_LEAD_FRAMES, DATA, FIRST_QPN,
                   MAX_MSG_BYTES, PerPacket, Plan, data_packet, incl_cap, pad4, wire_ns)
from .rate_curve import follow_rates, stretch
from .roce import Opcode


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
    # a scenario's per-job traffic class: a connection is one job's (its ranks are the job's GPUs)
    c_tc = None if flows.op_tc is None else np.repeat(flows.op_tc[rows["op_id"][new_conn]].astype(np.int64), qps, axis=0)
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
    # QPs' on the NIC (pacing.py) and no link carries more than the schedule gave it, averaged
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
    # NCCL_STEPS allow it (pacing.py waits for the slots); an ACK once its packet has arrived.
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
    # a scenario whose links change mid-run: each frame on its epoch's route and rates (epoch_paths.py)
    paths = epoch_paths.build(fabric, c_src, c_dst, c_sport, c_plane, c_qpn_src, c_qpn_dst, fabric.ip_version)
    return Plan(
        paths=paths, epoch_ns=None if paths is None else paths.epoch_ns,
        link_gbps_ep=None if paths is None else paths.gbps,
        out=out, sel=sel, fmt=fmt, row_comment=row_comment, hdr_bytes=hdr, nics=np.unique(np.r_[c_src, c_dst]),
        c_src=c_src, c_dst=c_dst, c_qpn_src=c_qpn_src, c_qpn_dst=c_qpn_dst,
        c_sport=c_sport, c_hops=c_hops, c_plane=c_plane, planes=fabric.planes,
        c_route=c_route, c_rroute=c_rroute, m_route=c_route[m_conn], link_gbps=fabric.links["gbps"].astype(np.int64), link_lat=link_lat,
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
        c_dscp=c_tc[:, 0] if c_tc is not None else None, c_pcp=c_tc[:, 1] if c_tc is not None else None,
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


def _row_first(v, m_row, n_rows: int) -> np.ndarray:
    """Per flow: v of its first message."""
    out = np.zeros(n_rows, np.int64)
    out[m_row[::-1]] = np.asarray(v)[::-1]
    return out


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
