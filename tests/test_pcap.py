"""pcap writer: every packet parsed by scapy (ICRC recomputed), tshark, and the flow table as oracle.

The expectations here are rebuilt from the rules in plain Python (QPN plan, message split,
PSN/MSN sequences, wire times); nothing is taken from tracegen.emit.views.pcap's internals.
"""
from __future__ import annotations

import dataclasses
import math
import shutil
import struct
import subprocess
from collections import defaultdict
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

from tracegen.config import Job, Output
from tracegen.emit.views import pcap as pcap_mod
from tracegen.emit.views.pcap import estimate_pcap, write_pcaps
from tracegen.tables import COMMOP_DTYPE, FLOW_DTYPE, CommOps, Flows, LinkKind, Ragged
from tracegen.fabric.topology import build_fabric

scapy_all = pytest.importorskip("scapy.all")
from scapy.contrib.roce import AETH, BTH  # noqa: E402
from scapy.layers.inet import IP, UDP  # noqa: E402
from scapy.layers.l2 import Dot1Q, Ether  # noqa: E402

MiB = 1 << 20
NET, NVL = int(LinkKind.NET), int(LinkKind.NVLINK)
OP_FIRST, OP_MIDDLE, OP_LAST_IMM, OP_ONLY, OP_ONLY_IMM, OP_ACK = 0x06, 0x07, 0x09, 0x0A, 0x0B, 0x11
RETH_OPS, IMM_OPS = {OP_FIRST, OP_ONLY, OP_ONLY_IMM}, {OP_LAST_IMM, OP_ONLY_IMM}

FABRIC = build_fabric(Job())          # 8 GPUs, 4 nodes x 2; rank r -> NIC r; rail = r % 2

# (src_nic, dst_nic, channel, bytes, max_msg_bytes, start_ns, link)
SCENARIO = [
    (0, 2, 0, 2 * MiB + 6, MiB, 10_000, NET),      # multi-MiB in 1 MiB messages; last one 6 B (pad 2)
    (2, 0, 0, 4 * 4096, MiB, 12_000, NET),         # exact PMTU multiple
    (0, 3, 1, 2 * 4096 + 1023, MiB, 10_500, NET),  # remainder 1023 (pad 1), cross-leaf (4 hops)
    (4, 2, 0, 100, MiB, 0, NET),                   # one packet: WRITE Only-Imm
    (6, 2, 1, 128 << 10, 128 << 10, 20_000, NET),  # p2p chunk
    (0, 2, 0, MiB, MiB, 400_000, NET),             # same connection again: PSNs continue
    (5, 7, 0, 0, MiB, 30_000, NET),                # zero bytes: one empty Only-Imm
    (0, 1, 0, MiB, MiB, 0, NVL),                   # NVLink: never on the wire
    (6, 7, 0, MiB, MiB, 0, NVL),
]


def make_flows(spec) -> Flows:
    rows = np.zeros(len(spec), FLOW_DTYPE)
    for i, (s, d, ch, nbytes, mm, start, link) in enumerate(spec):
        rows[i]["transfer_id"] = i
        rows[i]["src_rank"], rows[i]["dst_rank"], rows[i]["src_nic"], rows[i]["dst_nic"] = s, d, s, d
        rows[i]["channel"], rows[i]["bytes"], rows[i]["max_msg_bytes"] = ch, nbytes, mm
        if "wire_bytes" in FLOW_DTYPE.names:     # Simple protocol: the wire carries the payload
            rows[i]["wire_bytes"] = nbytes
        rows[i]["start_ns"], rows[i]["end_ns"], rows[i]["link"] = start, start + 1, link
    ops = CommOps(np.zeros(0, COMMOP_DTYPE), Ragged.empty(0), Ragged.empty(0))
    return Flows(rows, Ragged.empty(len(rows)), ops)


FLOWS = make_flows(SCENARIO)
# scapy needs ~2 ms per packet; at PMTU 1024 the big transfers shrink (64 KiB messages) to keep it quick.
SMALL = [(s, d, ch, nbytes // 16 + (nbytes % 16), mm // 16, start, link) if nbytes >= MiB else
         (s, d, ch, nbytes, mm, start, link) for s, d, ch, nbytes, mm, start, link in SCENARIO]
CONFIGS = {
    "pmtu4096-vlan": (Output(pmtu=4096, vlan=True), SCENARIO),
    "pmtu1024-novlan-ack4-pattern": (Output(pmtu=1024, vlan=False, ack_every=4, payload="pattern",
                                            dscp=24, ecn=1), SMALL),
}


# --- an independent model of what must be on the wire ------------------------------------------

def conn_of(row):
    """The NCCL connection of a spec row: (src, dst, communicator, channel). An optional 8th
    field names the communicator (0 when absent); a connection never spans two."""
    return (row[0], row[1], row[7] if len(row) > 7 else 0, row[2])


def expected_qpns(spec):
    """Connections sorted; per NIC QPNs counting up from 0x100 (sender's, then receiver's)."""
    conns = sorted({conn_of(r) for r in spec if r[6] == NET})
    nxt, qpn = defaultdict(lambda: 0x100), {}
    for conn in conns:
        s, d = conn[:2]
        qpn[conn] = (nxt[s], nxt[d])
        nxt[s] += 1
        nxt[d] += 1
    return qpn


def expected_messages(spec):
    """Message sizes per connection, in flow start order."""
    msgs = defaultdict(list)
    for row in sorted(spec, key=lambda r: r[5]):
        nbytes, mm, link = row[3], row[4], row[6]
        if link != NET:
            continue
        n = max(1, math.ceil(nbytes / mm))
        msgs[conn_of(row)] += [mm] * (n - 1) + [nbytes - (n - 1) * mm]
    return msgs


def qp_owner(qpn, src, dst, dqpn):
    """(connection, is_data) of requests src -> dst addressed to QP dqpn."""
    for conn, (qs, qd) in qpn.items():
        if conn[:2] == (src, dst) and qd == dqpn:
            return conn, True
        if conn[:2] == (dst, src) and qs == dqpn:
            return conn, False
    raise AssertionError(f"no connection for {src}->{dst} QP {dqpn:#x}")


def responder_qp(qpn, requester, requester_qp, responder):
    """The QP on `responder` paired with `requester_qp` on `requester`."""
    for conn, (qs, qd) in qpn.items():
        if conn[:2] == (requester, responder) and qs == requester_qp:
            return qd
        if conn[:2] == (responder, requester) and qd == requester_qp:
            return qs
    raise AssertionError("unknown QP")


def sport(a, b):
    fl = a * b
    fl ^= fl >> 20
    fl ^= fl >> 40
    fl &= 0xFFFFF
    return 0xC000 | ((fl & 0x3FFF) ^ ((fl & 0xFC000) >> 14))


def wire_ns(frame_len, gbps=FABRIC.nic_gbps):
    return math.ceil((frame_len + 24) * 8 / gbps)


def ip_of(nic):
    return FABRIC.nic_ip_str(nic)


NIC_OF_IP = {ip_of(n): n for n in range(FABRIC.n_nics)}


# --- reading our files --------------------------------------------------------------------------

def read_pcap(path: Path):
    data = path.read_bytes()
    header = struct.unpack_from("<IHHiIII", data, 0)
    recs, off = [], 24
    while off < len(data):
        sec, nsec, incl, orig = struct.unpack_from("<IIII", data, off)
        off += 16
        recs.append((sec * 10**9 + nsec, incl, orig, data[off:off + incl]))
        off += incl
    assert off == len(data)
    return header, recs


@dataclasses.dataclass
class Pkt:
    t: int
    orig: int
    src: int
    dst: int
    opcode: int
    psn: int
    dqpn: int
    ack: int
    pad: int
    sport: int
    ttl: int
    payload: bytes
    reth: tuple | None = None
    imm: int | None = None
    msn: int | None = None
    ip_id: int | None = None


def decode(frame: bytes, out: Output, t: int, orig: int) -> Pkt:
    """scapy parses the frame; the ICRC is recomputed by scapy's BTH and must equal our bytes."""
    p = Ether(frame)
    assert (Dot1Q in p) == out.vlan
    if out.vlan:
        assert p[Dot1Q].prio == out.pcp and p[Dot1Q].vlan == out.vlan_id and p[Dot1Q].type == 0x0800
    ip = p[IP]
    assert ip.tos == (out.dscp << 2) | out.ecn and ip.flags == "DF" and ip.frag == 0
    assert ip.len == len(frame) - (18 if out.vlan else 14)
    chk = ip.chksum
    ip2 = IP(bytes(ip)[:20])
    del ip2.chksum
    assert IP(bytes(ip2)).chksum == chk, "IPv4 header checksum"
    assert p[UDP].dport == 4791 and p[UDP].chksum == 0 and p[UDP].len == ip.len - 20
    b = p[BTH]
    assert b.migreq == 1 and b.pkey == 0xFFFF and b.version == 0 and not b.solicited
    assert not (b.fecn or b.becn or b.resv6 or b.resv7)
    icrc_wire = frame[-4:]
    b.icrc = None
    assert bytes(p)[-4:] == icrc_wire, "ICRC (scapy) differs"
    rest = bytes(b.payload)
    pkt = Pkt(t, orig, NIC_OF_IP[ip.src], NIC_OF_IP[ip.dst], b.opcode, b.psn, b.dqpn, b.ackreq,
              b.padcount, p[UDP].sport, ip.ttl, b"", ip_id=ip.id)
    if b.opcode == OP_ACK:
        assert AETH in p and len(rest) == 4
        pkt.msn = p[AETH].msn
        assert p[AETH].syndrome == 0x1F
        return pkt
    if b.opcode in RETH_OPS:
        pkt.reth, rest = struct.unpack(">QII", rest[:16]), rest[16:]
    if b.opcode in IMM_OPS:
        pkt.imm, rest = struct.unpack(">I", rest[:4])[0], rest[4:]
    assert len(rest) % 4 == 0 and rest[len(rest) - b.padcount:] == bytes(b.padcount)
    pkt.payload = rest[:len(rest) - b.padcount]
    return pkt


@lru_cache(maxsize=None)
def written(name: str, tmp_root: str):
    out, spec = CONFIGS[name]
    d = Path(tmp_root) / name
    d.mkdir()
    calls = []
    paths = write_pcaps(make_flows(spec), FABRIC, out, d, progress=lambda i, n: calls.append((i, n)))
    files = {}
    for path in paths:
        header, recs = read_pcap(path)
        files[path] = (header, recs, [decode(fr, out, t, orig) for t, incl, orig, fr in recs])
    return out, spec, paths, calls, files


@pytest.fixture(scope="module")
def tmp_root(tmp_path_factory):
    return str(tmp_path_factory.mktemp("pcaps"))


@pytest.fixture(scope="module", params=list(CONFIGS))
def run(request, tmp_root):
    return written(request.param, tmp_root)


# --- tests --------------------------------------------------------------------------------------

def test_one_file_per_nic_on_a_net_flow_and_no_nvlink(run):
    out, spec, paths, calls, files = run
    nics = sorted({r[0] for r in spec if r[6] == NET} | {r[1] for r in spec if r[6] == NET})
    assert [p.name for p in paths] == [f"{FABRIC.nic_name(n)}.pcap" for n in nics]
    # progress: bytes written so far after every slice, ending at the size of all files
    total = sum(p.stat().st_size for p in paths)
    done = [d for d, _ in calls]
    assert calls and all(n == total for _, n in calls) and done == sorted(done) and done[-1] == total
    assert len(calls) >= len(paths)
    nvlink_pairs = {(r[0], r[1]) for r in spec if r[6] == NVL}
    for path, (_, _, pkts) in files.items():
        nic = nics[paths.index(path)]
        assert all(nic in (p.src, p.dst) for p in pkts)
        assert not any((p.src, p.dst) in nvlink_pairs or (p.dst, p.src) in nvlink_pairs for p in pkts)
    assert FABRIC.nic_name(1) + ".pcap" not in [p.name for p in paths]


def test_pcap_headers(run):
    out, spec, paths, _, files = run
    for header, recs, _ in files.values():
        assert header == (0xA1B23C4D, 2, 4, 0, 0, 262144, 1)
        assert all(incl == orig == len(fr) for _, incl, orig, fr in recs)


def test_ethernet_addresses_and_ttl(run):
    out, spec, paths, _, files = run
    for path, (_, recs, pkts) in files.items():
        nic = next(n for n in range(FABRIC.n_nics) if f"{FABRIC.nic_name(n)}.pcap" == path.name)
        mac = bytes(FABRIC.nic_mac[nic])
        leaf = bytes(FABRIC.leaf_mac[FABRIC.nic_leaf[nic]])
        for (_, _, _, fr), p in zip(recs, pkts):
            hops = int(FABRIC.hops(p.src, p.dst))
            if p.src == nic:      # sent: host -> its leaf router, NCCL's hop limit 255
                assert (fr[:6], fr[6:12], p.ttl) == (leaf, mac, 255)
            else:                 # received: from its leaf router, after hops-1 routers
                assert (fr[:6], fr[6:12], p.ttl) == (mac, leaf, 255 - (hops - 1))


def _requests_by_qp(pkts):
    qps = defaultdict(list)
    for p in pkts:
        if p.opcode != OP_ACK:
            qps[(p.src, p.dst, p.dqpn)].append(p)
    return qps


def test_messages_psns_and_fields_follow_the_flow_table(run):
    out, spec, paths, _, files = run
    qpn, msgs = expected_qpns(spec), expected_messages(spec)
    seen = set()
    for path, (_, _, pkts) in files.items():
        for (src, dst, dqpn), seq in _requests_by_qp(pkts).items():
            # PSNs contiguous from 0 per QP per direction, in file order.
            assert [p.psn for p in seq] == list(range(len(seq)))
            conn, is_data = qp_owner(qpn, src, dst, dqpn)
            if is_data:                   # data direction: WRITE-with-imm messages
                sizes = []
                i = 0
                while i < len(seq):
                    first = seq[i]
                    assert first.opcode in (OP_FIRST, OP_ONLY_IMM)
                    n = 1 if first.opcode == OP_ONLY_IMM else math.ceil(first.reth[2] / out.pmtu)
                    msg = seq[i:i + n]
                    ops = [p.opcode for p in msg]
                    want = [OP_ONLY_IMM] if n == 1 else [OP_FIRST] + [OP_MIDDLE] * (n - 2) + [OP_LAST_IMM]
                    assert ops == want
                    assert [p.ack for p in msg] == [0] * (n - 1) + [1]
                    assert all(len(p.payload) == out.pmtu for p in msg[:-1])
                    assert sum(len(p.payload) for p in msg) == first.reth[2] == msg[-1].imm
                    assert msg[-1].pad == (-len(msg[-1].payload)) % 4
                    assert all(p.sport == sport(*qpn[conn]) for p in msg)
                    if out.payload == "pattern":
                        assert all(p.payload == bytes(j & 0xFF for j in range(len(p.payload))) for p in msg)
                    else:
                        assert all(not any(p.payload) for p in msg)
                    sizes.append(first.reth[2])
                    i += n
                assert sizes == msgs[conn], conn
                assert qpn[conn][1] == dqpn
                seen.add(("data", conn, path.name))
            else:                         # CTS direction: 64 B WRITE Only per message
                assert len(seq) == len(msgs[conn])
                assert all(p.opcode == OP_ONLY and p.ack == 1 and p.reth[2] == 64 and len(p.payload) == 64
                           for p in seq)
                assert all(p.sport == sport(*qpn[conn]) for p in seq)
                seen.add(("cts", conn, path.name))
    # Every connection shows up in both files, both directions.
    assert len(seen) == 4 * len(qpn)


def test_acks(run):
    out, spec, paths, _, files = run
    qpn, msgs = expected_qpns(spec), expected_messages(spec)
    for path, (_, _, pkts) in files.items():
        acks = defaultdict(list)
        for p in pkts:
            if p.opcode == OP_ACK:
                acks[(p.dst, p.src, p.dqpn)].append((p.psn, p.msn))    # keyed as the requester
        for (src, dst, dqpn), seq in _requests_by_qp(pkts).items():
            # Which packets must be acknowledged, and the MSN each ACK carries.
            want, done, in_msg = [], 0, 0
            for p in seq:
                if p.opcode in (OP_FIRST, OP_ONLY_IMM, OP_ONLY):
                    in_msg = 0
                in_msg += 1
                if p.ack:
                    done += 1
                    want.append((p.psn, done))
                elif out.ack_every and in_msg % out.ack_every == 0:
                    want.append((p.psn, done))
            conn, is_data = qp_owner(qpn, src, dst, dqpn)
            requester_qp = qpn[conn][0] if is_data else qpn[conn][1]
            assert acks[(src, dst, requester_qp)] == want


def test_tshark_reads_every_packet_like_scapy(run):
    tshark = shutil.which("tshark")
    if tshark is None:
        pytest.skip("tshark not installed (apt-get install tshark)")
    out, spec, paths, _, files = run
    for path, (_, _, pkts) in files.items():
        res = subprocess.run([tshark, "-r", str(path), "-T", "fields", "-E", "separator=,",
                              "-e", "_ws.malformed", "-e", "infiniband.bth.opcode",
                              "-e", "infiniband.bth.psn", "-e", "infiniband.bth.destqp"],
                             capture_output=True, text=True, check=True)
        lines = res.stdout.splitlines()
        assert len(lines) == len(pkts)
        for line, p in zip(lines, pkts):
            malformed, opcode, psn, destqp = line.split(",")
            assert malformed == ""
            assert (int(opcode), int(psn), int(destqp, 16)) == (p.opcode, p.psn, p.dqpn)


def test_timing(run):
    out, spec, paths, _, files = run
    hl = lambda a, b: int(FABRIC.hops(a, b)) * FABRIC.link_latency_ns
    tx_time, rx_time = {}, {}
    for path, (_, _, pkts) in files.items():
        nic = next(n for n in range(FABRIC.n_nics) if f"{FABRIC.nic_name(n)}.pcap" == path.name)
        ts = [p.t for p in pkts]
        assert ts == sorted(ts)
        for direction in ("tx", "rx"):
            stream = [p for p in pkts if (p.src == nic) == (direction == "tx")]
            for a, b in zip(stream, stream[1:]):
                assert b.t >= a.t + wire_ns(a.orig), (path.name, direction)
        for p in pkts:
            key = (p.src, p.dst, p.dqpn, p.opcode, p.psn, p.msn)
            (tx_time if p.src == nic else rx_time)[key] = p
    # Arrival never before transmit + propagation; the two copies agree on BTH onward.
    assert tx_time.keys() == rx_time.keys()
    for key, p in tx_time.items():
        assert rx_time[key].t >= p.t + hl(p.src, p.dst)
    # An ACK leaves only after the packet it acknowledges has fully arrived.
    qpn = expected_qpns(spec)
    arrived = {(p.src, p.dst, p.dqpn, p.psn): p for p in rx_time.values() if p.opcode != OP_ACK}
    n_acks = 0
    for (src, dst, dqpn, op, psn, msn), p in tx_time.items():
        if op == OP_ACK:        # src is the responder, dst the requester, dqpn the requester's QP
            acked = arrived[(dst, src, responder_qp(qpn, dst, dqpn, src), psn)]
            assert p.t >= acked.t + wire_ns(acked.orig)
            n_acks += 1
    assert n_acks > 0
    # A message is written only after its CTS (the k-th on that QP pair) has fully arrived.
    for path, (_, _, pkts) in files.items():
        nic = next(n for n in range(FABRIC.n_nics) if f"{FABRIC.nic_name(n)}.pcap" == path.name)
        starts, ctss = defaultdict(list), defaultdict(list)
        for p in pkts:
            if p.src == nic and p.opcode in (OP_FIRST, OP_ONLY_IMM):
                starts[(p.dst, p.dqpn)].append(p.t)           # keyed by the receiver's QP
            if p.dst == nic and p.opcode == OP_ONLY:
                ctss[(p.src, responder_qp(qpn, nic, p.dqpn, p.src))].append(p.t + wire_ns(p.orig))
        assert starts.keys() == ctss.keys()
        for key, ts in starts.items():
            assert len(ts) == len(ctss[key]) and all(t >= c for t, c in zip(ts, ctss[key]))
    # Data goes out no earlier than its flow's start.
    for p in tx_time.values():
        if p.opcode in (OP_FIRST, OP_ONLY_IMM):
            assert p.t >= min(r[5] for r in spec if r[:2] == (p.src, p.dst) and r[6] == NET)


def test_first_packet_leaves_at_flow_start_when_the_nic_is_idle():
    flows = make_flows([(0, 2, 0, 3 * 4096, MiB, 50_000, NET)])
    out = Output(pmtu=4096, vlan=True)
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        paths = write_pcaps(flows, FABRIC, out, Path(d))
        _, recs = read_pcap(paths[0])            # node0000-rail0: the sender
        pkts = [decode(fr, out, t, orig) for t, _, orig, fr in recs]
    data = [p for p in pkts if p.src == 0 and p.opcode != OP_ACK]
    cts = next(p for p in pkts if p.opcode == OP_ONLY)
    ack_of_cts = next(p for p in pkts if p.opcode == OP_ACK and p.src == 0)
    # The CTS is due two full frames ahead of the message; its ACK leaves once it has arrived;
    # the message starts exactly at the flow's start and its packets go back to back.
    assert cts.t + wire_ns(cts.orig) == 50_000 - 2 * wire_ns(4174) == ack_of_cts.t
    assert data[0].t == 50_000
    assert [b.t - a.t for a, b in zip(data, data[1:])] == [wire_ns(4174), wire_ns(4158)]


def test_control_frames_slip_in_between_packets(tmp_path):
    """Both NICs send a 1 MiB message while receiving one: each ACK leaves at the first packet
    boundary after its packet arrived (within one frame), in the middle of the NIC's own message,
    and arrives within one frame of tx + propagation."""
    out = Output(pmtu=4096, vlan=True, ack_every=16)
    spec = [(0, 2, 0, MiB, MiB, 10_000, NET), (2, 0, 0, MiB, MiB, 10_000, NET)]
    qpn = expected_qpns(spec)
    paths = write_pcaps(make_flows(spec), FABRIC, out, tmp_path)
    files = {p.name: [decode(fr, out, t, orig) for t, _, orig, fr in read_pcap(p)[1]] for p in paths}
    frame_ns, flight = wire_ns(4174), int(FABRIC.hops(0, 2)) * FABRIC.link_latency_ns
    for nic, peer in ((0, 2), (2, 0)):
        mine, theirs = files[FABRIC.nic_name(nic) + ".pcap"], files[FABRIC.nic_name(peer) + ".pcap"]
        arrived = {(p.psn, p.dqpn): p for p in mine if p.dst == nic and p.opcode != OP_ACK}
        sent = [p for p in mine if p.src == nic]
        acks = [p for p in sent if p.opcode == OP_ACK]
        assert len(acks) == 1 + 1 + 255 // 16        # CTS's ACK, the A-bit packet, every 16th
        for ack in acks:
            acked = arrived[(ack.psn, responder_qp(qpn, peer, ack.dqpn, nic))]
            assert 0 <= ack.t - (acked.t + wire_ns(acked.orig)) <= frame_ns
        # ACKs due while this NIC sends its own message sit between two of its packets.
        data = [i for i, p in enumerate(sent) if p.opcode in (OP_FIRST, OP_MIDDLE, OP_LAST_IMM)]
        between = [p for p in sent[data[0]:data[-1]] if p.opcode == OP_ACK]
        assert len(between) >= 10
        # Arrivals: at most one frame of queueing behind the peer's packet in flight.
        tx_of = {(p.opcode, p.psn, p.dqpn): p.t for p in theirs if p.src == peer}
        for p in mine:
            if p.dst == nic:
                assert 0 <= p.t - (tx_of[(p.opcode, p.psn, p.dqpn)] + flight) <= frame_ns


@pytest.mark.parametrize("window_packets,window_bytes", [(7, 20_000), (1, 1)])
def test_same_input_same_bytes_whatever_the_slice_size(tmp_path, monkeypatch, window_packets, window_bytes):
    out = CONFIGS["pmtu1024-novlan-ack4-pattern"][0]
    a = write_pcaps(FLOWS, FABRIC, out, _mkdir(tmp_path / "a"))
    b = write_pcaps(FLOWS, FABRIC, out, _mkdir(tmp_path / "b"))
    monkeypatch.setattr(pcap_mod, "WINDOW_PACKETS", window_packets)
    monkeypatch.setattr(pcap_mod, "WINDOW_BYTES", window_bytes)
    c = write_pcaps(FLOWS, FABRIC, out, _mkdir(tmp_path / "c"))
    assert [p.name for p in a] == [p.name for p in b] == [p.name for p in c]
    for pa, pb, pc in zip(a, b, c):
        assert pa.read_bytes() == pb.read_bytes() == pc.read_bytes()


def test_snaplen_keeps_orig_len(tmp_path):
    full = write_pcaps(FLOWS, FABRIC, Output(), _mkdir(tmp_path / "full"))
    cut = write_pcaps(FLOWS, FABRIC, Output(snaplen=128), _mkdir(tmp_path / "cut"))
    for pf, pc in zip(full, cut):
        hf, rf = read_pcap(pf)
        hc, rc = read_pcap(pc)
        assert hc[5] == 128 and len(rf) == len(rc)
        for (tf, _, of, ff), (tc, ic, oc, fc) in zip(rf, rc):
            assert (tc, oc, ic) == (tf, of, min(of, 128))
            assert fc == ff[:128]


@pytest.mark.parametrize("out", [Output(), Output(pmtu=1024, vlan=False), Output(ack_every=3),
                                 Output(snaplen=100, ack_every=1), Output(snaplen=30),
                                 Output(time_window="0:5000")])       # most NICs' files empty: not written
def test_estimate_is_exact(tmp_path, out):
    paths = write_pcaps(FLOWS, FABRIC, out, tmp_path)
    n_pkts = sum(len(read_pcap(p)[1]) for p in paths)
    assert estimate_pcap(FLOWS, FABRIC, out) == (n_pkts, sum(p.stat().st_size for p in paths))


@pytest.mark.parametrize("out", [Output(), Output(ack_every=3, format="pcapng"), Output(nics="0,2")])
def test_estimate_in_blocks_of_sender_nics_is_exact(tmp_path, monkeypatch, out):
    """A big job's count is built a few sender NICs at a time (memory): the files still judge it."""
    paths = write_pcaps(FLOWS, FABRIC, out, tmp_path)
    n_pkts = sum(len((read_pcap(p) if out.format == "pcap" else _pcapng_records(p))[1]) for p in paths)
    monkeypatch.setattr(pcap_mod, "BLOCK_MESSAGES", 2)
    pcap_mod._LAST_PLAN.clear()
    assert estimate_pcap(FLOWS, FABRIC, out) == (n_pkts, sum(p.stat().st_size for p in paths))


def _pcapng_records(path: Path):
    """(None, [EPB ...]): a minimal pcapng block walk (type, total length) counting EPBs."""
    data, pos, recs = path.read_bytes(), 0, []
    while pos < len(data):
        btype, blen = struct.unpack_from("<II", data, pos)
        if btype == 6:
            recs.append(pos)
        pos += blen
    return None, recs


def test_nvlink_only_writes_nothing(tmp_path):
    flows = make_flows([r for r in SCENARIO if r[6] == NVL])
    assert write_pcaps(flows, FABRIC, Output(), tmp_path) == []
    assert estimate_pcap(flows, FABRIC, Output()) == (0, 0)
    assert list(tmp_path.iterdir()) == []


def _mkdir(p: Path) -> Path:
    p.mkdir()
    return p


def test_slices_are_written_page_aligned_to_their_file_offset(tmp_path, monkeypatch):
    """Each slice lies in memory at its file offset modulo the page size, so the kernel copies
    whole pages into the page cache (misaligned slices wrote at half the speed; bench_pcap)."""
    from tracegen.emit.views import pcap
    seen, real = [], pcap._write_all

    def spy(f, buf):
        seen.append((f.tell() % 4096, buf.ctypes.data % 4096, len(buf)))
        real(f, buf)

    monkeypatch.setattr(pcap, "WINDOW_PACKETS", 50)       # many slices per file
    monkeypatch.setattr(pcap, "_write_all", spy)
    paths = write_pcaps(FLOWS, FABRIC, Output(), tmp_path)
    assert len(seen) > 2 * len(paths)
    assert all(at_file == in_memory for at_file, in_memory, _ in seen)
    assert sum(n for _, _, n in seen) + 24 * len(paths) == sum(p.stat().st_size for p in paths)


def test_ipv4_id_counts_each_senders_frames(run):
    """IPv4 identification: per sending NIC +1 per frame it sends (data, CTS, ACK), from 0, in send
    order; a received frame carries the id its sender gave it."""
    out, spec, paths, _, files = run
    sent = {}
    for path, (_, _, pkts) in files.items():
        nic = next(n for n in range(FABRIC.n_nics) if f"{FABRIC.nic_name(n)}.pcap" == path.name)
        mine = [p for p in pkts if p.src == nic]
        assert [p.ip_id for p in mine] == [k & 0xFFFF for k in range(len(mine))]
        sent.update({(p.src, p.dst, p.dqpn, p.opcode, p.psn, p.msn): p.ip_id for p in mine})
    for path, (_, _, pkts) in files.items():
        for p in pkts:
            assert sent[(p.src, p.dst, p.dqpn, p.opcode, p.psn, p.msn)] == p.ip_id
