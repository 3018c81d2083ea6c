"""A wire validator that shares no code with tracegen: its own pcap / pcapng reader (stdlib
`struct` only), RoCEv2 decoding from the specs (IBA Vol 1 ch. 9, Annex A17; WIRE.md), and the
rules a real RC fabric obeys.

    check_wire(folder_or_files) -> list[str]        every violation, one line each ("" = clean)
    check_capture(path, port_rate_gbps=...) -> list[str]

Rules (each violation line starts with its tag):
  [format]     the file parses: headers, block lengths, records inside the file, incl <= orig.
  [time]       records in time order within the file.
  [frame]      a RoCEv2 frame is well formed: IP/UDP lengths, IPv4 checksum, BTH TVer 0, P_Key,
               extension headers by opcode (RETH on WRITE First/Only, ImmDt on *-Imm, AETH on
               ACK), PadCnt 0 except on Last/Only, length = headers + payload + pad + ICRC; ICRC
               (WIRE.md's recipe, zlib) when the whole frame is captured; ACK syndrome an ACK
               (no NAK); CNP: BECN, PSN 0, 16 zero bytes.
  [overlap]    a transmitter never starts a frame before the previous one is off the wire at its
               port's rate: (t_next - t) * gbps >= (orig_len + 24) * 8 - FCS 4 + preamble/SFD 8
               + IFG 12 B (orig_len has no FCS), as tests/test_port_spacing.py counts.
               Transmitter = (pcapng interface, source MAC, destination MAC): every frame on a
               link carries the MACs of the two ends, so that pair names one direction of one
               link (a NIC's plane ports go to different leaves); a lab tester port (one
               transmitter whatever the peer) = (interface, source MAC). A PFC frame (to
               01:80:C2:00:00:01) belongs to the transmitter of its source MAC's other frames
               in the interface when they go to one peer: the PAUSE's own slot on that link
               (else its link is unknown and it is left out of this rule: stats
               "pfc_unattributed", e.g. a classic merged capture's PAUSEs from one leaf to
               several NICs).
  [pfc]        an Ethernet MAC control frame (0x8808, untagged) is an 802.1Qbb PFC frame: opcode
               0x0101, destination 01:80:C2:00:00:01, a time set only for an enabled class (an
               enabled class with time 0 is an XON: it resumes at once), 60 B; counted (stats "pfc"), never a RoCE frame nor in QP checks.
  [psn]        per transmitter and QP direction (src IP, dst IP, DestQP), requests in PSN order:
               +1 per packet (mod 2^24); in a complete capture +1 from one message to the next,
               in a filtered one (time window, collective/iteration filter) forward only.
  [opcode]     per QP direction, First Middle* Last | Only (Imm variants): no new message before
               the previous one's Last (messages never overlap on a QP), no Middle/Last outside
               a message (a filtered capture may open inside one); RETH DMA length = the
               message's payload.
  [ack]        ACKs per QP direction: PSN and MSN never go back; every ACK comes after the
               request packet it acknowledges has passed the capture point whole (matched by
               the reversed IP pair and the UDP source port, which mlx5 makes the same both
               ways; two QP pairs may share a port: the ACK must fit one of their request
               streams); in a complete capture its MSN = the messages completed up to that PSN.
  [cts]        (NCCL net_ib) each WRITE-with-imm data message lands where a CTS (the 64 B
               ncclIbSendFifo: addr, size, rkeys[0], nreqs, tag, idx) of the reverse direction
               said, and that CTS has passed whole before the message's first packet; CTS
               FIFO counters +1 per CTS on a QP (from 1 in a complete capture).
  [cnp]        a CNP from R to S to S's QP follows a CE-marked data packet of that QP (S to R,
               the UDP source port R's ACKs to that QP carry) that has passed whole; judged
               where the capture holds CE-marked data of that QP and an ACK naming it (a fabric
               port may carry the CNP but not the data: the CNP has its own UDP source port and
               route; before the marking switch the QP's packets are not marked yet).
A request/ACK/CTS pair is only judged where the capture holds both directions of that QP pair
(a fabric port may carry the data but not the reverse path's route).
Rates: port_rate_gbps (an int, or a function (iface, src_mac, dst_mac) -> Gb/s), else the
generate folder's summary.json (its links' rates, by the file's name), else pcapng if_speed.
"""
from __future__ import annotations

import json
import mmap
import struct
import zlib
from collections import Counter, defaultdict
from pathlib import Path

WIRE_EXTRA_BYTES = 24          # FCS 4 + preamble/SFD 8 + inter-frame gap 12
PSN_MOD = 1 << 24
HALF = 1 << 23
ROCE_PORT = 4791
# RC opcodes (IBA Table 35): class of each, extension headers after the BTH
FIRST, MIDDLE, LAST, ONLY = "first", "middle", "last", "only"
REQ = {0x00: (FIRST, 0, 0), 0x01: (MIDDLE, 0, 0), 0x02: (LAST, 0, 0), 0x03: (LAST, 0, 4), 0x04: (ONLY, 0, 0),
       0x05: (ONLY, 0, 4), 0x06: (FIRST, 16, 0), 0x07: (MIDDLE, 0, 0), 0x08: (LAST, 0, 0), 0x09: (LAST, 0, 4),
       0x0A: (ONLY, 16, 0), 0x0B: (ONLY, 16, 4)}      # (position, RETH bytes, ImmDt bytes)
IMM = {0x03, 0x05, 0x09, 0x0B}
WRITE_ONLY = 0x0A
ACK, CNP = 0x11, 0x81
CTS_BYTES = 64                 # struct ncclIbSendFifo (nccl src/transport/net_ib/common.h)


# --- reading captures ------------------------------------------------------------------------

class Iface:
    __slots__ = ("name", "mac", "speed_bps", "units_per_s", "snaplen")

    def __init__(self, snaplen=0):
        self.name, self.mac, self.speed_bps, self.units_per_s, self.snaplen = "", None, 0, 10**6, snaplen


def read_records(path):
    """(interfaces, records, violations): records (iface, t_ns, orig_len, frame bytes) in file order."""
    path = Path(path)
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        if size == 0:
            return [], [], [f"[format] {path.name}: empty file"]
        buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        magic = bytes(buf[:4])
        if magic == b"\x0a\x0d\x0d\x0a":
            return _pcapng(buf, path.name)
        return _pcap(buf, path.name)
    finally:
        buf.close()


def _pcap(buf, name):
    bad = []
    if len(buf) < 24:
        return [], [], [f"[format] {name}: shorter than a pcap header"]
    for e in "<>":
        magic = struct.unpack_from(e + "I", buf, 0)[0]
        if magic in (0xA1B2C3D4, 0xA1B23C4D):
            break
    else:
        return [], [], [f"[format] {name}: not a pcap (magic {bytes(buf[:4]).hex()})"]
    mult = 1 if magic == 0xA1B23C4D else 1000
    _, _, _, _, snaplen, linktype = struct.unpack_from(e + "HHiIII", buf, 4)
    if linktype != 1:
        bad.append(f"[format] {name}: link type {linktype}, not Ethernet")
    iface = Iface(snaplen)
    recs, off, hdr = [], 24, struct.Struct(e + "IIII")
    while off < len(buf):
        if off + 16 > len(buf):
            bad.append(f"[format] {name}: a record header cut at byte {off}")
            break
        sec, frac, incl, orig = hdr.unpack_from(buf, off)
        if incl > orig or off + 16 + incl > len(buf) or (snaplen and incl > snaplen):
            bad.append(f"[format] {name}: record at byte {off}: incl {incl}, orig {orig}, file {len(buf)}")
            break
        if mult == 1 and frac >= 10**9:
            bad.append(f"[format] {name}: record at byte {off}: {frac} ns in a second")
        recs.append((0, sec * 10**9 + frac * mult, orig, bytes(buf[off + 16:off + 16 + incl])))
        off += 16 + incl
    return [iface], recs, bad


def _pcapng(buf, name):
    bad, ifaces, recs, off, e = [], [], [], 0, "<"
    while off < len(buf):
        if off + 12 > len(buf):
            bad.append(f"[format] {name}: a block cut at byte {off}")
            break
        btype = struct.unpack_from(e + "I", buf, off)[0]
        if btype == 0x0A0D0D0A:
            bom = bytes(buf[off + 8:off + 12])
            e = "<" if bom == b"\x4d\x3c\x2b\x1a" else ">" if bom == b"\x1a\x2b\x3c\x4d" else ""
            if not e:
                return ifaces, recs, bad + [f"[format] {name}: bad byte-order magic {bom.hex()}"]
            ifaces = []                      # interfaces are per section
        total = struct.unpack_from(e + "I", buf, off + 4)[0]
        if total < 12 or total % 4 or off + total > len(buf) or \
                struct.unpack_from(e + "I", buf, off + total - 4)[0] != total:
            bad.append(f"[format] {name}: block at byte {off}: length {total} does not close it")
            break
        body = bytes(buf[off + 8:off + total - 4])
        if btype == 1:                       # Interface Description Block
            linktype, _, snaplen = struct.unpack_from(e + "HHI", body, 0)
            if linktype != 1:
                bad.append(f"[format] {name}: interface {len(ifaces)} link type {linktype}")
            i = Iface(snaplen)
            for code, val in _options(body, 8, e):
                if code == 2:
                    i.name = val.decode(errors="replace")
                elif code == 6 and len(val) == 6:
                    i.mac = val
                elif code == 8 and len(val) == 8:
                    i.speed_bps = struct.unpack(e + "Q", val)[0]
                elif code == 9 and len(val) >= 1:
                    v = val[0]
                    i.units_per_s = (1 << (v & 0x7F)) if v & 0x80 else 10 ** v
            ifaces.append(i)
        elif btype == 6:                     # Enhanced Packet Block
            if_id, hi, lo, cap, orig = struct.unpack_from(e + "IIIII", body, 0)
            if if_id >= len(ifaces) or cap > orig or 20 + cap > len(body):
                bad.append(f"[format] {name}: packet block at byte {off}: interface {if_id} of {len(ifaces)}, "
                           f"cap {cap}, orig {orig}")
                break
            units, ups = (hi << 32) | lo, ifaces[if_id].units_per_s
            t = units * (10**9 // ups) if 10**9 % ups == 0 else units * 10**9 // ups
            recs.append((if_id, t, orig, body[20:20 + cap]))
        elif btype == 3:
            bad.append(f"[format] {name}: a Simple Packet Block (no timestamp) at byte {off}")
        off += total
    return ifaces, recs, bad


def _options(body, off, e):
    while off + 4 <= len(body):
        code, n = struct.unpack_from(e + "HH", body, off)
        if code == 0:
            return
        yield code, body[off + 4:off + 4 + n]
        off += 4 + ((n + 3) & ~3)


# --- decoding frames -------------------------------------------------------------------------

class Frame:
    """What the checks need of one record (RoCE fields None for other frames)."""
    __slots__ = ("n", "iface", "t", "orig", "src", "dst", "roce", "ips", "ipd", "ecn", "sport", "op",
                 "dqp", "psn", "va", "rkey", "dmalen", "payload", "msn", "syndrome", "cts")

    def __init__(self, n, iface, t, orig, frame):
        self.n, self.iface, self.t, self.orig = n, iface, t, orig
        self.src, self.dst = frame[6:12], frame[0:6]
        self.roce = False
        self.ips = self.ipd = self.ecn = self.sport = self.op = self.dqp = self.psn = None
        self.va = self.rkey = self.dmalen = self.payload = self.msn = self.syndrome = self.cts = None


def _icrc(ip: bytes, v6: bool) -> int:
    """ICRC over 8 x 0xFF + IP..payload with the variant fields all ones (WIRE.md, IBA A17.8)."""
    b = bytearray(ip)
    if v6:
        b[0] |= 0x0F
        b[1:4] = b"\xff\xff\xff"
        b[7] = 0xFF
        u = 40
    else:
        b[1] = 0xFF
        b[8] = 0xFF
        b[10:12] = b"\xff\xff"
        u = (b[0] & 0x0F) * 4
    b[u + 6:u + 8] = b"\xff\xff"
    b[u + 8 + 4] = 0xFF
    return zlib.crc32(bytes(b), zlib.crc32(b"\xff" * 8))


def decode(n, iface, t, orig, frame, bad, where):
    """A Frame; appends [frame] violations of a RoCEv2 frame to bad."""
    f = Frame(n, iface, t, orig, frame)
    off = 12
    if len(frame) < 14:
        return f
    etype = struct.unpack_from(">H", frame, off)[0]
    if etype == 0x8100 and len(frame) >= 18:
        off += 4
        etype = struct.unpack_from(">H", frame, off)[0]
    off += 2
    ip_at = off
    if etype == 0x0800 and len(frame) >= off + 28:
        vihl, tos, total, _, _, _, proto = struct.unpack_from(">BBHHHBB", frame, off)
        ihl = (vihl & 0x0F) * 4
        if proto != 17 or vihl >> 4 != 4 or len(frame) < off + ihl + 8:
            return f
        udp = off + ihl
        if struct.unpack_from(">H", frame, udp + 2)[0] != ROCE_PORT:
            return f
        ips, ipd, ecn, v6 = frame[off + 12:off + 16], frame[off + 16:off + 20], tos & 3, False
        ip_len = total
        s = sum(struct.unpack_from(">10H", frame, off))
        while s >> 16:
            s = (s & 0xFFFF) + (s >> 16)
        if s != 0xFFFF:
            bad.append(f"[frame] {where}: IPv4 header checksum wrong")
    elif etype == 0x86DD and len(frame) >= off + 48:
        vtf, plen, nh = struct.unpack_from(">IHB", frame, off)
        udp = off + 40
        if nh != 17 or struct.unpack_from(">H", frame, udp + 2)[0] != ROCE_PORT:
            return f
        ips, ipd, ecn, v6 = frame[off + 8:off + 24], frame[off + 24:off + 40], (vtf >> 20) & 3, True
        ip_len = plen + 40
    else:
        return f
    f.roce, f.ips, f.ipd, f.ecn = True, ips, ipd, ecn
    l2 = ip_at
    if l2 + ip_len != orig and not (l2 + ip_len < orig <= 60):      # padding only below 60 B
        bad.append(f"[frame] {where}: IP length {ip_len} + {l2} B of Ethernet != frame {orig} B")
    sport, _, ulen = struct.unpack_from(">HHH", frame, udp)
    if ulen != ip_len - (udp - ip_at):
        bad.append(f"[frame] {where}: UDP length {ulen} != IP payload {ip_len - (udp - ip_at)}")
    bth = udp + 8
    if len(frame) < bth + 12:
        bad.append(f"[frame] {where}: cut inside the BTH")
        f.roce = False
        return f
    op, flags, pkey, fb, q0, q1, q2, a, p0, p1, p2 = struct.unpack_from(">BBHBBBBBBBB", frame, bth)
    f.sport, f.op, f.dqp, f.psn = sport, op, (q0 << 16) | (q1 << 8) | q2, (p0 << 16) | (p1 << 8) | p2
    pad, tver = (flags >> 4) & 3, flags & 0x0F
    if tver != 0 or pkey == 0:
        bad.append(f"[frame] {where}: BTH TVer {tver}, P_Key {pkey:#x}")
    ext = bth + 12
    if op in REQ:
        pos, reth, imm = REQ[op]
        if pos in (FIRST, MIDDLE) and pad:
            bad.append(f"[frame] {where}: PadCnt {pad} on a {pos} packet")
        if reth and len(frame) >= ext + 16:
            f.va, f.rkey, f.dmalen = struct.unpack_from(">QII", frame, ext)
        hdr = ext + reth + imm
    elif op == ACK:
        hdr = ext + 4
        if len(frame) >= hdr:
            f.syndrome = frame[ext]
            f.msn = struct.unpack_from(">I", frame, ext)[0] & 0xFFFFFF
            if f.syndrome >> 5 != 0:
                bad.append(f"[frame] {where}: AETH syndrome {f.syndrome:#x} is not an ACK")
    elif op == CNP:
        hdr = ext + 16
        if not fb & 0x40 or f.psn != 0 or (len(frame) >= hdr and frame[ext:hdr] != bytes(16)):
            bad.append(f"[frame] {where}: CNP without BECN, PSN {f.psn} or non-zero reserved bytes")
    else:
        bad.append(f"[frame] {where}: opcode {op:#x} is none of RC WRITE/SEND, ACK, CNP")
        f.roce = False
        return f
    payload = orig - hdr - 4 - (orig - (l2 + ip_len))
    f.payload = payload - pad
    if payload < 0 or payload % 4 or (op in (ACK, CNP) and payload):
        bad.append(f"[frame] {where}: opcode {op:#x}: {payload} B between headers and ICRC")
        f.payload = max(f.payload, 0)
    if op in REQ and REQ[op][0] in (FIRST, MIDDLE) and payload == 0:
        bad.append(f"[frame] {where}: an empty {REQ[op][0]} packet")
    if len(frame) == orig:
        end = l2 + ip_len
        want = struct.unpack_from("<I", frame, end - 4)[0]
        if _icrc(frame[ip_at:end - 4], v6) != want:
            bad.append(f"[frame] {where}: ICRC wrong")
        if op == WRITE_ONLY and f.payload % CTS_BYTES == 0 and f.payload:
            # ncclIbSendFifo elements: u64 addr, u64 size, u32 rkeys[8], u32 nreqs, u32 tag, u64 idx (LE)
            addr, size, rkey0 = struct.unpack_from("<QQI", frame, hdr)
            nreqs, tag, idx = struct.unpack_from("<IIQ", frame, hdr + 48)
            f.cts = (addr, size, rkey0, nreqs, tag, idx)
    return f


# --- the checks ------------------------------------------------------------------------------

def _ahead(a: int, b: int) -> int:
    """b - a on the 24-bit PSN circle, in (-2^23, 2^23]."""
    d = (b - a) % PSN_MOD
    return d - PSN_MOD if d > HALF else d


class Stats(Counter):
    """frames, roce, transmitters, qp_streams, files checked."""


def check_capture(path, port_rate_gbps=None, complete: bool = True, per_source: bool = False,
                  stats: Stats | None = None) -> list[str]:
    """The violations of one capture file. port_rate_gbps: an int, a function
    (iface_index, src_mac, dst_mac) -> Gb/s, or None (pcapng if_speed). complete: the capture
    holds every frame of its QPs (no time window, no op filter). per_source: a transmitter is
    (interface, source MAC) - a lab tester port, whatever MAC it sends to."""
    path = Path(path)
    stats = stats if stats is not None else Stats()
    ifaces, recs, bad = read_records(path)
    name = path.name
    frames = [decode(n, i, t, o, fr, bad, f"{name} #{n + 1}") for n, (i, t, o, fr) in enumerate(recs)]
    _pfc(recs, name, bad, stats)
    del recs
    stats["files"] += 1
    stats["frames"] += len(frames)
    for a, b in zip(frames, frames[1:]):
        if b.t < a.t:
            bad.append(f"[time] {name} #{b.n + 1}: {b.t} ns after #{a.n + 1} at {a.t} ns")
            break
    rate = _rate_fn(port_rate_gbps, ifaces, name, bad)
    tx = defaultdict(list)
    pfc_mac = bytes.fromhex("0180c2000001")
    peers = defaultdict(set)                       # (iface, src) -> the MACs it sends to
    for f in frames:
        if f.dst != pfc_mac:
            peers[f.iface, f.src].add(f.dst)
    for f in frames:
        dst = f.dst
        if dst == pfc_mac and not per_source:
            # a PFC frame is on the wire of its sender's link direction: it takes its slot there
            # (64 B + preamble + IFG), the other frames that sender puts on that link go before or
            # after it. Its multicast destination does not name the link: when the sender sends to
            # several peers (or none) in this interface, its link is unknown - not spacing-checked.
            if len(peers[f.iface, f.src]) != 1:
                stats["pfc_unattributed"] += 1
                continue
            dst = next(iter(peers[f.iface, f.src]))
        tx[(f.iface, f.src) if per_source else (f.iface, f.src, dst)].append(f)
    stats["transmitters"] += len(tx)
    gbps_of = {}                                   # frame number -> its transmitter's rate
    for key, seq in tx.items():
        seq.sort(key=lambda f: (f.t, f.n))
        gbps = rate(key[0], key[1], seq[0].dst) if rate else 0
        for f in seq:
            gbps_of[f.n] = gbps
        _spacing(seq, gbps, name, bad)
    roce = [f for f in frames if f.roce]
    stats["roce"] += len(roce)
    msgs = _qp_streams(tx, complete, name, bad, stats)
    _acks(tx, msgs, gbps_of, complete, name, bad)
    _cts(tx, msgs, gbps_of, complete, name, bad)
    _cnps(roce, gbps_of, name, bad, stats)
    return bad


def _pfc(recs, name, bad, stats):
    """[pfc]: MAC control frames must be well-formed PFC frames (IEEE 802.1Qbb clause 36)."""
    for n, (_, _, orig, fr) in enumerate(recs):
        if len(fr) < 14 or fr[12:14] != b"\x88\x08":
            continue
        stats["pfc"] += 1
        where = f"{name} #{n + 1}"
        if len(fr) < 36 or orig != 60 or fr[:6] != bytes.fromhex("0180c2000001") or fr[14:16] != b"\x01\x01":
            bad.append(f"[pfc] {where}: not a 60 B PFC frame to 01:80:c2:00:00:01 with opcode 0x0101")
            continue
        cev = struct.unpack_from(">H", fr, 16)[0]
        times = struct.unpack_from(">8H", fr, 18)
        if cev >> 8 or any(times[c] and not cev >> c & 1 for c in range(8)):
            bad.append(f"[pfc] {where}: class-enable vector {cev:#06x} and pause times {times} disagree")


def _rate_fn(port_rate_gbps, ifaces, name, bad):
    if callable(port_rate_gbps):
        return port_rate_gbps
    if port_rate_gbps:
        return lambda i, s, d: int(port_rate_gbps)
    if ifaces and all(i.speed_bps for i in ifaces):
        return lambda i, s, d: ifaces[i].speed_bps / 1e9
    bad.append(f"[format] {name}: no port rate known (pass port_rate_gbps or keep summary.json by the files)")
    return None


def _spacing(seq, gbps, name, bad):
    if not gbps:
        return
    for a, b in zip(seq, seq[1:]):
        if (b.t - a.t) * gbps < (a.orig + WIRE_EXTRA_BYTES) * 8:
            bad.append(f"[overlap] {name} #{b.n + 1}: starts {b.t - a.t} ns after #{a.n + 1} "
                       f"({a.orig} B needs {(a.orig + WIRE_EXTRA_BYTES) * 8 / gbps:.1f} ns at {gbps:g} Gb/s)")


class Message:
    __slots__ = ("first", "last", "psn0", "psn1", "payload", "imm", "va", "rkey")


def _qp_streams(tx, complete, name, bad, stats):
    """PSN order and opcode sequences per transmitter and QP direction; returns the messages per
    (ips, ipd, sport) with their frames (for the ACK/CTS checks)."""
    msgs = defaultdict(list)
    for key, seq in tx.items():
        streams = defaultdict(list)
        for f in seq:
            if f.roce and f.op in REQ:
                streams[(f.ips, f.ipd, f.dqp)].append(f)
        stats["qp_streams"] += len(streams)
        for (ips, ipd, dqp), fs in streams.items():
            where = f"{name} QP {dqp:#x} {ips.hex()}->{ipd.hex()}"
            cur, prev_psn, started, lost = None, None, False, False
            for f in fs:
                pos = REQ[f.op][0]
                if prev_psn is not None:
                    d = _ahead(prev_psn, f.psn)
                    inside = cur is not None
                    if d != 1 and (inside or complete or d <= 0):
                        bad.append(f"[psn] {where} #{f.n + 1}: PSN {f.psn} after {prev_psn}")
                prev_psn = f.psn
                if pos in (FIRST, ONLY):
                    if cur is not None:
                        bad.append(f"[opcode] {where} #{f.n + 1}: opcode {f.op:#x} (PSN {f.psn}) starts a "
                                   f"message before the one from PSN {cur.psn0} ended")
                    cur = Message()
                    cur.first, cur.psn0, cur.payload, cur.imm = f, f.psn, 0, f.op in IMM
                    cur.va, cur.rkey = f.va, f.rkey
                    if f.dmalen is None:
                        bad.append(f"[frame] {where} #{f.n + 1}: no RETH on opcode {f.op:#x}")
                elif cur is None:
                    if (complete or started) and not lost:
                        bad.append(f"[opcode] {where} #{f.n + 1}: opcode {f.op:#x} (PSN {f.psn}) outside a message")
                    started = lost = True         # one report until the next message starts
                    continue
                lost = False
                started = True
                cur.payload += f.payload
                if pos in (LAST, ONLY):
                    cur.last, cur.psn1, cur.imm = f, f.psn, f.op in IMM
                    dm = cur.first.dmalen
                    if dm is not None and dm != cur.payload:
                        bad.append(f"[opcode] {where} #{f.n + 1}: RETH DMA length {dm} != {cur.payload} B "
                                   "of payload")
                    msgs[(ips, ipd, f.sport)].append(cur)
                    cur = None
    return msgs


def _passed(d, t, gbps_of):
    """Frame d has passed the capture point whole by time t."""
    g = gbps_of.get(d.n) or 0
    return (t - d.t) * g >= (d.orig + WIRE_EXTRA_BYTES) * 8 if g else t > d.t


def _acks(tx, msgs, gbps_of, complete, name, bad):
    # request frames per (ips, ipd, sport), then per DestQP: mlx5's source port hashes the product
    # of the two QPNs into 14 bits, so two QP pairs of the same two NICs may share one, and an ACK
    # (which names the requester's QP, not the responder's) belongs to one of those streams
    by_pair = defaultdict(lambda: defaultdict(list))
    for key, seq in tx.items():
        for f in seq:
            if f.roce and f.op in REQ:
                by_pair[(f.ips, f.ipd, f.sport)][f.dqp].append(f)
    for key, seq in tx.items():
        streams = defaultdict(list)
        for f in seq:
            if f.roce and f.op == ACK and f.syndrome is not None:
                streams[(f.ips, f.ipd, f.dqp)].append(f)
        for (ips, ipd, dqp), acks in streams.items():
            where = f"{name} ACKs to QP {dqp:#x} {ips.hex()}->{ipd.hex()}"
            prev = None
            for a in acks:
                if prev is not None and (_ahead(prev.psn, a.psn) < 0 or _ahead(prev.msn, a.msn) < 0):
                    bad.append(f"[ack] {where} #{a.n + 1}: PSN {a.psn} MSN {a.msn} after PSN {prev.psn} MSN {prev.msn}")
                prev = a
                cands = by_pair.get((ipd, ips, a.sport))
                if not cands:
                    continue                         # the data took another route
                why = []
                for reqs in cands.values():          # the ACK is right if it fits one stream
                    hit = [d for d in reqs if d.psn == a.psn and d.t <= a.t and _passed(d, a.t, gbps_of)]
                    if not hit:
                        why.append(f"acknowledges PSN {a.psn} before it passed whole")
                        continue
                    if complete:                     # messages ended (Last / Only) up to the PSN
                        done = len({d.psn for d in reqs if REQ[d.op][0] in (LAST, ONLY) and _ahead(d.psn, a.psn) >= 0})
                        if done % PSN_MOD != a.msn:
                            why.append(f"MSN {a.msn}, but {done} messages up to PSN {a.psn}")
                            continue
                    break
                else:
                    bad.append(f"[ack] {where} #{a.n + 1}: " + " / ".join(why))


def _cts(tx, msgs, gbps_of, complete, name, bad):
    cts = defaultdict(list)                          # per (ips, ipd, rkey): CTS frames in time order
    for key, seq in tx.items():
        streams = defaultdict(list)
        for f in seq:
            if f.roce and f.cts is not None:
                streams[(f.ips, f.ipd, f.dqp)].append(f)
                cts[(f.ips, f.ipd, f.cts[2])].append(f)
        for (ips, ipd, dqp), fs in streams.items():
            for a, b in zip(fs, fs[1:]):
                if b.cts[5] != a.cts[5] + 1:
                    bad.append(f"[cts] {name} #{b.n + 1}: CTS counter {b.cts[5]} after {a.cts[5]} on QP {dqp:#x}")
            if complete and fs[0].cts[5] != 1:
                bad.append(f"[cts] {name} #{fs[0].n + 1}: first CTS counter {fs[0].cts[5]} on QP {dqp:#x}")
    if not complete:
        return
    used = defaultdict(set)
    # in time order over every QP: with several QPs per connection a message's parts go on
    # different QPs under one CTS, and the buffer slots come round again under later CTSs
    every = sorted(((ips, ipd, m) for (ips, ipd, _), ms in msgs.items() for m in ms),
                   key=lambda x: (x[2].first.t, x[2].first.n))
    for ips, ipd, m in every:
        if not m.imm or m.rkey is None:
            continue                              # a CTS itself (WRITE Only) or a plain WRITE
        grants = cts.get((ipd, ips, m.rkey))
        if not grants:
            continue                              # CTS on another route, or not NCCL's
        fit = [c for c in sorted(grants, key=lambda c: c.cts[5])
               if c.cts[0] <= m.va <= c.cts[0] + c.cts[1] and m.va not in used[c.n]]
        if not fit:
            bad.append(f"[cts] {name} #{m.first.n + 1}: data to {m.va:#x} (R_Key {m.rkey:#x}) has no CTS "
                       "granting it")
            continue
        c = fit[0]
        used[c.n].add(m.va)
        if not (c.t <= m.first.t and _passed(c, m.first.t, gbps_of)):
            bad.append(f"[cts] {name} #{m.first.n + 1}: data to {m.va:#x} starts at {m.first.t} ns, its CTS "
                       f"#{c.n + 1} (counter {c.cts[5]}) at {c.t} ns has not passed")


def _cnps(roce, gbps_of, name, bad, stats):
    """A CNP (R -> S) names the sender's QP (its DestQP), not the data's route: mlx5 sends it with
    its own UDP source port, so it may cross a fabric port the QP's data never crosses. The
    data stream it answers is the one R ACKs on that QP (an ACK R -> S to the same DestQP carries
    the data's UDP source port), so a CNP is judged where the capture holds that QP's data and
    one of its ACKs; a host capture always does."""
    sport_of = {}                                    # (R, S, S's QPN) -> the data's UDP source port
    data = defaultdict(list)                         # data frames per (S, R, sport)
    for f in roce:
        if f.op == ACK:
            sport_of.setdefault((f.ips, f.ipd, f.dqp), f.sport)
        elif f.op in REQ:
            data[(f.ips, f.ipd, f.sport)].append(f)
    for f in roce:
        if f.op != CNP:
            continue
        sport = sport_of.get((f.ips, f.ipd, f.dqp))
        stream = data.get((f.ipd, f.ips, sport)) if sport is not None else None
        if not stream:
            stats["cnp_unpaired"] += 1               # that QP's data or ACKs take another route
            continue
        marks = [d for d in stream if d.ecn == 3]
        if not marks:
            continue      # a switch after this capture point marked it (the sender's own capture)
        stats["cnp_judged"] += 1
        if not any(d.t <= f.t and _passed(d, f.t, gbps_of) for d in marks):
            bad.append(f"[cnp] {name} #{f.n + 1}: CNP at {f.t} ns to QP {f.dqp:#x} before any CE-marked "
                       f"packet of that QP ({len(marks)} in the capture) has passed")


# --- a generate folder -----------------------------------------------------------------------

def _files(folder_or_files):
    if isinstance(folder_or_files, (str, Path)):
        p = Path(folder_or_files)
        if p.is_file():
            return [p], p.parent
        sub = p / "pcap"
        d = sub if sub.is_dir() else p
        return sorted(x for x in d.iterdir() if x.suffix in (".pcap", ".pcapng")), d
    files = [Path(x) for x in folder_or_files]
    return files, (files[0].parent if files else Path("."))


def _summary(d: Path):
    for c in (d / "summary.json", d.parent / "summary.json"):
        if c.is_file():
            return json.loads(c.read_text())
    return None


def folder_rates(summary: dict, stem: str):
    """Gb/s of the link(s) a file named `stem` captures, from summary.json: a NIC's ports, a switch
    port 'SW-PEER', the merged file (every NIC port), a lab port (the NIC rate). The smallest if
    several (a NIC's planes all run at one rate)."""
    links = summary.get("links") or {}
    gbps = dict(zip(links.get("name", []), links.get("gbps", [])))
    out = summary["job"]["output"]
    if out.get("lab"):
        return int(summary["nic_gbps"])             # a tester port replays a NIC (all its planes)
    ends = [n.split("->") for n in gbps]
    nics = set(summary.get("nic_names", []))
    if stem in nics:
        mine = [gbps[f"{a}->{b}"] for a, b in ends if a == stem or b == stem]
    elif stem == "merged":
        mine = [gbps[f"{a}->{b}"] for a, b in ends if a in nics or b in nics]
    else:
        mine = [gbps[f"{a}->{b}"] for a, b in ends if f"{a}-{b}" == stem]
    if not mine:
        return None
    return min(mine)


def check_wire(folder_or_files, port_rate_gbps=None, stats: Stats | None = None) -> list[str]:
    """Every violation in a generate output folder (or its pcap/ folder, or a list of capture
    files). Rates, views and filters come from summary.json next to the files when there is one."""
    files, d = _files(folder_or_files)
    summary = _summary(d)
    out = summary["job"]["output"] if summary else {}
    complete = not (out.get("time_window") or out.get("collectives") or int(out.get("iteration", -1)) >= 0)
    per_source = bool(out.get("lab"))
    bad = []
    for f in files:
        rate = port_rate_gbps
        if rate is None and summary is not None:
            rate = folder_rates(summary, f.stem)
        bad += check_capture(f, rate, complete=complete, per_source=per_source, stats=stats)
    return bad


def tags(violations) -> Counter:
    """Violations counted by tag ('[psn]', '[overlap]', ...)."""
    return Counter(v.split(" ", 1)[0] for v in violations)


if __name__ == "__main__":           # python tests/wire_check.py FOLDER...: counts, then the first lines
    import sys
    for arg in sys.argv[1:]:
        st = Stats()
        v = check_wire(arg, stats=st)
        print(arg, dict(st), dict(tags(v)))
        for line in v[:int(__import__("os").environ.get("SHOW", "10"))]:
            print("  ", line)
