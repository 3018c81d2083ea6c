"""Frame bytes: capture records (record header, Ethernet .. ICRC, pcapng options) of a window of
a file's packets, built from header templates (numpy, one structured dtype per header: roce.py).

The packets of one item (a run of one message's packets, or one control frame) and class (First/
Only, Middle, Last; CE-marked or not) share every header byte but the PSN: one template row each
(record header + frame headers, ICRC by table lookups: CRC is affine in the headers and the payload
is constant per size), copied to its packets with one gather; per packet only the timestamp, the
PSN and the ICRC change (the PSN's share of the CRC by lookup). Records land in the buffer by one
fancy-index copy per record width through a byte-offset view.
  * Ethernet and TTL are those of the link the copy is on: a NIC's own capture has its sent
    frames as they leave (to its leaf's router MAC, TTL 255; CNPs 64) and its received frames as
    they arrive (from its leaf's router MAC, TTL - routers crossed).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...config import Output
from . import congestion, roce, routes
from .addresses import Addressing, link_macs, mac_table
from .capture_file import comment_option_bytes, comment_options, put_records
from .copies import item_dest_qpn
from .items import Items
from .plan import (ACK_CTS, ACK_DATA, CNP, COMMENT_PREFIX, CTS, CTS_BYTES, DATA, IP_TTL, PATTERN, Plan,
                   data_packet, incl_cap, pad4)
from .roce import Opcode


def records(p: Plan, addr: Addressing, it: Items, pos, li, j, t, scratch):
    """Capture records (header + frame [+ pcapng options, trailer]) of packets in file order,
    as one byte buffer. pos: the window's items; per packet li (its item in pos), j (its
    packet index in the item's message), t. scratch.space(n) gives the buffer (not zeroed).

    All packets of one item (a segment of one message, or one control frame) of one class
    (First/Only, Middle, Last; CE-marked or not) have the same headers but for the PSN: one
    template row each is built, copied to its packets, and only the timestamp, the PSN, the IPv4
    identification and checksum, and the ICRC (by CRC linearity from the template's) are
    written per packet."""
    out, fmt, R = p.out, p.fmt, p.fmt.rec_hdr_bytes
    n = len(li)
    w_kind, w_msg, w_link, w_iface = it.kind[pos], it.msg[pos], it.link[pos], it.iface[pos]
    w_npk = p.m_npk[w_msg]
    # Items whose packets share every header byte but the PSN and the IPv4 identification: the
    # data items (segments, or a paced message's trains) of one message on one link and interface;
    # a control frame is alone.
    is_data = w_kind == DATA
    n_link, n_iface = int(w_link.max()) + 1, int(w_iface.max()) + 1
    same = np.where(is_data, ((w_msg * n_link + w_link) * n_iface + w_iface) * 2, np.arange(len(pos)) * 2 + 1)
    _, grp = np.unique(same, return_inverse=True)
    cls = np.where(j == 0, 0, np.where(j == w_npk[li] - 1, 2, 1))
    key = grp[li] * 6 + cls * 2
    if len(p.ce_g):
        key += is_data[li] & (w_link[li] >= 1) & ce(p, w_msg[li], j, w_link[li])
    used = np.flatnonzero(np.bincount(key, minlength=6 * (int(grp.max()) + 1)))
    tid_of_key = np.zeros(6 * (int(grp.max()) + 1), np.int64)
    tid_of_key[used] = np.arange(len(used))
    tid = tid_of_key[key]
    rep = np.empty(len(used), np.int64)
    rep[tid] = np.arange(n)                  # any packet of a template stands for it
    tl = li[rep]
    pkt_id = (it.ip_id[pos] - it.ka[pos])[li] + j          # IPv4 identification, per packet
    tm = templates(p, addr, w_kind[tl], w_msg[tl], it.pkt[pos][tl], j[rep], w_link[tl],
                   w_iface[tl], (used & 1).astype(bool), pkt_id[rep])
    width = tm.rows.shape[1]
    rec_len = tm.rec_len[tid]
    rec_off = np.cumsum(rec_len) - rec_len
    total = int(rec_off[-1] + rec_len[-1])
    buf = scratch.space(total + width)       # slack: the sliding views below end `width` early;
                                             # put_records writes every byte of buf[:total]

    # PSNs: a data packet's is its template's + (j - the template's j); control frames are alone.
    psn = (tm.psn[tid] + j - tm.j[tid]) & roce.PSN_MASK
    v4 = out.ip_version == 4
    ip_fields = {}
    if v4:      # identification per packet (pkt_id); checksum by RFC 1624 from the template's
        ip_id = pkt_id & 0xFFFF
        s = (~tm.csum & 0xFFFF)[tid] + (~tm.ip_id & 0xFFFF)[tid] + ip_id
        s = (s & 0xFFFF) + (s >> 16)
        csum = ~((s & 0xFFFF) + (s >> 16)) & 0xFFFF
        ip_at = R + roce.l2_bytes(out.vlan)
        ip_fields = dict(id_at=ip_at + roce.IPV4_ID_OFFSET, ip_id=ip_id, csum_at=ip_at + roce.IPV4_CSUM_OFFSET,
                         csum=csum)
    # Template rows (a truncated record can be shorter than its row) copied to their records'
    # offsets with the timestamps, PSNs and IPv4 ids put in: one pass over the packets.
    put_records(buf, tm.rows, np.minimum(width, R + tm.incl), tid, rec_off, total, fmt, t, R + tm.psn_col, psn,
                **ip_fields)
    full = tm.full[tid]
    if full.any():
        f = np.flatnonzero(full)
        ft = tid[f]
        tails, which = np.unique(tm.crc_tail, return_inverse=True)      # per template, then per packet
        tables = roce.icrc_delta_tables(tails, tm.id_lead if v4 else 0)
        crc = tm.crc[ft] ^ roce.icrc_delta_lookup(tables, which[ft], psn[f] ^ tm.psn[ft],
                                                  (ip_id[f] ^ tm.ip_id[ft]) if v4 else None)
        _at(buf, 4)[rec_off[f] + R + tm.frame_len[ft] - roce.ICRC_BYTES] = crc.astype("<u4").view(_void(4))
    if out.payload == "pattern":
        hdr = p.hdr_bytes[tm.op]
        cnt = np.clip(np.minimum(tm.payload, tm.incl - hdr), 0, None)
        start = R + hdr
        for (cnt_b, start_b), g in _groups((cnt << 16) | start, tid, split=True):
            if cnt_b:
                _at(buf, cnt_b)[rec_off[g] + start_b] = PATTERN[:cnt_b].view(_void(cnt_b))[0]
    if fmt.pcapng:
        _at(buf, 4)[rec_off + rec_len - 4] = tm.trailer.view(_void(4)).ravel()[tid]
    if tm.comments is not None:          # options after the padded frame; one text per template
        at = rec_off + R + pad4(tm.incl[tid])
        order = np.argsort(tid, kind="stable")
        bounds = np.searchsorted(tid[order], np.arange(len(tm.comments) + 1))
        for k, o in enumerate(tm.comments):
            _at(buf, len(o))[at[order[bounds[k]:bounds[k + 1]]]] = np.frombuffer(o, _void(len(o)))[0]
    return buf[:total]


def _void(w: int) -> np.dtype:
    return np.dtype((np.void, w))


def _at(buf: np.ndarray, w: int) -> np.ndarray:
    """buf as w-byte items starting at every byte offset: v[off] is buf[off:off + w]. Assigning
    items at many offsets is then one fancy-index copy of w bytes each (they must not overlap)."""
    return np.ndarray((len(buf) - w + 1,), dtype=_void(w), buffer=buf, strides=(1,))


def _groups(per_template: np.ndarray, tid: np.ndarray, split: bool = False):
    """(value, packets) per distinct value of a template property; with split, values are
    (hi << 16 | lo) pairs."""
    u = np.unique(per_template)
    if len(u) == 1:
        return [((int(u[0]) >> 16, int(u[0]) & 0xFFFF) if split else int(u[0]), slice(None))]
    values = per_template[tid]
    if len(u) <= 4:                 # a few: one pass each beats a sort
        groups = [(int(v), np.flatnonzero(values == v)) for v in u.tolist()]
    else:
        order = np.argsort(values, kind="stable")
        bounds = np.searchsorted(values[order], u)
        groups = [(int(v), order[lo:hi]) for v, lo, hi in zip(u.tolist(), bounds, np.r_[bounds[1:], len(values)])]
    return [((v >> 16, v & 0xFFFF), g) for v, g in groups] if split else groups


@dataclass
class Templates:
    """One header row per template (record header but its timestamp, frame headers), and what
    the packets of a template share."""
    rows: np.ndarray        # (T, width) uint8
    op: np.ndarray
    payload: np.ndarray     # payload bytes after what the row holds (zeros or the pattern)
    frame_len: np.ndarray
    incl: np.ndarray
    rec_len: np.ndarray
    j: np.ndarray           # the packet index the row was built for
    psn: np.ndarray         # ... and its PSN
    psn_col: int            # where the PSN is in a frame
    full: np.ndarray        # frame captured whole: the record ends with the ICRC
    crc: np.ndarray         # the template's ICRC
    crc_tail: np.ndarray    # bytes the ICRC covers after the PSN (header tail, payload, pad)
    ip_id: np.ndarray       # IPv4 identification of the template packet
    csum: np.ndarray        # ... and its IPv4 header checksum (IPv6: unused)
    id_lead: int            # bytes from the identification to the PSN
    trailer: np.ndarray | None
    comments: list | None


def templates(p: Plan, addr: Addressing, kind, m, acked, j, link, iface, ce, ip_id) -> Templates:
    """Header rows of template packets: `kind`, message, packet j, on link `link` (CE-marked
    where ce), IPv4 identification ip_id."""
    out, pmtu, l2, fmt, fabric = p.out, p.out.pmtu, roce.l2_bytes(p.out.vlan), p.fmt, addr.fabric
    on_cts_qp = (kind == CTS) | (kind == ACK_CTS)
    c = np.where(on_cts_qp, p.m_conn[m] - p.m_q[m], p.m_conn[m])
    size, npk = p.m_size[m], p.m_npk[m]
    is_data, is_cts, is_cnp = kind == DATA, kind == CTS, kind == CNP
    data_op, data_payload = data_packet(size, npk, j, pmtu)
    op = np.where(is_data, data_op, np.where(is_cts, Opcode.RC_WRITE_ONLY,
                                             np.where(is_cnp, Opcode.CNP, Opcode.RC_ACK)))
    payload = np.where(is_data, data_payload, np.where(is_cts, CTS_BYTES, 0))
    frame_len = p.hdr_bytes[op] + pad4(payload) + roce.ICRC_BYTES
    incl = np.minimum(frame_len, incl_cap(out, p.hdr_bytes)[op])
    comments = None
    opt_len = 0
    if p.row_comment is not None:
        rows_ = p.m_row[m].tolist()
        texts = [COMMENT_PREFIX[k] + p.row_comment[r] for k, r in zip(kind.tolist(), rows_)]
        comments = [comment_options(x) for x in texts]
        opt_len = comment_option_bytes(np.array([len(x) for x in texts], np.int64))
    rec_len = fmt.rec_bytes(incl, opt_len)
    R = fmt.rec_hdr_bytes

    # Who sends: data from the connection's sender, CTS, data ACKs and CNPs from its receiver.
    from_dst = (kind == CTS) | (kind == ACK_DATA) | is_cnp
    # NCCL_IB_FIFO_TC: the receiver's QPs (its CTS, and the ACKs they return) on that traffic
    # class; VLAN priority from its DSCP by mlx5's default map (DSCP >> 3).
    fifo_tc = ((kind == CTS) | (kind == ACK_DATA)) & (p.fifo_tc >= 0)
    tx_nic, rx_nic = np.where(from_dst, p.c_dst[c], p.c_src[c]), np.where(from_dst, p.c_src[c], p.c_dst[c])
    route = p.route_of(kind, m, acked)     # control frames: acked is their k_pkt (items.py)
    acked = np.where(kind == ACK_DATA, acked, j)
    sport = np.where(is_cnp, 0, p.c_sport[c])
    dest_qp = item_dest_qpn(p, c, rx_nic)
    psn = np.where(on_cts_qp, p.m_cts_psn[m], np.where(is_cnp, 0, (p.m_psn[m] + acked) & roce.PSN_MASK))
    fields = dict(
        src_ip=fabric.nic_ip[tx_nic], dst_ip=fabric.nic_ip[rx_nic], payload=payload, frame_len=frame_len,
        ttl=np.where(is_cnp, congestion.CNP_TTL, IP_TTL) - link, sport=sport,   # one less per router crossed
        tos=np.where(is_cnp, (congestion.CNP_DSCP << 2) | out.ecn,
                     np.where(fifo_tc, p.fifo_tc,
                              (p.data_dscp(c) << 2) | np.where(is_data & ce, congestion.ECN_CE, out.ecn))),
        pcp=np.where(is_cnp, congestion.CNP_PCP, np.where(fifo_tc, p.fifo_tc >> 5, p.data_pcp(c))),
        dest_qp=dest_qp,
        psn=psn, ack_req=np.where(is_data, j == npk - 1, is_cts),
        va=np.where(is_cts, p.m_cts_va[m], p.m_va[m]).astype(np.uint64),
        rkey=np.where(is_cts, p.m_cts_rkey[m], p.m_rkey[m]),
        dma_len=np.where(is_cts, CTS_BYTES, size), imm=p.m_imm[m],
        msn=np.where(kind == ACK_CTS, p.m_cts_psn[m] + 1, p.m_done[m] + (acked == npk - 1)) & roce.PSN_MASK,
        ip_id=ip_id & 0xFFFF,
    )
    eth_src, eth_dst = link_macs(fabric, tx_nic, rx_nic, sport, routes.plane_of(fabric, p.c_qpn_src[c]),
                                 p.c_hops[c], link, dest_qp, route)
    if addr.peer_direct:
        eth_dst = rx_nic
    elif addr.first_hop is not None:
        eth_dst = np.where(link == 0, len(mac_table(fabric)) + tx_nic, eth_dst)
    macs = addr.table()
    T = len(op)
    hdr = p.hdr_bytes[op]
    body = np.where(is_cts, CTS_BYTES, 0)          # payload bytes the row holds: a CTS's FIFO element
    width = R + int((hdr + body).max())
    rows = np.zeros((T, width), np.uint8)
    rows[:, :R] = fmt.headers(np.zeros(T, np.int64), incl, frame_len, iface, opt_len)
    rows[:, R:R + int(hdr.max())] = headers(op, out, fields, macs[eth_dst], macs[eth_src], int(hdr.max()))
    g = np.flatnonzero(is_cts)
    if len(g):
        at = R + int(p.hdr_bytes[Opcode.RC_WRITE_ONLY])
        rows[g, at:at + CTS_BYTES] = p.m_cts_body[m[g]]
    psn_col = l2 + roce.ip_bytes(out.ip_version) + roce.UDP.itemsize + roce.BTH_PSN_OFFSET
    tail = hdr - (psn_col + 3) + pad4(payload)
    full = incl == frame_len           # the ICRC is only there if captured
    crc = np.zeros(T, np.uint32)
    for n_hdr in np.unique((hdr + body)[full]).tolist():
        g = np.flatnonzero(full & (hdr + body == n_hdr))
        crc[g] = roce.icrc_sized(rows[g, R + l2:R + n_hdr], payload[g] - body[g],
                                 lambda size: payload_bytes(out.payload, size), out.ip_version)
    trailer = fmt.trailers(incl, opt_len) if fmt.pcapng else None
    ip_at = R + l2
    csum = (rows[:, ip_at + roce.IPV4_CSUM_OFFSET].astype(np.int64) << 8) | rows[:, ip_at + roce.IPV4_CSUM_OFFSET + 1]
    id_lead = roce.ip_bytes(out.ip_version) + roce.UDP.itemsize + roce.BTH_PSN_OFFSET - roce.IPV4_ID_OFFSET
    return Templates(rows, op, payload - body, frame_len, incl, rec_len, j, psn, psn_col, full, crc, tail,
                     fields["ip_id"], csum, id_lead, trailer, comments)


def ce(p: Plan, m, j, link=None) -> np.ndarray:
    """Is data packet j of message m CE-marked (on its way to the receiver; with link, its copy
    at that route position: queue marks are set at one port and kept after it)?"""
    if not len(p.ce_g):
        return np.zeros(len(m), bool)
    g = p.m_pkt0[m] + j
    pos = np.minimum(np.searchsorted(p.ce_g, g), len(p.ce_g) - 1)
    hit = p.ce_g[pos] == g
    if p.ce_pos is not None and link is not None:
        hit &= p.ce_pos[pos] <= link
    return hit


def headers(op: np.ndarray, out: Output, f: dict, eth_dst, eth_src, width: int) -> np.ndarray:
    """(n, width) uint8: every header of each frame, Ethernet to the last extension header,
    zero-padded. The headers up to the BTH are common to all opcodes and filled for all frames
    at once; the extension headers (RETH, ImmDt, AETH; a CNP's reserved 16 bytes stay zero)
    are placed after the BTH per opcode."""
    n = len(op)
    base = roce.base_dtype(out.vlan, out.ip_version)
    h = np.zeros(n, base)
    h["eth"]["dst"], h["eth"]["src"] = eth_dst, eth_src
    is_cnp = op == Opcode.CNP
    ethertype = roce.ETHERTYPE_IPV6 if out.ip_version == 6 else roce.ETHERTYPE_IPV4
    if out.vlan:
        h["eth"]["ethertype"] = roce.ETHERTYPE_DOT1Q
        h["vlan"]["tci"] = (f["pcp"] << 13) | out.vlan_id
        h["vlan"]["ethertype"] = ethertype
    else:
        h["eth"]["ethertype"] = ethertype
    ip = h["ip"]
    tos = f["tos"]
    l4_len = f["frame_len"] - roce.l2_bytes(out.vlan) - roce.ip_bytes(out.ip_version)
    if out.ip_version == 6:
        ip["ver_tc_fl"] = (6 << 28) | (tos << 20)          # flow label 0, as NCCL leaves it
        ip["payload_len"], ip["next_header"], ip["hop_limit"] = l4_len, roce.IPPROTO_UDP, f["ttl"]
        ip["src"], ip["dst"] = roce.ipv6_from_ipv4(f["src_ip"]), roce.ipv6_from_ipv4(f["dst_ip"])
    else:
        ip["ver_ihl"], ip["tos"] = 0x45, tos
        ip["total_len"] = l4_len + roce.IPV4.itemsize
        ip["id"], ip["flags_frag"], ip["ttl"], ip["proto"] = f["ip_id"], roce.IPV4_DF, f["ttl"], roce.IPPROTO_UDP
        src, dst = f["src_ip"], f["dst_ip"]
        ip["src"], ip["dst"] = src, dst
        # Same one's-complement sum as roce.ipv4_checksum, from the source columns.
        w = ((0x45 << 8) + roce.IPV4_DF + roce.IPPROTO_UDP + roce.IPV4.itemsize + f["ip_id"]
             + tos + l4_len + (f["ttl"] << 8) + (src >> 16) + (src & 0xFFFF) + (dst >> 16) + (dst & 0xFFFF))
        w = (w & 0xFFFF) + (w >> 16)
        w = (w & 0xFFFF) + (w >> 16)
        ip["csum"] = ~w & 0xFFFF
    udp = h["udp"]
    udp["sport"], udp["dport"] = f["sport"], roce.ROCEV2_UDP_PORT
    udp["len"] = l4_len
    bth = h["bth"]
    bth["opcode"] = op
    # A CNP as a ConnectX sends it: M = 0, BECN set.
    bth["flags"] = np.where(is_cnp, 0, roce.BTH_MIGREQ | ((-f["payload"] & 3) << 4))
    bth["fecn_becn"] = np.where(is_cnp, roce.BTH_BECN, 0)
    bth["pkey"] = out.pkey
    roce.put_u24(bth["dest_qp"], f["dest_qp"])
    bth["ack_req"] = np.where(f["ack_req"], roce.BTH_ACKREQ, 0)
    roce.put_u24(bth["psn"], f["psn"])
    rows = np.zeros((n, width), np.uint8)
    rows[:, :base.itemsize] = h.view(np.uint8).reshape(n, -1)
    # Extension headers, each where the opcode's layout puts it.
    for name, ext, offset, has in roce.EXT_PLACES:
        g = np.flatnonzero(has[op])
        if not len(g) or name == "cnp":          # a CNP's 16 reserved bytes stay zero
            continue
        e = np.zeros(len(g), ext)
        if name == "reth":
            e["va"], e["rkey"], e["dma_len"] = f["va"][g], f["rkey"][g], f["dma_len"][g]
        elif name == "immdt":
            e["imm"] = f["imm"][g]            # NCCL puts the message size in the immediate
        else:
            e["syndrome"] = roce.AETH_ACK
            roce.put_u24(e["msn"], f["msn"][g])
        at = base.itemsize + offset
        rows[g, at:at + ext.itemsize] = e.view(np.uint8).reshape(len(g), -1)
    return rows


def payload_bytes(kind: str, n: int) -> bytes:
    data = PATTERN[:n].tobytes() if kind == "pattern" else bytes(n)
    return data + bytes(-n & 3)
