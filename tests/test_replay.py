"""Lab mode, replayed for real: two network namespaces joined by a veth pair (MTU 9000), a lab
pcap sent with `tcpreplay` on one end and captured with tcpdump (nanosecond timestamps) on the
other. Every frame must arrive, byte-identical and in order. Needs root, tcpreplay, tcpdump, ip;
the namespaces (and with them the veth pair and its addresses) are always deleted."""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

import test_pcap as tp
from tracegen.config import Output
from tracegen.emit.views.pcap import write_pcaps

TOOLS = ("tcpreplay", "tcpdump", "ip")
pytestmark = pytest.mark.root

# A routed DUT: every tester port its own /24 (host k: 192.168.100+k.1, gateway .254), frames to
# the DUT's MAC, ARP announcement + request for the gateway first.
LAB_PLAN = """
hosts: [0, 2, 3, node0003-rail0]
ports: [tester0, tester2, tester3, tester6]
mac: "02:aa:00:00:00:01"
ipv4: 192.168.100.1
prefix: 24
dut_mac: "02:aa:00:00:01:00"
"""
DUT_MAC = bytes.fromhex("02aa00000100")
PORT_MAC = bytes.fromhex("02aa00000001")


def _skip_reason():
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        return f"needs {', '.join(missing)} (apt-get install tcpreplay tcpdump iproute2)"
    return None


def _run(*cmd, check=True):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=check)


def _namespaces(pairs):
    """Two network namespaces joined by veth pairs (tx end, rx end) with MTU 9000 and no IPv6;
    yields (ns_tx, ns_rx) and always deletes them."""
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    tag = f"tg{os.getpid() % 100000}"
    ns_tx, ns_rx = f"{tag}tx", f"{tag}rx"
    created = []
    try:
        for ns in (ns_tx, ns_rx):
            _run("ip", "netns", "add", ns)
            created.append(ns)
        for tx, rx in pairs:
            _run("ip", "link", "add", tx, "netns", ns_tx, "type", "veth", "peer", "name", rx, "netns", ns_rx)
        for ns in (ns_tx, ns_rx):
            # No IPv6 chatter (router solicitations, DAD) on either end; nothing leaves the namespaces.
            for key in ("all", "default"):
                _run("ip", "netns", "exec", ns, "sysctl", "-qw", f"net.ipv6.conf.{key}.disable_ipv6=1")
        for tx, rx in pairs:
            _run("ip", "-n", ns_tx, "link", "set", tx, "mtu", "9000", "up")
            _run("ip", "-n", ns_rx, "link", "set", rx, "mtu", "9000", "up")
        yield ns_tx, ns_rx
    finally:
        for ns in created:
            _run("ip", "netns", "del", ns, check=False)


@pytest.fixture
def veth_pair():
    yield from _namespaces([("veth-tx", "veth-rx")])


@pytest.fixture
def two_veth_pairs():
    yield from _namespaces([("veth-a", "veth-ra"), ("veth-b", "veth-rb")])


CAPTURE = "udp port 4791 or (vlan and udp port 4791) or arp or (vlan and arp)"


def _capture(ns: str, dev: str, path: Path) -> subprocess.Popen:
    dump = subprocess.Popen(["ip", "netns", "exec", ns, "tcpdump", "-i", dev, "-w", str(path), "-U", "-s", "0",
                             "-B", "65536",          # 64 MiB capture buffer: a loaded CI machine drops none
                             "--time-stamp-precision=nano", CAPTURE],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    line = dump.stderr.readline()                             # "listening on DEV ..."
    assert "listening" in line, line
    return dump


def _stop(dump: subprocess.Popen) -> None:
    dump.send_signal(2)                                       # SIGINT: tcpdump flushes and exits
    dump.wait(timeout=10)


def _frames(path: Path):
    header, recs = tp.read_pcap(path)
    assert header[0] == 0xA1B23C4D            # nanosecond pcap
    return recs


def test_lab_pcap_replays_byte_identical(tmp_path, veth_pair):
    """A routed lab plan replayed into the DUT side: per-port subnets in the frames, the ARP frames
    first, every frame byte-identical and in order."""
    ns_tx, ns_rx = veth_pair
    plan = tmp_path / "lab.yaml"
    plan.write_text(LAB_PLAN)
    (tmp_path / "lab").mkdir()
    out = Output(lab=str(plan), ecn_mark_fraction=0.02)
    paths = {p.name: p for p in write_pcaps(tp.FLOWS, tp.FABRIC, out, tmp_path / "lab")}
    sent = paths["tester0.pcap"]
    want = _frames(sent)
    assert len(want) > 100 and max(len(fr) for *_, fr in want) > 4000
    # ARP first: the port's announcement and its request for the gateway, at t0 = 0.
    arp = [fr for *_, fr in want if fr[16:18] == b"\x08\x06"]
    assert [fr for *_, fr in want[:2]] == arp and want[0][0] == 0
    assert arp[0][:12] == b"\xff" * 6 + PORT_MAC and arp[0][32:36] == arp[0][42:46] == bytes([192, 168, 100, 1])
    # Then RoCE: its host's frames from its own subnet to the DUT's MAC, peers in theirs.
    roce = want[2:]
    assert all(fr[:6] == DUT_MAC and fr[6:12] == PORT_MAC and fr[30:34] == bytes([192, 168, 100, 1])
               and fr[34:36] == bytes([192, 168]) and fr[36] in (101, 102, 103) and fr[37] == 1 for *_, fr in roce)

    cap = tmp_path / "received.pcap"
    dump = _capture(ns_rx, "veth-rx", cap)
    try:
        res = _run("ip", "netns", "exec", ns_tx, "tcpreplay", "-i", "veth-tx", str(sent))
        assert f"{len(want)} packets" in res.stdout, res.stdout
        deadline = time.time() + 10
        while time.time() < deadline and (not cap.exists() or len(_frames(cap)) < len(want)):
            time.sleep(0.1)
    finally:
        _stop(dump)
    got = _frames(cap)
    assert len(got) == len(want), "frames lost or extra"
    assert [fr for *_, fr in got] == [fr for *_, fr in want]
    assert all(incl == orig for _, incl, orig, _ in got)
    # Timing: replayed spacing follows the pcap's (tcpreplay sleeps between packets; coarse check).
    span_want = want[-1][0] - want[0][0]
    span_got = got[-1][0] - got[0][0]
    assert span_got >= 0.5 * span_want


def test_two_ports_replay_together_from_the_all_ports_file(tmp_path, two_veth_pairs):
    """The README's recipe for starting two tester ports together: one tcpreplay process sends
    all-ports.pcap on -i/-I, split by source MAC with a tcpprep cache - each port gets exactly
    its own file's frames, byte-identical and in order, on one timeline."""
    if shutil.which("tcpprep") is None:
        pytest.skip("needs tcpprep (tcpreplay package)")
    ns_tx, ns_rx = two_veth_pairs
    plan = tmp_path / "lab.yaml"
    plan.write_text("hosts: [0, 2]\nports: [pa, pb]\nmac: '02:aa:00:00:00:01'\nmerged: true\n")
    (tmp_path / "lab").mkdir()
    paths = {p.name: p for p in write_pcaps(tp.FLOWS, tp.FABRIC, Output(lab=str(plan)), tmp_path / "lab")}
    cache = tmp_path / "all.cache"
    _run("tcpprep", "--mac=02:aa:00:00:00:01", "-i", str(paths["all-ports.pcap"]), "-o", str(cache))
    caps = {dev: tmp_path / f"{dev}.pcap" for dev in ("veth-ra", "veth-rb")}
    dumps = [_capture(ns_rx, dev, path) for dev, path in caps.items()]
    want = {"veth-ra": _frames(paths["pa.pcap"]), "veth-rb": _frames(paths["pb.pcap"])}
    try:
        _run("ip", "netns", "exec", ns_tx, "tcpreplay", "-i", "veth-a", "-I", "veth-b", "-c", str(cache),
             str(paths["all-ports.pcap"]))
        deadline = time.time() + 10
        while time.time() < deadline and any(not p.exists() or len(_frames(p)) < len(want[d]) for d, p in caps.items()):
            time.sleep(0.1)
    finally:
        for d in dumps:
            _stop(d)
    for dev, path in caps.items():
        assert [fr for *_, fr in _frames(path)] == [fr for *_, fr in want[dev]]


def test_lab_plan_errors_are_one_line(tmp_path):
    from tracegen.errors import ConfigError
    bad = tmp_path / "bad.yaml"
    for text, key in [("hosts: leaf9\n", "leaf9"), ("hosts: [0, 0]\n", "twice"), ("hots: leaf0\n", "hosts"),
                      ("hosts: leaf0\nports: [a]\n", "ports"), ("hosts: [0]\nmac: zz\n", "mac"),
                      ("hosts: [0]\nports: ['a/b']\n", "ports")]:
        bad.write_text(text)
        with pytest.raises(ConfigError, match=key):
            write_pcaps(tp.FLOWS, tp.FABRIC, Output(lab=str(bad)), tmp_path)
    with pytest.raises(ConfigError, match="whole frames"):
        bad.write_text("hosts: leaf0\n")
        write_pcaps(tp.FLOWS, tp.FABRIC, Output(lab=str(bad), snaplen=128), tmp_path)


def test_lab_files_hold_what_each_port_transmits(tmp_path):
    """Per port: exactly its host's sent frames to other chosen hosts, as in the host view, with
    lab addresses - the BTH onward is unchanged except the ICRC (IP addresses are covered) - and
    the host view's times less the common t0."""
    pytest.importorskip("scapy.all")
    from scapy.contrib.roce import BTH
    from scapy.layers.inet import IP
    from scapy.layers.l2 import Ether
    plan = tmp_path / "lab.yaml"
    plan.write_text(LAB_PLAN)
    (tmp_path / "lab").mkdir()
    (tmp_path / "host").mkdir()
    lab = {p.name: tp.read_pcap(p)[1] for p in write_pcaps(tp.FLOWS, tp.FABRIC, Output(lab=str(plan)),
                                                            tmp_path / "lab")}
    host = {p.name: tp.read_pcap(p)[1] for p in write_pcaps(tp.FLOWS, tp.FABRIC, Output(), tmp_path / "host")}
    chosen = {0: 100, 2: 101, 3: 102, 6: 103}       # NIC -> its port's subnet 192.168.<x>.0/24
    roce = {name: [r for r in recs if r[3][16:18] != b"\x08\x06"] for name, recs in lab.items()}
    t0 = min(r[0] for recs in roce.values() for r in recs) - 100_000    # lead_us 100 before the first frame
    first_host = min(t for nic in chosen for t, _, _, fr in host[tp.FABRIC.nic_name(nic) + ".pcap"]
                     if tp.NIC_OF_IP[".".join(map(str, fr[30:34]))] == nic
                     and tp.NIC_OF_IP[".".join(map(str, fr[34:38]))] in chosen)
    assert t0 == 0 and first_host > 0
    for nic, port in ((0, "tester0"), (2, "tester2"), (3, "tester3"), (6, "tester6")):
        mine = [(t, fr) for t, _, _, fr in host[tp.FABRIC.nic_name(nic) + ".pcap"]
                if tp.NIC_OF_IP[".".join(map(str, fr[30:34]))] == nic
                and tp.NIC_OF_IP[".".join(map(str, fr[34:38]))] in chosen]
        got = roce.get(port + ".pcap", [])
        assert [(t - first_host, fr[38:-4]) for t, fr in mine] == [(t - 100_000, fr[38:-4]) for t, _, _, fr in got]
        for t, _, orig, fr in got:
            assert fr[30:34] == bytes([192, 168, chosen[nic], 1])
            assert fr[34:36] == bytes([192, 168]) and fr[36] in chosen.values() and fr[37] == 1
            pkt = Ether(fr)                                        # ICRC and checksum recomputed
            chk = pkt[IP].chksum
            del pkt[IP].chksum
            pkt[BTH].icrc = None
            rebuilt = bytes(pkt)
            assert rebuilt[-4:] == fr[-4:] and Ether(rebuilt)[IP].chksum == chk
