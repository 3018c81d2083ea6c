"""The connection-level schedule (detail conn) against the chunk-level one (detail full).

Both run the same fluid engine on the same fabric; conn times each op per NCCL connection, its
rate capped by its chunk schedule alone. Bytes per NIC and link must be identical, the iteration
within 1 %, every op's release and end within 2 % or 2 us.
"""
from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np
import pytest

from schedule_validator import assert_valid, fabric_routes
from tracegen.config import job_from_dict
from tracegen.pipeline import run_pipeline
from tracegen.tables import LinkKind

M = {"layers": 4, "hidden": 512, "heads": 8, "vocab": 4096, "seq_len": 512}
MOE = dict(M, experts=8, top_k=2)

# dense/MoE x tp/pp/dp/cp/ep x ring/tree x rail-optimised / oversubscribed / fat-tree fabrics
MATRIX = {
    "dense dp4 tp2 pp2 rail": dict(model=M, parallelism=dict(dp=4, tp=2, pp=2, global_batch=16)),
    "tree dp16 tp2": dict(model=M, parallelism=dict(dp=16, tp=2, pp=1, global_batch=32), nccl={"algorithm": "tree"}),
    "cp2 tp2 dp2 pp2": dict(model=M, parallelism=dict(cp=2, tp=2, dp=2, pp=2, global_batch=8)),
    "dense dp4 tp8 pp2 dgx": dict(model=M, parallelism=dict(dp=4, tp=8, pp=2, global_batch=16), cluster="dgx-h100"),
    "moe ep4 dp4 tp2 sp": dict(model=MOE, parallelism=dict(dp=4, ep=4, tp=2, sp=True, pp=1, global_batch=16)),
    "moe ep8 dp8 fat-tree": dict(model=MOE, parallelism=dict(dp=8, ep=8, tp=1, pp=2, global_batch=32),
                                 fabric="fat-tree-k8"),
    "dense dp8 tp2 pp2 2:1": dict(model=M, parallelism=dict(dp=8, tp=2, pp=2, global_batch=32),
                                  fabric="leaf-spine-2to1"),
    "dense dp8 tp2 4:1": dict(model=M, parallelism=dict(dp=8, tp=2, pp=1, global_batch=32), fabric="leaf-spine-4to1"),
}


@pytest.fixture(scope="module", params=list(MATRIX))
def pair(request):
    j = job_from_dict(MATRIX[request.param], name="eq")
    return (run_pipeline(dataclasses.replace(j, detail="full")),
            run_pipeline(dataclasses.replace(j, detail="conn"), fold=False))


def test_bytes_per_nic_and_link_identical(pair):
    full, conn = pair
    assert full.flows.detail == "full" and conn.flows.detail == "conn"
    assert len(conn.flows) < len(full.flows)
    assert np.array_equal(full.report.nic_tx_bytes, conn.report.nic_tx_bytes)
    assert np.array_equal(full.report.nic_rx_bytes, conn.report.nic_rx_bytes)
    assert np.array_equal(full.report.link_bytes, conn.report.link_bytes)
    assert full.report.transfers == conn.report.transfers
    assert [d.net_messages for d in full.report.dims] == [d.net_messages for d in conn.report.dims]


# The one known excess: on the fat-tree MoE job four PP sends share their receivers' NICs with an
# EP AllToAll's chunks and end 2.7 % later per connection than chunk by chunk.
OP_TOLERANCE = {"moe ep8 dp8 fat-tree": 0.03}


def test_iteration_and_op_times_agree(pair, request):
    """Iteration within 1 %; every op's release and end within 2 % (of the time since the
    iteration began) or 2 us."""
    full, conn = pair
    a, b = full.flows, conn.flows
    it = a.op_end_ns.max()
    assert abs(b.op_end_ns.max() - it) <= 0.01 * it, (b.op_end_ns.max(), it)
    tol = OP_TOLERANCE.get(request.node.callspec.params["pair"], 0.02)
    for x, y in ((a.op_start_ns, b.op_start_ns), (a.op_end_ns, b.op_end_ns)):
        off = np.abs(y - x) > np.maximum(tol * x, 2000)
        assert not off.any(), (np.flatnonzero(off)[:5], x[off][:5], y[off][:5])


def test_connection_schedule_respects_every_link(pair):
    _, conn = pair
    assert_valid(conn.flows, conn.fabric, conn.job.output, fabric_routes, exact=False)


def test_auto_picks_full_for_small_jobs_and_conn_beyond(monkeypatch):
    from tracegen.timing import detail
    j = job_from_dict(MATRIX["cp2 tp2 dp2 pp2"], name="eq")
    assert run_pipeline(j).flows.detail == "full"
    monkeypatch.setattr(detail, "FULL_DETAIL_MAX_TRANSFERS", 10)
    assert run_pipeline(j).flows.detail == "conn"


def test_pcap_estimate_per_connection_matches_the_chunks(pair):
    """Unfiltered, the connection-level estimate counts the same records as the chunk-level plan
    (data packets, and per message a CTS, its ACK and the data's ACK, in two files each)."""
    from tracegen.emit.views.pcap import estimate_pcap
    full, conn = pair
    a = estimate_pcap(full.flows, full.fabric, full.job.output, nccl=full.job.nccl)
    b = estimate_pcap(conn.flows, conn.fabric, conn.job.output, nccl=conn.job.nccl)
    assert b[0] == a[0] and abs(b[1] - a[1]) <= 0.01 * a[1]


def test_generate_refuses_ns3_from_a_connection_schedule(tmp_path):
    import subprocess
    import sys
    res = subprocess.run([sys.executable, "-m", "tracegen.cli", "generate", "--detail", "conn", "-q",
                          "-o", str(tmp_path / "t")], capture_output=True, text=True)
    assert res.returncode == 2 and "--detail full" in res.stderr and len(res.stderr.splitlines()) == 1
    assert not (tmp_path / "t").exists()
    res = subprocess.run([sys.executable, "-m", "tracegen.cli", "generate", "--detail", "conn", "-q", "--no-pcap",
                          "--no-ns3", "-o", str(tmp_path / "t")], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert "route" in (tmp_path / "t" / "flows.csv").read_text().split("\n", 1)[0]


def test_the_work_estimate_follows_the_detail_the_pipeline_picks():
    """Timed per connection a job makes no chunk transfer: the estimate counts its ops (and the
    memory they take), not the transfers a chunk-level expansion would make, and the pipeline
    reuses the CommOp table the estimate built instead of building it again."""
    from tracegen.timing import work
    from tracegen.errors import ConfigError
    j = job_from_dict(MATRIX["dense dp8 tp2 pp2 2:1"], name="eq")
    full, conn = dataclasses.replace(j, detail="full"), dataclasses.replace(j, detail="conn")
    w_full, w_conn = work.estimate(full, emit=False), work.estimate(conn, emit=False)
    assert (w_full.detail, w_conn.detail) == ("full", "conn")
    assert w_full.transfers == w_conn.transfers > 0 and w_full.ops == w_conn.ops
    assert w_conn.timed_ops < w_conn.ops and w_conn.conn_edges > 0             # folded: replica 0
    assert w_conn.units == (work.OP_UNITS * w_conn.timed_ops
                            + w_conn.conn_edges * work.CONN_EDGE_BYTES // work.BYTES_PER_UNIT)
    run = run_pipeline(conn)
    assert len(run.flows) <= w_conn.conn_edges <= 1.25 * len(run.flows)   # an upper estimate of its rows
    assert "collective calls timed per connection" in str(pytest.raises(ConfigError, work.estimate, conn, w_conn.units - 1,
                                                           emit=False).value)
    work.estimate(conn, w_conn.units, emit=False)                    # exactly at the budget: runs
    auto = dataclasses.replace(j, detail="auto")
    assert work.estimate(auto, emit=True).detail == "full"           # pcaps are made of chunks
    ops = work.built_commops(auto)
    assert ops is not None and work.built_commops(auto) is None      # handed over once
    work.estimate(conn, emit=False)
    kept = work._built[id(conn)][1]
    assert run_pipeline(conn).ops is kept


FOLDABLE = [k for k in MATRIX if "moe" not in k]


@pytest.mark.parametrize("name", FOLDABLE)
def test_folded_workload_times_the_job_as_unfolded(name):
    """Timed per connection, a job whose DP replicas are the same up to a rank offset is built
    for replica 0 alone (CommOps.replicas): its NVLink edges stand for every replica, its network
    edges are made for each replica (they share the fabric). Against the unfolded build: the same
    iteration (within 1 %), bytes per NIC, rank, dimension and fabric link, and transfers."""
    from tracegen.workload import build_commops, foldable
    j = dataclasses.replace(job_from_dict(MATRIX[name], name="eq"), detail="conn")
    assert foldable(j)
    whole, folded = run_pipeline(j, fold=False), run_pipeline(j, fold=True)
    assert whole.ops.replicas == 1 and folded.ops.replicas == j.parallelism.dp
    assert len(folded.ops) < len(whole.ops) == int(folded.ops.copies().sum())
    a, b = whole.report, folded.report
    assert abs(b.iteration_ns / a.iteration_ns - 1) < 0.01
    for field in ("nic_tx_bytes", "nic_rx_bytes", "rank_net_bytes", "rank_nvlink_bytes", "link_bytes"):
        assert np.array_equal(getattr(a, field), getattr(b, field)), field
    assert a.rank_sent.keys() == b.rank_sent.keys()
    assert all(np.array_equal(a.rank_sent[k], b.rank_sent[k]) for k in a.rank_sent)
    assert a.dims == b.dims and a.transfers == b.transfers
    assert len(build_commops(j, fold=True)) == len(folded.ops)
    # the network edges of every replica, each once: the same (src, dst, channel) multiset
    edges = lambda f: Counter(zip(*(f.rows[k][f.rows["link"] == LinkKind.NET].tolist()  # noqa: E731
                                    for k in ("src_rank", "dst_rank", "channel"))))
    assert edges(whole.flows) == edges(folded.flows)
    assert_valid(folded.flows, folded.fabric, folded.job.output, fabric_routes, exact=False)


def test_jobs_that_cannot_fold_are_built_whole():
    from tracegen.workload import build_commops, foldable
    moe = job_from_dict(MATRIX["moe ep4 dp4 tp2 sp"], name="eq")          # EP groups cut across replicas
    dgx_tp2 = job_from_dict(dict(model=M, parallelism=dict(dp=4, tp=2, pp=1, global_batch=16),
                                 cluster="dgx-h100"), name="eq")          # replicas share nodes
    for j in (moe, dgx_tp2):
        assert not foldable(j) and build_commops(j, fold=True).replicas == 1
    full = run_pipeline(dataclasses.replace(job_from_dict(MATRIX["dense dp8 tp2 4:1"], name="eq"), detail="full"))
    assert full.ops.replicas == 1 and full.transfers is not None          # chunks of every replica


@pytest.mark.parametrize("name", ["dense dp4 tp8 pp2 dgx", "moe ep8 dp8 fat-tree", "dense dp8 tp2 pp2 2:1"])
def test_items_merged_in_blocks_of_ops_time_the_job_identically(name, monkeypatch):
    """group_items merges the items' links a block of whole ops at a time (memory): every row's
    start and end, the items and their links are those of the merge at once."""
    from tracegen.timing import conn_items
    j = dataclasses.replace(job_from_dict(MATRIX[name], name="eq"), detail="conn")
    whole = run_pipeline(j)
    monkeypatch.setattr(conn_items, "GROUP_BLOCK_ROWS", 7)
    from tracegen.timing import schedule
    blocks_made = []
    real = schedule.item_links
    monkeypatch.setattr(schedule, "item_links", lambda *a, **k: blocks_made.append(1) or real(*a, **k))
    blocks = run_pipeline(j)
    assert len(blocks_made) > 8
    assert np.array_equal(whole.flows.rows, blocks.flows.rows)
    assert np.array_equal(whole.flows.op_end_ns, blocks.flows.op_end_ns)
    assert whole.report.iteration_ns == blocks.report.iteration_ns
