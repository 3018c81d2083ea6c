"""Switch views of any switch of any fabric (fat-tree aggregation and core, every plane of a
multi-plane fabric), judged against the senders' own captures and an independent walk of the
route: a port file holds exactly the frames whose route crosses its link, each with the two
routers' MACs of that link, the TTL less the routers crossed before it, no earlier than the
latencies of the links before it allow, and never more than the link's rate per direction."""
from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
from click.testing import CliRunner

from tracegen.cli import main
from tracegen.config import load_job
from tracegen.fabric.topology import build_fabric
from tg_helpers import read_pcap

SETS = ["parallelism.dp=8", "parallelism.global_batch=32"]


def _generate(out, sets, *extra):
    args = ["generate", "-q", "--collective", "pp,dp", "--no-ns3", "-o", str(out)]
    for s in sets:
        args += ["--set", s]
    res = CliRunner().invoke(main, args + list(extra))
    assert res.exit_code == 0, res.output
    return sorted((out / "pcap").glob("*.pcap"))


def _fields(fr: bytes):
    off = 18 if fr[12:14] == b"\x81\x00" else 14
    ip = fr[off:off + 20]
    key = (ip[12:16], ip[16:20], fr[off + 20:off + 22], fr[off + 32:off + 36], fr[off + 36:off + 40], fr[off + 28])
    return key, fr[0:6], fr[6:12], ip[8]


def _route_nodes(fabric, tx, rx, sport, plane, dest_qpn):
    r = fabric.router
    return r.path_nodes(r.routes([tx], [rx], [sport], plane, fabric.ip_version, dest_qpn=[dest_qpn])[0])


FILE_FABRIC = ("switches: {tor-a: 1, tor-b: 1, s0: 2, s.slow: 2}\n"     # uneven: one spine at 100G
               "links: [[tor-a, s0, 400], [tor-b, s0, 400], [tor-a, s.slow, 100, 500], [tor-b, s.slow, 100]]\n"
               "nics: [tor-a, tor-a, tor-a, tor-a, tor-b, tor-b, tor-b, tor-b]\n")


@pytest.mark.parametrize("fabric,switches,more", [
    ("fat-tree-k8", ["core0", "spine1"], []),
    ("fat-tree-k8", ["core3", "spine2"], ["fabric.ecmp_hash=qp"]),   # routed by the BTH DestQP
    # DP, PP cross spines; 2 QPs a connection, messages round-robin over them: a CTS goes on QP 0,
    # so on QP 0's plane, whichever QP its message takes
    ("multi-plane-2", ["p1-spine0", "p1-leaf1"], ["fabric.nodes_per_leaf=4", "nccl.qps_per_connection=2"]),
    ("file", ["s.slow", "tor-b"], [])])
def test_switch_ports_hold_exactly_the_frames_routed_over_them(tmp_path, fabric, switches, more):
    if fabric == "file":
        (tmp_path / "fab.yaml").write_text(FILE_FABRIC)
        sets = ["fabric.kind=file", f"fabric.file={tmp_path / 'fab.yaml'}"]
    else:
        sets = [f"fabric={fabric}", *SETS, *more]
    fab = build_fabric(load_job(sets=sets))
    nic_of_ip = {int(ip).to_bytes(4, "big"): n for n, ip in enumerate(fab.nic_ip)}
    node_of_mac = {bytes(m): n for n, m in enumerate(fab.nic_mac)}
    node_of_mac.update({bytes(m): fab.n_nics + s for s, m in enumerate(fab.sw_mac)})
    lat = {}
    for ln in fab.links:
        lat[(int(ln["a"]), int(ln["b"]))] = lat[(int(ln["b"]), int(ln["a"]))] = (int(ln["latency_ns"]), int(ln["gbps"]))

    # What every NIC sent (TTL 255, or 64 for CNPs), and the plane it sent on (its first hop's
    # router MAC carries the plane in byte 2).
    sent = {}
    for f in _generate(tmp_path / "host", sets):
        for t, _, fr in read_pcap(f):
            key, dst_mac, src_mac, ttl = _fields(fr)
            if node_of_mac.get(src_mac, -1) < fab.n_nics:
                sent[key] = (t, ttl, dst_mac[2])
    assert len(sent) > 500
    crossing = defaultdict(set)                     # (from node, to node) -> keys routed over it
    path_of = {}
    for key, (_, _, plane) in sent.items():
        tx, rx, sport = nic_of_ip[key[0]], nic_of_ip[key[1]], int.from_bytes(key[2], "big")
        nodes = _route_nodes(fab, tx, rx, sport, plane, int.from_bytes(key[3][1:], "big"))
        path_of[key] = nodes
        for u, v in zip(nodes, nodes[1:]):
            crossing[(u, v)].add(key)

    checked = 0
    for sw in switches:
        files = _generate(tmp_path / sw, sets, "--switch", sw)
        me = fab.n_nics + fab.switch_id(sw)
        peers = {f.stem[len(sw) + 1:] for f in files}
        assert peers == {fab.node_name(b) for a, b in lat if a == me}, "one file per port of the switch"
        for f in files:
            peer_name = f.stem[len(sw) + 1:]
            if peer_name.startswith("node"):         # a NIC's port: its frames on this switch's plane
                ends = [(node_of_mac[fr[6:12]], node_of_mac[fr[0:6]]) for _, _, fr in read_pcap(f)]
                router = {v if u < fab.n_nics else u for u, v in ends}
                assert ends and router == {me}, f"{f.name}: frames of another plane's leaf {router}"
                continue
            peer = fab.n_nics + fab.switch_id(peer_name)
            gbps = lat[(me, peer)][1]
            got = defaultdict(list)
            for t, orig, fr in read_pcap(f):
                key, dst_mac, src_mac, ttl = _fields(fr)
                u, v = node_of_mac[src_mac], node_of_mac[dst_mac]
                assert {u, v} == {me, peer}, f"{f.name}: frame from {u} to {v}"
                nodes = path_of[key]
                k = next(i for i in range(len(nodes) - 1) if (nodes[i], nodes[i + 1]) == (u, v))
                t_sent, ttl_sent, _ = sent[key]
                assert ttl == ttl_sent - k, f"{f.name}: TTL {ttl} at route position {k}"
                flight = sum(lat[(a, b)][0] for a, b in zip(nodes[:k], nodes[1:k + 1]))
                assert t >= t_sent + flight
                got[(u, v)].append((t, orig, key))
            for d in ((me, peer), (peer, me)):
                keys = [k for _, _, k in got[d]]
                assert len(keys) == len(set(keys)) and set(keys) == crossing[d], \
                    f"{f.name} {d}: {len(set(keys) ^ crossing[d])} frames differ from the routes"
                recs = got[d]
                for (t0, n0, _), (t1, _, _) in zip(recs, recs[1:]):
                    assert (t1 - t0) * gbps >= (n0 + 24) * 8, f"{f.name}: frames overlap at {gbps} Gb/s"
                checked += len(recs)
    assert checked > 500
