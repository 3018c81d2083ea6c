"""Issue 3: every parallelism of a real training job against the closed forms of FORMULAS.md.

The generated transfers (workload -> collectives) are summed per rank and per dimension and held
against `volumes.expected_rank_bytes`, which is written from the formulas, not from the op table.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from tracegen.config import job_from_dict
from tracegen.errors import ConfigError
from tracegen.pipeline import run_pipeline
from tracegen.tables import CollKind, Dim, Phase
from tracegen.workload.compute import ComputeModel
from tracegen.workload.memory import zero_model_state_bytes
from tracegen.workload.params import active_param_count, param_count
from tracegen.workload.pipeline_order import interleaved_1f1b, one_f_one_b
from tracegen.workload.volumes import expected_rank_bytes, small_op_bytes


def job(model=None, gpn=None, nccl=None, **par):
    par.setdefault("dp", 1)
    par.setdefault("tp", 1)
    par.setdefault("pp", 1)
    par.setdefault("micro_batch", 1)
    mb = par.pop("mb", 2)
    par.setdefault("global_batch", par["micro_batch"] * par["dp"] * mb)
    world = par["dp"] * par["tp"] * par["pp"] * par.get("cp", 1)
    mdl = {"layers": 4, "hidden": 384, "heads": 6, "vocab": 1000, "seq_len": 96}
    mdl.update(model or {})
    gpn = gpn or max(g for g in (1, 2, 3, 4) if world % g == 0)
    return job_from_dict({"model": mdl, "parallelism": par,
                          "cluster": {"gpus_per_node": gpn},
                          "nccl": nccl or {"channels": 1, "pxn": False}})


def measured(run) -> dict[tuple[int, Dim], int]:
    r, ops = run.flows.rows, run.ops.rows
    dims = ops["dim"][r["op_id"]]
    out: dict = {}
    for rank, dim, nbytes in zip(r["src_rank"].tolist(), dims.tolist(), r["bytes"].tolist()):
        out[(rank, Dim(dim))] = out.get((rank, Dim(dim)), 0) + nbytes
    return out


# (name, job kwargs, per-rank exact?) — odd degrees, non-power-of-two sizes (h=384, s=96, V=1000)
MATRIX = [
    ("dp2-tp2-pp2", dict(dp=2, tp=2, pp=2), True),
    ("dp3-tp3-pp3 odd", dict(dp=3, tp=3, pp=3, model={"layers": 6}), False),
    ("tp3 sp", dict(tp=3, sp=True, dp=2), True),
    ("tp2 sp pp2 scatter", dict(tp=2, sp=True, pp=2, dp=2), True),
    ("tp2 scatter-gather", dict(tp=2, pp=2, pp_scatter_gather=True), True),
    ("cp2 tp2", dict(cp=2, tp=2, dp=2), True),
    ("cp3 odd", dict(cp=3, dp=1, model={"seq_len": 96}), True),
    ("zero1", dict(dp=4, zero=1), True),
    ("zero2 fp32 grads", dict(dp=3, zero=2, grad_dtype="fp32"), True),
    ("zero3", dict(dp=2, pp=2, zero=3), True),
    ("vpp2", dict(pp=2, vpp=2, dp=2, mb=4, model={"layers": 8}), True),
    ("full recompute", dict(tp=2, cp=2, recompute="full"), True),
    ("selective recompute", dict(tp=2, recompute="selective"), True),
    ("moe ep2", dict(dp=2, ep=2, model={"experts": 4, "top_k": 2}), True),
    ("moe ep4 tp2 sp first-k-dense", dict(dp=4, ep=4, tp=2, sp=True,
                                          model={"experts": 8, "top_k": 2, "first_k_dense": 1,
                                                 "shared_experts": 1, "moe_ffn_hidden": 192}), True),
    ("moe ep3 cf1.25 zero1", dict(dp=3, ep=3, zero=1, model={"experts": 6, "top_k": 2,
                                                              "capacity_factor": 1.25}), False),
    ("dp5 buckets", dict(dp=5, dp_bucket_bytes=300_000), False),
    ("untied pp3", dict(pp=3, dp=2, model={"layers": 6, "tied_embeddings": False}), True),
]


@pytest.mark.parametrize("name,kw,exact", MATRIX, ids=[m[0] for m in MATRIX])
def test_volumes_equal_closed_forms(name, kw, exact):
    j = job(**kw)
    run = run_pipeline(j)
    got = measured(run)
    want = {rank: expected_rank_bytes(j, rank) for rank in range(j.world)}
    dims = {d for (_, d) in got} | {d for w in want.values() for d in w}
    for dim in dims:
        total_got = sum(got.get((r, dim), 0) for r in range(j.world))
        total_want = sum(want[r].get(dim, Fraction(0)) for r in range(j.world))
        assert total_got == total_want, f"{dim.name}: all ranks sent {total_got}, formulas say {total_want}"
        if exact:   # the few-byte AllReduces (loss, grad norm) hold per rank only on average
            for r in range(j.world):
                slack = 2 * small_op_bytes(j, r)
                assert abs(got.get((r, dim), 0) - want[r].get(dim, 0)) <= slack, f"rank {r} {dim.name}"


def test_sp_sends_a_quarter_more_than_tp_per_layer():
    """Megatron's SP: per layer per micro-batch 6 AllGather + 4 ReduceScatter of S_act
    (10·(t−1)/t·S_act per rank) where TP runs 4 AllReduces (8·(t−1)/t·S_act)."""
    wide = {"heads": 12}
    plain, sp = run_pipeline(job(tp=4, dp=1, model=wide)), run_pipeline(job(tp=4, dp=1, sp=True, model=wide))
    kinds = lambda run, dim: {CollKind(k) for k in run.ops.rows["kind"][run.ops.rows["dim"] == dim]}
    assert kinds(sp, Dim.SP) == {CollKind.ALLGATHER, CollKind.REDUCESCATTER, CollKind.ALLREDUCE}
    assert kinds(plain, Dim.TP) == {CollKind.ALLREDUCE, CollKind.BROADCAST}
    layer = lambda run: run.flows.rows["bytes"][run.ops.rows["layer"][run.flows.rows["op_id"]] >= 0].sum()
    assert layer(sp) * 8 == layer(plain) * 10
    ops = sp.ops.rows[(sp.ops.rows["dim"] == Dim.SP) & (sp.ops.rows["layer"] == 0)]
    for phase, ag, rs in ((Phase.FWD, 2, 2), (Phase.BWD, 4, 2)):        # 2 micro-batches
        at = ops[ops["phase"] == phase]
        assert (at["kind"] == CollKind.ALLGATHER).sum() == ag * 2
        assert (at["kind"] == CollKind.REDUCESCATTER).sum() == rs * 2


def test_cp_ring_steps_and_gqa():
    j = job(cp=4, model={"seq_len": 96, "kv_heads": 2})
    run = run_pipeline(j)
    ops = run.ops.rows
    cp = ops[(ops["dim"] == Dim.CP) & (ops["layer"] == 0) & (ops["microbatch"] == 0)]
    # forward: c−1 steps x c ranks; backward the same with K, V, dK, dV (twice the bytes)
    fwd, bwd = cp[cp["phase"] == Phase.FWD], cp[cp["phase"] == Phase.BWD]
    assert len(fwd) == len(bwd) == 3 * 4
    kv_per_token = 2 * 2 * (384 // 6)          # K and V of 2 KV heads
    assert (fwd["bytes"] == 1 * (96 // 4) * kv_per_token * 2).all()
    assert (bwd["bytes"] == 2 * fwd["bytes"][0]).all()


def test_moe_alltoall_per_layer():
    j = job(dp=4, ep=4, model={"experts": 8, "top_k": 2, "first_k_dense": 1, "capacity_factor": 1.5})
    ops = run_pipeline(j).ops.rows
    a2a = ops[ops["kind"] == CollKind.ALLTOALL]
    assert (a2a["dim"] == Dim.EP).all()
    assert set(a2a["layer"]) == {1, 2, 3}                       # the first layer stays dense
    per_layer = a2a[(a2a["layer"] == 1) & (a2a["microbatch"] == 0)]
    assert len(per_layer) == 4                                   # dispatch + combine, fwd + bwd
    rows = int(np.ceil(96 * 2 * 1.5))                            # tokens x top_k x capacity factor
    assert (per_layer["bytes"] == rows * 384 * 2).all()
    # expert gradients sync over the expert-data-parallel group, dense over DP
    assert {Dim(d) for d in ops["dim"][ops["kind"] == CollKind.ALLREDUCE]} >= {Dim.DP}


def test_zero3_gathers_parameters_twice_per_microbatch():
    j = job(dp=4, zero=3, mb=3)
    ops = run_pipeline(j).ops.rows
    ag = ops[(ops["kind"] == CollKind.ALLGATHER) & (ops["dim"] == Dim.DP)]
    rs = ops[(ops["kind"] == CollKind.REDUCESCATTER) & (ops["dim"] == Dim.DP)]
    assert ag["bytes"].sum() * 4 == 2 * 2 * rs["bytes"].sum()   # fwd + bwd gathers of bf16, fp32 grads
    for mbi in range(3):
        assert (ag["microbatch"] == mbi).sum() == 2 * (4 + 2)   # 4 layers + embedding + head, twice


@pytest.mark.parametrize("pp,m,v", [(4, 8, 1), (4, 8, 2), (2, 6, 1), (3, 9, 3)])
def test_pipeline_bubble_matches_formula_when_communication_is_free(pp, m, v):
    layers = pp * v * 2
    j = job_from_dict({
        "model": {"layers": layers, "hidden": 4096, "heads": 32, "vocab": 64, "seq_len": 2048},
        "parallelism": {"dp": 1, "tp": 1, "pp": pp, "vpp": v, "global_batch": m},
        "cluster": {"gpus_per_node": 1, "nic_gbps": 10 ** 6, "nvlink_gbps": 10 ** 6, "link_latency_ns": 0}})
    run = run_pipeline(j)
    cm = ComputeModel.of(j)
    per_stage_ideal = m * (layers // pp) * 3 * cm.layer_fwd_ns(False)
    markers = run.ops.rows["kind"] == CollKind.MARKER
    iteration = int(run.flows.op_end_ns[markers].max())
    bubble = (iteration - per_stage_ideal) / per_stage_ideal
    assert bubble == pytest.approx((pp - 1) / (v * m), rel=0.01)


def test_schedule_runs_stages_in_1f1b_order():
    j = job(pp=4, mb=6, model={"layers": 8})
    run = run_pipeline(j)
    ops, start = run.ops.rows, run.flows.op_start_ns
    for stage in range(4):
        sends = np.nonzero((ops["dim"] == Dim.PP) & (ops["stage"] == stage))[0]
        sends = sends[np.argsort(start[sends], kind="stable")]
        seen = [("F" if ops["phase"][i] == Phase.FWD else "B", int(ops["microbatch"][i])) for i in sends]
        order = [x for x in one_f_one_b(4, stage, 6)
                 if not (x[0] == "F" and stage == 3) and not (x[0] == "B" and stage == 0)]
        assert seen == order


def test_interleaved_order_is_megatrons():
    order = interleaved_1f1b(2, 0, 4, 2)
    # warm-up (p−s−1)·2 + (v−1)·p = 4 forwards: chunk 0 of mb 0,1 then chunk 1 of mb 0,1
    assert order[:4] == [("F", 0, 0), ("F", 0, 1), ("F", 1, 0), ("F", 1, 1)]
    assert order[4:6] == [("F", 0, 2), ("B", 1, 0)]
    assert sorted(order) == sorted([(d, c, mb) for d in "FB" for c in range(2) for mb in range(4)])


def test_parameter_counts_of_published_models():
    from tracegen.config import job_from_dict as jd

    def model(name):
        return jd({"model": name, "parallelism": {"dp": 1, "tp": 1, "pp": 1, "global_batch": 1},
                   "cluster": {"gpus_per_node": 1}}).model
    published = {"llama3-8b": 8.03e9, "llama3-70b": 70.6e9, "llama3-405b": 405.9e9,
                  "mixtral-8x7b": 46.7e9, "deepseek-v3": 671e9}
    for name, n in published.items():
        assert param_count(model(name)) == pytest.approx(n, rel=0.01), name
    assert active_param_count(model("mixtral-8x7b")) == pytest.approx(12.9e9, rel=0.01)
    assert active_param_count(model("deepseek-v3")) == pytest.approx(37e9, rel=0.02)


def test_zero_memory_matches_zero_paper_figure_1():
    psi, n_d = 7.5e9, 64
    got = [round(zero_model_state_bytes(psi, n_d, stage) / 1e9, 1) for stage in range(4)]
    assert got == [120.0, 31.4, 16.6, 1.9]


@pytest.mark.parametrize("kw,key", [
    (dict(dp=2, ep=2, model={"experts": 3}), "experts"),
    (dict(cp=2, model={"seq_len": 98}), "seq_len"),
    (dict(tp=1, sp=True), "sp"),
    (dict(dp=2, ep=2), "ep"),
    (dict(dp=4, ep=3, model={"experts": 6}), "ep"),
    (dict(dp=2, ep=2, tp=2, model={"experts": 4}), "sp"),
    (dict(pp=2, vpp=3, model={"layers": 4}), "vpp"),
    (dict(pp=2, vpp=2, mb=3, model={"layers": 8}), "pp"),
    (dict(zero=4), "zero"),
    (dict(recompute="some"), "recompute"),
    (dict(dp=2, model={"experts": 4, "top_k": 5}), "top_k"),
])
def test_invalid_combinations_name_the_key(kw, key):
    with pytest.raises(ConfigError) as e:
        job(**kw)
    assert key in str(e.value) and "\n" not in str(e.value)
