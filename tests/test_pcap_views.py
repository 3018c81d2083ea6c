"""pcapng (interface blocks, EPBs, comments) and the views: merged NICs, switch ports.

pcapng is read here by a small independent block parser and by tshark/capinfos; its packets
must be those of the nanosecond pcap. The switch-port oracle routes every packet of the host
files itself with Fabric.path (ECMP on the UDP source port) and demands exactly those that cross
the port, nothing else."""
from __future__ import annotations

import shutil
import struct
import subprocess
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("scapy.all")
import test_pcap as tp  # noqa: E402
import test_pcap_wire as tw  # noqa: E402

from tracegen.config import Output  # noqa: E402
from tracegen.emit.views.pcap import estimate_pcap, spine_mac, write_pcaps  # noqa: E402

FABRIC = tp.FABRIC
FLOWS = tp.FLOWS
LAT = FABRIC.link_latency_ns
# More cross-leaf connections (rail 0 <-> rail 1) so that both spines carry traffic.
CROSS = tp.make_flows(tp.SCENARIO + [(2, 5, 0, 20_000, tp.MiB, 3_000, tp.NET), (7, 4, 1, 9_000, tp.MiB, 8_000, tp.NET),
                                     (6, 1, 0, 30_000, tp.MiB, 1_000, tp.NET), (1, 6, 1, 12_000, tp.MiB, 2_000, tp.NET)])


def read_pcapng(path: Path):
    """-> (interfaces [{code: value}], records [(if_id, t_ns, cap, orig, data, comment)])."""
    data = path.read_bytes()
    off, ifaces, recs = 0, [], []
    while off < len(data):
        btype, blen = struct.unpack_from("<II", data, off)
        assert blen % 4 == 0 and struct.unpack_from("<I", data, off + blen - 4)[0] == blen
        body = data[off + 8:off + blen - 4]
        if btype == 0x0A0D0D0A:
            assert struct.unpack_from("<IHHq", body)[:3] == (0x1A2B3C4D, 1, 0)
        elif btype == 1:
            assert struct.unpack_from("<HHI", body)[0] == 1
            ifaces.append(_options(body[8:]))
        elif btype == 6:
            if_id, hi, lo, cap, orig = struct.unpack_from("<IIIII", body)
            pkt = body[20:20 + cap]
            opts = _options(body[20 + ((cap + 3) & ~3):])
            recs.append((if_id, (hi << 32) | lo, cap, orig, pkt, opts.get(1)))
        else:
            raise AssertionError(f"unexpected block {btype:#x}")
        off += blen
    assert off == len(data)
    return ifaces, recs


def _options(b: bytes) -> dict:
    out, off = {}, 0
    while off < len(b):
        code, n = struct.unpack_from("<HH", b, off)
        if code == 0:
            break
        out[code] = b[off + 4:off + 4 + n]
        off += 4 + ((n + 3) & ~3)
    return out


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    """The per-NIC nanosecond pcaps: every view is judged against them."""
    d = tmp_path_factory.mktemp("host")
    paths = write_pcaps(FLOWS, FABRIC, Output(), d)
    return {p.name[:-5]: tp.read_pcap(p)[1] for p in paths}


@pytest.mark.parametrize("comments", [False, True])
def test_pcapng_holds_the_pcap_packets(tmp_path, host, comments):
    out = Output(format="pcapng", comments=comments)
    paths = write_pcaps(FLOWS, FABRIC, out, tmp_path)
    assert [p.name for p in paths] == [n + ".pcapng" for n in host]
    n_recs = 0
    for path in paths:
        nic = path.name[:-7]
        ifaces, recs = read_pcapng(path)
        assert len(ifaces) == 1
        i = ifaces[0]
        k = next(n for n in range(FABRIC.n_nics) if FABRIC.nic_name(n) == nic)
        assert i[2].decode() == nic and i[6] == bytes(FABRIC.nic_mac[k]) and i[9] == bytes([9])
        assert struct.unpack("<Q", i[8])[0] == FABRIC.nic_gbps * 10**9 and FABRIC.nic_ip_str(k) in i[3].decode()
        assert [(t, cap, orig, d) for _, t, cap, orig, d, _ in recs] == host[nic]
        assert all(r[0] == 0 for r in recs)
        if comments:
            assert all(r[5] and r[5].split(b" |")[0] in (b"data", b"CTS", b"ACK", b"ACK of CTS") for r in recs)
            assert all(b" op " in r[5] and b" step " in r[5] and b" chunk " in r[5] for r in recs)
        else:
            assert all(r[5] is None for r in recs)
        n_recs += len(recs)
    assert estimate_pcap(FLOWS, FABRIC, out) == (n_recs, sum(p.stat().st_size for p in paths))


def test_pcapng_comments_name_the_collective(tmp_path):
    import test_pcap_select as ts
    out = Output(format="pcapng", comments=True)
    paths = write_pcaps(ts.FLOWS, FABRIC, out, tmp_path)
    seen = set()
    for path in paths:
        for *_, data, comment in read_pcapng(path)[1]:
            op = ts.op_of(data)
            dim, kind, it = ts.OPS[op]
            assert f" {dim.name} {kind.label} iter {it} op {op} ".encode() in comment
            seen.add(op)
    assert seen == {0, 1, 2, 3}
    assert estimate_pcap(ts.FLOWS, FABRIC, out)[1] == sum(p.stat().st_size for p in paths)


def test_tshark_and_capinfos_read_pcapng(tmp_path):
    tshark, capinfos = shutil.which("tshark"), shutil.which("capinfos")
    if not (tshark and capinfos):
        pytest.skip("tshark/capinfos not installed")
    paths = write_pcaps(FLOWS, FABRIC, Output(format="pcapng", comments=True, ecn_mark_fraction=0.02), tmp_path)
    for path in paths:
        res = subprocess.run([tshark, "-r", str(path), "-T", "fields", "-E", "separator=/t", "-e", "_ws.malformed",
                              "-e", "frame.comment", "-e", "frame.interface_name", "-e", "infiniband.bth.opcode"],
                             capture_output=True, text=True, check=True)
        rows = [r.split("\t") for r in res.stdout.splitlines()]
        assert rows and len(rows) == len(read_pcapng(path)[1])
        assert all(r[0] == "" and r[1] and r[2] == path.name[:-7] for r in rows)
        info = subprocess.run([capinfos, "-I", str(path)], capture_output=True, text=True, check=True).stdout
        assert "Number of interfaces in file: 1" in info and f"Name = {path.name[:-7]}" in info
        assert "Time resolution = 0x09" in info and "Speed = 400000000000" in info
    assert any("CNP |" in subprocess.run([tshark, "-r", str(p), "-T", "fields", "-e", "frame.comment"],
                                         capture_output=True, text=True).stdout for p in paths)


def test_merged_file_is_the_union_in_time_order(tmp_path, host):
    out = Output(merge=True, format="pcapng", nics="0,2,3")
    (path,) = write_pcaps(FLOWS, FABRIC, out, tmp_path)
    assert path.name == "merged.pcapng"
    ifaces, recs = read_pcapng(path)
    names = [FABRIC.nic_name(n) for n in (0, 2, 3)]
    assert [i[2].decode() for i in ifaces] == names
    ts = [r[1] for r in recs]
    assert ts == sorted(ts)
    for k, name in enumerate(names):     # per interface: exactly that NIC's capture, in order
        assert [(t, cap, orig, d) for i, t, cap, orig, d, _ in recs if i == k] == host[name]
    assert estimate_pcap(FLOWS, FABRIC, out) == (len(recs), path.stat().st_size)


def test_merged_classic_pcap_holds_each_frame_once_as_sent(tmp_path, host):
    """No interface ids in classic pcap: every frame a selected NIC sends or receives, once, as its
    sender sent it (time, MACs, TTL) - a replay puts it on the wire once."""
    out = Output(merge=True, nics="0,2,3")
    (plain,) = write_pcaps(FLOWS, FABRIC, out, tmp_path)
    got = tp.read_pcap(plain)[1]
    chosen = {0, 2, 3}
    want = []
    for name, recs in host.items():
        nic = next(n for n in range(FABRIC.n_nics) if FABRIC.nic_name(n) == name)
        for t, incl, orig, fr in recs:
            src, dst = tp.NIC_OF_IP[".".join(map(str, fr[30:34]))], tp.NIC_OF_IP[".".join(map(str, fr[34:38]))]
            if src == nic and (src in chosen or dst in chosen):
                want.append((t, incl, orig, fr))
    assert [r[0] for r in got] == sorted(r[0] for r in got)
    assert Counter(got) == Counter(want) and len(got) == len(want)
    assert estimate_pcap(FLOWS, FABRIC, out) == (len(got), plain.stat().st_size)


def test_ipv6_interface_descriptions_name_the_ipv6_address(tmp_path):
    out = Output(format="pcapng", ip_version=6, merge=True, nics="0,2")
    (path,) = write_pcaps(FLOWS, FABRIC, out, tmp_path)
    ifaces, _ = read_pcapng(path)
    assert [i[3].decode().split()[-2:] for i in ifaces] == [["IPv6", "fd00::a00:1"], ["IPv6", "fd00::a00:2"]]
    assert all("IPv4" not in i[3].decode() for i in ifaces)


def _route_links(src, dst, sport):
    path = FABRIC.path(src, dst, sport)
    return list(zip(path, path[1:]))


@pytest.mark.parametrize("switch", ["leaf0", "leaf1", "spine0", "spine1"])
def test_switch_port_view_is_exactly_the_packets_crossing_the_port(tmp_path, host, switch):
    out = Output(switch=switch, ecn_mark_fraction=0.05)
    host_ecn = {p.name[:-5]: tp.read_pcap(p)[1]
                for p in write_pcaps(CROSS, FABRIC, Output(ecn_mark_fraction=0.05), _mk(tmp_path / "host"))}
    paths = write_pcaps(CROSS, FABRIC, out, _mk(tmp_path / "view"))
    got = {p.name[:-5]: tp.read_pcap(p)[1] for p in paths}
    # Expected: route every sent packet of the host files.
    want: dict[str, list] = {}
    kind, sw = ("leaf" if switch.startswith("leaf") else "spine"), int(switch[-1])
    sw_node = FABRIC.leaf_node_id(sw) if kind == "leaf" else FABRIC.spine_node_id(sw)
    for name, recs in host_ecn.items():
        nic = next(n for n in range(FABRIC.n_nics) if FABRIC.nic_name(n) == name)
        for t, incl, orig, fr in recs:
            p = tw.decode(fr, Output(), t, orig, ce_ok=True) if fr[46] != 0x81 else None
            src, dst = tp.NIC_OF_IP[".".join(str(b) for b in fr[30:34])], tp.NIC_OF_IP[".".join(str(b) for b in fr[34:38])]
            sport = struct.unpack(">H", fr[38:40])[0]
            assert p is None or (p.src, p.dst, p.sport) == (src, dst, sport)
            if kind == "leaf" and FABRIC.nic_leaf[nic] == sw:   # NIC port: the NIC's own capture
                want.setdefault(f"leaf{sw}-{name}", []).append((t, incl, orig, fr))
            if src != nic:
                continue
            for i, (a, b) in enumerate(_route_links(src, dst, sport)):
                if sw_node in (a, b) and a >= FABRIC.n_nics and b >= FABRIC.n_nics:
                    leaf, spine = (a, b) if a < b else (b, a)
                    lf, sp = leaf - FABRIC.n_nics, spine - FABRIC.n_nics - FABRIC.n_leaves
                    port = f"leaf{lf}-spine{sp}" if kind == "leaf" else f"spine{sp}-leaf{lf}"
                    want.setdefault(port, []).append((t + i * LAT, i, fr))
    assert set(got) == set(want)
    assert any("spine" in k for k in got)
    waited = 0
    for port, recs in got.items():
        if "spine" not in port:
            assert recs == want[port]
            continue
        assert [r[0] for r in recs] == sorted(r[0] for r in recs)
        # Same packets (UDP onward: BTH, payload, ICRC) as route the host files; this link's MACs
        # and TTL; each leaves the port no earlier than it arrived (sent + i x latency).
        assert Counter(fr[38:] for _, _, _, fr in recs) == Counter(fr[38:] for _, _, fr in want[port])
        arrivals: dict[bytes, list] = {}
        for t, i, fr in sorted(want[port], key=lambda r: r[0]):
            arrivals.setdefault(fr[38:], []).append((t, i))
        per_dir: dict[int, list] = {}
        for t, incl, orig, fr in recs:
            arr, i = arrivals[fr[38:]].pop(0)
            assert t >= arr
            waited += t > arr
            per_dir.setdefault(i, []).append((arr, t, orig, fr[30:38] + fr[42:46]))     # + IPs, DestQP
            src, dst = tp.NIC_OF_IP[".".join(str(b) for b in fr[30:34])], tp.NIC_OF_IP[".".join(str(b) for b in fr[34:38])]
            spine = _route_links(src, dst, int(struct.unpack(">H", fr[38:40])[0]))[1][1] - FABRIC.spine_node_id(0)
            leaf_a, leaf_b = bytes(FABRIC.leaf_mac[FABRIC.nic_leaf[src]]), bytes(FABRIC.leaf_mac[FABRIC.nic_leaf[dst]])
            macs = (bytes(spine_mac(spine)), leaf_a) if i == 1 else (leaf_b, bytes(spine_mac(spine)))
            assert (fr[:6], fr[6:12], fr[26]) == macs + ((64 if fr[46] == 0x81 else 255) - i,)
            if fr[46] != 0x81:
                tw.decode(fr, Output(), t, orig, ce_ok=True)        # IPv4 checksum and ICRC still valid
        # Each direction is an egress queue at the link's rate: a QP's frames in the order they
        # came, frames never overlap, and (on the first switch link, where the arrival is the
        # sender's time + one latency exactly) a frame waits only while the port sends another.
        for i, seq in per_dir.items():
            assert_fifo_port(seq, FABRIC.leaf_spine_gbps, work_conserving=i == 1)
    if switch in ("leaf0", "spine0"):      # where CROSS makes two NICs burst into one uplink
        assert waited, "no frame queued at any port: the scenario does not test the port FIFO"
    assert estimate_pcap(CROSS, FABRIC, out) == (sum(map(len, got.values())), sum(p.stat().st_size for p in paths))


def wire_ns_exact(orig_len: int, gbps: int) -> float:
    """ns a frame holds a link: frame + FCS + preamble/SFD + IFG (IEEE 802.3)."""
    return (orig_len + 4 + 8 + 12) * 8 / gbps


def assert_fifo_port(seq, gbps: int, slack_ns: int = 2, work_conserving: bool = True):
    """seq: (arrival, departure, frame length, QP) in file order, one direction of one port. The
    port serves whole runs of a message's packets in turn (hops.py, as a NIC does), so a QP's
    frames keep their order but frames of two QPs need not leave in the order they came."""
    last = {}
    for (a0, t0, n0, _), (a1, t1, n1, qp) in zip(seq, seq[1:]):
        assert a1 >= last.get(qp, a1), "a QP's frames served out of arrival order"
        last[qp] = a1
        w = wire_ns_exact(n0, gbps)
        assert t1 - t0 >= w - 1e-9, f"frames overlap: {t1 - t0} ns < {w:.1f} ns at {gbps} Gb/s"
        if t1 > a1 and work_conserving:
            assert t1 - t0 <= w + slack_ns, f"the port idled {t1 - t0 - w:.1f} ns while a frame waited"


def _mk(p: Path) -> Path:
    p.mkdir()
    return p


@pytest.mark.parametrize("kw,words", [(dict(merge=True, switch="leaf0"), "one view"),
                                      (dict(comments=True), "pcapng"), (dict(switch="leaf7"), "output.switch"),
                                      (dict(switch="spine"), "output.switch")])
def test_view_errors_name_the_key(tmp_path, kw, words):
    from tracegen.errors import ConfigError
    with pytest.raises(ConfigError, match=words):
        write_pcaps(FLOWS, FABRIC, Output(**kw), tmp_path)


def test_cli_switch_view_and_pcapng(tmp_path):
    import sys
    res = subprocess.run([sys.executable, "-m", "tracegen.cli", "generate", "-q", "--no-ns3", "--format", "pcapng",
                          "--comments", "--switch", "leaf0", "-o", str(tmp_path / "o")],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    names = sorted(p.name for p in (tmp_path / "o" / "pcap").iterdir())
    assert names and all(n.startswith("leaf0-") and n.endswith(".pcapng") for n in names)
    for p in (tmp_path / "o" / "pcap").iterdir():
        ifaces, recs = read_pcapng(p)
        assert len(ifaces) == 1 and recs and all(r[5] for r in recs)
