"""The wire validator can fail: hand-made captures (frames packed here with struct, ICRC by
WIRE.md's recipe, checked against a real ConnectX CNP) with one violation each, and the clean
capture they are cut from, which passes."""
from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest

from wire_check import Stats, check_capture, check_wire, tags

NIC_A, NIC_B = bytes.fromhex("020000000001"), bytes.fromhex("020000000101")
LEAF, LEAF_P1 = bytes.fromhex("024c00000000"), bytes.fromhex("024c01000000")
IP_A, IP_B = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
SPORT = 0xC123
QP_B, QP_A = 0x105, 0x107            # data goes to B's QP; ACKs and CNPs to A's
PMTU = 256
GBPS = 100
W = lambda n: -(-(n + 24) * 8 // GBPS)       # ns a frame of n bytes holds a 100 Gb/s link


def roce(op, psn, *, dqp=QP_B, src=IP_A, dst=IP_B, smac=NIC_A, dmac=LEAF, sport=SPORT, payload=b"",
         reth=None, imm=None, aeth=None, ecn=2, becn=False, ackreq=False, pad=None, cnp=False,
         icrc_ok=True, csum_ok=True) -> bytes:
    pad = (-len(payload)) % 4 if pad is None else pad
    bth = struct.pack(">BBHB3sB3s", op, 0x40 | (pad << 4), 0xFFFF, 0x40 if becn else 0, dqp.to_bytes(3, "big"),
                      0x80 if ackreq else 0, (psn % (1 << 24)).to_bytes(3, "big"))
    ext = (struct.pack(">QII", *reth) if reth else b"") + (struct.pack(">I", imm) if imm is not None else b"") \
        + (struct.pack(">I", aeth) if aeth is not None else b"") + (bytes(16) if cnp else b"")
    body = bth + ext + payload + bytes(pad)
    udp = struct.pack(">HHHH", 0 if cnp else sport, 4791, 8 + len(body) + 4, 0)
    ip = bytearray(struct.pack(">BBHHHBBH4s4s", 0x45, (26 << 2) | ecn, 20 + len(udp) + len(body) + 4, 0, 0x4000,
                               255, 17, 0, src, dst))
    s = sum(struct.unpack(">10H", ip))
    s = (s & 0xFFFF) + (s >> 16)
    ip[10:12] = struct.pack(">H", (~s & 0xFFFF) ^ (0 if csum_ok else 1))
    masked = bytearray(ip) + udp + body
    masked[1], masked[8], masked[10:12] = 0xFF, 0xFF, b"\xff\xff"          # ToS, TTL, checksum
    masked[26:28] = b"\xff\xff"                                            # UDP checksum
    masked[32] = 0xFF                                                      # BTH FECN/BECN byte
    crc = zlib.crc32(bytes(masked), zlib.crc32(b"\xff" * 8)) ^ (0 if icrc_ok else 1)
    return dmac + smac + b"\x08\x00" + bytes(ip) + udp + body + struct.pack("<I", crc)


def cts(psn, counter, addr, size=1 << 20, rkey=0x15D, **kw) -> bytes:
    """A CTS: WRITE Only of one ncclIbSendFifo element, B -> A (NCCL net_ib, p2p.cc ncclIbPostFifo)."""
    elem = struct.pack("<QQ8IIIQ", addr, size, rkey, 0, 0, 0, 0, 0, 0, 0, 1, 3, counter)
    kw = dict(dict(dqp=QP_A, src=IP_B, dst=IP_A, smac=LEAF, dmac=NIC_A), **kw)
    return roce(0x0A, psn, payload=elem, reth=(0x7E0000000000, 0xF1, 64), **kw)


def ack(psn, msn, **kw) -> bytes:
    kw = dict(dict(dqp=QP_A, src=IP_B, dst=IP_A, smac=LEAF, dmac=NIC_A), **kw)
    return roce(0x11, psn, aeth=(0x1F << 24) | msn, **kw)


def message(psn0, size, va, *, rkey=0x15D, **kw) -> list[bytes]:
    """One RDMA WRITE-with-imm of `size` bytes in PMTU packets: First Middle* Last-Imm, or Only-Imm."""
    n = max(1, -(-size // PMTU))
    if n == 1:
        return [roce(0x0B, psn0, payload=bytes(size), reth=(va, rkey, size), imm=size, ackreq=True, **kw)]
    out = [roce(0x06, psn0, payload=bytes(PMTU), reth=(va, rkey, size), **kw)]
    out += [roce(0x07, psn0 + k, payload=bytes(PMTU), **kw) for k in range(1, n - 1)]
    return out + [roce(0x09, psn0 + n - 1, payload=bytes(size - (n - 1) * PMTU), imm=size, ackreq=True, **kw)]


def clean() -> list[tuple[int, bytes]]:
    """A conversation at 100 Gb/s as A's NIC records it: B's CTS, A's two messages (3 packets and
    1 packet) back to back, B's ACKs, a CE-marked packet and the CNP answering it."""
    recs, t = [], 1000
    for k, va in enumerate((0x7A0000000000, 0x7A0000080000)):
        fr = cts(k, k + 1, va)
        recs.append((t, fr))
        t += W(len(fr))
    t += 500
    for fr in message(0, 700, 0x7A0000000000) + message(3, 100, 0x7A0000080000):
        recs.append((t, fr))
        t += W(len(fr))
    t += 3000                                                      # the round trip
    for psn, msn in ((2, 1), (3, 2)):
        fr = ack(psn, msn)
        recs.append((t, fr))
        t += W(len(fr))
    return recs


def write_pcap(path: Path, recs) -> Path:
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 262144, 1))
        for t, fr in recs:
            f.write(struct.pack("<IIII", t // 10**9, t % 10**9, len(fr), len(fr)) + fr)
    return path


def write_pcapng(path: Path, ifaces, recs, tsresol=9) -> Path:
    """recs: (iface, t in units of 10^-tsresol s, frame)."""
    def block(btype, body):
        return struct.pack("<II", btype, 12 + len(body)) + body + struct.pack("<I", 12 + len(body))

    def opt(code, val):
        return struct.pack("<HH", code, len(val)) + val + bytes(-len(val) % 4)
    out = block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    for name, gbps in ifaces:
        out += block(1, struct.pack("<HHI", 1, 0, 0) + opt(2, name.encode()) + opt(8, struct.pack("<Q", gbps * 10**9))
                     + opt(9, bytes([tsresol])) + opt(0, b""))
    for i, t, fr in recs:
        out += block(6, struct.pack("<IIIII", i, t >> 32, t & 0xFFFFFFFF, len(fr), len(fr)) + fr + bytes(-len(fr) % 4))
    path.write_bytes(out)
    return path


def run(tmp_path, recs, **kw):
    return check_capture(write_pcap(tmp_path / "x.pcap", recs), GBPS, **kw)


def test_the_clean_conversation_passes(tmp_path):
    assert run(tmp_path, clean()) == []


def test_icrc_matches_a_real_connectx_cnp(tmp_path):
    """WIRE.md's CNP captured on a ConnectX-4 Lx: the validator's ICRC accepts it, and a flipped
    byte of it is caught."""
    cnp = bytes.fromhex("e41d2dab2bc27cfe90643b32080045c2003c718c400040119161 0a0011010a001201"
                        "000012b700280000 8100ffff40000118 00000000 00000000000000000000000000000000"
                        "82fd002a".replace(" ", ""))
    assert run(tmp_path, [(0, cnp)]) == []
    bad = bytearray(cnp)
    bad[48] ^= 1                                      # a bit of the DestQP: only the ICRC tells
    assert tags(run(tmp_path, [(0, bytes(bad))]))["[frame]"] == 1


def _edit(recs, i, fr):
    recs = list(recs)
    recs[i] = (recs[i][0], fr)
    return recs


def _swap(recs, i, j):
    recs = list(recs)
    (ti, fi), (tj, fj) = recs[i], recs[j]
    recs[i], recs[j] = (ti, fj), (tj, fi)
    return recs


# each case: (clean capture -> one with the violation, the tag that must appear)
CASES = {
    # PSN of the second Middle skips one
    "psn-gap": (lambda r: _edit(r, 3, roce(0x07, 2, payload=bytes(PMTU))), "[psn]"),
    # the second message's Only goes out before the first message's Last (PSN 3 before 2)
    "psn-back": (lambda r: _swap(r, 4, 5), "[psn]"),
    # a new First while the first message is still open: messages overlap on the QP
    "overlap-messages": (lambda r: _edit(r, 3, message(1, 700, 0x7A0000000000)[0]), "[opcode]"),
    # the RETH promises 800 bytes, 700 follow
    "dma-length": (lambda r: _edit(r, 2, roce(0x06, 0, payload=bytes(PMTU), reth=(0x7A0000000000, 0x15D, 800))),
                   "[opcode]"),
    # A's two data frames 1 ns apart: the port cannot send the second before the first is out
    "port-rate": (lambda r: [(t if i != 3 else r[2][0] + 1, fr) for i, (t, fr) in enumerate(r)], "[overlap]"),
    # B acknowledges PSN 3 before A's packet 3 has passed whole
    "ack-early": (lambda r: [(t if i != 7 else r[5][0] + 1, fr) for i, (t, fr) in enumerate(r)], "[ack]"),
    # the ACKs come back in the wrong order (PSN 3 then 2)
    "ack-order": (lambda r: _swap(r, 6, 7), "[ack]"),
    # MSN 5 for the first message
    "ack-msn": (lambda r: _edit(r, 6, ack(2, 5)), "[ack]"),
    # the first message starts before its CTS has arrived whole
    "data-before-cts": (lambda r: sorted([(t if i != 2 else r[0][0] + 2, fr) for i, (t, fr) in enumerate(r)]),
                        "[cts]"),
    # the second CTS carries FIFO counter 3 after 1
    "cts-counter": (lambda r: _edit(r, 1, cts(1, 3, 0x7A0000080000)), "[cts]"),
    # the second message writes where no CTS granted it
    "no-cts": (lambda r: _edit(r, 5, message(3, 100, 0x7A0000900000)[0]), "[cts]"),
    # a CNP from B to A's QP before the CE-marked packet of that QP has passed
    "cnp-early": (lambda r: _cnp_after(r, -50), "[cnp]"),
    "bad-icrc": (lambda r: _edit(r, 2, message(0, 700, 0x7A0000000000, icrc_ok=False)[0]), "[frame]"),
    "bad-ipv4-checksum": (lambda r: _edit(r, 2, message(0, 700, 0x7A0000000000, csum_ok=False)[0]), "[frame]"),
    "padcnt-on-middle": (lambda r: _edit(r, 3, roce(0x07, 1, payload=bytes(PMTU - 4), pad=3)), "[frame]"),
    "nak": (lambda r: _edit(r, 6, ack(2, 1)[:-8] + struct.pack(">B", 0x60) + ack(2, 1)[-7:]), "[frame]"),
    "cnp-without-becn": (lambda r: r + [(r[-1][0] + 100, roce(0x81, 0, dqp=QP_A, src=IP_B, dst=IP_A, smac=LEAF,
                                                              dmac=NIC_A, cnp=True))], "[frame]"),
    "time-goes-back": (lambda r: r + [(r[0][0] - 500, r[0][1])], "[time]"),
}


def _cnp_after(r, dt_ns: int, qp: int = QP_A):
    """The clean conversation with A's first packet CE-marked and B's CNP to A's QP dt_ns after
    that packet started (it has passed whole at 100 Gb/s after ~100 ns)."""
    r = _edit(r, 2, message(0, 700, 0x7A0000000000, ecn=3)[0])
    cnp = roce(0x81, 0, dqp=qp, src=IP_B, dst=IP_A, smac=LEAF, dmac=NIC_A, becn=True, cnp=True)
    return sorted(r + [(r[2][0] + dt_ns, cnp)], key=lambda x: x[0])


def test_a_cnp_is_judged_against_its_own_qp(tmp_path):
    """A CNP once its QP's CE-marked packet has passed is clean; one naming another QP of the
    same two NICs is not judged (mlx5 gives a CNP its own UDP source port: on a fabric port it
    may travel without that QP's data)."""
    st = Stats()
    assert check_capture(write_pcap(tmp_path / "x.pcap", _cnp_after(clean(), 2000)), GBPS, stats=st) == []
    assert (st["cnp_judged"], st["cnp_unpaired"]) == (1, 0)
    st = Stats()
    assert check_capture(write_pcap(tmp_path / "y.pcap", _cnp_after(clean(), -50, QP_A + 1)), GBPS, stats=st) == []
    assert (st["cnp_judged"], st["cnp_unpaired"]) == (0, 1)


def test_two_qp_pairs_sharing_a_source_port(tmp_path):
    """mlx5 hashes the product of the two QPNs into 14 bits of UDP source port, so two QP pairs of
    two NICs may share one: A's one-packet message to another of B's QPs (a plain WRITE Only, no
    CTS needed) on the same port leaves B's ACKs on A's QP right; an ACK whose MSN fits neither
    stream is still wrong."""
    extra = roce(0x0A, 0, dqp=QP_B + 7, payload=bytes(32), reth=(0x7A0000100000, 0x15D, 32), ackreq=True)
    recs = clean()
    recs.insert(5, (recs[4][0] + W(len(recs[4][1])), extra))
    recs[6:] = [(t + W(len(extra)), fr) for t, fr in recs[6:]]
    assert run(tmp_path, recs) == []
    assert "[ack]" in tags(run(tmp_path, _edit(recs, 7, ack(2, 5))))


def test_cts_grants_follow_time_across_qps(tmp_path):
    """Several QPs per connection: a buffer slot comes round again under a later CTS, and the
    message that uses it may go on another QP. Grants are matched in time order over all QPs:
    Y's message (t 1700) takes the 2nd CTS for slot 0, X's later one (t 2300) the 3rd."""
    va0, va1 = 0x7A0000000000, 0x7A0000080000
    recs = [(1000, cts(0, 1, va1)), (1100, cts(1, 2, va0)),
            (1500, message(0, 100, va1)[0]), (1700, message(0, 100, va0, dqp=QP_B + 2, sport=SPORT + 1)[0]),
            (1900, cts(2, 3, va0)), (2300, message(1, 100, va0)[0])]
    assert run(tmp_path, recs) == []
    late = recs[:4] + [(2300, message(1, 100, va0)[0]), (2400, cts(2, 3, va0))]       # X before its grant
    assert "[cts]" in tags(run(tmp_path, late))


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_violation_is_reported(tmp_path, case):
    make, tag = CASES[case]
    got = run(tmp_path, make(clean()))
    assert tag in tags(got), got


def test_a_cut_file_is_reported(tmp_path):
    path = write_pcap(tmp_path / "x.pcap", clean())
    path.write_bytes(path.read_bytes()[:-30])
    assert "[format]" in tags(check_capture(path, GBPS))


def test_psn_wraps_at_2_24(tmp_path):
    recs, t = [], 0
    for fr in message(0xFFFFFE, 700, 0x7A0000000000):
        recs.append((t, fr))
        t += W(len(fr))
    assert run(tmp_path, recs) == []
    recs[1] = (recs[1][0], roce(0x07, 0, payload=bytes(PMTU)))      # 2^24 - 1 skipped
    assert "[psn]" in tags(run(tmp_path, recs))


def test_a_filtered_capture_may_open_inside_a_message(tmp_path):
    """A time window cuts messages: complete=False accepts a capture that starts with a Middle and
    skips PSNs between messages, never within one or backwards."""
    recs = clean()[3:6]
    assert "[opcode]" in tags(run(tmp_path, recs))
    assert run(tmp_path, recs, complete=False) == []
    assert "[psn]" in tags(run(tmp_path, _swap(recs, 1, 2), complete=False))


def test_transmitters_are_told_apart_by_their_link(tmp_path):
    """Frames to two different leaves (a NIC's two plane ports) may overlap in time; frames of one
    port may not. A lab tester port (per_source) is one transmitter whatever the destination MAC."""
    a = message(0, 100, 0x7A0000000000)[0]
    b = message(0, 100, 0x7A0000000000, dmac=LEAF_P1, sport=SPORT + 1, dqp=0x109)[0]
    assert run(tmp_path, [(0, a), (1, b)]) == []
    assert "[overlap]" in tags(run(tmp_path, [(0, a), (1, b)], per_source=True))
    assert "[overlap]" in tags(run(tmp_path, [(0, a), (1, message(1, 100, 0x7A0000000000)[0])]))


def test_pcapng_interfaces_rates_and_time_units(tmp_path):
    """pcapng: per interface its own transmitters, its if_speed as the rate, its if_tsresol as the
    time unit (microseconds here)."""
    a, b = message(0, 100, 0x7A0000000000)[0], message(1, 100, 0x7A0000000000)[0]
    ok = write_pcapng(tmp_path / "ok.pcapng", [("p0", 100), ("p1", 100)], [(0, 10, a), (1, 10, a), (0, 11, b)], 6)
    assert check_capture(ok) == []
    slow = write_pcapng(tmp_path / "slow.pcapng", [("p0", 1)], [(0, 10, a), (0, 11, b)], 6)
    assert "[overlap]" in tags(check_capture(slow))             # 1 Gb/s: ~1 us for the first frame


def test_a_folder_takes_its_rates_from_summary_json(tmp_path):
    """check_wire reads the link rates of the generate folder's summary.json by file name."""
    import json
    d = tmp_path / "trace"
    (d / "pcap").mkdir(parents=True)
    write_pcap(d / "pcap" / "node0000-rail0.pcap", clean())
    summary = {"job": {"output": {}, "fabric": {"planes": 1}}, "nic_gbps": GBPS,
               "nic_names": ["node0000-rail0"],
               "links": {"name": ["node0000-rail0->leaf0", "leaf0->node0000-rail0"], "gbps": [GBPS, GBPS]}}
    (d / "summary.json").write_text(json.dumps(summary))
    assert check_wire(d) == []
    summary["links"]["gbps"] = [10, 10]                          # the same frames on a 10 Gb/s port
    (d / "summary.json").write_text(json.dumps(summary))
    assert "[overlap]" in tags(check_wire(d))
