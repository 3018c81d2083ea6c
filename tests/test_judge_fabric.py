"""Judges of the fabric (issue 25, mutation pass): port rates, oversubscription, fat-tree pods and
placement, QP numbering and planes - each from the documented rule (fabric_kinds / connections
module docs, Al-Fares et al. 2008), recomputed by brute force here, never by the code's helpers."""
from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

from tracegen.config import job_from_dict
from tracegen.fabric.kinds import fat_tree_k
from tracegen.pipeline import run_pipeline
from tracegen.fabric.topology import build_fabric

TINY = {"layers": 2, "hidden": 256, "heads": 8, "vocab": 512, "seq_len": 64}


def job(nodes, gpn=2, nics=0, **fabric):
    return job_from_dict({"model": TINY, "parallelism": {"dp": nodes * gpn, "tp": 1, "pp": 1,
                                                         "global_batch": nodes * gpn},
                          "cluster": {"gpus_per_node": gpn, "nodes": nodes, "nics_per_node": nics},
                          "fabric": fabric})


def _ports(f):
    """{nic: [(switch, gbps), ...]} of every NIC-switch link, from the links table."""
    out = defaultdict(list)
    for a, b, g in zip(f.links["a"].tolist(), f.links["b"].tolist(), f.links["gbps"].tolist()):
        if (a < f.n_nics) != (b < f.n_nics):
            nic, sw = (a, b) if a < f.n_nics else (b, a)
            out[nic].append((sw - f.n_nics, g))
    return out


@pytest.mark.parametrize("fabric", [{"kind": "rail-optimised", "planes": 2},
                                    {"kind": "leaf-spine", "planes": 4, "nodes_per_leaf": 2},
                                    {"kind": "fat-tree", "planes": 2}])
def test_a_nic_shares_its_rate_over_its_planes(fabric):
    """Multi-plane (fabric_kinds doc): one port per plane, each nic_gbps / P - a NIC's ports
    together run at its line rate, and Fabric.port_gbps (what pacing and pcap views space
    frames by) is that share."""
    f = build_fabric(job(4, **fabric))
    P = fabric["planes"]
    ports = _ports(f)
    assert sorted(ports) == list(range(f.n_nics))
    for nic, sws in ports.items():
        assert sorted(int(f.sw_plane[s]) for s, _ in sws) == list(range(P)), nic
        assert sum(g for _, g in sws) == f.nic_gbps and {g for _, g in sws} == {f.nic_gbps // P}
    assert f.port_gbps * P == f.nic_gbps


@pytest.mark.parametrize("fabric,nodes", [({"kind": "rail-optimised", "nodes_per_leaf": 2, "spines": 4}, 4),
                                          ({"kind": "leaf-spine", "nodes_per_leaf": 2, "spines": 2}, 6),
                                          ({"kind": "fat-tree", "k": 4}, 8)])
@pytest.mark.parametrize("ratio", [2, 4])
def test_oversubscription_is_a_full_leafs_down_over_up(fabric, nodes, ratio):
    """fabric.oversubscription = a leaf's NIC-facing Gb/s / its uplink Gb/s (each uplink rounded
    up to whole Gb/s): summed from the links table per leaf."""
    f = build_fabric(job(nodes, oversubscription=ratio, **fabric))
    down, up = defaultdict(int), defaultdict(list)
    for a, b, g in zip(f.links["a"].tolist(), f.links["b"].tolist(), f.links["gbps"].tolist()):
        if a < f.n_nics:
            down[b - f.n_nics] += g
        elif f.sw_tier[a - f.n_nics] == 1 and f.sw_tier[b - f.n_nics] == 2:
            up[a - f.n_nics].append(g)
    assert down and set(down) == set(up)
    for leaf, d in down.items():
        n = len(up[leaf])
        assert set(up[leaf]) == {-(-d // (ratio * n))}, (leaf, d, up[leaf])


def test_fat_tree_pods_and_cores_follow_al_fares():
    """k = 4, 16 NIC ports (Al-Fares et al. 2008): pods of k/2 leaves and k/2 aggregation
    switches, every leaf linked to exactly the aggregation switches of its own pod, aggregation
    switch j of every pod to cores j·k/2 .. j·k/2 + k/2 - 1; k/2 NICs per leaf, in NIC order."""
    k, half = 4, 2
    f = build_fabric(job(8, kind="fat-tree", k=k))
    idx = lambda s: int(f.sw_index[s])
    adj = defaultdict(set)
    for a, b in zip(f.links["a"].tolist(), f.links["b"].tolist()):
        if a >= f.n_nics and b >= f.n_nics:
            adj[a - f.n_nics].add(b - f.n_nics)
            adj[b - f.n_nics].add(a - f.n_nics)
    leaves = [s for s in range(f.n_switches) if f.sw_tier[s] == 1]
    aggs = [s for s in range(f.n_switches) if f.sw_tier[s] == 2]
    cores = [s for s in range(f.n_switches) if f.sw_tier[s] == 3]
    assert (len(leaves), len(aggs), len(cores)) == (8, 8, 4)
    for s in leaves:
        assert {idx(x) for x in adj[s]} == {idx(s) // half * half + j for j in range(half)}, s
    for s in aggs:
        ups = {idx(x) for x in adj[s] if f.sw_tier[x] == 3}
        assert ups == {idx(s) % half * half + j for j in range(half)}, s
    for nic in range(f.n_nics):
        assert idx(f.nic_port_leaf[nic, 0]) == nic // half


@pytest.mark.parametrize("ports", [1, 2, 3, 16, 17, 54, 55, 128, 129, 1024])
def test_auto_fat_tree_radix_is_the_smallest_that_holds_the_nics(ports):
    """A k-ary fat-tree holds k³/4 hosts: auto picks the smallest even k >= 2 that holds them."""
    want = next(k for k in range(2, 100, 2) if k ** 3 // 4 >= ports)
    assert fat_tree_k(ports) == want


def test_fat_tree_rail_placement_is_rail_major():
    """placement `rail` fills leaves in rail-major order (rail 0 of every node first), k/2 NIC
    ports per leaf: with 3 nodes x 2 NICs and k = 4, leaf 0 holds rail 0 of nodes 0 and 1, leaf 1
    rail 0 of node 2 and rail 1 of node 0, leaf 2 rail 1 of nodes 1 and 2."""
    nodes, nics, half = 3, 2, 2
    f = build_fabric(job(nodes, gpn=2, nics=nics, kind="fat-tree", k=4, placement="rail"))
    order = [(r, n) for r in range(nics) for n in range(nodes)]          # rail-major positions
    for pos, (r, n) in enumerate(order):
        assert int(f.sw_index[f.nic_port_leaf[n * nics + r, 0]]) == pos // half, (n, r)


# --- connections: QPNs, planes, the paths ns-3 pins ---------------------------------------------

@pytest.fixture(scope="module")
def run2p():
    """The default job on a 2-plane fabric with 2 QPs per connection (PP and the tied-embedding
    AllReduce share rank pairs: two communicators between the same GPUs)."""
    from tracegen.config import load_job
    return run_pipeline(load_job(sets=["fabric.planes=2", "nccl.qps_per_connection=2"]), emit=False)


def test_qpns_count_up_per_nic_in_the_documented_order(run2p):
    """connections.py: QPNs count up per NIC from 0x100 over the NIC's QPs in sorted (src NIC, dst
    NIC, src rank, dst rank, communicator, channel, QP index) order, as sender and as receiver."""
    c = run2p.flows.conns
    q = c.qps
    per_nic = defaultdict(list)
    for i in range(len(c)):
        key = (int(c.src_nic[i]), int(c.dst_nic[i]), int(c.src_rank[i]), int(c.dst_rank[i]),
               int(c.comm[i]), int(c.channel[i]))
        for j in range(q):
            per_nic[key[0]].append((key + (j,), "src", i * q + j))
            per_nic[key[1]].append((key + (j,), "dst", i * q + j))
    assert len({(int(a), int(b)) for a, b in zip(c.src_rank, c.dst_rank)}) < len(c)   # shared pairs
    for nic, items in per_nic.items():
        for k, (_, role, qp) in enumerate(sorted(items)):
            got = c.qpn_src[qp] if role == "src" else c.qpn_dst[qp]
            assert got == 0x100 + k, (nic, role, qp)


@pytest.fixture(scope="module")
def run2p1q():
    """The same on one QP per connection: a QP's two ends then often have QPNs of different
    parity (with 2 QPs both ends' parity is the QP index), so sender and receiver QPN tell
    different planes."""
    from tracegen.config import load_job
    return run_pipeline(load_job(sets=["fabric.planes=2", "nccl.qps_per_connection=1"]), emit=False)


@pytest.mark.parametrize("which", ["run2p", "run2p1q"])
def test_a_qps_plane_is_its_sender_qpn_mod_planes_everywhere(which, request):
    """A QP's plane is its sender QPN mod planes: its data leave on that plane's port, and the
    path ns-3 pins for it (Fabric.qp_paths) is the one the schedule timed."""
    run = request.getfixturevalue(which)
    if which == "run2p1q":                     # the case has power: the two ends disagree somewhere
        c = run.flows.conns
        assert (c.qpn_src % 2 != c.qpn_dst % 2).any()
    f, c = run.fabric, run.flows.conns
    lk = f.links
    first = c.route[:, 0]
    leaf = np.where(first & 1, lk["a"][first >> 1], lk["b"][first >> 1]) - f.n_nics
    assert (f.sw_plane[leaf] == c.qpn_src % 2).all() and len(set(c.plane.tolist())) == 2
    src, dst = np.repeat(c.src_nic, c.qps), np.repeat(c.dst_nic, c.qps)
    paths = f.qp_paths(src, dst, c.sport, c.qpn_src, c.qpn_dst)
    for qp, path in enumerate(paths):
        d = c.route[qp][c.route[qp] >= 0]
        ends = np.where(d & 1, lk["a"][d >> 1], lk["b"][d >> 1]).tolist()
        assert path == [int(src[qp])] + ends, qp
