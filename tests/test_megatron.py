"""Issue 12: per-iteration op counts and logical bytes per rank, held exactly against Megatron-LM's
rules for the jobs the issue names. Expected tables are written here from the rules (which
function issues what, with which buffer), not from tracegen's closed forms.

Logical bytes = the buffer size the caller passes (AllGather/ReduceScatter: the full gathered
buffer; AllToAll: the rank's send buffer; send/recv: counted at both ends). One DP gradient bucket
(dp_bucket_bytes beyond the model) so bucket boundaries do not enter.
"""
from __future__ import annotations


import numpy as np
import pytest

from tracegen.config import job_from_dict
from tracegen.tables import CollKind, Dim, Phase
from tracegen.workload import build_commops
from tracegen.workload.layout import Layout

AR, RS, AG, A2A, BC, P2P = (CollKind.ALLREDUCE, CollKind.REDUCESCATTER, CollKind.ALLGATHER,
                            CollKind.ALLTOALL, CollKind.BROADCAST, CollKind.SENDRECV)
F, Bw, O = Phase.FWD, Phase.BWD, Phase.OPT
ONE_BUCKET = 1 << 50


def per_rank(ops, rank: int) -> dict:
    """(dim, kind, phase) -> [count, logical bytes] of the ops `rank` takes part in."""
    out: dict = {}
    rows = ops.rows
    for i in range(len(rows)):
        if rows["kind"][i] == CollKind.MARKER or rank not in ops.groups[i]:
            continue
        key = (Dim(rows["dim"][i]), CollKind(rows["kind"][i]), Phase(rows["phase"][i]))
        c = out.setdefault(key, [0, 0])
        c[0] += 1
        c[1] += int(rows["bytes"][i])
    return out


def table(*entries) -> dict:
    """[(dim, kind, phase, count, bytes)] -> the per_rank form, summing repeated keys."""
    out: dict = {}
    for dim, kind, phase, n, nbytes in entries:
        if n:
            c = out.setdefault((dim, kind, phase), [0, 0])
            c[0] += n
            c[1] += nbytes
    return out


def gpt_layer(h):
    """(TP-split, TP-replicated) elements of a GPT layer: QKV + bias and fc1 + bias split,
    proj/fc2 biases and two LayerNorms (weight + bias) whole (RowParallelLinear keeps its bias)."""
    return 3 * h * h + 3 * h + h * h + 4 * h * h + 4 * h + 4 * h * h, h + h + 2 * 2 * h


def pad(v, t):
    return -(-v // (128 * t)) * (128 * t)


# ---- GPT-13B, tp8 dp2, 8 micro-batches -----------------------------------------------------------

GPT13B = {"layers": 40, "hidden": 5120, "heads": 40, "vocab": 50257, "seq_len": 2048, "dtype": "bf16"}


def gpt13b(sp: bool):
    return job_from_dict({"model": GPT13B, "cluster": "dgx-h100",
                          "parallelism": {"tp": 8, "dp": 2, "pp": 1, "sp": sp, "micro_batch": 1,
                                          "global_batch": 16, "dp_bucket_bytes": ONE_BUCKET}})


@pytest.mark.parametrize("sp", [False, True])
def test_gpt13b_tp8_dp2(sp):
    j = gpt13b(sp)
    l, h, s, m, t = 40, 5120, 2048, 8, 8
    S = s * h * 2                                       # S_act, b = 1, bf16
    split, rep = gpt_layer(h)
    V = pad(50257, t)                                   # 51,200
    psi = l * (split // t + rep) + V * h // t + s * h + 2 * h   # + position table + final LN
    common = [
        (Dim.TP, AR, F, 3 * m, 3 * m * s * 4),          # vocab-parallel cross-entropy, fp32
        (Dim.TP, BC, F, 4 * m, m * s * (8 + 8 + 4 + 8)),  # tokens, labels, loss_mask, position_ids
        (Dim.TP, AR, O, 3, 12),                         # grad norm (mp group), update ok, norm max
        (Dim.DP, AR, Bw, 1, psi * 4),                   # fp32 gradients of bf16 training
        (Dim.DP, AR, O, 1, 8),                          # [loss sum, tokens] over DP
    ]
    if not sp:
        want = table(*common,
                     (Dim.TP, AR, F, (2 * l + 1) * m, (2 * l + 1) * m * S),   # + embedding
                     (Dim.TP, AR, Bw, (2 * l + 1) * m, (2 * l + 1) * m * S))  # + LM head
    else:
        want = table(*common,
                     (Dim.SP, AG, F, (2 * l + 1) * m, (2 * l + 1) * m * S),   # QKV, fc1, LM head
                     (Dim.SP, RS, F, 2 * l * m, 2 * l * m * S),               # proj, fc2
                     (Dim.SP, AR, F, m, m * S),                               # learned positions
                     (Dim.SP, AG, Bw, (4 * l + 2) * m, (4 * l + 2) * m * S),  # + head re-gather, embedding
                     (Dim.SP, RS, Bw, (2 * l + 1) * m, (2 * l + 1) * m * S),
                     (Dim.SP, AR, O, 1, (l * rep + 2 * h) * 4))               # LayerNorm & bias grads
    ops = build_commops(j)
    for rank in (0, 7, 8, 15):
        assert per_rank(ops, rank) == want, rank
    if sp:   # the number: 6 AG per layer per micro-batch + 3 outside the layers
        assert want[(Dim.SP, AG, F)][0] + want[(Dim.SP, AG, Bw)][0] == 1944


# ---- GPT-175B, tp8 pp8 dp2 (fp16) -----------------------------------------------------------------

def test_gpt175b_tp8_pp8_dp2():
    j = job_from_dict({"preset": "gpt3-175b",
                       "parallelism": {"global_batch": 16, "dp_bucket_bytes": ONE_BUCKET}})
    l, h, s, t, pp, m = 96, 12288, 2048, 8, 8, 8
    S = s * h * 2
    split, rep = gpt_layer(h)
    V = pad(50257, t)
    lay = Layout.of(j.parallelism)
    per_stage = l // pp
    layers_psi = per_stage * (split // t + rep)
    fp16_opt = [(Dim.TP, AR, O, 4, 16)]                 # found_inf + grad norm (mp) + 2 flags
    first = table(*fp16_opt,
                  (Dim.TP, AR, F, (2 * per_stage + 1) * m, (2 * per_stage + 1) * m * S),
                  (Dim.TP, AR, Bw, 2 * per_stage * m, 2 * per_stage * m * S),
                  (Dim.TP, BC, F, 2 * m, m * s * (8 + 8)),       # tokens, position_ids
                  (Dim.PP, P2P, F, m, m * S), (Dim.PP, P2P, Bw, m, m * S),
                  (Dim.EMB, AR, O, 1, V * h // t * 2),           # tied word embedding, fp16 grads
                  (Dim.DP, AR, Bw, 1, (layers_psi + V * h // t + s * h) * 2))
    middle = table(*fp16_opt,
                   (Dim.TP, AR, F, 2 * per_stage * m, 2 * per_stage * m * S),
                   (Dim.TP, AR, Bw, 2 * per_stage * m, 2 * per_stage * m * S),
                   (Dim.PP, P2P, F, 2 * m, 2 * m * S), (Dim.PP, P2P, Bw, 2 * m, 2 * m * S),
                   (Dim.DP, AR, Bw, 1, layers_psi * 2))
    last = table(*fp16_opt,
                 (Dim.TP, AR, F, (2 * per_stage + 3) * m, 2 * per_stage * m * S + 3 * m * s * 4),
                 (Dim.TP, AR, Bw, (2 * per_stage + 1) * m, (2 * per_stage + 1) * m * S),
                 (Dim.TP, BC, F, 2 * m, m * s * (8 + 4)),       # labels, loss_mask
                 (Dim.PP, P2P, F, m, m * S), (Dim.PP, P2P, Bw, m, m * S),
                 (Dim.EMB, AR, O, 1, V * h // t * 2),
                 (Dim.DP, AR, Bw, 1, (layers_psi + V * h // t + 2 * h) * 2),
                 (Dim.DP, AR, O, 1, 8))
    ops = build_commops(j)
    for stage, want in ((0, first), (3, middle), (pp - 1, last)):
        for t_idx, d in ((0, 0), (7, 1)):
            rank = lay.rank(t_idx, d, stage)
            assert per_rank(ops, rank) == want, (stage, t_idx, d)


# ---- LLaMA-7B, tp2 dp4, distributed optimizer -----------------------------------------------------

def test_llama7b_tp2_dp4_distributed_optimizer():
    model = {"layers": 32, "hidden": 4096, "heads": 32, "ffn_hidden": 11008, "vocab": 32000,
             "seq_len": 2048, "dtype": "bf16", "gated_mlp": True, "position_embeddings": False,
             "tied_embeddings": False, "bias": False}
    j = job_from_dict({"model": model, "cluster": "dgx-h100",
                       "parallelism": {"tp": 2, "dp": 4, "pp": 1, "zero": 1, "micro_batch": 1,
                                       "global_batch": 16, "dp_bucket_bytes": ONE_BUCKET}})
    l, h, s, t, m, ffn = 32, 4096, 2048, 2, 4, 11008
    S = s * h * 2
    V = pad(32000, t)                                   # already a multiple of 256
    layer_split, layer_rep = 4 * h * h + 3 * h * ffn, 2 * h   # RMSNorm weights only
    psi = l * (layer_split // t + layer_rep) + 2 * V * h // t + h   # embedding, LM head, final norm
    want = table((Dim.TP, AR, F, (2 * l + 1 + 3) * m, (2 * l + 1) * m * S + 3 * m * s * 4),
                 (Dim.TP, AR, Bw, (2 * l + 1) * m, (2 * l + 1) * m * S),
                 (Dim.TP, BC, F, 4 * m, m * s * 28),
                 (Dim.TP, AR, O, 2, 8),                  # update ok, grad-norm max over tp·pp
                 (Dim.DP, RS, Bw, 1, psi * 4),           # fp32 gradient ReduceScatter
                 (Dim.DP, AG, O, 1, psi * 2),            # bf16 parameter AllGather
                 (Dim.DP, AR, O, 2, 4 + 8))              # grad norm over all ranks, loss over DP
    ops = build_commops(j)
    for rank in range(8):
        assert per_rank(ops, rank) == want, rank


# ---- Mixtral 8x7B, tp4 ep8 dp8, SP, expert_tp 1 and 4 -----------------------------------------------

@pytest.mark.parametrize("etp", [1, 4])
def test_mixtral_tp4_ep8_dp8_sp(etp):
    j = job_from_dict({"model": "mixtral-8x7b", "cluster": "dgx-h100",
                       "parallelism": {"tp": 4, "dp": 8, "pp": 1, "ep": 8, "expert_tp": etp,
                                       "sp": True, "zero": 1, "micro_batch": 1, "global_batch": 16,
                                       "dp_bucket_bytes": ONE_BUCKET}})
    l, h, s, t, m, ffn, E, k = 32, 4096, 4096, 4, 2, 14336, 8, 2
    S = s * h * 2
    V = pad(32000, t)
    attn = h * h + 2 * h * (8 * 128) + h * h             # Q, K, V (8 KV heads of 128), O
    layer_rep = 2 * h + E * h                            # two RMSNorms + the router
    dense = l * (attn // t + layer_rep) + 2 * V * h // t + h
    expert = l * (E // 8) * 3 * h * ffn // etp           # one expert per EP rank, split over etp
    rows = s // t * k                                    # SP shard x top-2, capacity factor 1
    a2a = rows * h * 2
    edp = 32 // (etp * 8)
    want = table((Dim.SP, AG, F, (l + 1) * m, (l + 1) * m * S),        # QKV, LM head
                 (Dim.SP, RS, F, (l + 1) * m, (l + 1) * m * S),        # proj, RoPE embedding
                 (Dim.SP, AG, Bw, (2 * l + 2) * m, (2 * l + 2) * m * S),
                 (Dim.SP, RS, Bw, (l + 1) * m, (l + 1) * m * S),
                 (Dim.SP, AR, O, 1, (l * layer_rep + h) * 4),
                 (Dim.EP, A2A, F, 2 * l * m, 2 * l * m * a2a),         # dispatch, combine
                 (Dim.EP, A2A, Bw, 2 * l * m, 2 * l * m * a2a),
                 (Dim.EP, AG, F, l * m if etp > 1 else 0, l * m * etp * a2a),
                 (Dim.EP, RS, F, l * m if etp > 1 else 0, l * m * etp * a2a),
                 (Dim.EP, AG, Bw, l * m if etp > 1 else 0, l * m * etp * a2a),
                 (Dim.EP, RS, Bw, l * m if etp > 1 else 0, l * m * etp * a2a),
                 (Dim.TP, AR, F, 3 * m, 3 * m * s * 4),
                 (Dim.TP, BC, F, 4 * m, m * s * 28),
                 (Dim.TP, AR, O, 2, 8),
                 (Dim.DP, RS, Bw, 1, dense * 4), (Dim.DP, AG, O, 1, dense * 2),
                 (Dim.DP, AR, O, 2, 4 + 8),
                 (Dim.EDP, RS, Bw, 1 if edp > 1 else 0, expert * 4),
                 (Dim.EDP, AG, O, 1 if edp > 1 else 0, expert * 2))
    ops = build_commops(j)
    for rank in (0, 5, 31):
        assert per_rank(ops, rank) == want, rank
    # Megatron-core's expert grid: with etp 1 rank 0's EP group is {0..7}, expert-DP {0,8,16,24}
    a2a_groups = {tuple(ops.groups[i]) for i in np.flatnonzero(ops.rows["kind"] == A2A) if 0 in ops.groups[i]}
    want_ep = tuple(range(8)) if etp == 1 else tuple(range(0, 32, 4))
    assert a2a_groups == {want_ep}
    edp_groups = {tuple(ops.groups[i]) for i in np.flatnonzero(ops.rows["dim"] == Dim.EDP) if 0 in ops.groups[i]}
    assert edp_groups == ({(0, 8, 16, 24)} if etp == 1 else set())


# ---- sizing rules, memory, config ----------------------------------------------------------------

def test_vocab_padding_position_table_and_grad_dtype():
    from tracegen.config import grad_elem_bytes
    from tracegen.workload.volumes import rank_params
    j = gpt13b(sp=False)
    assert j.model.padded_vocab(8) == 51200 and j.model.padded_vocab(1) == 50304
    assert grad_elem_bytes(j.model, j.parallelism) == 4                     # bf16 -> fp32
    fp16 = job_from_dict({"preset": "gpt3-175b"})
    assert grad_elem_bytes(fp16.model, fp16.parallelism) == 2
    kept = job_from_dict({"model": GPT13B, "parallelism": {"tp": 8, "dp": 2, "pp": 1,
                                                          "global_batch": 2, "grad_dtype": "bf16"},
                          "cluster": "dgx-h100"})
    assert grad_elem_bytes(kept.model, kept.parallelism) == 2
    # a longer position table is held whole on every TP rank: DP reduces all of it
    longer = job_from_dict({"model": {**GPT13B, "max_position_embeddings": 4096}, "cluster": "dgx-h100",
                            "parallelism": {"tp": 8, "dp": 2, "pp": 1, "global_batch": 2}})
    assert rank_params(longer, 0).dense - rank_params(j, 0).dense == 2048 * 5120


@pytest.mark.parametrize("change,key", [
    ({"model": {"max_position_embeddings": 1024}}, "model.max_position_embeddings"),
    ({"parallelism": {"expert_tp": 2}}, "parallelism.expert_tp"),
    ({"model": {"experts": 8, "top_k": 2}, "parallelism": {"ep": 8, "expert_tp": 4, "dp": 2}}, "expert_tp"),
    ({"model": {"experts": 8, "top_k": 2}, "parallelism": {"tp": 2}}, "sp"),
])
def test_bad_megatron_keys_name_the_key(change, key):
    from tracegen.errors import ConfigError
    base = {"model": {"layers": 2, "hidden": 256, "heads": 8, "seq_len": 2048, "vocab": 1000},
            "parallelism": {"tp": 1, "dp": 2, "pp": 1, "global_batch": 2}, "cluster": {"gpus_per_node": 2}}
    doc = {k: {**base[k], **change.get(k, {})} for k in base}
    with pytest.raises(ConfigError) as e:
        job_from_dict(doc)
    assert key in str(e.value) and "\n" not in str(e.value)


def test_memory_flash_attention_recompute_and_warning():
    from tracegen.workload.memory import activation_bytes_per_layer, memory_estimate
    j = gpt13b(sp=True)
    s, b, h, a, t = 2048, 1, 5120, 40, 8
    assert activation_bytes_per_layer(j) == s * b * h * 34 / t                 # flash: no scores
    eager = job_from_dict({"model": {**GPT13B, "flash_attention": False}, "cluster": "dgx-h100",
                           "parallelism": {"tp": 8, "dp": 2, "pp": 1, "sp": True, "global_batch": 2}})
    assert activation_bytes_per_layer(eager) == s * b * h * (34 + 5 * a * s / h) / t
    selective = job_from_dict({"model": {**GPT13B, "flash_attention": False}, "cluster": "dgx-h100",
                               "parallelism": {"tp": 8, "dp": 2, "pp": 1, "sp": True, "global_batch": 2,
                                               "recompute": "selective"}})
    assert activation_bytes_per_layer(selective) == activation_bytes_per_layer(j)
    me = memory_estimate(j)
    assert me.fits and me.gpu_bytes == 80 * 10 ** 9 and me.warning(j) == ""
    big = job_from_dict({"preset": "deepseek-v3"})
    me = memory_estimate(big)
    assert not me.fits
    msg = me.warning(big)
    assert msg.startswith("memory per GPU") and "exceeds the H100's 80 GB" in msg and "\n" not in msg


# ---- real-scale presets: load, validate, closed forms (never the full pipeline here) ------------

SCALE = {"llama3-405b-128k": 131072, "llama3-405b-64k": 65536, "llama3-405b-32k": 32768,
         "llama3-405b": 16384, "llama3-405b-8k": 8192, "llama3-405b-4k": 4096,
         "llama3-405b-2k": 2048, "gpt3-175b-1k": 1024, "deepseek-v3-2k": 2048, "mixtral-8x7b-512": 512}


def test_every_job_preset_fits_its_gpu_or_says_why_not():
    from tracegen.config import list_presets, load_job
    from tracegen.workload.memory import memory_estimate
    names = dict(list_presets()["jobs"])
    assert set(SCALE) <= set(names)
    for name, desc in names.items():
        j = load_job(preset=name)
        if not memory_estimate(j).fits:
            assert "does not fit" in desc, name


@pytest.mark.parametrize("name", list(SCALE))
def test_scale_presets_load_with_sane_closed_forms(name):
    from tracegen.config import load_job
    from tracegen.workload.memory import memory_estimate
    from tracegen.workload.volumes import expected_rank_bytes, rank_params
    j = load_job(preset=name)
    par, m = j.parallelism, j.model
    assert j.world == SCALE[name] and j.nodes * 8 == j.world
    me = memory_estimate(j)
    assert 10e9 < me.total_bytes < 80e9
    lay = Layout.of(par)
    mid = lay.rank(0, 0, par.pp // 2)
    rp = rank_params(j, par.pp // 2)
    got = expected_rank_bytes(j, mid)
    n = par.dp * par.cp
    # ZeRO-1: fp32 gradient ReduceScatter + bf16/fp16 parameter AllGather of the rank's share
    g = 4 if m.dtype == "bf16" else 2
    assert got[Dim.DP] == pytest.approx((n - 1) / n * rp.dense * (g + m.bytes_per_elem), rel=1e-6)
    if par.sp:   # per block per micro-batch 3 AG + 2 RS (+ 1 + 1 with full recompute); a layer has
        S = par.micro_batch * m.seq_len * m.hidden * m.bytes_per_elem   # attention + MLP blocks,
        blocks = 1 if m.experts and not m.shared_experts else 2           # MoE: attention only
        calls = blocks * (5 + (2 if par.recompute == "full" else 0))
        layers = m.layers // par.pp
        per_layer = calls * (par.tp - 1) / par.tp * S
        assert got[Dim.SP] == pytest.approx(layers * par.microbatches * per_layer, rel=1e-3)


def test_llama3_405b_is_metas_layout():
    from tracegen.config import load_job
    from tracegen.workload.params import param_count
    j = load_job(preset="llama3-405b")
    par = j.parallelism
    assert (par.tp, par.pp, par.dp, par.cp, par.sp, par.zero) == (8, 16, 128, 1, True, 1)
    assert par.global_batch * j.model.seq_len == 16 * 2 ** 20          # 16M tokens per step
    assert param_count(j.model) == pytest.approx(405.9e9 * 128 / 126, rel=0.01)


def test_plan_json_keys_and_counts():
    """`tracegen plan --json`: stable keys; the per-op table's counts are the CommOps' own."""
    import json

    from click.testing import CliRunner

    from tracegen.cli import main
    argv = ["plan", "--json", "--set", "parallelism.sp=true"]
    res = CliRunner().invoke(main, argv)
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["schema"] == "tracegen.plan/1"
    assert set(doc) == {"schema", "job", "iteration_ns", "memory", "warnings", "ops", "dims",
                        "transfers", "net_transfers", "pcap", "output"}
    assert set(doc["memory"]) == {"model_states_bytes", "activations_bytes", "total_bytes",
                                  "gpu_bytes", "fits"}
    for row in doc["ops"]:
        assert set(row) == {"dim", "collective", "phase", "busiest_rank", "rank0"}
        assert set(row["busiest_rank"]) == {"rank", "count", "bytes"} and set(row["rank0"]) == {"count", "bytes"}
        assert row["busiest_rank"]["bytes"] >= row["rank0"]["bytes"]
    for row in doc["dims"]:
        assert set(row) == {"dim", "ops", "transfers", "net_bytes", "net_wire_bytes", "nvlink_bytes",
                            "net_messages", "busiest_rank_sent_bytes", "closed_form_bytes"}
    # default job: tiny, 4 layers, tp=2 pp=2, 4 micro-batches; stage 0 holds layers 0-1
    sp_ag = {(r["dim"], r["collective"], r["phase"]): r["rank0"] for r in doc["ops"]}
    assert sp_ag[("SP", "AllGather", "fwd")]["count"] == 2 * 2 * 4                 # 2 per layer
    assert sp_ag[("SP", "AllGather", "bwd")]["count"] == (4 * 2 + 1) * 4           # + embedding
    assert sp_ag[("SP", "ReduceScatter", "fwd")]["count"] == 2 * 2 * 4
    assert sp_ag[("SP", "AllReduce", "fwd")]["count"] == 4       # learned positions: AllReduce
    assert CliRunner().invoke(main, argv).output == res.output                        # deterministic
