"""Fabric kinds, ECMP routing by the 5-tuple hash, and link sharing in the schedule."""
from __future__ import annotations

import zlib
from collections import deque

import numpy as np
import pytest

from tracegen.config import job_from_dict, load_job
from tracegen.timing.connections import udp_sport
from tracegen.errors import ConfigError
from tracegen.pipeline import run_pipeline
from tracegen.tables import LinkKind
from tracegen.fabric.topology import build_fabric

TINY = {"layers": 2, "hidden": 256, "heads": 8, "vocab": 512, "seq_len": 64}


def fabric_job(fabric, dp=16, tp=1, gpn=2, **kw):
    return job_from_dict({"model": TINY, "parallelism": {"dp": dp, "tp": tp, "pp": 1, "global_batch": dp},
                          "cluster": {"gpus_per_node": gpn}, "fabric": fabric, **kw})


# --- an independent model of the hash (zlib, struct-free byte building) -------------------------

def _fmix(h: int) -> int:
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    return h ^ (h >> 16)


def _choice(src_ip: int, dst_ip: int, sport: int, switch: int, seed: int, n: int) -> int:
    data = src_ip.to_bytes(4, "big") + dst_ip.to_bytes(4, "big") + bytes([17]) + sport.to_bytes(2, "big") \
        + (4791).to_bytes(2, "big")
    s = _fmix((seed * 0x9E3779B1 + switch * 0x85EBCA77 + 1) & 0xFFFFFFFF)
    return _fmix(zlib.crc32(data) ^ s) % n


def _addr(ipv4: int, ip_version: int) -> bytes:
    """The address as on the wire: IPv4, or the IPv6 plan's fd00::<IPv4>."""
    return ipv4.to_bytes(4, "big") if ip_version == 4 else b"\xfd" + bytes(11) + ipv4.to_bytes(4, "big")


def _qp_choice(src_ip: int, dst_ip: int, dest_qpn: int, switch: int, seed: int, n: int, shift: int,
               ip_version: int = 4) -> int:
    """The qp hash: CRC-32 of src IP | dst IP | DestQP, the switch's bits, a 256-entry table."""
    crc = zlib.crc32(_addr(src_ip, ip_version) + _addr(dst_ip, ip_version) + dest_qpn.to_bytes(3, "big"))
    s = _fmix((seed * 0x9E3779B1 + switch * 0x85EBCA77 + 1) & 0xFFFFFFFF)
    return (((crc >> shift) ^ s) & 0xFF) % n


def _graph(f):
    adj: dict[int, list[int]] = {}
    for a, b in zip(f.links["a"].tolist(), f.links["b"].tolist()):
        adj.setdefault(a, []).append(b)
        adj.setdefault(b, []).append(a)
    return adj


def _bfs(adj, src, avoid_nics: int):
    dist, q = {src: 0}, deque([src])
    while q:
        u = q.popleft()
        for v in adj[u]:
            if v not in dist and (v >= avoid_nics or v == u):
                dist[v] = dist[u] + 1
                q.append(v)
    return dist


# chi-square critical values at p = 0.001 for n - 1 degrees of freedom
CHI2_999 = {3: 16.27, 7: 24.32}


@pytest.mark.parametrize("spines", [4, 8])
def test_ecmp_spreads_sequential_qps_evenly_over_spines(spines):
    """Sequential QPNs between two leaves (udp_sport % spines would leave half of 4 spines idle):
    1,000 QPs are indistinguishable from a uniform spread (chi-square, p > 0.001); 10,000 put
    every spine within 10 % of uniform. (For any hash that behaves like a random one, 1,000 QPs
    over 8 spines deviate by ~8 % of the mean per spine (1 sigma), so a 10 % bound needs more.)"""
    f = build_fabric(fabric_job({"nodes_per_leaf": 1, "spines": spines}, dp=4, gpn=1))
    r = f.router
    for n, check in ((1000, "chi2"), (10000, "10%")):
        qpn = np.arange(0x100, 0x100 + n)
        sport = udp_sport(qpn, qpn + 0x40)
        spine = r.node_after(r.routes(np.zeros(n, int), np.full(n, 3), sport, 0), 1)
        counts = np.bincount(spine - f.spine_node_id(0), minlength=spines)
        assert len(counts) == spines
        if check == "chi2":
            chi2 = ((counts - n / spines) ** 2 / (n / spines)).sum()
            assert chi2 < CHI2_999[spines - 1], counts
        else:
            assert np.abs(counts - n / spines).max() <= 0.1 * n / spines, counts


def test_ecmp_choice_matches_an_independent_crc_model():
    f = build_fabric(fabric_job({"nodes_per_leaf": 1, "spines": 5, "ecmp_seed": 7}, dp=4, gpn=1))
    r = f.router
    for qpn in range(0x100, 0x140):
        sport = int(udp_sport(qpn, qpn + 1))
        src_leaf = f.node_id(f.nic_port_leaf[0, 0]) - f.n_nics
        want = _choice(int(f.nic_ip[0]), int(f.nic_ip[2]), sport, src_leaf, 7, 5)
        got = r.node_after(r.routes([0], [2], [sport], 0), 1)[0] - f.spine_node_id(0)
        assert got == want


@pytest.mark.parametrize("spines", [3, 4, 5, 8])
@pytest.mark.parametrize("seed", [0, 1, 7])
def test_qp_hash_spreads_1000_sequential_qps_within_10_percent(spines, seed):
    """fabric.ecmp_hash=qp (the BTH DestQP with the addresses, linear CRC, a member table): 1,000
    consecutive DestQPs between two leaves put every spine within 10 % of uniform - for 4 and 8
    spines within one QP of it - wherever the QPNs start."""
    f = build_fabric(fabric_job({"nodes_per_leaf": 1, "spines": spines, "ecmp_hash": "qp", "ecmp_seed": seed},
                                dp=4, gpn=1))
    r = f.router
    n = 1000
    for first in (0x100, 0x1234, 0xABCDE):
        dqpn = np.arange(first, first + n)
        route = r.routes(np.zeros(n, int), np.full(n, 3), udp_sport(dqpn - 7, dqpn), 0, dest_qpn=dqpn)
        counts = np.bincount(r.node_after(route, 1) - f.spine_node_id(0), minlength=spines)
        assert len(counts) == spines
        assert np.abs(counts - n / spines).max() <= 0.1 * n / spines, counts
        if spines in (4, 8):
            assert np.abs(counts - n // spines).max() <= 1, counts


@pytest.mark.parametrize("ip_version", [4, 6])
def test_qp_hash_choice_matches_an_independent_crc_model(ip_version):
    """Leaves pick by the CRC's low bits, switches above them by bits 16 and up (fat-tree k=8:
    leaf -> aggregation -> core), each through a 256-entry table of its candidates; IPv6 hashes
    the 16-byte addresses."""
    f = build_fabric(fabric_job({"preset": "fat-tree-k8", "ecmp_hash": "qp", "ecmp_seed": 11}, dp=64, gpn=2,
                                output={"ip_version": ip_version}))
    r = f.router
    src, dst = 0, 63                                            # different pods: 6 links
    assert f.hops(np.array([src]), np.array([dst]))[0] == 6
    ip = [int(x) for x in f.nic_ip]
    adj = _graph(f)                                  # neighbours from the link list, not the router
    for dqpn in range(0x100, 0x140):
        nodes = r.path_nodes(r.routes([src], [dst], [0], 0, ip_version, dest_qpn=[dqpn])[0])
        leaf, agg, core = (n - f.n_nics for n in nodes[1:4])
        aggs = sorted(x - f.n_nics for x in adj[f.n_nics + leaf] if x >= f.n_nics and f.sw_tier[x - f.n_nics] == 2)
        cores = sorted(x - f.n_nics for x in adj[f.n_nics + agg] if x >= f.n_nics and f.sw_tier[x - f.n_nics] == 3)
        assert agg == aggs[_qp_choice(ip[src], ip[dst], dqpn, leaf, 11, len(aggs), 0, ip_version)]
        assert core == cores[_qp_choice(ip[src], ip[dst], dqpn, agg, 11, len(cores), 16, ip_version)]


def test_qp_hash_does_not_polarise_a_fat_tree():
    """A leaf and the aggregation switch above it pick by different CRC bits: 1,024 consecutive
    QPs from one leaf to another pod use all 16 (aggregation, core) pairs evenly, where one set of
    bits at both tiers would use 4."""
    f = build_fabric(fabric_job({"preset": "fat-tree-k8", "ecmp_hash": "qp"}, dp=64, gpn=2))
    r = f.router
    n = 1024
    route = r.routes(np.zeros(n, int), np.full(n, 63), np.zeros(n, int), 0, dest_qpn=np.arange(0x100, 0x100 + n))
    pair = r.node_after(route, 1) * 100_000 + r.node_after(route, 2)
    _, counts = np.unique(pair, return_counts=True)
    assert len(counts) == 16 and np.abs(counts - n / 16).max() <= 0.1 * n / 16, counts


@pytest.mark.parametrize("ecmp_hash", ["5-tuple", "qp"])
@pytest.mark.parametrize("fabric", ["rail-optimised", "leaf-spine-2to1", "fat-tree-k8", "multi-plane-2",
                                    "dgx-h100-su"])
def test_every_route_is_a_shortest_valid_path(fabric, ecmp_hash):
    j = fabric_job({"preset": fabric, "ecmp_hash": ecmp_hash}, dp=32, gpn=2)
    f = build_fabric(j)
    adj = _graph(f)
    rng = np.random.default_rng(1)
    src, dst = rng.integers(0, f.n_nics, 300), rng.integers(0, f.n_nics, 300)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    sport = rng.integers(0xC000, 0x10000, len(src))
    plane = rng.integers(0, f.planes, len(src))
    routes = f.router.routes(src, dst, sport, plane, dest_qpn=rng.integers(0x100, 1 << 24, len(src)))
    for s, d, p, rt in zip(src.tolist(), dst.tolist(), plane.tolist(), routes):
        nodes = f.router.path_nodes(rt)
        assert nodes[0] == s and nodes[-1] == d
        for u, v, ld in zip(nodes, nodes[1:], rt[rt >= 0].tolist()):      # consecutive, real links
            a, b = int(f.links["a"][ld >> 1]), int(f.links["b"][ld >> 1])
            assert (u, v) == ((a, b) if ld % 2 == 0 else (b, a))
        assert all(n >= f.n_nics for n in nodes[1:-1])                   # no NIC forwards
        assert len({f.sw_plane[n - f.n_nics] for n in nodes[1:-1]}) == 1   # one plane
        # shortest: the BFS distance between the two leaves over switches only
        first, last = nodes[1], nodes[-2]
        assert len(nodes) - 3 == _bfs(adj, first, f.n_nics)[last]


def test_fat_tree_k8_shape():
    f = build_fabric(fabric_job("fat-tree-k8", dp=64, gpn=2))          # 64 NICs: 16 leaves, 4 pods
    tiers = np.bincount(f.sw_tier, minlength=4)
    assert (tiers[1], tiers[2], tiers[3]) == (16, 16, 16)
    sw = (f.links["a"] >= f.n_nics) & (f.links["b"] >= f.n_nics)
    assert sw.sum() == 16 * 4 + 16 * 4          # leaf-spine inside pods + spine-core
    assert f.hops(np.array([0]), np.array([63]))[0] == 6
    assert f.hops(np.array([0]), np.array([4]))[0] == 4   # same pod, other leaf


def test_oversubscription_sets_the_uplink_rate():
    f = build_fabric(fabric_job("leaf-spine-4to1", dp=16, gpn=2))   # 4 nodes x 2 NICs x 400G per leaf
    up = f.links["gbps"][(f.links["a"] >= f.n_nics) & (f.links["b"] >= f.n_nics)]
    assert set(up.tolist()) == {200}                                # 3200 / (4 x 4)


def test_multi_plane_splits_the_nic():
    f = build_fabric(fabric_job("multi-plane-2", dp=4, gpn=2))
    nic_links = f.links[f.links["a"] < f.n_nics]
    assert len(nic_links) == 2 * f.n_nics and set(nic_links["gbps"].tolist()) == {200}


def test_topology_file(tmp_path):
    (tmp_path / "fab.yaml").write_text(
        "switches: {leafA: 1, leafB: 1, s0: 2, s1: 2}\n"
        "links: [[leafA, s0, 400], [leafB, s0, 400], [leafA, s1, 100, 500], [leafB, s1, 100]]\n"
        "nics: [leafA, leafA, leafB, leafB]\n")
    j = fabric_job({"kind": "file", "file": str(tmp_path / "fab.yaml")}, dp=4, gpn=1)
    f = build_fabric(j)
    assert f.sw_name == ["leafA", "leafB", "s0", "s1"] and f.hops(np.array([0]), np.array([3]))[0] == 4
    run = run_pipeline(j)
    assert run.report.iteration_ns > 0
    (tmp_path / "bad.yaml").write_text("switches: {a: 1}\nlinks: []\nnics: [a, a, zz, a]\n")
    with pytest.raises(ConfigError, match="tier-1"):
        build_fabric(fabric_job({"kind": "file", "file": str(tmp_path / "bad.yaml")}, dp=4, gpn=1))
    for name in ("../up", "node7", "a b"):          # names name switch-view files: no paths, no NIC names
        (tmp_path / "bad.yaml").write_text(f"switches: {{'{name}': 1}}\nlinks: []\nnics: ['{name}'] \n")
        with pytest.raises(ConfigError, match="switch name"):
            build_fabric(fabric_job({"kind": "file", "file": str(tmp_path / "bad.yaml")}, dp=4, gpn=1))


def test_cluster_keys_still_accepted_as_fabric_aliases():
    j = load_job(sets=["cluster.nodes_per_leaf=3", "cluster.spines=5", "cluster.leaf_spine_gbps=100"])
    assert (j.fabric.nodes_per_leaf, j.fabric.spines, j.fabric.leaf_spine_gbps) == (3, 5, 100)
    assert load_job(preset="llama3-70b").fabric.spines == 16         # from the dgx-h100 cluster preset


# --- link sharing --------------------------------------------------------------------------------

def _p2p_job(fabric, pairs, nbytes=8 << 20):
    """A job whose only traffic is one p2p op per (src, dst), all released at t = 0."""
    from tracegen.tables import COMMOP_DTYPE, CollKind, CommOps, Dim, Ragged
    j = fabric_job(fabric, dp=8, gpn=1, nccl={"channels": 1, "p2p_chunk_bytes": nbytes})
    ops = np.zeros(len(pairs), COMMOP_DTYPE)
    ops["op_id"], ops["kind"], ops["dim"] = np.arange(len(pairs)), CollKind.SENDRECV, Dim.PP
    ops["bytes"], ops["elem_bytes"], ops["stage"], ops["layer"] = nbytes, 1, -1, -1
    return j, CommOps(ops, Ragged.from_lists([list(p) for p in pairs]), Ragged.empty(len(pairs)))


def _schedule(j, ops):
    from tracegen.collectives import expand
    from tracegen.timing.schedule import schedule
    f = build_fabric(j)
    return f, schedule(ops, expand(ops, f, j.nccl), f, j)


def test_two_flows_through_one_spine_link_each_get_half():
    """One spine, two flows from two hosts of leaf 0 to two hosts of leaf 1: the leaf0->spine link
    is their bottleneck, so each gets half of it and both end together, twice as late as one."""
    fab = {"kind": "leaf-spine", "nodes_per_leaf": 4, "spines": 1, "leaf_spine_gbps": 400}
    j, one = _p2p_job(fab, [(0, 4)])
    _, f1 = _schedule(j, one)
    j, two = _p2p_job(fab, [(0, 4), (1, 5)])
    _, f2 = _schedule(j, two)
    t1 = int(f1.finish_ns.max() - f1.rows["start_ns"].min())
    ends = f2.finish_ns - f2.rows["start_ns"]
    assert abs(ends[0] - ends[1]) <= 1 and abs(ends[0] - 2 * t1) <= 2
    # with two spines the hash decides: either they collide (2x) or not (1x), nothing else
    fab2 = dict(fab, spines=8)
    j, two = _p2p_job(fab2, [(0, 4), (1, 5)])
    fabric, f8 = _schedule(j, two)
    d = f8.finish_ns - f8.rows["start_ns"]
    spines = fabric.router.node_after(f8.conns.route, 1)
    want = 2 * t1 if spines[0] == spines[1] else t1
    assert np.abs(d - want).max() <= 2


def test_same_leaf_traffic_never_touches_a_spine():
    j, ops = _p2p_job({"kind": "leaf-spine", "nodes_per_leaf": 8, "spines": 2}, [(0, 4), (1, 5)])
    fabric, fl = _schedule(j, ops)
    assert (fl.conns.hops == 2).all()


def test_busbw_ring_allreduce_dgx_h100_within_nccl_tests_range():
    """1 GiB ring AllReduce over 4 DGX H100 nodes (rail-aligned rings, 16 channels): busbw in the
    366-396 GB/s nccl-tests measure (FORMULAS.md)."""
    from tracegen.tables import COMMOP_DTYPE, CollKind, CommOps, Dim, Ragged
    n = 32
    j = job_from_dict({"model": TINY, "parallelism": {"dp": n, "tp": 1, "pp": 1, "global_batch": n},
                       "cluster": "dgx-h100", "nccl": {"channels": 16}})
    ops = np.zeros(1, COMMOP_DTYPE)
    ops["kind"], ops["dim"], ops["bytes"], ops["elem_bytes"] = CollKind.ALLREDUCE, Dim.DP, 1 << 30, 2
    ops = CommOps(ops, Ragged.from_lists([list(range(n))]), Ragged.empty(1))
    _, fl = _schedule(j, ops)
    busbw = (1 << 30) / (fl.op_end_ns[0] - fl.op_start_ns[0]) * 2 * (n - 1) / n
    assert 366 <= busbw <= 396, busbw
    assert (fl.rows["link"] == LinkKind.NET).any()


@pytest.mark.parametrize("detail", ["full", "conn"])
def test_non_blocking_fabric_reproduces_the_nic_only_schedule(detail):
    """Rail-aligned rings (PXN) on a rail-optimised fabric that is non-blocking whatever ECMP
    picks (every uplink as fast as its leaf's NIC ports together): sharing every switch port
    changes nothing against NICs and NVLink alone (within 1 %)."""
    from tracegen.collectives import expand
    from tracegen.timing.schedule import schedule
    from tracegen.timing.schedule_conn import schedule_connections
    from tracegen.workload import build_commops
    j = job_from_dict({"model": {"layers": 4, "hidden": 512, "heads": 8, "vocab": 4096, "seq_len": 512},
                       "parallelism": {"dp": 8, "tp": 8, "pp": 2, "global_batch": 32},
                       "cluster": "dgx-h100", "fabric": {"nodes_per_leaf": 4, "spines": 2,
                                                         "leaf_spine_gbps": 1600}})   # 4 x 400 per uplink
    f, ops = build_fabric(j), build_commops(j)
    if detail == "full":
        tr = expand(ops, f, j.nccl)
        runs = [schedule(ops, tr, f, j, shared_fabric=s) for s in (True, False)]
    else:
        runs = [schedule_connections(ops, f, j, shared_fabric=s) for s in (True, False)]
    shared, nic_only = (r.op_end_ns.max() for r in runs)
    assert (runs[0].conns.hops > 2).any()                     # some traffic does cross the spines
    assert abs(shared - nic_only) <= 0.01 * nic_only, (shared, nic_only)


def test_link_loads_over_time_match_the_bytes_and_never_exceed_the_rate():
    """The engine's record of every link's load (fluid.LinkLoad), binned over the iteration, adds
    up to the bytes the routes put on each link, and no bin carries more than the link's rate."""
    j = fabric_job("leaf-spine-2to1", dp=16, gpn=2)
    run = run_pipeline(j)
    rep, fl = run.report, run.flows
    end = int(fl.op_end_ns.max())
    n = 2 * len(run.fabric.links)
    busy = fl.link_load.binned(n, 1000, -(-end // 1000) + 1)
    # (items end on whole ns: each holds its link up to 1 ns longer at its rate)
    assert np.allclose(busy.sum(axis=1), rep.link_bytes, rtol=1e-3, atol=64)
    gbps = np.repeat(run.fabric.links["gbps"], 2)
    assert (busy * 8 <= gbps[:, None] * 1000 * (1 + 1e-9)).all()
    assert (rep.link_peak <= 1 + 1e-9).all() and rep.link_peak.max() > 0.99   # the uplinks saturate


def test_qp_hash_evens_out_the_uplinks_of_a_job():
    """DP rings with 4 QPs per connection over a 2:1 leaf-spine with 4 spines: by the 5-tuple hash
    some leaf->spine links carry far more than others; by the qp hash every uplink of a leaf
    carries the same bytes, and the iteration is not slower."""
    fab = {"kind": "leaf-spine", "nodes_per_leaf": 2, "spines": 4, "oversubscription": 2}
    out = {}
    for h in ("5-tuple", "qp"):
        j = fabric_job(dict(fab, ecmp_hash=h), dp=16, gpn=1, nccl={"qps_per_connection": 4})
        run = run_pipeline(j)
        f = run.fabric
        a, b = f.links["a"].astype(np.int64) - f.n_nics, f.links["b"].astype(np.int64) - f.n_nics
        sw = (a >= 0) & (b >= 0)
        up = np.flatnonzero(sw & (f.sw_tier[np.maximum(a, 0)] == 1) & (f.sw_tier[np.maximum(b, 0)] == 2))
        assert len(up) == 8 * 4
        up_bytes = run.report.link_bytes[2 * up].reshape(-1, 4)     # leaf -> spine, per leaf
        out[h] = (up_bytes, int(run.flows.op_end_ns.max()))
    skew = lambda b: (b.max(axis=1) / b.mean(axis=1)).max()
    assert skew(out["qp"][0]) < 1.001                  # (control frames differ by a few bytes)
    assert skew(out["5-tuple"][0]) > 1.2
    assert out["qp"][1] < out["5-tuple"][1], (skew(out["5-tuple"][0]), out["qp"][1], out["5-tuple"][1])


def test_link_utilisation_picture_from_a_run_and_from_disk(tmp_path):
    from click.testing import CliRunner
    from tracegen.cli import main
    out = tmp_path / "t"
    res = CliRunner().invoke(main, ["generate", "-q", "--no-pcap", "--no-ns3", "--set", "fabric=leaf-spine-2to1",
                                    "--set", "parallelism.dp=8", "--set", "parallelism.global_batch=32", "-o", str(out)])
    assert res.exit_code == 0, res.output
    import json
    lu = json.loads((out / "summary.json").read_text())["link_utilisation"]
    assert len(lu["name"]) == 8 and max(max(u) for u in lu["util"]) <= 1 + 1e-6
    header = (out / "flows.csv").read_text().split("\n", 1)[0].split(",")
    assert header[-2:] == ["route", "net_wire_bytes"]
    res = CliRunner().invoke(main, ["report", str(out), "-o", str(tmp_path / "r")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "r" / "link_utilisation.png").read_bytes() == (out / "link_utilisation.png").read_bytes()


# --- the router against a reference of its own; bounded tables ------------------------------------

def _reference_routes(f, src, dst, sport, dqpn, hash_kind, seed):
    """Routes by the module doc alone, in plain Python: BFS distances to the destination's leaf,
    the candidates one hop closer in ascending switch order, the (hash mod n)-th (plane 0, IPv4)."""
    n = f.n_nics
    nbrs, port = {}, {}
    for lk, (a, b) in enumerate(zip(f.links["a"].tolist(), f.links["b"].tolist())):
        if a >= n and b >= n:
            nbrs.setdefault(a, []).append((b, 2 * lk))
            nbrs.setdefault(b, []).append((a, 2 * lk + 1))
        else:
            port[a if a < n else b] = (b if a < n else a, 2 * lk if a < n else 2 * lk + 1)
    nic_leaves = {leaf for leaf, _ in port.values()}
    ip = [int(x) for x in f.nic_ip]
    out, dist_to = [], {}
    for s, d, sp, q in zip(src, dst, sport, dqpn):
        (cur, up), (goal, down_rev) = port[s], port[d]
        if goal not in dist_to:
            dist, frontier = {goal: 0}, [goal]
            while frontier:
                frontier = [v for u in frontier for v, _ in nbrs.get(u, []) if v not in dist
                            and not dist.setdefault(v, dist[u] + 1) is None]
            dist_to[goal] = dist
        dist, route = dist_to[goal], [up]
        while cur != goal:
            cand = sorted((v, dr) for v, dr in nbrs[cur] if dist.get(v, -9) == dist[cur] - 1)
            sw = cur - n
            k = (_choice(ip[s], ip[d], sp, sw, seed, len(cand)) if hash_kind == "5-tuple" else
                 _qp_choice(ip[s], ip[d], q, sw, seed, len(cand), 0 if cur in nic_leaves else 16))
            cur, dr = cand[k]
            route.append(dr)
        out.append(route + [down_rev ^ 1])
    return out


def _random_file_fabric(rng, path):
    """Connected, no parallel links: 2-5 leaves (some without NICs), 0-4 switches of tier 2 or 3,
    a random spanning tree plus random extra links (leaf-leaf ones included)."""
    leaves = [f"l{i}" for i in range(int(rng.integers(2, 6)))]
    others = [f"s{i}" for i in range(int(rng.integers(0, 5)))]
    names = leaves + others
    order = rng.permutation(len(names))
    pairs = {tuple(sorted((names[order[i]], names[order[int(rng.integers(0, i))]]))) for i in range(1, len(names))}
    for _ in range(int(rng.integers(0, 10))):
        a, b = rng.choice(len(names), 2, replace=False)
        pairs.add(tuple(sorted((names[a], names[b]))))
    tiers = {x: 1 for x in leaves} | {x: int(rng.integers(2, 4)) for x in others}
    nics = [leaves[int(rng.integers(0, len(leaves) - 1))] for _ in range(8)]    # the last leaf: no NIC
    path.write_text(f"switches: {tiers}\nlinks: {[[a, b] for a, b in sorted(pairs)]}\nnics: {nics}\n".replace("'", ""))


@pytest.mark.parametrize("ecmp_hash", ["5-tuple", "qp"])
def test_routes_match_a_reference_router_on_random_fabrics(tmp_path, ecmp_hash):
    """30 random connected file fabrics (chains, meshes, leaves linked directly, tier-3 switches)
    and the presets: every route equals the plain-Python reference's, link by link."""
    rng = np.random.default_rng(5)
    jobs = [fabric_job(dict(p, ecmp_hash=ecmp_hash, ecmp_seed=3), dp=32, gpn=2)
            for p in ({"preset": "rail-optimised"}, {"preset": "leaf-spine-2to1"}, {"preset": "fat-tree-k8"},
                      {"preset": "dgx-h100-su"}, {"kind": "leaf-spine", "nodes_per_leaf": 1, "spines": 3},
                      {"kind": "rail-optimised", "nodes_per_leaf": 2, "spines": 5})]
    for t in range(30):
        _random_file_fabric(rng, tmp_path / f"f{t}.yaml")
        jobs.append(fabric_job({"kind": "file", "file": str(tmp_path / f"f{t}.yaml"), "ecmp_hash": ecmp_hash,
                                "ecmp_seed": t}, dp=8, gpn=2))
    for j in jobs:
        f = build_fabric(j)
        src, dst = rng.integers(0, f.n_nics, 200), rng.integers(0, f.n_nics, 200)
        src, dst = src[src != dst], dst[src != dst]
        sport, dqpn = rng.integers(0xC000, 0x10000, len(src)), rng.integers(0x100, 1 << 24, len(src))
        got = f.router.routes(src, dst, sport, 0, dest_qpn=dqpn)
        want = _reference_routes(f, src.tolist(), dst.tolist(), sport.tolist(), dqpn.tolist(), ecmp_hash,
                                 j.fabric.ecmp_seed)
        assert [r[r >= 0].tolist() for r in got] == want
        assert got.shape[1] >= max(len(r) for r in want)


def test_a_fabric_of_65536_spines_routes_in_bounded_memory():
    """fabric.spines at its documented maximum (docs/limits.md): the router's tables grow with
    the links (2 x 65,536), not switches x neighbours (a padded adjacency: 65,538 x 65,536 x 8 B
    twice, 64 GiB); 2,000 routes pick their spine as the independent hash model says."""
    import tracemalloc
    f = build_fabric(load_job(sets=["fabric.spines=65536"]))          # the default job: 2 leaves
    assert f.n_spines == 65536
    n = 2000
    src, dst = np.zeros(n, int), np.full(n, 1)        # node0000-rail0 (leaf0) -> node0000-rail1 (leaf1)
    sport = udp_sport(np.arange(0x100, 0x100 + n), np.arange(0x200, 0x200 + n)).astype(np.int64)
    tracemalloc.start()
    r = f.router
    spine = r.node_after(r.routes(src, dst, sport, 0), 1)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 64 << 20, peak
    leaf = f.nic_port_leaf[0, 0]
    want = [_choice(int(f.nic_ip[0]), int(f.nic_ip[1]), int(s), int(leaf), 0, 65536) for s in sport]
    assert (spine - f.spine_node_id(0)).tolist() == want


@pytest.mark.parametrize("ratio,per_leaf,spines,want", [
    (0.01, 2, 2, 40_000),         # the smallest ratio: a rail leaf of 2 nodes, 2 x 400G down; 800 / (0.01 x 2)
    (0.01, 16, 1, 160_000),       # 4 nodes: 1600 / 0.01, exact in decimal (no float error, no division by 0)
    (2.5, 2, 3, 107),             # 800 / 7.5 = 106.67 -> 107, exactly (2.5 x 3 is no float error)
    (3, 2, 1, 267),               # 800 / 3
])
def test_uplink_rate_from_any_oversubscription(ratio, per_leaf, spines, want):
    """(Ratios below 0.01 are refused by the job's range: test_oversubscription_below_range_is_refused.)"""
    f = build_fabric(load_job(sets=[f"fabric.nodes_per_leaf={per_leaf}", f"fabric.spines={spines}",
                                    f"fabric.oversubscription={ratio}"]))
    up = f.links["gbps"][(f.links["a"] >= f.n_nics) & (f.links["b"] >= f.n_nics)]
    assert set(up.tolist()) == {want}


def test_oversubscription_below_range_is_refused():
    """0.0001 once divided by zero; the key's range now stops it in one line naming it."""
    from tracegen.errors import ConfigError
    with pytest.raises(ConfigError, match=r"fabric\.oversubscription: must be 0 or in 0\.01\.\.1000"):
        load_job(sets=["fabric.oversubscription=0.0001"])
