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


PFC_WIRE_BYTES = 64 + 20            # a PFC frame with FCS, preamble and IFG


class _Level:
    """A port's queue (one priority) at any instant from its rows: bytes arrived at or before t
    less bytes started to leave by t (every frame arrives before it leaves); and the instants in
    a span where it changes."""

    def __init__(self, group):
        import bisect
        self.bisect = bisect
        self.a = sorted((r[Row.ARRIVE], r[Row.BYTES]) for r in group)
        self.d = sorted((r[Row.DEPART], r[Row.BYTES]) for r in group)
        self.at, self.dt = [x for x, _ in self.a], [x for x, _ in self.d]
        self.ca, self.cd = [0], [0]
        for _, b in self.a:
            self.ca.append(self.ca[-1] + b)
        for _, b in self.d:
            self.cd.append(self.cd[-1] + b)

    def __call__(self, t):
        r = self.bisect.bisect_right
        return self.ca[r(self.at, t)] - self.cd[r(self.dt, t)]

    def instants(self, lo, hi):
        b = self.bisect
        ts = {lo, hi}
        ts.update(self.at[b.bisect_left(self.at, lo):b.bisect_right(self.at, hi)])
        ts.update(self.dt[b.bisect_left(self.dt, lo):b.bisect_right(self.dt, hi)])
        return sorted(ts)


def judge_pauses(out: Path, rows, leaf_mac, lat: int, rate_of, xoff: int, xon: int, prio: int = 3, leaf="leaf0"):
    """The PFC frames on every port file of switch `leaf`'s view, 802.1Qbb semantics: a PFC frame
    acts once its last bit has arrived (first bit + 84 B at the link's rate) and holds the paused
    port's priority for its quanta (512-bit times at that link's rate) or until the next PFC frame
    for that port acts (a refresh carries it on, an XON - time 0 - ends it).

    Frames `leaf` sends (towards a NIC in its NIC file, towards a neighbour switch in a link file)
    are judged against the leaf's replayed egress queues (rows: replay()) fed by that port - S, a
    NIC file or link file - sent within the trigger window [slot - slack, slot] (slot: the time it
    starts on the link; slack: two frames in flight ahead of it):
      a PAUSE after a frame of S finding a queue above Xoff, with the quanta that queue needs to
      drain to Xon at its port's rate; or a refresh - it acts no earlier than the PAUSE before it
      runs out - while such a queue is above Xon, its quanta that queue's drain;
      an XON while a queue fed by S is at or below Xon, ending a PAUSE still running;
      no arrival of S above Xoff goes without a PAUSE holding S or acting within the slack.
    Every PFC frame in the view (the leaf's and its neighbours'): the paused port - S's sender -
    starts no frame of the paused priority while paused.
    rate_of(file stem) -> Gb/s. Returns (PAUSEs the leaf sent after an arrival above Xoff, of them
    to NICs, frames of other priorities sent during pauses, a Counter of PFC frames by kind)."""
    from collections import Counter
    kinds = Counter()
    over = defaultdict(list)              # port file S -> its frames finding a queue above Xoff
    fed = defaultdict(lambda: defaultdict(list))   # S -> (egress file, pcp) -> rows of S's frames there
    for r in rows:
        fed[r[Row.UP]][r[Row.FILE], r[Row.PCP]].append(r)
        if r[Row.PCP] == prio and r[Row.QUEUE] + r[Row.BYTES] > xoff:
            over[r[Row.UP]].append(r)
    by_port = defaultdict(list)
    for r in rows:
        by_port[r[Row.FILE], r[Row.PCP]].append(r)
    level = {k: _Level(g) for k, g in by_port.items() if k[1] == prio}
    n = at_nic_ports = passed = 0
    for f in sorted((out / "pcap").glob(f"{leaf}-*")):
        nic_file = "-node" in f.name
        gbps = rate_of(f.stem)
        got = frames(f)
        w_pfc = -(-PFC_WIRE_BYTES * 8 // gbps)
        slack = 2 * -(-(max(o for _, o, _ in got) + 24) * 8 // gbps)
        shift = 0 if nic_file else lat      # a link file: the time it starts on the link; a NIC file: at the NIC
        for side in ("leaf", "peer"):
            # PFC frames `side` sends, and the frames the port it pauses sends (the other side)
            mine = sorted((t, c, q) for t, c, q, src in pauses(f) if (src == leaf_mac) == (side == "leaf"))
            if nic_file and side == "peer":
                assert not mine, f"{f.name}: a NIC sent a PFC frame"
                continue
            sends = [(t, h[1]) for t, _, h in got if h and (h[0] != leaf_mac) == (side == "leaf")]
            paused_sends = sorted(t for t, c in sends if c == prio)
            others = sorted(t for t, c in sends if c != prio)
            end_prev, acts, running = -1, [], False
            for i, (t, c, quanta) in enumerate(mine):
                assert c == prio, (f.name, t, c)
                act = t + shift + w_pfc                 # its last bit at the paused port
                nxt = mine[i + 1][0] + shift + w_pfc if i + 1 < len(mine) else 1 << 62
                end = min(act + -(-quanta * 512 // gbps), nxt)
                inside = [s for s in paused_sends if act <= s < end]
                assert not inside, f"{f.name}: {side} paused, its peer sends priority {prio} at {inside[:3]} in {act}..{end}"
                passed += sum(act <= s < end for s in others)
                if side == "leaf":
                    slot = t - (lat if nic_file else 0)
                    lo = slot - slack
                    levels = [(level[ef, pcp], ef) for (ef, pcp) in fed[f.stem] if pcp == prio]
                    if quanta == 0:
                        kinds["xon"] += 1
                        # a PAUSE since the last XON, still running when an XON sent at the
                        # window's start would act (a busy link may land it just after it ran out)
                        assert running and end_prev > lo + lat + w_pfc, f"{f.name}: an XON at {t} with no PAUSE running"
                        ok = any(lv(ts) <= xon for lv, _ in levels for ts in lv.instants(lo, slot))
                        assert ok, f"{f.name}: an XON at {t} while every queue {f.stem} feeds is above Xon"
                        end_prev, running = act, False
                        if acts:                        # the XON ends the pause as it acts
                            acts[-1] = (acts[-1][0], min(acts[-1][1], act))
                        continue
                    cands = [r for r in over[f.stem] if lo <= r[Row.ARRIVE] <= slot]
                    want = set()
                    for r in cands:
                        drain = -(-(r[Row.QUEUE] + r[Row.BYTES] - xon) * 8 // rate_of(r[Row.FILE]))
                        want.add(min(65535, max(1, -(-drain * gbps // 512))))
                    if quanta in want and end_prev <= act:
                        kinds["pause"] += 1
                        n += 1
                        at_nic_ports += any("-node" in r[Row.FILE] for r in cands)
                    else:
                        # a refresh: as the last PAUSE runs out, a queue S feeds still above Xon
                        assert end_prev >= 0 and end_prev <= act <= end_prev + slack + w_pfc, \
                            f"{f.name}: a PAUSE at {t} ns (quanta {quanta}) after no frame of {f.stem} above Xoff " \
                            f"(wanted {sorted(want)}) nor as its last PAUSE ran out at {end_prev}"
                        qs = [(lv(ts), ef) for lv, ef in levels for ts in lv.instants(lo, slot)]
                        refresh = {min(65535, max(1, -(-(-(-(q - xon) * 8 // rate_of(ef))) * gbps // 512)))
                                   for q, ef in qs if q > xon}
                        assert quanta in refresh, (f.name, t, quanta, sorted(refresh), max(q for q, _ in qs))
                        kinds["refresh"] += 1
                    end_prev, running = act + -(-quanta * 512 // gbps), True
                    acts.append((t + shift, end_prev))
                else:
                    kinds["xon_rx" if quanta == 0 else "pause_rx"] += 1
            if side == "leaf":
                # no arrival of S above Xoff unpaused: a PAUSE of S acts within the slack or holds it
                missing = [r for r in over[f.stem]
                           if not any(a <= r[Row.ARRIVE] + lat + slack + w_pfc and r[Row.ARRIVE] + lat < b
                                      for a, b in acts)]
                assert not missing, f"{f.name}: {len(missing)} arrivals above Xoff with no PAUSE, first {missing[0]}"
    return n, at_nic_ports, passed, kinds

