"""AllToAlls timed per sending rank (tracegen/timing/alltoall_agg.py, issue 27) against the pairwise
connection-level form they replace beyond AGG_PAIRS rank pairs, and against a closed form.

Judges: (1) on mid-size MoE jobs where both forms run - Mixtral (EP over 2 nodes, PXN proxies shared
by the two EP groups of a TP pair) and a shrunk DeepSeek-V3 (ep=16 over 2 nodes) on rail-optimised,
2:1 and 4:1 leaf-spine fabrics - every op's duration and the iteration within TOL of the pairwise
form, and the bytes each NIC sends and receives and each fabric link direction carries identical
(the pairwise rows summed by an independent bincount, not by the code under test); (2) a symmetric
AllToAll alone on a non-blocking fabric takes the closed form (n - L) x block wire bytes / NIC rate
within 1 %; (3) the work estimate admits deepseek-v3-2k per sender and counts its rows."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tracegen.config.load import load_job
from tracegen.fabric.topology import build_fabric
from tracegen.report.build import build_report
from tracegen.tables import CollKind, LinkKind
from tracegen.timing.schedule_conn import schedule_connections
from tracegen.workload import build_commops

TOL = 0.02          # AllToAll durations and the iteration: aggregated vs pairwise
OTHER_TOL = 0.15    # any op's duration

JOBS = {
    "mixtral rail": ("mixtral-8x7b", ["model.layers=4"]),
    "mixtral 2:1": ("mixtral-8x7b", ["model.layers=4", "fabric=leaf-spine-2to1", "fabric.nodes_per_leaf=1"]),
    "mixtral 4:1": ("mixtral-8x7b", ["model.layers=4", "fabric=leaf-spine-4to1", "fabric.nodes_per_leaf=1"]),
    "mixtral rail, a leaf per node": ("mixtral-8x7b", ["model.layers=4", "fabric.nodes_per_leaf=1"]),
    "mixtral 2:1, 4 QPs": ("mixtral-8x7b", ["model.layers=4", "fabric=leaf-spine-2to1", "fabric.nodes_per_leaf=1",
                                           "nccl.qps_per_connection=4"]),
    "deepseek ep16 rail": ("deepseek-v3", ["model.layers=8", "parallelism.pp=2", "parallelism.dp=16",
                                          "parallelism.global_batch=32", "cluster.nodes=4"]),
    "deepseek ep16 4:1": ("deepseek-v3", ["model.layers=8", "parallelism.pp=2", "parallelism.dp=16",
                                         "parallelism.global_batch=32", "cluster.nodes=4",
                                         "fabric=leaf-spine-4to1", "fabric.nodes_per_leaf=1"]),
    # ep 64 over 8 nodes as deepseek-v3-2k's EP groups, 2 nodes a leaf, 4:1: uplinks bind (4x slower)
    "deepseek-v3-2k ep64 4:1": ("deepseek-v3-2k", ["parallelism.pp=1", "parallelism.dp=64", "cluster.nodes=8",
                                                   "model.layers=5", "parallelism.global_batch=128",
                                                   "fabric=leaf-spine-4to1", "fabric.nodes_per_leaf=2"]),
    "deepseek ep16 2:1, no PXN": ("deepseek-v3", ["model.layers=8", "parallelism.pp=2", "parallelism.dp=16",
                                                 "parallelism.global_batch=32", "cluster.nodes=4",
                                                 "fabric=leaf-spine-2to1", "fabric.nodes_per_leaf=1",
                                                 "nccl.pxn=false"]),
}


def _both(preset, sets):
    job = load_job(preset=preset, sets=sets)
    fab = build_fabric(job)
    ops = build_commops(job)
    pair = schedule_connections(ops, fab, job, aggregate=False)
    agg = schedule_connections(ops, fab, job, aggregate=True)
    return job, fab, ops, pair, agg


@pytest.mark.parametrize("name", list(JOBS))
def test_per_sender_alltoalls_match_the_pairwise_form(name):
    job, fab, ops, pair, agg = _both(*JOBS[name])
    a2a = ops.rows["kind"] == CollKind.ALLTOALL
    assert a2a.sum() >= 8 and len(agg) < len(pair)          # the aggregated form is in use
    # rows of the aggregated ops: one per (op, sender, NVLink/NET), no single receiver
    r = agg.rows[a2a[agg.rows["op_id"]]]
    assert (r["dst_rank"] == -1).all()
    assert len(np.unique(r["op_id"].astype(np.int64) * 2 * fab.world + r["src_rank"] * 2 + r["link"])) == len(r)
    d_pair = pair.op_end_ns - pair.op_start_ns
    d_agg = agg.op_end_ns - agg.op_start_ns
    off = np.abs(d_agg - d_pair) / np.maximum(d_pair, 1)
    assert off[a2a].max() <= TOL, name
    # an op sharing an oversubscribed link with an AllToAll sees it as per-sender items whose pairs
    # move in step (pairwise: pairs on free routes finish early): PP sends on 4:1 up to 13 % off
    assert off.max() <= OTHER_TOL, name
    it_pair, it_agg = int(pair.op_end_ns.max()), int(agg.op_end_ns.max())
    assert abs(it_agg - it_pair) <= TOL * it_pair
    # bytes per NIC: the pairwise rows summed here; the aggregated form's report
    pr = pair.rows[pair.rows["link"] == LinkKind.NET]
    tx = np.bincount(pr["src_nic"], weights=pr["bytes"], minlength=fab.n_nics).astype(np.int64)
    rx = np.bincount(pr["dst_nic"], weights=pr["bytes"], minlength=fab.n_nics).astype(np.int64)
    rep = build_report(job, fab, agg)
    assert (rep.nic_tx_bytes == tx).all() and (rep.nic_rx_bytes == rx).all()
    # bytes per link direction: every pairwise NET row's wire bytes over its connection's QP routes
    c = pair.conns
    q = np.arange(len(c.qpn_src))
    per_qp = np.bincount(pair.row_conn[pair.row_conn >= 0], weights=pair.row_net_wire[pair.row_conn >= 0],
                         minlength=len(c))[q // c.qps] / c.qps
    links = np.zeros(2 * len(fab.links))
    for h in range(c.route.shape[1]):
        on = c.route[:, h] >= 0
        np.add.at(links, c.route[on, h], per_qp[on])
    assert np.array_equal(rep.link_bytes, np.rint(links).astype(np.int64))


@pytest.mark.parametrize("name", ["mixtral 2:1", "mixtral 2:1, 4 QPs", "deepseek ep16 2:1, no PXN"])
def test_each_senders_links_carry_its_pairs_bytes(name):
    """An aggregated item's links x weights x bytes = what the pairwise edges of its sender put on
    each link direction: NVLink edges on the sender's tx and the receiver's rx port, network edges
    over their connection's QP routes (1/qps each). Summed here from the pairwise edge table."""
    from tracegen.timing import alltoall_agg
    from tracegen.timing.connections import build_connections, communicator
    from tracegen.timing.conn_edges import edge_table
    job = load_job(preset=JOBS[name][0], sets=JOBS[name][1])
    fab, ops = build_fabric(job), build_commops(job)
    op = int(alltoall_agg.agg_ops(ops)[0])
    e = edge_table(ops, fab, job, which=[op])
    net = e["link"] == LinkKind.NET
    comm = communicator(ops.rows["dim"][e["op_id"]])
    conns = build_connections(e["src_rank"][net], e["dst_rank"][net], comm[net], e["channel"][net], fab,
                              job.nccl.qps_per_connection)
    want = {}                                       # (sender, is NET, link dir) -> bytes
    base = fab.n_link_dirs
    for i in np.flatnonzero(~net):
        s_, d_ = int(e["src_rank"][i]), int(e["dst_rank"][i])
        for lk in (base + 2 * s_, base + 2 * d_ + 1):
            want[s_, 0, lk] = want.get((s_, 0, lk), 0) + int(e["nvl_wire"][i])
    rc = conns.lookup(e["src_rank"][net], e["dst_rank"][net], comm[net], e["channel"][net])
    for i, c in zip(np.flatnonzero(net), rc):
        for q in range(conns.qps):
            for lk in conns.route[c * conns.qps + q]:
                if lk >= 0:
                    k = (int(e["src_rank"][i]), 1, int(lk))
                    want[k] = want.get(k, 0) + e["net_wire"][i] / conns.qps
    per_op = {k: np.zeros(len(ops), np.int64) for k in ("algo", "proto", "max_msg_bytes")}
    agg = alltoall_agg.Aggregate(ops, [op], fab, job, per_op)
    ptr, link, w, lat, big = agg.links(conns, job.output.pmtu, job.output.vlan, job.output.ip_version)
    got = {}
    for r in range(len(ptr) - 1):
        for j in range(ptr[r], ptr[r + 1]):
            got[int(agg.prow["src_rank"][r]), int(agg.prow["link"][r] == LinkKind.NET), int(link[j])] = w[j] * big[r]
    assert got.keys() == want.keys()
    assert all(abs(got[k] - want[k]) <= 1e-6 * want[k] for k in want)


@pytest.mark.parametrize("nodes,pxn", [(2, False), (4, False), (4, True)])
def test_a_symmetric_alltoall_alone_takes_the_closed_form(nodes, pxn):
    """n ranks on N nodes of L GPUs (one 400G NIC each), non-blocking rail-optimised fabric: every
    NIC sends (n - L) blocks of S/n bytes; alone the op takes their wire bytes at the NIC rate,
    plus a route's latency and the pipeline's first chunk (< 1 % at 256 MiB)."""
    from tracegen.cli.collective import build_ops, collective_job
    job = collective_job("dgx-h100", nodes, "auto", 0, "simple", "alone")
    job = dataclasses.replace(job, nccl=dataclasses.replace(job.nccl, pxn=pxn))
    fab = build_fabric(job)
    size = 256 << 20
    ops, _ = build_ops(CollKind.ALLTOALL, fab.world, [size], 2)
    f = schedule_connections(ops, fab, job, aggregate=True)
    assert (f.rows["dst_rank"] == -1).all()
    n, L = fab.world, 8
    blk = -(-size // 2 // n) * 2
    pmtu, hdr = 4096, 14 + 4 + 20 + 8 + 12 + 4 + 4 + 20      # Eth+VLAN, IPv4, UDP, BTH, ICRC, FCS, preamble+IFG
    wire = blk + -(-blk // pmtu) * hdr
    closed = (n - L) * wire / (400 / 8)
    got = int(f.op_end_ns[0] - f.op_start_ns[0])
    assert abs(got - closed) <= 0.01 * closed, (got, closed)


def test_the_estimate_counts_per_sender_rows(monkeypatch):
    """Beyond AGG_PAIRS (lowered here) the work estimate counts an AllToAll as 2 rows per sender
    (NVLink, NET), not ep (ep - 1) pairs, judged by the rows the schedule times; deepseek-v3-2k's
    closed-form pair count is beyond the real threshold (so `plan` times it per sender)."""
    from tracegen.timing import alltoall_agg
    from tracegen.timing.conn_edges import edge_table
    from tracegen.timing.alltoall_agg import alltoall_pairs
    from tracegen.timing.work import estimate
    ops2k, pairs2k = alltoall_pairs(load_job(preset="deepseek-v3-2k"))
    assert (ops2k, pairs2k) == (87_840, 354_170_880) and pairs2k > alltoall_agg.AGG_PAIRS
    job = load_job(preset="deepseek-v3", sets=["model.layers=4", "detail=conn"])
    pairwise = estimate(job, emit=False).conn_edges
    monkeypatch.setattr(alltoall_agg, "AGG_PAIRS", 0)
    w = estimate(job, emit=False)
    assert w.detail == "conn"
    ops, fab = build_commops(job), build_fabric(job)
    a2a = alltoall_agg.agg_ops(ops)
    keep = np.setdiff1d(np.arange(len(ops)), a2a)
    per_op = {}
    rows = len(edge_table(ops, fab, job, which=keep, per_op=per_op)["op_id"])
    rows += len(alltoall_agg.Aggregate(ops, a2a, fab, job, per_op).table()["op_id"])
    assert 0.9 * rows <= w.conn_edges <= 1.1 * rows < pairwise
