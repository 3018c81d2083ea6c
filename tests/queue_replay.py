"""An independent replay of a leaf switch's egress queues from its switch view's captures alone
(issue 24). Shares no code with tracegen: its own header parser, wire_check's stdlib reader.

A leaf view (`--switch leafK`) has one file per port: `leafK-<nic>.pcap` (that NIC's own capture:
what it sent, and what the leaf sent it, at the NIC's timestamps) and `leafK-<switch>.pcap` (the
frames leaving either end of that link, at the time they start on it). The leaf's egress ports
are its uplinks (frames whose source MAC is the leaf's in a switch-link file) and its ports to
the NICs (frames the NIC file received). Each frame leaving an egress port is matched to its copy
upstream - a NIC's sent copy or a frame a neighbour switch sent the leaf - by (IP source,
destination, identification, opcode, DestQP, PSN) and occurrence; it reached the egress port one
link latency after it started upstream (cut-through) and left when it started on the egress
link (a NIC file's received copy: one link latency before the NIC's timestamp). Per port and
priority a heap of departures gives the bytes (frame + FCS) queued ahead of each arrival.
"""
from __future__ import annotations

import heapq
import struct
from collections import defaultdict
from pathlib import Path

from wire_check import read_records

FCS = 4
PFC_DST = bytes.fromhex("0180c2000001")


def parse(frame: bytes):
    """(src MAC, pcp, ip src, ip dst, ip id, ecn, opcode, dest QP, psn) of a RoCEv2 over IPv4 frame
    with an 802.1Q tag; None for anything else."""
    if len(frame) < 18 or frame[12:14] != b"\x81\x00":
        return None
    pcp = frame[14] >> 5
    if frame[16:18] != b"\x08\x00":
        return None
    ip = 18
    ihl = (frame[ip] & 0x0F) * 4
    tos, ip_id, proto = frame[ip + 1], struct.unpack_from(">H", frame, ip + 4)[0], frame[ip + 9]
    udp = ip + ihl
    if proto != 17 or struct.unpack_from(">H", frame, udp + 2)[0] != 4791:
        return None
    bth = udp + 8
    return (frame[6:12], pcp, frame[ip + 12:ip + 16], frame[ip + 16:ip + 20], ip_id, tos & 3, frame[bth],
            int.from_bytes(frame[bth + 5:bth + 8], "big"), int.from_bytes(frame[bth + 9:bth + 12], "big"))


def frames(path):
    _, recs, bad = read_records(path)
    assert not bad, bad
    return [(t, orig, parse(fr)) for _, t, orig, fr in recs]


def pauses(path):
    """(t_ns, priority, quanta, source MAC) of the 802.1Qbb PFC frames of a capture."""
    out = []
    for _, t, orig, fr in read_records(path)[1]:
        if fr[12:14] == b"\x88\x08" and fr[14:16] == b"\x01\x01":
            cev = struct.unpack_from(">H", fr, 16)[0]
            times = struct.unpack_from(">8H", fr, 18)
            assert orig == 60 and fr[:6] == PFC_DST and bin(cev).count("1") == 1
            c = cev.bit_length() - 1
            out.append((t, c, times[c], fr[6:12]))
    return out


class Row(list):
    """[egress port file, pcp, arrival, departure, bytes, is data, CE leaving, queue found,
    upstream file, CE upstream]"""
    FILE, PCP, ARRIVE, DEPART, BYTES, DATA, CE, QUEUE, UP, CE_UP = range(10)


def replay(out: Path, leaf: str = "leaf0", lat: int = 0):
    """Every frame leaving an egress port of switch `leaf` (a leaf's uplinks and ports to NICs, a
    spine's ports to the leaves) as a Row, with the queue of its port and priority it found on
    arrival; and the switch's MAC (the one every port file of its view shares)."""
    pcap = out / "pcap"
    nic_files = sorted(f for f in pcap.glob(f"{leaf}-*") if "-node" in f.name)
    sw_files = sorted(f for f in pcap.glob(f"{leaf}-*") if f not in nic_files)
    macs = [{h[0] for _, _, h in frames(f) if h} for f in (nic_files or sw_files)]   # a leaf: its NIC files
    leaf_mac = set.intersection(*(m for m in macs if m))
    assert len(leaf_mac) == 1, "the switch's router MAC is the one MAC every port file shares"
    leaf_mac = leaf_mac.pop()
    up = defaultdict(list)            # key -> (time it started upstream, upstream file, CE), in file order
    leaving = []                      # (egress file, t leaving, bytes, header)
    for f in nic_files:
        for t, orig, h in frames(f):
            if not h:
                continue
            key = h[2:5] + h[6:]
            if h[0] != leaf_mac:
                up[key].append((t, f.stem, h[5] == 3))
            else:
                leaving.append((f.stem, t - lat, orig, h))
    for f in sw_files:
        for t, orig, h in frames(f):
            if not h:
                continue
            if h[0] != leaf_mac:
                up[h[2:5] + h[6:]].append((t, f.stem, h[5] == 3))
            else:
                leaving.append((f.stem, t, orig, h))
    seen = defaultdict(int)
    rows = []
    for port, t, orig, h in sorted(leaving, key=lambda x: (x[1], x[0])):
        key = h[2:5] + h[6:]
        n = seen[key]
        seen[key] += 1
        t_up, src, ce_up = up[key][n]
        a = t_up + lat
        assert a <= t, f"{port}: a frame leaves {a - t} ns before it arrived"
        rows.append(Row([port, h[1], a, t, orig + FCS, h[6] <= 0x0B, h[5] == 3, 0, src, ce_up]))
    by_port = defaultdict(list)
    for r in rows:
        by_port[r[0], r[1]].append(r)
    for group in by_port.values():
        group.sort(key=lambda r: (r[2], r[3]))
        heap, queued = [], 0
        for r in group:
            while heap and heap[0][0] <= r[2]:      # left before it arrived
                queued -= heapq.heappop(heap)[1]
            r[7] = queued
            heapq.heappush(heap, (r[3], r[4]))
            queued += r[4]
    return rows, leaf_mac


def judge_pauses(out: Path, rows, leaf_mac, lat: int, rate_of, xoff: int, xon: int, prio: int = 3, leaf="leaf0"):
    """Each PAUSE a NIC S of the leaf receives: a frame S sent reached one of the leaf's egress
    ports (an uplink or a port to another NIC) one link latency plus at most two frames on the
    leaf-to-S link (the frame in flight, a PAUSE slot) before it, with that queue (the frame
    included) above Xoff; the quanta are what the queue needs to drain to Xon at the port's rate,
    in 512-bit times at S's rate (rate_of(file stem) -> Gb/s); S starts no frame of the paused
    priority while it lasts; every arrival of S above Xoff falls in or just before a pause of S.
    Returns (pauses, pauses after a port to a NIC, frames of other priorities sent during pauses)."""
    over = defaultdict(list)              # NIC file -> its frames finding a queue above Xoff
    for r in rows:
        if r[Row.PCP] == prio and r[Row.QUEUE] + r[Row.BYTES] > xoff:
            over[r[Row.UP]].append(r)
    n = at_nic_ports = passed = 0
    spans = defaultdict(list)
    for f in sorted((out / "pcap").glob(f"{leaf}-node*")):
        gbps = rate_of(f.stem)
        got = frames(f)
        slack = 2 * -(-(max(o for _, o, _ in got) + 24) * 8 // gbps)
        mine = [(t, h[1]) for t, _, h in got if h and h[0] != leaf_mac]
        sends = sorted(t for t, c in mine if c == prio)
        others = sorted(t for t, c in mine if c != prio)
        for t, c, quanta, src in pauses(f):
            assert src == leaf_mac and c == prio, (f.name, t, c)
            cands = [r for r in over[f.stem] if 0 <= t - lat - r[Row.ARRIVE] <= slack]
            assert cands, f"{f.name}: a PAUSE at {t} ns with no frame of this NIC above Xoff just before"
            want = set()
            for r in cands:
                drain = -(-(r[Row.QUEUE] + r[Row.BYTES] - xon) * 8 // rate_of(r[Row.FILE]))
                want.add(-(-drain * gbps // 512))
            assert quanta in want, (f.name, t, quanta, want)
            end = t + -(-quanta * 512 // gbps)
            inside = [s for s in sends if t <= s < end]
            assert not inside, f"{f.name}: sends priority {prio} at {inside[:3]} during a pause {t}..{end}"
            passed += sum(t <= s < end for s in others)
            at_nic_ports += any("-node" in r[Row.FILE] for r in cands)
            spans[f.stem].append((t, end))
            n += 1
        slack_f = slack
        missing = [r for r in over[f.stem]
                   if not any(a <= r[Row.ARRIVE] + lat + slack_f and r[Row.ARRIVE] + lat < b for a, b in spans[f.stem])]
        assert not missing, f"{f.name}: {len(missing)} arrivals above Xoff with no PAUSE, first {missing[0]}"
    return n, at_nic_ports, passed
