"""NCCL's values on the wire, field by field, over a matrix of options (IPv4/IPv6, VLAN on/off,
PMTU 1024/4096, 1 or 4 QPs per connection, round-robin and split, ECN/CNP, pcapng, fifo_tc).

Oracles: scapy parses every frame and recomputes ICRC and IPv4 checksum; tshark reads every
file with nothing malformed and the same TTL, identification, RETH and QoS fields; the expected
values come from an independent model of NCCL 2.30's net_ib rules written here (not from
tracegen's code):
  * TTL / hop limit 255 for data, CTS and ACKs (ncclIbQpRtr: grh.hop_limit = 255), CNPs 64 (the
    NIC's own), one less per router crossed;
  * IPv4 identification: per sending NIC 0, 1, 2, ... over the frames it sends;
  * RETH VAs: receive slots `buff + (step % NCCL_STEPS) * stepSize` of a registered buffer of
    NCCL_STEPS slots per connection (Simple: 512 KiB slots, P2P 128 KiB), a message using the
    slots of its row's largest message (sliceSteps) and starting on a multiple of them; below
    2^47; the R_Key is the one the CTS announced;
  * CTS: WRITE Only of one 64 B ncclIbSendFifo {u64 addr, u64 size, u32 rkeys[8], u32 nreqs,
    u32 tag, u64 idx} to FIFO slot (idx - 1) % 256 (32 x 8 slots of 512 B), idx = 1, 2, ...;
    posted at the op's start (here: the flow's) up to NCCL_STEPS steps ahead, later ones once
    the message NCCL_STEPS steps back has arrived;
  * nccl.fifo_tc: the receiver's QPs (CTS, ACKs of data) with that traffic class, PCP DSCP >> 3.
"""
from __future__ import annotations

import ipaddress
import math
import shutil
import struct
import subprocess
from collections import defaultdict
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import pytest

pytest.importorskip("scapy.all")
import test_pcap as tp  # noqa: E402
from scapy.contrib.roce import AETH, BTH, CNPPadding  # noqa: E402
from scapy.layers.inet import IP, UDP  # noqa: E402
from scapy.layers.inet6 import IPv6  # noqa: E402
from scapy.layers.l2 import Dot1Q, Ether  # noqa: E402

from tracegen.config import Nccl, Output  # noqa: E402
from tracegen.emit.views.pcap import estimate_pcap, write_pcaps  # noqa: E402
from tracegen.tables import Algo  # noqa: E402

FABRIC = tp.FABRIC
MiB, KiB = tp.MiB, 1 << 10
NET = tp.NET
STEPS, FIFO_SLOTS, FIFO_SLOT_BYTES = 8, 256, 512
OP_WRITE_ONLY, OP_CNP = 0x0A, 0x81
DATA_OPS = {0x06, 0x07, 0x09, 0x0B}
NIC_OF_IP6 = {ipaddress.IPv6Address((0xFD << 120) | int(FABRIC.nic_ip[n])): n for n in range(FABRIC.n_nics)}

# (src, dst, channel, bytes, max_msg_bytes, start_ns, link[, communicator[, algo]])
SPEC = [
    (0, 2, 0, 10 * MiB, MiB, 50_000, NET),              # ring slices: 2 steps each, the window binds
    (0, 2, 0, 300_000, MiB, 600_000, NET),              # same connection later: slots go on cycling
    (4, 2, 1, 260 * 4096, 4096, 20_000, NET),           # 260 one-packet messages: the FIFO wraps at 256
    (6, 3, 0, 3 * 128 * KiB + 5, 128 * KiB, 30_000, NET, 0, int(Algo.P2P)),   # P2P: 128 KiB slots
    (2, 5, 0, 3 * MiB, MiB, 5_000, NET),                # cross-leaf (through a spine)
    (7, 0, 1, 20_000, MiB, 1_000, NET),
]
SMALL = [(s, d, ch, n // 16 if n >= MiB else n, mm // 16 if mm >= MiB else mm, t, *rest)
         for s, d, ch, n, mm, t, *rest in SPEC]

# name: (Output, spec, Nccl)
MATRIX = {
    "v4-vlan-4096": (Output(), SPEC, Nccl()),
    "v6-novlan-1024": (Output(ip_version=6, vlan=False, pmtu=1024), SMALL, Nccl()),
    "v4-qps4-roundrobin-fifo_tc": (Output(), SPEC, Nccl(qps_per_connection=4, fifo_tc=186)),
    "v4-novlan-qps4-split-ecn": (Output(vlan=False, qp_split=True, ecn_mark_fraction=0.03, ecn_seed=5), SPEC,
                                 Nccl(qps_per_connection=4)),
    "v6-ecn-dcqcn-1024-fifo_tc": (Output(ip_version=6, pmtu=1024, ecn_mark_fraction=0.05, dcqcn=True), SMALL,
                                  Nccl(fifo_tc=184)),
    "v4-pcapng-comments": (Output(format="pcapng", comments=True, ack_every=8), SPEC, Nccl()),
}


def make_flows(spec):
    flows = tp.make_flows([r[:7] for r in spec])
    for i, r in enumerate(spec):
        if len(r) > 8:
            flows.rows[i]["algo"] = r[8]
    return flows


@dataclass
class F:
    """One frame as scapy reads it."""
    t: int
    src: int
    dst: int
    opcode: int
    psn: int
    dqpn: int
    ttl: int
    ip_id: int | None
    tos: int
    pcp: int | None
    sport: int
    frame: bytes
    reth: tuple | None = None          # (va, rkey, dma_len)
    imm: int | None = None
    payload: bytes = b""
    msn: int | None = None
    ce: bool = False
    extra: dict = field(default_factory=dict)


def parse(frame: bytes, t: int, out: Output) -> F:
    p = Ether(frame)
    assert (Dot1Q in p) == out.vlan
    pcp = p[Dot1Q].prio if out.vlan else None
    if out.ip_version == 6:
        ip = p[IPv6]
        assert ip.fl == 0 and ip.nh == 17
        src, dst = NIC_OF_IP6[ipaddress.IPv6Address(ip.src)], NIC_OF_IP6[ipaddress.IPv6Address(ip.dst)]
        ttl, ip_id, tos = ip.hlim, None, ip.tc
    else:
        ip = p[IP]
        assert ip.flags == "DF" and ip.frag == 0
        chk = ip.chksum
        again = IP(bytes(ip)[:20])
        del again.chksum
        assert IP(bytes(again)).chksum == chk, "IPv4 header checksum"
        src, dst, ttl, ip_id, tos = tp.NIC_OF_IP[ip.src], tp.NIC_OF_IP[ip.dst], ip.ttl, ip.id, ip.tos
    assert p[UDP].dport == 4791 and p[UDP].chksum == 0
    b = p[BTH]
    icrc = frame[-4:]
    b.icrc = None
    assert bytes(p)[-4:] == icrc, "ICRC (scapy) differs"
    f = F(t, src, dst, b.opcode, b.psn, b.dqpn, ttl, ip_id, tos, pcp, p[UDP].sport, frame)
    rest = bytes(b.payload)
    if b.opcode == OP_CNP:
        assert CNPPadding in p
        return f
    if b.opcode == 0x11:
        f.msn = p[AETH].msn
        return f
    if b.opcode in tp.RETH_OPS:
        f.reth, rest = struct.unpack(">QII", rest[:16]), rest[16:]
    if b.opcode in tp.IMM_OPS:
        f.imm, rest = struct.unpack(">I", rest[:4])[0], rest[4:]
    f.payload = rest[:len(rest) - b.padcount]
    return f


@lru_cache(maxsize=None)
def written(name: str, root: str):
    out, spec, nccl = MATRIX[name]
    d = Path(root) / name
    d.mkdir()
    flows = make_flows(spec)
    paths = write_pcaps(flows, FABRIC, out, d, nccl=nccl)
    files = {}
    for path in paths:
        nic = next(n for n in range(FABRIC.n_nics) if path.name.startswith(FABRIC.nic_name(n) + "."))
        recs = read_records(path, out)
        files[nic] = (path, [parse(fr, t, out) for t, fr in recs])
    n_recs = sum(len(v[1]) for v in files.values())
    assert estimate_pcap(flows, FABRIC, out, nccl=nccl) == (n_recs, sum(p.stat().st_size for p in paths))
    return out, spec, nccl, files


def read_records(path: Path, out: Output):
    if out.format == "pcapng":
        import test_pcap_views as tv
        return [(t, data) for _, t, _, _, data, _ in tv.read_pcapng(path)[1]]
    return [(t, fr) for t, _, _, fr in tp.read_pcap(path)[1]]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return str(tmp_path_factory.mktemp("nccl"))


@pytest.fixture(scope="module", params=list(MATRIX))
def run(request, root):
    return written(request.param, root)


# --- the model ------------------------------------------------------------------------------------

def connections(spec):
    """{(src, dst, comm, channel): [(size, max_msg, algo, start_ns, src_rank), ...]} per NCCL message,
    in posting order."""
    msgs = defaultdict(list)
    for r in sorted(spec, key=lambda r: r[5]):
        if r[6] != NET:
            continue
        nbytes, mm, algo = r[3], r[4], (r[8] if len(r) > 8 else 0)
        n = max(1, math.ceil(nbytes / mm))
        for k in range(n):
            msgs[tp.conn_of(r)].append((mm if k < n - 1 else nbytes - (n - 1) * mm, mm, algo, r[5], r[0]))
    return msgs


def ring_positions(msgs):
    """Per message: (slot bytes, steps, step counter) - each message aligned to its steps."""
    out, step = [], 0
    for size, mm, algo, _, _ in msgs:
        slot = 128 * KiB if algo == Algo.P2P else 512 * KiB
        steps = 1 << math.ceil(math.log2(max(1, math.ceil(mm / slot))))
        step = -(-step // steps) * steps
        out.append((slot, steps, step))
        step += steps
    return out


def sent_by(files, nic):
    return [f for f in files[nic][1] if f.src == nic]


def qpns(spec, nq):
    """{conn: [(QPN on sender, QPN on receiver) per QP]} - per NIC from 0x100 in sorted order."""
    nxt, out = defaultdict(lambda: 0x100), {}
    for conn in sorted({tp.conn_of(r) for r in spec if r[6] == NET}):
        s, d = conn[:2]
        out[conn] = []
        for _ in range(nq):
            out[conn].append((nxt[s], nxt[d]))
            nxt[s] += 1
            nxt[d] += 1
    return out


# --- per frame --------------------------------------------------------------------------------

def test_ttl_is_nccls_255_and_cnps_64(run):
    out, spec, nccl, files = run
    for nic, (_, frames) in files.items():
        for f in frames:
            start = 64 if f.opcode == OP_CNP else 255
            crossed = 0 if f.src == nic else int(FABRIC.hops(f.src, f.dst)) - 1
            assert f.ttl == start - crossed


def test_ipv4_identification_counts_each_senders_frames(run):
    out, spec, nccl, files = run
    if out.ip_version == 6:
        assert all(f.ip_id is None for _, fr in files.values() for f in fr)
        return
    for nic in files:
        mine = sent_by(files, nic)
        assert [f.ip_id for f in mine] == [k & 0xFFFF for k in range(len(mine))]
    copies = sender_copies(files, out)
    for nic, (_, frames) in files.items():           # a received copy: the sender's number
        seen = defaultdict(int)
        for f in frames:
            if f.src != nic:
                key = (f.src, f.dst, f.frame[udp_at(out):-4])
                assert f.ip_id == copies[key][seen[key]].ip_id
                seen[key] += 1


def udp_at(out: Output) -> int:
    return (18 if out.vlan else 14) + (40 if out.ip_version == 6 else 20)


def sender_copies(files, out):
    """{(sender, receiver, frame from UDP to the ICRC): the sender's copies in order} - its identity
    (BTH and payload; identical only for CNPs to one QP), whatever the IP header and ICRC."""
    copies = defaultdict(list)
    for nic in files:
        for f in sent_by(files, nic):
            copies[(f.src, f.dst, f.frame[udp_at(out):-4])].append(f)
    return copies


def test_qos_fields_per_kind(run):
    """Data and the sender's ACKs of CTS: output DSCP/ECN and PCP; CTS and ACKs of data (the
    receiver's QPs): nccl.fifo_tc when set (PCP = DSCP >> 3); CNPs DSCP 48, PCP 6."""
    out, spec, nccl, files = run
    qp = qpns(spec, nccl.qps_per_connection)
    receiver_qps = {(c[1], c[0], qs) for c, pairs in qp.items() for qs, qd in pairs}    # CTS: to the sender's QPs
    for nic, (_, frames) in files.items():
        for f in frames:
            data_tos = (out.dscp << 2) | out.ecn
            if f.opcode == OP_CNP:
                want_tos, want_pcp = (48 << 2) | out.ecn, 6
            elif f.opcode in DATA_OPS:
                want_tos, want_pcp = data_tos, out.pcp
                if f.src != nic and (f.tos & 3) == 3 and out.ecn_mark_fraction:
                    want_tos |= 3                      # CE marked on the way
            else:
                # CTS and ACKs of data: from the receiver to the sender's QP
                from_receiver = (f.src, f.dst, f.dqpn) in receiver_qps
                if nccl.fifo_tc >= 0 and from_receiver:
                    want_tos, want_pcp = nccl.fifo_tc, nccl.fifo_tc >> 5
                else:
                    want_tos, want_pcp = data_tos, out.pcp
            assert f.tos == want_tos, (f.opcode, f.tos, want_tos)
            if out.vlan:
                assert f.pcp == want_pcp


# --- per connection: buffers, FIFO, CTS timing ----------------------------------------------

def _conn_frames(files, spec, nq, conn):
    """(data messages [(t, [parts as frames with RETH])] in NCCL order, CTS frames (receiver's
    copies, as sent) in order) of a connection."""
    s, d = conn[:2]
    pairs = qpns(spec, nq)[conn]
    data_qps = {qd for _, qd in pairs}
    firsts = [f for f in sent_by(files, s) if f.dst == d and f.dqpn in data_qps and f.reth is not None
              and f.opcode in DATA_OPS]
    cts = [f for f in sent_by(files, d) if f.dst == s and f.opcode == OP_WRITE_ONLY and f.dqpn == pairs[0][0]]
    return firsts, cts


def test_reth_vas_cycle_in_the_connections_buffer_and_cts_carry_ncclibsendfifo(run):
    out, spec, nccl, files = run
    nq = nccl.qps_per_connection
    for conn, msgs in connections(spec).items():
        firsts, cts = _conn_frames(files, spec, nq, conn)
        parts = nq if out.qp_split else 1
        assert len(firsts) == parts * len(msgs) and len(cts) == len(msgs)
        pos = ring_positions(msgs)
        base = firsts[0].reth[0]
        fifo = cts[0].reth[0]
        for k, ((size, mm, algo, start, rank), (slot, steps, step), c) in enumerate(zip(msgs, pos, cts)):
            mine = firsts[k * parts:(k + 1) * parts]
            va, rkey, _ = mine[0].reth
            assert va == base + (step % STEPS) * slot                       # the ring of NCCL_STEPS slots
            assert va + size <= base + STEPS * slot < 1 << 47              # inside the buffer, canonical
            assert sum(f.reth[2] for f in mine) == size
            if parts > 1:                                                  # QP q writes at addr + q x chunk
                chunk = math.ceil(math.ceil(size / parts) / 128) * 128
                assert [f.reth[0] for f in mine] == [va + q * chunk for q in range(parts)]
            assert all(f.reth[1] == rkey for f in mine)
            # the CTS: RETH into the sender's FIFO slot, the ncclIbSendFifo element as payload
            assert c.reth == (fifo + (k % FIFO_SLOTS) * FIFO_SLOT_BYTES, c.reth[1], 64) and c.reth[1] != rkey
            assert c.reth[1] == cts[0].reth[1]
            addr, posted, *rkeys = struct.unpack("<QQ8I", c.payload[:48])
            nreqs, tag, idx = struct.unpack("<IIQ", c.payload[48:64])
            assert (addr, posted, rkeys, nreqs, tag, idx) == (va, steps * slot, [rkey] + [0] * 7, 1, rank, k + 1)
            assert posted >= size


def test_cts_open_with_a_burst_and_later_ones_wait_for_the_slot(run):
    out, spec, nccl, files = run
    nq = nccl.qps_per_connection
    for conn, msgs in connections(spec).items():
        s, d = conn[:2]
        firsts, cts = _conn_frames(files, spec, nq, conn)
        parts = nq if out.qp_split else 1
        pos = ring_positions(msgs)
        # arrival of each message at the receiver: the end of its last packet (all QP parts)
        rx = [f for f in files[d][1] if f.src == s and f.opcode in DATA_OPS]
        ends = []
        for k in range(len(msgs)):
            mine = firsts[k * parts:(k + 1) * parts]
            ends.append(max(_arrival_end(rx, f, out) for f in mine))
        for k, ((size, mm, algo, start, rank), (slot, steps, step)) in enumerate(zip(msgs, pos)):
            end = step + steps
            if end <= STEPS:      # within the first NCCL_STEPS steps: posted when the op opens,
                assert cts[k].t < ends[0]      # a burst before even the first message has arrived
            else:                 # NCCL_STEPS steps back must have arrived first
                w = next(i for i in range(k) if pos[i][2] + pos[i][1] >= end - STEPS)
                assert cts[k].t >= ends[w]
            # the message waits for its CTS (as it arrives at the sender)
            got = next(f for f in files[s][1] if f.src == d and f.opcode == OP_WRITE_ONLY and f.reth == cts[k].reth
                       and f.payload == cts[k].payload)
            assert firsts[k * parts].t >= got.t + tp.wire_ns(len(got.frame))


def _arrival_end(rx, sent_first, out):
    """End of the last packet of the message whose first packet is sent_first, in rx."""
    i = next(i for i, f in enumerate(rx) if f.dqpn == sent_first.dqpn and f.psn == sent_first.psn)
    n = 1 if sent_first.opcode == 0x0B else math.ceil(sent_first.reth[2] / out.pmtu)
    last = rx[i]
    for f in rx[i:]:
        if f.dqpn == sent_first.dqpn and (f.psn - sent_first.psn) % (1 << 24) == n - 1:
            last = f
            break
    return last.t + tp.wire_ns(len(last.frame))


def test_the_fifo_wraps_after_256_cts(root):
    out, spec, nccl, files = written("v4-vlan-4096", root)
    conn = tp.conn_of(SPEC[2])
    _, cts = _conn_frames(files, SPEC, 1, conn)
    assert len(cts) == 260
    slots = [(c.reth[0] - cts[0].reth[0]) // FIFO_SLOT_BYTES for c in cts]
    assert slots == [k % 256 for k in range(260)]
    assert [struct.unpack("<Q", c.payload[56:64])[0] for c in cts] == list(range(1, 261))


def test_tshark_agrees_and_finds_nothing_malformed(run):
    tshark = shutil.which("tshark")
    if tshark is None:
        pytest.skip("tshark not installed")
    out, spec, nccl, files = run
    v6 = out.ip_version == 6
    for nic, (path, frames) in files.items():
        res = subprocess.run([tshark, "-r", str(path), "-T", "fields", "-E", "separator=,", "-E", "occurrence=f",
                              "-e", "_ws.malformed", "-e", "ipv6.hlim" if v6 else "ip.ttl",
                              "-e", "ipv6.tclass" if v6 else "ip.id", "-e", "infiniband.reth.va",
                              "-e", "infiniband.reth.r_key", "-e", "infiniband.reth.dmalen", "-e", "vlan.priority",
                              "-e", "infiniband.bth.opcode"],
                             capture_output=True, text=True, check=True)
        rows = [line.split(",") for line in res.stdout.splitlines()]
        assert len(rows) == len(frames)
        for r, f in zip(rows, frames):
            assert r[0] == "" and int(r[1]) == f.ttl and int(r[7]) == f.opcode
            assert int(r[2], 0) == (f.tos if v6 else f.ip_id)
            if f.reth is not None and f.opcode != OP_CNP:
                assert (int(r[3], 0), int(r[4], 0), int(r[5])) == f.reth
            if out.vlan:
                assert int(r[6]) == f.pcp
