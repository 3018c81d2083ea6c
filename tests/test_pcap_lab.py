"""Lab mode for routed and bridged DUTs: per-port subnets and gateways, ARP / ND frames first
(parsed by scapy, checksums recomputed), one time reference t0 for every port file, the merged
all-ports file, --lab-rate, and one-line errors. The replay through network namespaces is in
test_replay.py."""
from __future__ import annotations

import ipaddress
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("scapy.all")
import test_pcap as tp  # noqa: E402
import test_pcap_views as tv  # noqa: E402
from scapy.layers.inet6 import ICMPv6ND_NA, ICMPv6ND_NS, ICMPv6NDOptDstLLAddr, ICMPv6NDOptSrcLLAddr, IPv6  # noqa: E402
from scapy.layers.l2 import ARP, Dot1Q, Ether  # noqa: E402

from tracegen.config import Job, Output  # noqa: E402
from tracegen.emit.views.lab import retime  # noqa: E402
from tracegen.emit.views.pcap import estimate_pcap, write_pcaps  # noqa: E402
from tracegen.errors import ConfigError  # noqa: E402

FLOWS = tv.CROSS
HOSTS = {0: "p0", 2: "p2", 5: "p5", 6: "p6"}     # NIC -> tester port (both leaves)
LEAD_NS = 50_000


def plan(tmp_path, text: str) -> str:
    path = tmp_path / "lab.yaml"
    path.write_text("hosts: [0, 2, 5, 6]\nports: [p0, p2, p5, p6]\nmac: '02:aa:00:00:00:01'\n"
                    f"lead_us: {LEAD_NS // 1000}\n" + text)
    return str(path)


def lab_files(tmp_path, out: Output):
    d = tmp_path / "lab"
    d.mkdir(exist_ok=True)
    paths = write_pcaps(FLOWS, tp.FABRIC, out, d)
    if out.format == "pcapng":
        files = {p.name.rsplit(".", 1)[0]: [(t, data, i) for i, t, _, _, data, _ in tv.read_pcapng(p)[1]] for p in paths}
    else:
        files = {p.name.rsplit(".", 1)[0]: [(t, fr, 0) for t, _, _, fr in tp.read_pcap(p)[1]] for p in paths}
    assert estimate_pcap(FLOWS, tp.FABRIC, out) == (sum(map(len, files.values())), sum(p.stat().st_size for p in paths))
    return paths, files


@pytest.mark.parametrize("vlan", [True, False])
def test_routed_ipv4_ports_have_their_own_subnets_and_announce_first(tmp_path, vlan):
    path = plan(tmp_path, "ipv4: 10.20.0.10\nprefix: 24\ngateway: 10.20.0.1\n"
                          "dut_mac: ['02:dd:00:00:00:01', '02:dd:00:00:00:02', '02:dd:00:00:00:03', '02:dd:00:00:00:04']\n")
    paths, files = lab_files(tmp_path, Output(lab=path, vlan=vlan))
    assert sorted(files) == sorted(HOSTS.values())
    port_ip = {f"p{n}": f"10.20.{k}.10" for k, n in enumerate(HOSTS)}
    gw = {f"p{n}": f"10.20.{k}.1" for k, n in enumerate(HOSTS)}
    dut = {f"p{n}": f"02:dd:00:00:00:0{k + 1}" for k, n in enumerate(HOSTS)}
    firsts = []
    for name, recs in files.items():
        mac = Ether(recs[0][1]).src
        a, b = (Ether(fr) for _, fr, _ in recs[:2])
        assert (Dot1Q in a) == vlan and (not vlan or a[Dot1Q].vlan == 100)
        assert len(recs[0][1]) == len(recs[1][1]) == 60                  # padded as a NIC sends it
        # announcement (gratuitous ARP), then who-has the gateway; both at t0, back to back
        assert (a.dst, a[ARP].op, a[ARP].hwsrc, a[ARP].psrc, a[ARP].pdst, a[ARP].hwdst) == (
            "ff:ff:ff:ff:ff:ff", 1, mac, port_ip[name], port_ip[name], "00:00:00:00:00:00")
        assert (b.dst, b[ARP].op, b[ARP].psrc, b[ARP].pdst) == ("ff:ff:ff:ff:ff:ff", 1, port_ip[name], gw[name])
        assert recs[0][0] == 0 and 0 < recs[1][0] < 10
        rest = recs[2:]
        assert rest and not any(ARP in Ether(fr) for _, fr, _ in rest)
        for _, fr, _ in rest:
            p = Ether(fr)
            assert p.dst == dut[name] and p.src == mac and p["IP"].src == port_ip[name]
            assert p["IP"].dst in port_ip.values() and p["IP"].dst != port_ip[name]
            assert p["IP"].ttl in (255, 64)
        firsts.append(rest[0][0])
    assert min(firsts) == LEAD_NS                  # t0: lead_us before the first frame of any port


def test_routed_ipv6_ports_send_neighbor_advertisement_and_solicitation(tmp_path):
    path = plan(tmp_path, "ipv4: 192.168.10.2\nprefix: 30\n")      # /30 per link: gateway .1 (+4 per port)
    _, files = lab_files(tmp_path, Output(lab=path, ip_version=6))
    for k, n in enumerate(HOSTS):
        recs = files[f"p{n}"]
        me = ipaddress.IPv6Address((0xFD << 120) | int(ipaddress.IPv4Address(f"192.168.10.{2 + 4 * k}")))
        gw = ipaddress.IPv6Address((0xFD << 120) | int(ipaddress.IPv4Address(f"192.168.10.{1 + 4 * k}")))
        na, ns = Ether(recs[0][1]), Ether(recs[1][1])
        for p in (na, ns):                          # scapy recomputes the ICMPv6 checksum
            chk = p[ICMPv6ND_NA if p is na else ICMPv6ND_NS].cksum
            q = Ether(recs[0][1] if p is na else recs[1][1])
            del q[ICMPv6ND_NA if p is na else ICMPv6ND_NS].cksum
            assert Ether(bytes(q))[ICMPv6ND_NA if p is na else ICMPv6ND_NS].cksum == chk
            assert p[IPv6].hlim == 255 and p[IPv6].src == str(me)
        assert (na.dst, na[IPv6].dst, na[ICMPv6ND_NA].tgt, na[ICMPv6ND_NA].O, na[ICMPv6NDOptDstLLAddr].lladdr) == (
            "33:33:00:00:00:01", "ff02::1", str(me), 1, na.src)
        sn = "ff02::1:ff" + f"{int(gw) & 0xFFFFFF:06x}"[:2] + ":" + f"{int(gw) & 0xFFFF:04x}"
        assert (ns[IPv6].dst, ns[ICMPv6ND_NS].tgt, ns[ICMPv6NDOptSrcLLAddr].lladdr) == (
            str(ipaddress.IPv6Address(sn)), str(gw), ns.src)
        assert ns.dst == "33:33:ff:" + ":".join(f"{b:02x}" for b in gw.packed[-3:])   # the group's MAC
        for _, fr, _ in recs[2:]:
            assert Ether(fr)[IPv6].src == str(me)


def test_bridged_dut_one_subnet_peer_macs_announcement_only(tmp_path):
    path = plan(tmp_path, "l2: true\nipv4: 172.16.5.11\nprefix: 24\n")
    _, files = lab_files(tmp_path, Output(lab=path))
    macs = {f"p{n}": f"02:aa:00:00:00:0{k + 1}" for k, n in enumerate(HOSTS)}
    ips = {f"p{n}": f"172.16.5.{11 + k}" for k, n in enumerate(HOSTS)}
    mac_of_ip = {ips[p]: macs[p] for p in ips}
    for name, recs in files.items():
        a = Ether(recs[0][1])
        assert a[ARP].psrc == a[ARP].pdst == ips[name] and ARP not in Ether(recs[1][1])
        for _, fr, _ in recs[1:]:
            p = Ether(fr)
            assert p.src == macs[name] and p.dst == mac_of_ip[p["IP"].dst]


def test_without_arp_the_ports_still_share_t0(tmp_path):
    path = plan(tmp_path, "arp: false\n")
    _, files = lab_files(tmp_path, Output(lab=path))
    assert not any(ARP in Ether(fr) for recs in files.values() for _, fr, _ in recs)
    assert min(recs[0][0] for recs in files.values()) == LEAD_NS


@pytest.mark.parametrize("fmt", ["pcap", "pcapng"])
def test_merged_all_ports_file_is_the_union_on_one_timeline(tmp_path, fmt):
    path = plan(tmp_path, "merged: true\n")
    paths, files = lab_files(tmp_path, Output(lab=path, format=fmt))
    merged = files.pop("all-ports")
    ports = sorted(files, key=lambda p: list(HOSTS.values()).index(p))
    assert [r[0] for r in merged] == sorted(r[0] for r in merged)
    if fmt == "pcapng":     # one interface per port, in port order
        ifaces, _ = tv.read_pcapng(next(p for p in paths if p.name.startswith("all-ports")))
        assert [i[2].decode() for i in ifaces] == ports
        assert Counter(merged) == Counter((t, fr, ports.index(name)) for name in ports for t, fr, _ in files[name])
    else:
        assert Counter(merged) == Counter((t, fr, 0) for name in ports for t, fr, _ in files[name])


def test_lab_files_parse_in_tshark(tmp_path):
    tshark = shutil.which("tshark")
    if tshark is None:
        pytest.skip("tshark not installed")
    path = plan(tmp_path, "merged: true\n")
    paths, files = lab_files(tmp_path, Output(lab=path, format="pcapng", ecn_mark_fraction=0.05))
    for p in paths:
        res = subprocess.run([tshark, "-r", str(p), "-T", "fields", "-e", "_ws.malformed", "-e", "frame.protocols"],
                             capture_output=True, text=True, check=True)
        rows = [r.split("\t") for r in res.stdout.splitlines()]
        assert len(rows) == len(files[p.name.rsplit(".", 1)[0]]) and all(r[0] == "" for r in rows)
        kinds = ["arp" if r[1].endswith(":arp") else "roce" if ":udp:infiniband" in r[1] else r[1] for r in rows]
        n_arp = kinds.count("arp")
        assert n_arp >= 2 and kinds == ["arp"] * n_arp + ["roce"] * (len(kinds) - n_arp)


@pytest.mark.parametrize("text,words", [
    ("ipv4: 10.0.0.0\nprefix: 24\n", "network or broadcast"),
    ("gateway: 10.9.9.9\n", "not another address"),
    ("gateway: [192.168.100.254]\n", "one per port"),
    ("prefix: 33\n", "prefix"),
    ("l2: true\ngateway: 192.168.100.254\n", "routed DUT"),
    ("l2: true\nipv4: 192.168.100.254\n", "one /24"),
    ("dut_mac: [02:00:00:00:00:01]\n", "one per port"),
    ("dut_mac: '01:00:5e:00:00:01'\n", "multicast"),          # IEEE 802: the I/G bit is octet 0's lowest
    ("dut_mac: 'ff:ff:ff:ff:ff:ff'\n", "broadcast"),
    ("lead_us: -1\n", "lead_us"),
    ("arp: maybe\n", "arp"),
])
def test_lab_plan_errors_name_the_key(tmp_path, text, words):
    with pytest.raises(ConfigError, match=words):
        write_pcaps(FLOWS, tp.FABRIC, Output(lab=plan(tmp_path, text)), tmp_path)


def test_retime_puts_the_cluster_on_the_testers_rate():
    job = Job(output=Output(lab_gbps=100))
    assert retime(job).cluster.nic_gbps == 100 and retime(job).fabric.leaf_spine_gbps == 0
    from dataclasses import replace
    fast = replace(job, fabric=replace(job.fabric, leaf_spine_gbps=800))
    assert retime(fast).fabric.leaf_spine_gbps == 200
    assert retime(Job()) == Job()


def test_cli_lab_rate_retimes_the_whole_trace(tmp_path):
    """--lab-rate 100G: the job is scheduled again on 100 Gb/s NICs - packets of a message leave
    one 100 Gb/s wire time apart, and the iteration takes longer."""
    lab = tmp_path / "lab.yaml"
    lab.write_text("hosts: leaf0\narp: false\n")
    runs = {}
    for rate in (None, "100G"):
        o = tmp_path / f"o{rate}"
        args = [sys.executable, "-m", "tracegen.cli", "generate", "--no-ns3", "--lab", str(lab), "-o", str(o)]
        res = subprocess.run(args + (["--lab-rate", rate] if rate else []), capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr
        runs[rate] = res.stdout, {p.name: tp.read_pcap(p)[1] for p in (o / "pcap").iterdir()}
    ms = lambda text: float(text.split("iteration ")[1].split(" ms")[0])
    assert ms(runs["100G"][0]) > ms(runs[None][0])
    for rate, gbps in ((None, 400), ("100G", 100)):
        recs = max(runs[rate][1].values(), key=len)
        gaps = [(b[0] - a[0], a[2]) for a, b in zip(recs, recs[1:]) if a[2] > 4000 and b[2] > 4000]
        assert gaps and min(g for g, _ in gaps) == min(tp.wire_ns(n, gbps) for _, n in gaps)
    bad = subprocess.run([sys.executable, "-m", "tracegen.cli", "generate", "--no-ns3", "--lab", str(lab),
                          "--lab-rate", "fast", "-o", str(tmp_path / "x")], capture_output=True, text=True)
    assert bad.returncode == 2 and "--lab-rate" in bad.stderr


def test_interfaces_name_port_address_and_gateway(tmp_path):
    path = plan(tmp_path, "prefix: 24\n")
    paths = write_pcaps(FLOWS, tp.FABRIC, Output(lab=path, format="pcapng"), tmp_path)
    descs = {p.name: tv.read_pcapng(p)[0][0][3].decode() for p in paths}
    assert descs["p2.pcapng"] == "tester port p2 as node0001-rail0 192.168.101.1/24 gateway 192.168.101.254"
    assert all(Path(p).exists() for p in paths)
