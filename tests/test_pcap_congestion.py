"""Congestion artefacts: CE marks in the receivers' copies and the CNPs the receiver NICs send.

scapy parses every CNP with its own CNP layer and recomputes the ICRC; tshark shows opcode 129
and nothing malformed; CNPs keep the per-QP gap of 4 us, each follows a CE-marked arrival on its
QP, every CE mark is answered or absorbed by the gap; all other packets still pass the oracles
of test_pcap / test_pcap_wire."""
from __future__ import annotations

import shutil
import subprocess
from collections import defaultdict
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("scapy.all")
import test_pcap as tp  # noqa: E402
import test_pcap_wire as tw  # noqa: E402
from scapy.contrib.roce import BTH, CNPPadding  # noqa: E402
from scapy.layers.inet import IP, UDP  # noqa: E402
from scapy.layers.inet6 import IPv6  # noqa: E402
from scapy.layers.l2 import Dot1Q, Ether  # noqa: E402

from tracegen.config import Output  # noqa: E402
from tracegen.emit.packets import congestion  # noqa: E402
from tracegen.emit.packets.schedule import MAX_TRAIN_PACKETS  # noqa: E402
from tracegen.emit.views.pcap import estimate_pcap, write_pcaps  # noqa: E402

GAP_NS = 4000
CONFIGS = {
    "v4-vlan-random5%": (Output(ecn_mark_fraction=0.05, ecn_seed=7), tp.SCENARIO),
    "v6-novlan-1024-periodic20%": (Output(ip_version=6, vlan=False, pmtu=1024, ecn_mark_fraction=0.2,
                                          ecn_pattern="periodic", ack_every=4), tp.SMALL),
    "v4-vlan-random5%-dcqcn": (Output(ecn_mark_fraction=0.05, ecn_seed=7, dcqcn=True), tp.SCENARIO),
}


def decode_cnp(frame: bytes, out: Output, t: int, orig: int):
    p = Ether(frame)
    assert CNPPadding in p and p[BTH].opcode == 0x81
    b = p[BTH]
    assert b.becn == 1 and not b.fecn and b.psn == 0 and b.pkey == out.pkey and not b.ackreq
    assert bytes(p[CNPPadding]) == bytes(16)                      # 16 reserved zero bytes
    icrc = frame[-4:]
    b.icrc = None
    assert bytes(p)[-4:] == icrc, "CNP ICRC (scapy) differs"
    assert p[UDP].sport == 0 and p[UDP].dport == 4791 and p[UDP].chksum == 0
    if out.vlan:
        assert p[Dot1Q].prio == 6
    if out.ip_version == 6:
        ip = p[IPv6]
        assert ip.tc >> 2 == 48 and len(frame) == 94 + (4 if out.vlan else 0)
        src, dst = (tw.NIC_OF_IP6[tw.ipaddress.IPv6Address(a)] for a in (ip.src, ip.dst))
        ttl = ip.hlim
    else:
        ip = p[IP]
        assert ip.tos == (48 << 2) | out.ecn and len(frame) == 74 + (4 if out.vlan else 0)
        src, dst, ttl = tp.NIC_OF_IP[ip.src], tp.NIC_OF_IP[ip.dst], ip.ttl
    return tp.Pkt(t, orig, src, dst, 0x81, 0, b.dqpn, 0, 0, 0, ttl, b"")


@lru_cache(maxsize=None)
def written(name, tmp_root):
    out, spec = CONFIGS[name]
    d = Path(tmp_root) / name
    d.mkdir()
    flows = tp.make_flows(spec)
    paths = write_pcaps(flows, tp.FABRIC, out, d)
    files, cnps = {}, {}
    for path in paths:
        header, recs = tp.read_pcap(path)
        pk, cn = [], []
        for t, incl, orig, fr in recs:
            is_cnp = fr[(18 if out.vlan else 14) + (40 if out.ip_version == 6 else 20) + 8] == 0x81
            if is_cnp:
                cn.append(decode_cnp(fr, out, t, orig))
            else:
                pk.append(tw.decode(fr, out, t, orig, ce_ok=True))
        files[path], cnps[path] = (header, [r for r in recs], pk), cn
    assert estimate_pcap(flows, tp.FABRIC, out) == (sum(len(f[1]) for f in files.values()),
                                                     sum(p.stat().st_size for p in paths))
    return out, spec, paths, files, cnps


@pytest.fixture(scope="module")
def tmp_root(tmp_path_factory):
    return str(tmp_path_factory.mktemp("cnp"))


@pytest.fixture(scope="module", params=list(CONFIGS))
def run(request, tmp_root):
    return written(request.param, tmp_root)


def nic_of(path):
    return next(n for n in range(tp.FABRIC.n_nics) if tp.FABRIC.nic_name(n) + ".pcap" == path.name)


def test_ce_marks_only_in_receiver_copies(run):
    out, spec, paths, files, cnps = run
    sent, marked, n_data = {}, [], 0
    for path, (_, _, pkts) in files.items():
        nic = nic_of(path)
        for p in pkts:
            key = (p.src, p.dst, p.dqpn, p.psn, p.opcode)
            if p.src == nic:
                assert p.ecn == out.ecn                  # the sender's NIC sends ECT
                sent[key] = p
            elif p.ecn == 3:
                assert p.opcode in (tp.OP_FIRST, tp.OP_MIDDLE, tp.OP_LAST_IMM, tp.OP_ONLY_IMM)
                marked.append(key)
            if p.dst == nic and p.opcode in (tp.OP_FIRST, tp.OP_MIDDLE, tp.OP_LAST_IMM, tp.OP_ONLY_IMM):
                n_data += 1
    assert marked and all(k in sent for k in marked)
    if out.ecn_pattern == "periodic":
        assert len(marked) == int(n_data * out.ecn_mark_fraction)
    else:
        assert abs(len(marked) / n_data - out.ecn_mark_fraction) < 0.03


def test_cnps_parse_keep_the_gap_and_follow_ce_marks(run):
    out, spec, paths, files, cnps = run
    qpn = tp.expected_qpns(spec)
    sender_qp = {conn[:2] + (qs,): conn for conn, (qs, qd) in qpn.items()}
    for path, (_, _, pkts) in files.items():
        nic = nic_of(path)
        ce_end = defaultdict(list)       # per connection: CE-marked arrivals (end of frame)
        for p in pkts:
            if p.dst == nic and p.ecn == 3:
                (conn,) = [c for c, (qs, qd) in qpn.items() if (c[0], c[1], qd) == (p.src, p.dst, p.dqpn)]
                ce_end[conn].append(p.t + tp.wire_ns(p.orig))
        sent_cnp = defaultdict(list)
        for c in cnps[path]:
            conn = sender_qp[(c.dst, c.src, c.dqpn)]     # DestQP = the sender's QP of that connection
            if c.src == nic:
                sent_cnp[conn].append(c.t)
        for conn, ts in sent_cnp.items():
            assert all(b - a >= GAP_NS for a, b in zip(ts, ts[1:])), "one CNP per QP per 4 us"
            assert all(any(a <= t for a in ce_end[conn]) for t in ts)
        for conn, ends in ce_end.items():    # each mark answered, or absorbed by the 4 us gap
            assert all(any(t > a - GAP_NS for t in sent_cnp[conn]) for a in ends)
        assert sent_cnp.keys() <= ce_end.keys()
    assert sum(len(c) for c in cnps.values()) > 0


def test_cnps_appear_in_both_files(run):
    out, spec, paths, files, cnps = run
    tx = sorted((c.src, c.dst, c.dqpn) for path, cs in cnps.items() for c in cs if c.src == nic_of(path))
    rx = sorted((c.src, c.dst, c.dqpn) for path, cs in cnps.items() for c in cs if c.dst == nic_of(path))
    assert tx == rx and tx
    for path, cs in cnps.items():     # made by the NIC: TTL 64 as sent, less the routers crossed
        for c in cs:
            assert c.ttl == (64 if c.src == nic_of(path) else 64 - (int(tp.FABRIC.hops(c.src, c.dst)) - 1))


def test_other_packets_pass_the_original_oracles(run):
    out, spec, paths, files, cnps = run
    r = (out, spec, paths, None, files)
    tp.test_messages_psns_and_fields_follow_the_flow_table(r)
    tp.test_acks(r)
    for path, (_, recs, pkts) in files.items():     # spacing per direction, CNPs included
        nic = nic_of(path)
        everything = sorted(pkts + cnps[path], key=lambda p: p.t)
        for tx in (True, False):
            s = [p for p in everything if (p.src == nic) == tx]
            assert all(b.t >= a.t + tp.wire_ns(a.orig) for a, b in zip(s, s[1:]))


def test_tshark_opcode_129_nothing_malformed(run):
    tshark = shutil.which("tshark")
    if tshark is None:
        pytest.skip("tshark not installed")
    out, spec, paths, files, cnps = run
    for path in paths:
        res = subprocess.run([tshark, "-r", str(path), "-T", "fields", "-e", "_ws.malformed",
                              "-e", "infiniband.bth.opcode", "-e", "ip.dsfield.dscp", "-e", "ipv6.tclass.dscp"],
                             capture_output=True, text=True, check=True)
        rows = [line.split("\t") for line in res.stdout.splitlines()]
        assert len(rows) == len(files[path][1]) and all(r[0] == "" for r in rows)
        assert sum(r[1] == "129" for r in rows) == len(cnps[path])
        assert all("48" in r[2:] for r in rows if r[1] == "129")


def test_wire_md_cnp_layout():
    """Same bytes as the ConnectX-4 Lx CNP of WIRE.md when fed that frame's fields."""
    import test_roce
    want = bytes.fromhex(test_roce.CNP_HEX)
    p = Ether(want)
    assert CNPPadding in p
    from tracegen.emit.packets import roce
    h = np.frombuffer(want[:-4], roce.frame_dtype(roce.Opcode.CNP, False)).copy()
    assert h["bth"]["fecn_becn"] == roce.BTH_BECN and h["bth"]["flags"] == 0
    assert roce.frame_dtype(roce.Opcode.CNP, False).itemsize + 4 == 74


def test_marks_are_deterministic_and_bounded():
    a = congestion.ce_marks(1_000_000, 0.01, "random", 3)
    assert np.array_equal(a, congestion.ce_marks(1_000_000, 0.01, "random", 3))
    assert not np.array_equal(a, congestion.ce_marks(1_000_000, 0.01, "random", 4))
    assert 9000 < len(a) < 11000 and (np.diff(a) > 0).all()
    p = congestion.ce_marks(1000, 0.25, "periodic", 0)
    assert p.tolist() == list(range(3, 1000, 4))
    keep = congestion.rate_limit(np.array([1, 1, 1, 2, 1]), np.array([0, 3999, 4000, 10, 9000]))
    assert keep.tolist() == [True, False, True, True, True]


def test_no_fraction_no_cnp(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = write_pcaps(tp.FLOWS, tp.FABRIC, Output(), tmp_path / "a")
    b = write_pcaps(tp.FLOWS, tp.FABRIC, replace(Output(), ecn_seed=99, ecn_pattern="periodic"), tmp_path / "b")
    assert [x.read_bytes() for x in a] == [x.read_bytes() for x in b]


def test_same_input_same_bytes_with_cnps(tmp_path):
    out = CONFIGS["v4-vlan-random5%"][0]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = write_pcaps(tp.FLOWS, tp.FABRIC, out, tmp_path / "a")
    b = write_pcaps(tp.FLOWS, tp.FABRIC, out, tmp_path / "b")
    assert [x.read_bytes() for x in a] == [x.read_bytes() for x in b]


# --- the open-loop DCQCN reaction (output.dcqcn) ----------------------------------------------------

LONG = [(0, 2, 0, 24 * tp.MiB, tp.MiB, 10_000, tp.NET), (4, 6, 0, 8 * tp.MiB, tp.MiB, 10_000, tp.NET)]


def test_dcqcn_rates_follow_the_reaction_point():
    """Hand-computed: line 400G, g = 1/256, alpha starts at 1; cut on the first CNP to
    rate (1 - alpha/2) = half; a second CNP within 4 us updates alpha but does not cut; after
    300 us without a cut the rate moves halfway back to the target (fast recovery)."""
    d = replace(congestion.Dcqcn.for_job(None, 400), fast_recovery=5)
    assert (d.ai_bps, d.hai_bps, d.min_bps) == (80e6, 800e6, 1e9)
    line = 400e9
    r = congestion.dcqcn_rates([1000, 3000], [0, 1000, 2999, 3000, 301_000, 601_000], d)
    assert r[0] == line and r[1] == r[2] == r[3] == line / 2
    assert r[4] == (line / 2 + line) / 2 and r[5] == (r[4] + line) / 2
    r = congestion.dcqcn_rates([1000, 6000], [6000], d)        # 5 us apart: cut twice
    alpha = (1 - 1 / 256) ** 6 + 1 / 256        # 5 periods of decay, then the EWMA step
    assert r[0] == pytest.approx(line / 2 * (1 - alpha / 2))
    assert (congestion.dcqcn_rates([], [0, 10**6], d) == line).all()


def test_dcqcn_parameters_are_those_the_ns3_export_writes(tmp_path):
    """The pcap's reaction and `tracegen ns3 run` react alike: every DCQCN key of config.txt."""
    from tracegen.config import Job
    from tracegen.emit.sims.ns3 import write_ns3
    from tracegen.pipeline import run_pipeline
    run = run_pipeline(Job())
    job = run.job
    write_ns3(run.flows, run.fabric, job, tmp_path)
    kv = dict(line.split(None, 1) for line in (tmp_path / "config.txt").read_text().splitlines() if line.strip())
    rate = lambda v: float(v.strip().lower().replace("mb/s", "e6").replace("gb/s", "e9").replace("kb/s", "e3"))
    d = congestion.Dcqcn.for_job(job.network, tp.FABRIC.nic_gbps)
    assert (d.ai_bps, d.hai_bps, d.min_bps) == (rate(kv["RATE_AI"]), rate(kv["RATE_HAI"]), rate(kv["MIN_RATE"]))
    assert d.g == float(kv["EWMA_GAIN"]) and d.fast_recovery == int(kv["FAST_RECOVERY_TIMES"])
    assert (d.alpha_interval_ns, d.decrease_interval_ns, d.increase_interval_ns) == (
        1000 * int(kv["ALPHA_RESUME_INTERVAL"]), 1000 * int(kv["RATE_DECREASE_INTERVAL"]), 1000 * int(kv["RP_TIMER"]))


def test_dcqcn_paces_the_qp_after_its_cnp_and_nothing_else(tmp_path):
    """Before its first CNP arrives a QP sends at line rate; each message that starts after it is
    paced at DCQCN's rate - at most half the line rate until the first 300 us recovery step
    (alpha = 1: the first cut halves the rate) - as a rate limiter does: bursts of packets at
    line rate (at most MAX_TRAIN_PACKETS) with gaps where the port is free for other QPs, the
    message as a whole at most at that rate; and the trace only gets longer."""
    out = Output(ecn_mark_fraction=0.01, ecn_pattern="periodic", dcqcn=True)
    flows = tp.make_flows(LONG)
    paths = write_pcaps(flows, tp.FABRIC, out, tmp_path)
    plain = {p.name: tp.read_pcap(p)[1] for p in write_pcaps(flows, tp.FABRIC, replace(out, dcqcn=False),
                                                               _mk(tmp_path / "plain"))}
    files = {p.name: tp.read_pcap(p)[1] for p in paths}
    wire = tp.wire_ns(4158)                         # a Middle packet at 400 Gb/s
    for sender in (0, 4):
        recs = files[tp.FABRIC.nic_name(sender) + ".pcap"]
        pk = [tw.decode(fr, out, t, orig, ce_ok=True) if fr[46] != 0x81 else decode_cnp(fr, out, t, orig)
              for t, _, orig, fr in recs]
        cnp_at = min(p.t + tp.wire_ns(p.orig) for p in pk if p.opcode == 0x81 and p.dst == sender)
        sent = [p for p in pk if p.src == sender]
        gaps = defaultdict(list)                    # per message (its First's time): Middle-to-Middle gaps
        start = None
        for a, b in zip(sent, sent[1:]):
            if a.opcode == tp.OP_FIRST:
                start = a.t
            if a.opcode == b.opcode == tp.OP_MIDDLE:
                gaps[start].append(b.t - a.t)
        assert any(t < cnp_at for t in gaps) and any(t >= cnp_at for t in gaps)
        paced = 0
        for t, g in gaps.items():
            if t < cnp_at:
                assert set(g) == {wire}
            elif t < cnp_at + 300_000 and len(g) >= 16:
                assert min(g) == wire and max(g) > wire, (t, sorted(set(g)))       # bursts, and gaps
                assert sum(g) >= (2 * len(g) - MAX_TRAIN_PACKETS) * wire, (t, sum(g), len(g))   # <= half rate
                paced += 1
        assert paced
        assert recs[-1][0] > plain[tp.FABRIC.nic_name(sender) + ".pcap"][-1][0]


def test_dcqcn_needs_the_dcqcn_cc_mode(tmp_path):
    from tracegen.config import Network
    from tracegen.errors import ConfigError
    with pytest.raises(ConfigError, match="cc_mode"):
        write_pcaps(tp.FLOWS, tp.FABRIC, Output(ecn_mark_fraction=0.1, dcqcn=True), tmp_path,
                    network=Network(cc_mode="hpcc"))


def _mk(p: Path) -> Path:
    p.mkdir()
    return p
