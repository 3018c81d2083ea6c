"""Compute time between collectives against closed forms written here from FORMULAS.md (FLOPs per
layer, Narayanan et al.'s per-iteration count) and Megatron-core's MoE capacity rule - the
expected values never come from tracegen.workload.compute, only the values under test do.

FLOPs -> ns: FLOPs / (peak x MFU), peak = the GPU's dense peak at the training precision
(H100 SXM bf16: 989 TFLOP/s, NVIDIA's datasheet), each piece rounded to whole ns (at least 1).
"""
from __future__ import annotations

import math

import pytest

from tracegen.config import job_from_dict
from tracegen.tables import CollKind, Dim, Phase
from tracegen.workload import build_commops
from tracegen.workload.compute import ComputeModel

H100_BF16_FLOPS_PER_NS = 989e12 / 1e9


def ns(flops: float, mfu: float) -> int:
    return max(1, round(flops / (H100_BF16_FLOPS_PER_NS * mfu)))


def gpt_job(tp=1, cp=1, b=1, s=256, h=512, a=8, V=1024, layers=2, mfu=0.4, recompute="none", **model):
    return job_from_dict({
        "model": dict({"layers": layers, "hidden": h, "heads": a, "vocab": V, "seq_len": s}, **model),
        "parallelism": {"dp": 1, "tp": tp, "pp": 1, "cp": cp, "micro_batch": b, "global_batch": b,
                        "recompute": recompute},
        "cluster": {"gpus_per_node": tp * cp, "mfu": mfu}})


# --- per piece: FORMULAS.md's 24bsh² + 4bs²h per layer, 2bshV logits ------------------------------

@pytest.mark.parametrize("tp,cp", [(1, 1), (2, 1), (4, 1), (2, 2), (1, 4)])
def test_gpt_layer_pieces(tp, cp):
    """GPT layer (no GQA, 4h MLP): QKV + projection 8bsh², attention scores and values 4bs²h (CP:
    this rank's s/c queries against all s keys), MLP 16bsh², logits 2bshV, all / t."""
    b, s, h, V, mfu = 2, 256, 512, 1024, 0.45
    job = gpt_job(tp=tp, cp=cp, b=b, s=s, h=h, V=V, mfu=mfu)
    q = b * s / cp                                  # this rank's query tokens
    cm = ComputeModel.of(job)
    assert cm.attn_linear_ns == ns(8 * q * h * h / tp, mfu)
    assert cm.attn_core_ns == ns(4 * q * s * h / tp, mfu)
    assert cm.mlp_ns == ns(16 * q * h * h / tp, mfu)
    assert cm.logits_ns == ns(2 * q * h * V / tp, mfu)
    layer = (24 * b * s * h * h + 4 * b * s * s * h) / (tp * cp)
    assert abs(cm.layer_fwd_ns(moe=False) - layer / (H100_BF16_FLOPS_PER_NS * mfu)) <= 1.5


def test_gqa_swiglu_layer_pieces():
    """A Llama-style layer: Q and O are h x (a·d), K and V h x (g·d) for g KV groups; a SwiGLU
    MLP has three h x f matrices. Core attention is per query head: 4·b·s²·a·d."""
    b, s, h, a, g, d, f, V, t = 1, 512, 1024, 16, 4, 64, 2816, 2048, 2
    job = gpt_job(tp=t, b=b, s=s, h=h, a=a, V=V, kv_heads=g, ffn_hidden=f, gated_mlp=True, bias=False,
                  position_embeddings=False)
    cm, mfu = ComputeModel.of(job), 0.4
    tokens = b * s
    assert cm.attn_linear_ns == ns(2 * tokens * (2 * h * a * d + 2 * h * g * d) / t, mfu)
    assert cm.attn_core_ns == ns(4 * tokens * s * a * d / t, mfu)
    assert cm.mlp_ns == ns(2 * tokens * 3 * h * f / t, mfu)


# --- per op kind: the compute gap each collective waits for ------------------------------------------

def _gaps(job):
    ops = build_commops(job)
    r = ops.rows
    tp = [i for i in range(len(ops)) if r["dim"][i] == Dim.TP and r["kind"][i] == CollKind.ALLREDUCE]
    return r, tp


def test_gaps_of_each_collective_in_a_tp_layer():
    """tp=2: forward, the AllReduce after attention waits QKV + core + projection, the one after
    the MLP the MLP; backward twice that; the LM head's logits before the cross-entropy reduces."""
    b, s, h, V, mfu, L = 1, 256, 512, 1024, 0.4, 2
    job = gpt_job(tp=2, b=b, s=s, h=h, V=V, layers=L)
    lin, core, mlp = ns(8 * b * s * h * h / 2, mfu), ns(4 * b * s * s * h / 2, mfu), ns(16 * b * s * h * h / 2, mfu)
    logits = ns(2 * b * s * h * V / 2, mfu)
    r, tp = _gaps(job)
    fwd = [int(r["gap_ns"][i]) for i in tp if r["phase"][i] == Phase.FWD]
    bwd = [int(r["gap_ns"][i]) for i in tp if r["phase"][i] == Phase.BWD]
    # embedding AR, (attention AR, MLP AR) per layer, 3 cross-entropy ARs after the logits
    assert fwd == [0] + [lin + core, mlp] * L + [logits, 0, 0]
    # LM head input gradient AR after 2x logits, then per layer (MLP AR, attention AR) at 2x
    assert bwd == [2 * logits] + [2 * mlp, 2 * lin + 2 * core] * L


@pytest.mark.parametrize("recompute", ["selective", "full"])
def test_recompute_adds_the_recomputed_forward(recompute):
    b, s, h, V, mfu, L = 1, 256, 512, 1024, 0.4, 2
    job = gpt_job(tp=2, b=b, s=s, h=h, V=V, layers=L, recompute=recompute)
    lin, core, mlp = ns(8 * b * s * h * h / 2, mfu), ns(4 * b * s * s * h / 2, mfu), ns(16 * b * s * h * h / 2, mfu)
    logits = ns(2 * b * s * h * V / 2, mfu)
    r, tp = _gaps(job)
    bwd = [int(r["gap_ns"][i]) for i in tp if r["phase"][i] == Phase.BWD]
    if recompute == "selective":      # the attention core again before each layer's backward
        assert bwd == [2 * logits] + [core + 2 * mlp, 2 * lin + 2 * core] * L
    else:                             # the whole forward (with its 2 ARs) again
        assert bwd == [2 * logits] + [lin + core, mlp, 2 * mlp, 2 * lin + 2 * core] * L


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_iteration_compute_matches_narayanan(recompute):
    """Narayanan et al. 2021 (FORMULAS.md): with full recompute one iteration costs
    F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) FLOPs (without: 72·B·s·l·h²·(1 + s/(6h)) + 6·B·s·h·V).
    On one TP group (dp = pp = 1) the compute gaps of its ops add up to F / t per GPU."""
    b, s, h, V, L, t, mfu, m = 2, 256, 512, 1024, 4, 2, 0.4, 3
    job = job_from_dict({
        "model": {"layers": L, "hidden": h, "heads": 8, "vocab": V, "seq_len": s},
        "parallelism": {"dp": 1, "tp": t, "pp": 1, "micro_batch": b, "global_batch": b * m, "recompute": recompute},
        "cluster": {"gpus_per_node": t, "mfu": mfu}})
    B = b * m
    if recompute == "full":
        F = 96 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h))
    else:
        F = 72 * B * s * L * h * h * (1 + s / (6 * h)) + 6 * B * s * h * V
    total = int(build_commops(job).rows["gap_ns"].sum())
    pieces = m * L * 16                               # whole-ns rounding, at most 1/2 ns per piece
    assert abs(total - F / t / (H100_BF16_FLOPS_PER_NS * mfu)) <= pieces


# --- MoE: Megatron-core's capacity, the experts' compute -------------------------------------------

def megatron_capacity(num_tokens: int, num_experts: int, capacity_factor: float) -> int:
    """megatron/core/transformer/moe/moe_utils.py::get_capacity (NVIDIA/Megatron-LM):
    capacity = math.ceil((num_tokens / num_experts) * capacity_factor), per expert."""
    return math.ceil((num_tokens / num_experts) * capacity_factor)


def megatron_dispatch_rows(tokens: int, top_k: int, experts: int, cf: float) -> int:
    """MoEAlltoAllTokenDispatcher.preprocess (megatron/core/transformer/moe/token_dispatcher.py),
    drop-and-pad: capacity = get_capacity(num_tokens=tokens * topk, num_experts, capacity_factor),
    num_out_tokens = capacity * num_experts rows leave for the experts."""
    return megatron_capacity(tokens * top_k, experts, cf) * experts


def moe_job(s=96, b=1, E=8, k=2, cf=1.1, ep=2, dp=2, h=256, mfu=0.4, shared=0):
    return job_from_dict({
        "model": {"layers": 2, "hidden": h, "heads": 8, "vocab": 512, "seq_len": s, "experts": E, "top_k": k,
                  "capacity_factor": cf, "moe_ffn_hidden": 2 * h, "shared_experts": shared},
        "parallelism": {"dp": dp, "tp": 1, "pp": 1, "ep": ep, "micro_batch": b, "global_batch": b * dp},
        "cluster": {"gpus_per_node": 1, "mfu": mfu}})


@pytest.mark.parametrize("s,E,k,cf", [
    (96, 8, 2, 1.1),     # 24 x 1.1 = 26.4 per expert -> 27 (the whole buffer: 211.2 -> 212, not 216)
    (100, 8, 1, 1.0),    # 12.5 per expert -> 13
    (96, 8, 2, 1.25),    # exactly 30 per expert
    (64, 4, 2, 0.9),     # 28.8 -> 29
])
def test_moe_dispatch_rows_follow_megatron_capacity(s, E, k, cf):
    """Every EP AllToAll moves capacity x experts token rows of h elements: the per-expert
    capacity rounded up (never down, never over the whole buffer at once)."""
    h = 256
    job = moe_job(s=s, E=E, k=k, cf=cf, h=h)
    ops = build_commops(job).rows
    a2a = ops[(ops["dim"] == Dim.EP) & (ops["kind"] == CollKind.ALLTOALL)]
    assert len(a2a) == 2 * 2 * 2                 # dispatch + combine, fwd + bwd, 2 MoE layers (one EP group)
    rows = megatron_dispatch_rows(s, k, E, cf)
    assert (a2a["bytes"] == rows * h * 2).all(), (int(a2a["bytes"][0]) // (2 * h), rows)


def test_moe_layer_compute():
    """Router 2·T·h·E and routed experts on the dispatched rows 2·rows·(2·h·f) between dispatch
    and combine; shared experts on the rank's own T tokens 2·T·n_shared·(2·h·f) (a TP-split dense
    MLP in Megatron-core, its own block)."""
    s, E, k, cf, h, mfu, shared = 96, 8, 2, 1.1, 256, 0.4, 1
    f = 2 * h
    job = moe_job(s=s, E=E, k=k, cf=cf, h=h, shared=shared)
    rows = megatron_dispatch_rows(s, k, E, cf)
    want = ns(2 * s * h * E + 2 * rows * 2 * h * f, mfu)
    cm = ComputeModel.of(job)
    assert cm.moe_ns == want
    assert cm.shared_ns == ns(2 * s * shared * 2 * h * f, mfu)
    ops = build_commops(job).rows
    a2a = ops[(ops["dim"] == Dim.EP) & (ops["kind"] == CollKind.ALLTOALL)]
    fwd_combine = a2a[a2a["phase"] == Phase.FWD]["gap_ns"][1::2]
    assert (fwd_combine == want).all()
