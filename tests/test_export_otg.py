"""`tracegen export otg`: the OTG config snappi validates and reads back, and its flows against the
lab pcaps of the same job read by a parser of this file (struct, not tracegen's code): the RDMA
WRITE payload bytes (BTH opcode, RETH, ImmDt, pad count, ICRC) equal the sum over the OTG flows
of message size x unit x message count (sizes from otg.json, counts from otg-schedule.json, both
read back as plain JSON); the QPs (QPN, UDP source port, DSCP, ECN, PCP, IB MTU) and addresses
are those the frames carry."""
from __future__ import annotations

import ipaddress
import json
import struct
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

snappi = pytest.importorskip("snappi")

from tracegen.cli import main  # noqa: E402
from tracegen.emit.sims.otg import message_sizes  # noqa: E402

LAB = """hosts: leaf0
ports: [eth1, eth2, eth3, eth4]
mac: "02:aa:00:00:00:01"
ipv4: 192.168.100.1
prefix: 24
gateway: 192.168.100.254
dut_mac: "02:aa:00:00:01:00"
"""
FAST = ["--set", "output.pictures=false", "--set", "output.perfetto=false"]
UNIT = {"bytes": 1, "kb": 1024, "mb": 1 << 20, "gb": 1 << 30}   # the reading the README documents
RETH_OPS, IMM_OPS = {0x06, 0x0A, 0x0B}, {0x09, 0x0B}             # WRITE First/Only(+Imm); Last/Only with Imm


def read_pcap(path: Path):
    """(record bytes) of a nanosecond or microsecond classic pcap."""
    data = path.read_bytes()
    magic = struct.unpack("<I", data[:4])[0]
    assert magic in (0xA1B23C4D, 0xA1B2C3D4), hex(magic)
    off, out = 24, []
    while off < len(data):
        _, _, incl, orig = struct.unpack("<IIII", data[off:off + 16])
        assert incl == orig                       # lab frames are whole
        out.append(data[off + 16:off + 16 + incl])
        off += 16 + incl
    return out


def rdma_writes(frame: bytes):
    """None, or a dict of the frame's RoCEv2 RDMA WRITE fields (payload without pad and ICRC)."""
    et, o, pcp = struct.unpack("!H", frame[12:14])[0], 14, None
    if et == 0x8100:
        tci, et = struct.unpack("!HH", frame[14:18])
        pcp, o = tci >> 13, 18
    if et == 0x0800:
        ihl, tos, proto = (frame[o] & 0xF) * 4, frame[o + 1], frame[o + 9]
        src, dst = str(ipaddress.IPv4Address(frame[o + 12:o + 16])), str(ipaddress.IPv4Address(frame[o + 16:o + 20]))
        o += ihl
    elif et == 0x86DD:
        tos = (struct.unpack("!I", frame[o:o + 4])[0] >> 20) & 0xFF
        proto = frame[o + 6]
        src, dst = str(ipaddress.IPv6Address(frame[o + 8:o + 24])), str(ipaddress.IPv6Address(frame[o + 24:o + 40]))
        o += 40
    else:
        return None
    if proto != 17:
        return None
    sport, dport = struct.unpack("!HH", frame[o:o + 4])
    if dport != 4791:
        return None
    b = o + 8
    opcode, flags = frame[b], frame[b + 1]
    if not 0x06 <= opcode <= 0x0B:
        return None
    dest_qp = int.from_bytes(frame[b + 5:b + 8], "big")
    hdr = 12 + (16 if opcode in RETH_OPS else 0) + (4 if opcode in IMM_OPS else 0)
    pad = (flags >> 4) & 3
    payload = len(frame) - b - hdr - 4 - pad
    assert payload >= 0
    return dict(opcode=opcode, payload=payload, src=src, dst=dst, sport=sport, dest_qp=dest_qp,
                dscp=tos >> 2, ecn=tos & 3, pcp=pcp)


def flow_bytes(otg: dict, schedule: dict) -> tuple[int, int]:
    """Sum of message size x unit x count over the OTG flows; (bytes, messages)."""
    count = {f["name"]: f["message_count"] for f in schedule["flows"]}
    total = msgs = 0
    for group in otg["stateful_flows"]["rocev2"]:
        for tp in group["tx_ports"]:
            for f in tp["transmit_type"]["target_line_rate"]["flows"]:
                total += int(f["message_size"]) * UNIT[f["message_size_unit"]] * count[f["name"]]
                msgs += count[f["name"]]
    assert len(count) == sum(len(tp["transmit_type"]["target_line_rate"]["flows"])
                             for g in otg["stateful_flows"]["rocev2"] for tp in g["tx_ports"])
    return total, msgs


def run(args):
    res = CliRunner().invoke(main, args)
    return res


def lab_and_otg(tmp_path, extra=()):
    (tmp_path / "lab.yaml").write_text(LAB)
    lab = str(tmp_path / "lab.yaml")
    res = run(["generate", "-q", "--no-ns3", *FAST, *extra, "--lab", lab, "-o", str(tmp_path / "trace")])
    assert res.exit_code == 0, res.output
    res = run(["export", "otg", *extra, "--lab", lab, "-o", str(tmp_path / "otg")])
    assert res.exit_code == 0, res.output
    frames = [w for f in sorted((tmp_path / "trace" / "pcap").glob("*.pcap")) for w in map(rdma_writes, read_pcap(f)) if w]
    text = (tmp_path / "otg" / "otg.json").read_text()
    schedule = json.loads((tmp_path / "otg" / "otg-schedule.json").read_text())
    return frames, text, schedule, res.output


def qps_of(otg: dict, v: int):
    """Per QP name: (device address, source QPN, UDP sport, DSCP, ECN), and per device its PCP and IB MTU."""
    out, dev = {}, {}
    key = "ipv6" if v == 6 else "ipv4"
    for d in otg["devices"]:
        eth = d["ethernets"][0]
        ip = eth[f"{key}_addresses"][0]["address"]
        dev[ip] = (eth["vlans"][0]["priority"], d["rocev2"][f"{key}_interfaces"][0]["ib_mtu"])
        for intf in d["rocev2"][f"{key}_interfaces"]:
            for peer in intf["peers"]:
                for q in peer["qps"]:
                    rc = q["connection_type"]["reliable_connection"]
                    out[q["qp_name"]] = (ip, rc["source_qp_number"], rc["udp_source_port"], rc["dscp"], rc["ecn"])
    return out, dev


ECN = {"non_ect": 0, "ect_1": 1, "ect_0": 2, "ce": 3}


@pytest.mark.parametrize("extra", [[], ["--set", "output.ip_version=6", "--set", "nccl.qps_per_connection=4"]],
                         ids=["default", "ipv6-qp4"])
def test_default_job_lab_plan_otg_bytes_equal_the_lab_pcaps(tmp_path, extra):
    frames, text, schedule, said = lab_and_otg(tmp_path, extra)
    v = 6 if extra else 4
    # snappi validates as it serializes; the file reads back to the same JSON
    cfg = snappi.Config().deserialize(text)
    assert cfg.serialize(encoding=cfg.JSON) + "\n" == text
    otg = json.loads(text)
    total, msgs = flow_bytes(otg, schedule)
    pcap_total = sum(w["payload"] for w in frames)
    assert pcap_total > 30_000_000 and total == pcap_total, (total, pcap_total)
    assert f"{total:,} B" in said
    # message counts: NCCL's (one per Last/Only packet) plus at most one per flow group whose bytes
    # are not whole KiB (README: a remainder message)
    nccl_msgs = sum(1 for w in frames if w["opcode"] in (0x08, 0x09, 0x0A, 0x0B))
    assert nccl_msgs <= msgs <= nccl_msgs + len(schedule["flows"])
    # ports and addresses: the lab plan's
    assert [p["name"] for p in otg["ports"]] == ["eth1", "eth2", "eth3", "eth4"]
    want = [f"192.168.{100 + k}.1" for k in range(4)]
    if v == 6:
        want = [str(ipaddress.IPv6Address((0xFD << 120) | int(ipaddress.IPv4Address(a)))) for a in want]
    key = "ipv6" if v == 6 else "ipv4"
    assert [d["ethernets"][0][f"{key}_addresses"][0]["address"] for d in otg["devices"]] == want
    # every data flow's QP pair is one the frames use: source address, UDP source port and DSCP/ECN
    # of the sender's QP, destination QPN of the receiver's; and per QP pair the bytes agree
    qps, dev = qps_of(otg, v)
    seen = Counter()
    for w in frames:
        seen[(w["src"], w["dst"], w["sport"], w["dest_qp"], w["dscp"], w["ecn"])] += w["payload"]
        assert dev[w["src"]][0] == w["pcp"]
        assert w["payload"] <= dev[w["src"]][1]                  # IB MTU
    ours = Counter()
    for f in schedule["flows"]:
        tx, rx = qps[f["tx_qp"]], qps[f["rx_qp"]]
        assert tx[2] == rx[2]                                    # one UDP source port per QP pair (mlx5)
        ours[(tx[0], rx[0], tx[2], rx[1], tx[3], ECN[tx[4]])] += f["bytes"]
    assert ours == seen
    n_qps = len(qps)
    assert n_qps % (8 if extra else 2) == 0                      # both ends of each pair (x 4 QPs)


def test_message_sizes_keep_bytes_and_counts():
    for total, count in [(0, 3), (4 * 22, 22), (1 << 20, 1), (2 * 332544, 2), (8 * 332544, 8), (65535, 1),
                         (65536, 1), (65535 * 1024 + 1, 1), (3 * (65535 << 20) + 7, 3), (10, 3), (5, 7)]:
        parts = message_sizes(total, count)
        assert sum(b * n for b, _, _, n in parts) == total
        assert all(v <= 65535 and b == v * UNIT[u] for b, u, v, n in parts)
        n = sum(n for *_, n in parts)
        assert count <= n <= count + 3
        if total % count == 0 and (total // count <= 65535 or (total // count) % 1024 == 0):
            assert parts == [(total // count, parts[0][1], parts[0][2], count)]    # exact NCCL size kept
    assert message_sizes(2 * 332544, 2) == [(325 * 1024, "kb", 325, 1), (324 * 1024, "kb", 324, 1), (512, "bytes", 512, 1)]
    assert message_sizes(8 * 332544, 8) == [(325 * 1024, "kb", 325, 6), (324 * 1024, "kb", 324, 2)]


def export(tmp_path, name, *args):
    res = run(["export", "otg", *FAST, *args, "-o", str(tmp_path / name)])
    return res, tmp_path / name


def test_dscp_ecn_pcp_from_the_job_and_byte_identical_twice(tmp_path):
    """The job's output.dscp / ecn / pcp on every data QP and VLAN, NCCL_IB_FIFO_TC (46 << 2, not
    ECT) on the receivers' CTS QPs and the ACK/NAK settings, CNP DSCP 48 (WIRE.md); the same
    command twice writes the same bytes."""
    sets = ["--set", "output.dscp=40", "--set", "output.ecn=1", "--set", "output.pcp=5",
            "--set", "nccl.fifo_tc=184"]
    (res_a, a), (res_b, b) = export(tmp_path, "a", *sets), export(tmp_path, "b", *sets)
    assert res_a.exit_code == 0 and res_b.exit_code == 0, res_a.output + res_b.output
    for name in ("otg.json", "otg.yaml", "otg-schedule.json"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    otg = json.loads((a / "otg.json").read_text())
    schedule = json.loads((a / "otg-schedule.json").read_text())
    qps, dev = qps_of(otg, 4)
    assert {pcp for pcp, _ in dev.values()} == {5}
    data = {qps[f["tx_qp"]][3:] for f in schedule["flows"] if f["stream"] == "data"}
    cts = {qps[f["tx_qp"]][3:] for f in schedule["flows"] if f["stream"] == "cts"}
    assert data == {(40, "ect_1")} and cts == {(46, "non_ect")}
    for o in otg["options"]["per_port_options"]:
        r = o["protocols"][0]["rocev2"]
        assert r["cnp"]["ip_dscp"]["value"] == 48
        for k in ("ack", "nak"):
            assert (r["connection_type"]["reliable_connection"][k]["ip_dscp"]["value"],
                    r["connection_type"]["reliable_connection"][k]["ecn_value"]) == (46, "non_ect")
    # the read-back as snappi objects agrees (not only the JSON text)
    cfg = snappi.Config().deserialize((a / "otg.json").read_text())
    rc = cfg.devices[0].rocev2.ipv4_interfaces[0].peers[0].qps[0].connection_type.reliable_connection
    assert rc.dscp in (40, 46)


def test_max_flows_merges_phases_then_sizes_and_keeps_the_bytes(tmp_path):
    """The default job without a lab plan (every NIC with traffic): the finest level that fits;
    a smaller cap merges (qp-size, then qp) with the same bytes; below the coarsest level one
    line, exit 2, nothing written."""
    got = {}
    for cap in (None, "151", "140"):
        res, d = export(tmp_path, f"m{cap}", *(["--max-flows", cap] if cap else []))
        assert res.exit_code == 0, res.output
        otg, schedule = json.loads((d / "otg.json").read_text()), json.loads((d / "otg-schedule.json").read_text())
        snappi.Config().deserialize(json.dumps(otg))
        got[cap] = (schedule["level"], flow_bytes(otg, schedule)[0], len(schedule["flows"]))
        assert cap is None or len(schedule["flows"]) <= int(cap)
    levels = [got[c][0] for c in (None, "151", "140")]
    assert levels == ["op", "qp-size", "qp"], got
    assert len({got[c][1] for c in got}) == 1 and got[None][1] > 60_000_000
    res, d = export(tmp_path, "small", "--max-flows", "2")
    assert res.exit_code == 2 and not d.exists()
    line = res.output.strip()
    assert "\n" not in line and line.startswith("error: ") and "--max-flows" in line and "Traceback" not in line


def test_export_otg_without_snappi_says_how_to_install(tmp_path, monkeypatch):
    import builtins
    real = builtins.__import__

    def fake(name, *a, **k):
        if name.startswith("snappi"):
            raise ImportError("No module named 'snappi'")
        return real(name, *a, **k)
    monkeypatch.setattr(builtins, "__import__", fake)
    res = CliRunner().invoke(main, ["export", "otg", "-o", str(tmp_path / "o")])
    assert res.exit_code == 2 and "tracegen[otg]" in res.output and not (tmp_path / "o").exists()


@pytest.mark.parametrize("pmtu, mtu", [(1024, 1500), (4096, 9000)])
def test_layer1_mtu_carries_the_path_mtu(tmp_path, pmtu, mtu):
    """An Ethernet MTU the RoCE path MTU fits in: 1024 B in a 1500 B frame, 4096 B needs jumbo
    frames (WIRE.md); every device's IB MTU is the job's."""
    res, d = export(tmp_path, "o", "--set", f"output.pmtu={pmtu}")
    assert res.exit_code == 0, res.output
    otg = json.loads((d / "otg.json").read_text())
    assert [l1["mtu"] for l1 in otg["layer1"]] == [mtu]
    assert {ib for _, ib in qps_of(otg, 4)[1].values()} == {pmtu}
