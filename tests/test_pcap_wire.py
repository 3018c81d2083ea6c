"""The wire matrix: IPv4/IPv6, VLAN on/off, PMTU 1024/4096, P_Key, several QPs per connection
(round-robin and split). scapy parses every packet and recomputes its ICRC (its IPv6 masking is
independent of ours), tshark finds nothing malformed and agrees field by field, and an
independent model (below) predicts QPNs, which QP carries which message, PSNs and ACKs."""
from __future__ import annotations

import ipaddress
import math
import shutil
import subprocess
from collections import defaultdict
from functools import lru_cache
from pathlib import Path

import pytest

pytest.importorskip("scapy.all")
import test_pcap as tp  # noqa: E402
from scapy.contrib.roce import AETH, BTH  # noqa: E402
from scapy.layers.inet import IP, UDP  # noqa: E402
from scapy.layers.inet6 import IPv6  # noqa: E402
from scapy.layers.l2 import Dot1Q, Ether  # noqa: E402

from tracegen.config import Output  # noqa: E402
from tracegen.emit.views.pcap import estimate_pcap, write_pcaps  # noqa: E402

FABRIC = tp.FABRIC
# IPv6 plan (documented in roce.ipv6_from_ipv4): fd00::/96 + the IPv4 address in the low 32 bits.
NIC_OF_IP6 = {ipaddress.IPv6Address((0xFD << 120) | int(FABRIC.nic_ip[n])): n for n in range(FABRIC.n_nics)}

# name: (Output, flow spec, qps_per_connection)
CONFIGS = {
    "v6-vlan-4096": (Output(ip_version=6), tp.SCENARIO, 1),
    "v6-novlan-1024-pkey": (Output(ip_version=6, vlan=False, pmtu=1024, pkey=0x8001, ack_every=4,
                                   payload="pattern", dscp=24, ecn=1), tp.SMALL, 1),
    "v4-pkey-qps3-roundrobin": (Output(pkey=0x7FFF), tp.SCENARIO, 3),
    "v6-qps2-split-1024": (Output(ip_version=6, pmtu=1024, qp_split=True, ack_every=4), tp.SMALL, 2),
    "v4-novlan-qps4-split": (Output(vlan=False, qp_split=True), tp.SCENARIO, 4),
    # split parts of one frame length but different pad counts, pattern payload: pad bytes stay 0
    "v4-qps3-split-pattern": (Output(qp_split=True, payload="pattern"), tp.SCENARIO, 3),
}


def decode(frame: bytes, out: Output, t: int, orig: int, ce_ok: bool = False) -> tp.Pkt:
    """ce_ok: the ECN field may also read CE (3) - a switch marked the packet."""
    p = Ether(frame)
    l2 = 18 if out.vlan else 14
    assert (Dot1Q in p) == out.vlan
    tos = (out.dscp << 2) | out.ecn
    tclass = p[IPv6].tc if out.ip_version == 6 else p[IP].tos
    ecn = tclass & 3
    if ce_ok and ecn == 3:
        tos |= 3
    if out.vlan:
        assert p[Dot1Q].prio == out.pcp and p[Dot1Q].vlan == out.vlan_id
        assert p[Dot1Q].type == (0x86DD if out.ip_version == 6 else 0x0800)
    if out.ip_version == 6:
        assert IP not in p
        ip = p[IPv6]
        assert (ip.version, ip.tc, ip.fl, ip.nh) == (6, tos, 0, 17)
        assert ip.plen == len(frame) - l2 - 40 == p[UDP].len
        src, dst = NIC_OF_IP6[ipaddress.IPv6Address(ip.src)], NIC_OF_IP6[ipaddress.IPv6Address(ip.dst)]
        ttl, ip_id = ip.hlim, None
    else:
        ip = p[IP]
        assert ip.tos == tos and ip.flags == "DF" and ip.len == len(frame) - l2 == p[UDP].len + 20
        chk = ip.chksum
        ip2 = IP(bytes(ip)[:20])
        del ip2.chksum
        assert IP(bytes(ip2)).chksum == chk
        src, dst, ttl = tp.NIC_OF_IP[ip.src], tp.NIC_OF_IP[ip.dst], ip.ttl
        ip_id = ip.id
    assert p[UDP].dport == 4791 and p[UDP].chksum == 0
    b = p[BTH]
    assert b.migreq == 1 and b.pkey == out.pkey and b.version == 0 and not (b.fecn or b.becn)
    icrc_wire = frame[-4:]
    b.icrc = None
    assert bytes(p)[-4:] == icrc_wire, "ICRC (scapy) differs"
    rest = bytes(b.payload)
    pkt = tp.Pkt(t, orig, src, dst, b.opcode, b.psn, b.dqpn, b.ackreq, b.padcount, p[UDP].sport, ttl, b"")
    pkt.ecn = ecn
    pkt.ip_id = ip_id
    if b.opcode == tp.OP_ACK:
        pkt.msn = p[AETH].msn
        assert p[AETH].syndrome == 0x1F and len(rest) == 4
        return pkt
    if b.opcode in tp.RETH_OPS:
        pkt.reth, rest = tp.struct.unpack(">QII", rest[:16]), rest[16:]
    if b.opcode in tp.IMM_OPS:
        pkt.imm, rest = tp.struct.unpack(">I", rest[:4])[0], rest[4:]
    assert len(rest) % 4 == 0 and rest[len(rest) - b.padcount:] == bytes(b.padcount)
    pkt.payload = rest[:len(rest) - b.padcount]
    return pkt


# --- the model ------------------------------------------------------------------------------------

def expected_qps(spec, nq):
    """{connection + (q,): (QPN on s, QPN on d)}: per NIC from 0x100 in sorted order."""
    conns = sorted({tp.conn_of(r) for r in spec if r[6] == tp.NET})
    nxt, qpn = defaultdict(lambda: 0x100), {}
    for conn in conns:
        s, d = conn[:2]
        for q in range(nq):
            qpn[conn + (q,)] = (nxt[s], nxt[d])
            nxt[s] += 1
            nxt[d] += 1
    return qpn


def expected_writes(spec, nq, split):
    """{connection + (q,): [(dma_len, imm), ...]} in the order that QP sends them."""
    writes = defaultdict(list)
    for conn, sizes in tp.expected_messages(spec).items():
        for i, size in enumerate(sizes):
            if split:
                chunk = math.ceil(math.ceil(size / nq) / 128) * 128
                for q in range(nq):
                    writes[conn + (q,)].append((min(max(size - q * chunk, 0), chunk), size))
            else:
                writes[conn + (i % nq,)].append((size, size))
    return writes


@lru_cache(maxsize=None)
def written(name: str, tmp_root: str):
    out, spec, nq = CONFIGS[name]
    d = Path(tmp_root) / name
    d.mkdir()
    paths = write_pcaps(tp.make_flows(spec), FABRIC, out, d, qps=nq)
    files = {}
    for path in paths:
        header, recs = tp.read_pcap(path)
        files[path] = (header, recs, [decode(fr, out, t, orig) for t, incl, orig, fr in recs])
    assert estimate_pcap(tp.make_flows(spec), FABRIC, out, qps=nq) == (
        sum(len(r) for _, r, _ in files.values()), sum(p.stat().st_size for p in paths))
    return out, spec, nq, paths, files


@pytest.fixture(scope="module")
def tmp_root(tmp_path_factory):
    return str(tmp_path_factory.mktemp("wire"))


@pytest.fixture(scope="module", params=list(CONFIGS))
def run(request, tmp_root):
    return written(request.param, tmp_root)


def test_qps_messages_psns_sports(run):
    out, spec, nq, paths, files = run
    qps, writes = expected_qps(spec, nq), expected_writes(spec, nq, out.qp_split)
    owner = {}
    for conn_q, (qs, qd) in qps.items():
        s, d = conn_q[:2]
        owner[(s, d, qd)] = (conn_q, True)        # data to the receiver's QP
        owner[(d, s, qs)] = (conn_q, False)       # CTS to the sender's QP
    seen = set()
    for path, (_, _, pkts) in files.items():
        seqs = defaultdict(list)
        for p in pkts:
            if p.opcode != tp.OP_ACK:
                seqs[(p.src, p.dst, p.dqpn)].append(p)
        for key, seq in seqs.items():
            assert [p.psn for p in seq] == list(range(len(seq)))       # per QP per direction
            qp, is_data = owner[key]
            assert all(p.sport == tp.sport(*qps[qp]) for p in seq)   # each QP its own entropy
            if is_data:
                got, i = [], 0
                while i < len(seq):
                    first = seq[i]
                    n = 1 if first.opcode == tp.OP_ONLY_IMM else math.ceil(first.reth[2] / out.pmtu)
                    msg = seq[i:i + n]
                    assert [p.opcode for p in msg] == ([tp.OP_ONLY_IMM] if n == 1 else
                                                      [tp.OP_FIRST] + [tp.OP_MIDDLE] * (n - 2) + [tp.OP_LAST_IMM])
                    assert sum(len(p.payload) for p in msg) == first.reth[2]
                    got.append((first.reth[2], msg[-1].imm))
                    i += n
                assert got == writes[qp], qp
            else:      # CTS: one per NCCL message, only on the connection's QP 0
                assert qp[-1] == 0
                assert len(seq) == len(tp.expected_messages(spec)[qp[:-1]])
                assert all(p.opcode == tp.OP_ONLY and p.reth[2] == 64 for p in seq)
            seen.add((key, path.name))
    n_data_qps = sum(1 for qp in qps if writes[qp])
    assert len(seen) == 2 * (n_data_qps + len(qps) // nq)


def test_acks_per_qp(run):
    out, spec, nq, paths, files = run
    for path, (_, _, pkts) in files.items():
        acks, seqs = defaultdict(list), defaultdict(list)
        for p in pkts:
            if p.opcode == tp.OP_ACK:
                acks[(p.dst, p.src, p.dqpn)].append((p.psn, p.msn, p.sport))
            else:
                seqs[(p.src, p.dst, p.dqpn)].append(p)
        qps = expected_qps(spec, nq)
        peer = {}
        for qp, (qs, qd) in qps.items():
            peer[(qp[0], qp[1], qd)] = qs
            peer[(qp[1], qp[0], qs)] = qd
        for (src, dst, dqpn), seq in seqs.items():
            want, done, in_msg = [], 0, 0
            for p in seq:
                if p.opcode in (tp.OP_FIRST, tp.OP_ONLY_IMM, tp.OP_ONLY):
                    in_msg = 0
                in_msg += 1
                if p.ack:
                    done += 1
                    want.append((p.psn, done, p.sport))
                elif out.ack_every and in_msg % out.ack_every == 0:
                    want.append((p.psn, done, p.sport))
            assert acks[(src, dst, peer[(src, dst, dqpn)])] == want


def test_addresses_ttl_and_spacing(run):
    out, spec, nq, paths, files = run
    for path, (_, recs, pkts) in files.items():
        nic = next(n for n in range(FABRIC.n_nics) if FABRIC.nic_name(n) + ".pcap" == path.name)
        for (_, _, _, fr), p in zip(recs, pkts):
            assert nic in (p.src, p.dst)
            hops = int(FABRIC.hops(p.src, p.dst))
            assert p.ttl == (255 if p.src == nic else 255 - (hops - 1))
        for tx in (True, False):
            stream = [p for p in pkts if (p.src == nic) == tx]
            assert all(b.t >= a.t + tp.wire_ns(a.orig) for a, b in zip(stream, stream[1:]))


@pytest.mark.parametrize("name", [k for k, v in CONFIGS.items() if v[2] == 1])   # test_pcap's model: 1 QP
def test_single_qp_configs_pass_the_original_oracle(name, tmp_root):
    out, spec, nq, paths, files = written(name, tmp_root)
    r = (out, spec, paths, None, files)
    tp.test_messages_psns_and_fields_follow_the_flow_table(r)
    tp.test_acks(r)
    tp.test_timing(r)


def test_tshark_reads_every_packet_like_scapy(run):
    tshark = shutil.which("tshark")
    if tshark is None:
        pytest.skip("tshark not installed (apt-get install tshark)")
    out, spec, nq, paths, files = run
    ipf = "ipv6.src" if out.ip_version == 6 else "ip.src"
    for path, (_, _, pkts) in files.items():
        res = subprocess.run([tshark, "-r", str(path), "-T", "fields", "-E", "separator=,",
                              "-e", "_ws.malformed", "-e", "infiniband.bth.opcode", "-e", "infiniband.bth.psn",
                              "-e", "infiniband.bth.destqp", "-e", "infiniband.bth.p_key", "-e", ipf,
                              "-e", "udp.srcport"],
                             capture_output=True, text=True, check=True)
        lines = res.stdout.splitlines()
        assert len(lines) == len(pkts)
        for line, p in zip(lines, pkts):
            malformed, opcode, psn, destqp, pkey, src, sport = line.split(",")
            assert malformed == ""
            assert (int(opcode), int(psn), int(destqp, 16), int(pkey, 0), int(sport)) == (
                p.opcode, p.psn, p.dqpn, out.pkey, p.sport)
            want_src = (str(ipaddress.IPv6Address((0xFD << 120) | int(FABRIC.nic_ip[p.src])))
                        if out.ip_version == 6 else FABRIC.nic_ip_str(p.src))
            assert src == want_src


def test_communicators_open_their_own_qps(tmp_path):
    """NCCL opens connections per communicator: flows between the same two ranks on the same
    channel from different parallelism groups (DP, TP, embedding) travel on different QPs, while
    sequence parallelism rides the tensor-parallel communicator (Megatron-LM)."""
    import numpy as np

    from tracegen.tables import COMMOP_DTYPE, CommOps, Dim, Flows, Ragged

    sizes, dims = (100, 200, 300, 400), (Dim.DP, Dim.TP, Dim.SP, Dim.EMB)
    base = tp.make_flows([(0, 2, 0, size, tp.MiB, 10_000 * k, tp.NET) for k, size in enumerate(sizes)])
    ops = np.zeros(len(dims), COMMOP_DTYPE)
    ops["op_id"], ops["dim"] = np.arange(len(dims)), dims
    rows = base.rows.copy()
    rows["op_id"] = np.arange(len(dims))
    flows = Flows(rows, base.deps, CommOps(ops, Ragged.empty(len(dims)), Ragged.empty(len(dims))))
    paths = write_pcaps(flows, FABRIC, Output(), tmp_path)
    receiver = next(p for p in paths if p.name.startswith(FABRIC.nic_name(2)))
    seen = {}
    for _, _, _, frame in tp.read_pcap(receiver)[1]:
        p = Ether(frame)
        if p[BTH].opcode == 0x0B and p[IP].src == FABRIC.nic_ip_str(0):     # WRITE Only-Imm
            reth = bytes(p[BTH].payload)[:16]
            seen[int.from_bytes(reth[12:16], "big")] = (p[BTH].dqpn, p[BTH].psn, p[UDP].sport)
    assert sorted(seen) == list(sizes)
    qp = {size: seen[size][0] for size in sizes}
    assert len({qp[100], qp[200], qp[400]}) == 3             # DP, TP, EMB: three QPs
    assert qp[200] == qp[300]                                # SP on TP's communicator
    assert (seen[200][1], seen[300][1]) == (0, 1)            # PSNs continue on the shared QP
    assert seen[100][1] == seen[400][1] == 0                 # each fresh QP starts at PSN 0
    assert len({seen[s][2] for s in (100, 200, 400)}) == 3   # and hashes to its own UDP port
