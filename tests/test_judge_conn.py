"""The connection-level schedule (tracegen/timing/schedule_conn.py) of a collective alone, against the
chunk-level one (schedule.py), by the module's documented promise: "alone an op takes exactly its
chunk-level time" (its items' rate is capped by that time less the last arrival latency, the
latency added back at the end). Both are the project's own engines, so this judges the relation
between them, not either alone; the sizes pick cases where each term matters: small messages
(hop latency is most of a ring's time) and halving-doubling (one channel's rounds move different
bytes over the same NIC ports)."""
from __future__ import annotations

import numpy as np
import pytest

from tracegen.collectives import expand
from tracegen.cli.collective import build_ops, collective_job
from tracegen.timing.schedule import schedule
from tracegen.timing.schedule_conn import schedule_connections
from tracegen.tables import CollKind
from tracegen.fabric.topology import build_fabric


@pytest.mark.parametrize("algorithm,size", [("ring", 64 << 10), ("ring", 4 << 20),
                                            ("halving_doubling", 4 << 20)])
def test_an_allreduce_alone_takes_its_chunk_level_time(algorithm, size):
    job = collective_job("dgx-h100", 4, algorithm, 0, "simple", "alone")
    fabric = build_fabric(job)
    ops, _ = build_ops(CollKind.ALLREDUCE, fabric.world, [size], 4)
    full = schedule(ops, expand(ops, fabric, job.nccl), fabric, job)
    conn = schedule_connections(ops, fabric, job)
    t_full = np.asarray(full.op_end_ns) - np.asarray(full.op_start_ns)
    t_conn = np.asarray(conn.op_end_ns) - np.asarray(conn.op_start_ns)
    assert (t_full > 0).all()
    assert np.all(np.abs(t_conn - t_full) <= np.maximum(0.01 * t_full, 50)), (t_full, t_conn)


def test_pxn_keeps_every_connection_level_net_edge_on_one_rail():
    """NCCL's PXN (net.cc, NCCL_PXN_DISABLE=0): a send whose NIC is on another rail than the
    receiver's goes over NVLink to the GPU of the sender's node on the receiver's rail, which
    sends on its own NIC - so every network leg joins two NICs of one rail, each NVLink hop stays in
    a node and leaves its GPU, and every receiver gets the same network bytes as without PXN."""
    import dataclasses
    from tracegen.tables import LinkKind
    from tracegen.timing.conn_edges import edge_table
    job = collective_job("dgx-h100", 2, "ring", 4, "simple", "pxn")
    fabric = build_fabric(job)
    ops, _ = build_ops(CollKind.ALLREDUCE, fabric.world, [4 << 20], 4)
    rail = fabric.nic_rail[fabric.rank_nic]
    plain = edge_table(ops, fabric, dataclasses.replace(job, nccl=dataclasses.replace(job.nccl, pxn=False)))
    px = edge_table(ops, fabric, dataclasses.replace(job, nccl=dataclasses.replace(job.nccl, pxn=True)))
    was = plain["link"] == LinkKind.NET
    assert (rail[plain["src_rank"][was]] != rail[plain["dst_rank"][was]]).any()   # PXN has work here
    net = px["link"] == LinkKind.NET
    assert (rail[px["src_rank"][net]] == rail[px["dst_rank"][net]]).all()
    nvl = ~net
    assert (px["src_rank"][nvl] != px["dst_rank"][nvl]).all()
    assert (fabric.rank_node[px["src_rank"][nvl]] == fabric.rank_node[px["dst_rank"][nvl]]).all()
    world = fabric.world
    assert (np.bincount(px["dst_rank"][net], px["net_wire"][net], world)
            == np.bincount(plain["dst_rank"][was], plain["net_wire"][was], world)).all()


@pytest.mark.parametrize("qps", [1, 3])
def test_link_csr_is_each_connections_links_with_their_share(qps):
    """Connections.link_csr (one QP: the route's links sorted; more: merged over the QPs), judged
    per connection from its QPs' routes in plain Python."""
    from tracegen.config import load_job
    from tracegen.fabric.topology import build_fabric
    from tracegen.timing.connections import build_connections
    fab = build_fabric(load_job(preset="default", sets=["fabric=fat-tree-k8", "parallelism.dp=16",
                                                       "parallelism.global_batch=16"]))
    rng = np.random.default_rng(7)
    sr = rng.integers(0, fab.world, 400)
    dr = (sr + rng.integers(1, fab.world, 400)) % fab.world
    keep = fab.rank_nic[sr] != fab.rank_nic[dr]
    c = build_connections(sr[keep], dr[keep], np.ones(int(keep.sum()), np.int64),
                          rng.integers(0, 3, int(keep.sum())), fab, qps)
    ptr, link, w = c.link_csr()
    for k in range(len(c)):
        share = {}
        for q in range(k * qps, (k + 1) * qps):
            for lk in c.route[q][c.route[q] >= 0].tolist():
                share[lk] = share.get(lk, 0) + 1 / qps
        assert link[ptr[k]:ptr[k + 1]].tolist() == sorted(share)
        assert np.allclose(w[ptr[k]:ptr[k + 1]], [share[x] for x in sorted(share)])


def test_build_connections_rows_name_each_transfers_connection():
    """build_connections(rows=True): each given transfer's connection, from the sort that finds
    them - judged per transfer in plain Python: that connection's ranks, communicator and channel
    are the transfer's."""
    from tracegen.config import load_job
    from tracegen.fabric.topology import build_fabric
    from tracegen.timing.connections import build_connections
    # two GPUs a NIC: connections sort by NIC first, so their order is not the keys' (ranks first)
    fab = build_fabric(load_job(preset="default", sets=["fabric=fat-tree-k8", "parallelism.dp=16",
                                                       "parallelism.global_batch=16", "cluster.gpus_per_node=8",
                                                       "cluster.nics_per_node=4"]))
    rng = np.random.default_rng(3)
    sr = rng.integers(0, fab.world, 300)
    dr = (sr + rng.integers(1, fab.world, 300)) % fab.world
    keep = fab.rank_nic[sr] != fab.rank_nic[dr]
    sr, dr = sr[keep], dr[keep]
    sr, dr = np.r_[sr, sr[:50]], np.r_[dr, dr[:50]]               # repeats: the same connection
    comm, ch = rng.integers(1, 4, len(sr)), rng.integers(0, 3, len(sr))
    comm[-50:], ch[-50:] = comm[:50], ch[:50]
    c, rows = build_connections(sr, dr, comm, ch, fab, 2, rows=True)
    assert len(rows) == len(sr) and np.array_equal(rows[-50:], rows[:50])
    for t in range(len(sr)):
        k = int(rows[t])
        assert (int(c.src_rank[k]), int(c.dst_rank[k]), int(c.comm[k]), int(c.channel[k])) == \
            (int(sr[t]), int(dr[t]), int(comm[t]), int(ch[t]))
    assert len(c) == len({(int(a), int(b), int(x), int(y)) for a, b, x, y in zip(sr, dr, comm, ch)})
