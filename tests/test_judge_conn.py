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
