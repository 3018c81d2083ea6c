"""Parameter count Ψ of a decoder-only transformer, layer by layer (it sets DP / ZeRO / EP volumes).

Matrices are counted by their shapes; `*_weights` are the matmul weights (what FLOPs scale with),
the rest (biases, norms, router) is added on top. A MoE layer's parameters split into a dense part
(attention, norms, router, shared experts: replicated over EP, synced over DP) and an expert part
(routed experts: split over EP, synced over the expert-data-parallel group).
"""
from __future__ import annotations

from ..config import Model


def narayanan_eq2(model: Model) -> int:
    """Narayanan et al. 2021, eq. 2: P = 12·l·h²·(1 + 13/(12h) + (V+s)/(12·l·h)), in integers.

    It assumes a GPT layer (biases, LayerNorm, 4h MLP, no GQA) and leaves out the final LayerNorm.
    """
    l, h = model.layers, model.hidden
    return 12 * l * h * h + 13 * l * h + (model.vocab + model.seq_len) * h


def attention_weights(m: Model) -> int:
    """Q, K, V, O projections. GQA shrinks K and V; MLA (DeepSeek) factors Q and KV through ranks."""
    h, heads, dh = m.hidden, m.heads, m.dhead
    if m.mla:
        v = m.v_head_dim or dh
        q = (h * m.q_lora_rank + m.q_lora_rank * heads * (dh + m.rope_head_dim) if m.q_lora_rank
             else h * heads * (dh + m.rope_head_dim))
        kv = h * (m.kv_lora_rank + m.rope_head_dim) + m.kv_lora_rank * heads * (dh + v)
        return q + kv + heads * v * h
    kv = (m.kv_heads or heads) * dh
    return h * heads * dh + 2 * h * kv + heads * dh * h


def _attention_extra(m: Model) -> int:
    """Biases of the projections; MLA's norms on the compressed Q and KV."""
    extra = 0
    if m.mla:
        extra += m.q_lora_rank + m.kv_lora_rank
    elif m.bias:
        kv = (m.kv_heads or m.heads) * m.dhead
        extra += m.heads * m.dhead + 2 * kv + m.hidden
    return extra


def mlp_weights(m: Model, width: int) -> int:
    return (3 if m.gated_mlp else 2) * m.hidden * width


def _mlp_params(m: Model, width: int) -> int:
    bias = ((2 if m.gated_mlp else 1) * width + m.hidden) if m.bias else 0
    return mlp_weights(m, width) + bias


def _norms(m: Model) -> int:
    return (4 if m.bias else 2) * m.hidden   # two norms per layer, LayerNorm has a beta


def expert_params(m: Model) -> int:
    """One routed expert."""
    return _mlp_params(m, m.moe_ffn)


def layer_params(m: Model, layer: int) -> tuple[int, int]:
    """(dense, expert) parameters of layer `layer` (0-based)."""
    dense = attention_weights(m) + _attention_extra(m) + _norms(m)
    if not m.is_moe_layer(layer):
        return dense + _mlp_params(m, m.ffn), 0
    dense += m.experts * m.hidden + m.shared_experts * expert_params(m)   # router + shared experts
    return dense, m.experts * expert_params(m)


def layer_param_count(model: Model, layer: int = 0) -> int:
    """All parameters of one transformer layer (dense + routed experts)."""
    return sum(layer_params(model, layer))


def embedding_param_count(model: Model) -> int:
    """Word embedding (+ learned position table), held by the first stage."""
    positions = model.seq_len if model.position_embeddings else 0
    return (model.vocab + positions) * model.hidden


def head_param_count(model: Model, pp: int = 1) -> int:
    """Final norm + LM head, held by the last stage.

    A tied head is free when it sits beside the embedding (pp = 1); with pp > 1 Megatron keeps a
    copy of the word embedding on the last stage (synced over the embedding group), so V·h again.
    """
    untied = not model.tied_embeddings or pp > 1
    return (2 if model.bias else 1) * model.hidden + (model.vocab * model.hidden if untied else 0)


def param_count(model: Model) -> int:
    """Exact count: layers + embeddings (+ position table) + final norm (+ untied LM head).

    For a GPT-style model this is narayanan_eq2(model) + 2h (the final LayerNorm).
    """
    layers = sum(layer_param_count(model, i) for i in range(model.layers))
    return layers + embedding_param_count(model) + head_param_count(model)


def active_param_count(model: Model) -> int:
    """Parameters a token passes through: routed experts count top_k times, not `experts` times."""
    total = param_count(model)
    return total - model.moe_layers * (model.experts - model.top_k) * expert_params(model)


def stage_extra_param_count(model: Model, stage: int, pp: int) -> int:
    """Parameters outside the layers held by pipeline stage `stage` of `pp` (whole, before TP)."""
    extra = embedding_param_count(model) if stage == 0 else 0
    if stage == pp - 1:
        extra += head_param_count(model, pp)
    return extra
