"""Parameter count Ψ of a decoder-only transformer, layer by layer (it sets DP / ZeRO / EP volumes).

Matrices are counted by their shapes; `*_weights` are the matmul weights (what FLOPs scale with),
the rest (biases, norms, router) is added on top. A MoE layer's parameters split into a dense part
(attention, norms, router, shared experts: replicated over EP, synced over DP) and an expert part
(routed experts: split over EP, synced over the expert-data-parallel group).
"""
from __future__ import annotations

from dataclasses import dataclass

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


@dataclass(frozen=True)
class LayerParams:
    """Parameters of one layer by how tensor parallelism holds them (whole model, before any split).

    split: column/row-parallel weights and column-parallel biases, 1/t per TP rank.
    replicated: a full copy on every TP rank - norms, row-parallel biases (added after the
      reduction), the MoE router, MLA's down-projections (TE `parallel_mode="duplicated"`).
      DP reduces them in full; under SP they are also all-reduced over TP once per iteration.
    expert_split / expert_replicated: the routed experts (all of them): weights and fc1 biases
      split over ep·etp, fc2 biases over ep only. Synced over the expert-data-parallel group.
    """
    split: int
    replicated: int
    expert_split: int = 0
    expert_replicated: int = 0

    @property
    def total(self) -> int:
        return self.split + self.replicated + self.expert_split + self.expert_replicated

    def per_rank(self, tp: int, ep: int = 1, etp: int = 1) -> tuple[int, int]:
        """(dense, expert) elements one rank holds."""
        return (self.split // tp + self.replicated,
                self.expert_split // (ep * etp) + self.expert_replicated // ep)


def _mlp_parts(m: Model, width: int) -> tuple[int, int]:
    """(split, replicated) of one MLP: fc1 (+bias) column-parallel, fc2 row-parallel (bias whole)."""
    fc1_bias = (2 if m.gated_mlp else 1) * width if m.bias else 0
    return mlp_weights(m, width) + fc1_bias, (m.hidden if m.bias else 0)


def _attention_parts(m: Model) -> tuple[int, int]:
    h, heads, dh = m.hidden, m.heads, m.dhead
    if m.mla:
        v = m.v_head_dim or dh
        q_down = h * m.q_lora_rank if m.q_lora_rank else 0
        q_up = (m.q_lora_rank or h) * heads * (dh + m.rope_head_dim)
        kv_down = h * (m.kv_lora_rank + m.rope_head_dim)
        split = q_up + m.kv_lora_rank * heads * (dh + v) + heads * v * h
        return split, q_down + kv_down + m.q_lora_rank + m.kv_lora_rank
    kv = (m.kv_heads or heads) * dh
    split = attention_weights(m) + ((heads * dh + 2 * kv) if m.bias else 0)
    return split, (h if m.bias else 0)


def layer_parts(m: Model, layer: int) -> LayerParams:
    a_split, a_rep = _attention_parts(m)
    if not m.is_moe_layer(layer):
        f_split, f_rep = _mlp_parts(m, m.ffn)
        return LayerParams(a_split + f_split, a_rep + f_rep + _norms(m))
    s_split, s_rep = _mlp_parts(m, m.moe_ffn)
    e_split, e_rep = _mlp_parts(m, m.moe_ffn)
    return LayerParams(a_split + m.shared_experts * s_split,
                       a_rep + m.shared_experts * s_rep + _norms(m) + m.experts * m.hidden,
                       m.experts * e_split, m.experts * e_rep)


def layer_params(m: Model, layer: int) -> tuple[int, int]:
    """(dense, expert) parameters of layer `layer` (0-based)."""
    lp = layer_parts(m, layer)
    return lp.split + lp.replicated, lp.expert_split + lp.expert_replicated


def layer_param_count(model: Model, layer: int = 0) -> int:
    """All parameters of one transformer layer (dense + routed experts)."""
    return layer_parts(model, layer).total


def embedding_parts(model: Model, tp: int = 1) -> LayerParams:
    """Input embedding on the first stage: the vocab-parallel word table (padded vocabulary, split
    over TP) and the learned position table (`max_position_embeddings` rows, whole on every rank)."""
    return LayerParams(model.padded_vocab(tp) * model.hidden, model.positions * model.hidden)


def head_parts(model: Model, tp: int = 1, pp: int = 1) -> LayerParams:
    """Final norm (whole) + LM head (padded vocabulary, split over TP) on the last stage.

    A tied head is free when it sits beside the embedding (pp = 1); with pp > 1 Megatron keeps a
    copy of the word embedding on the last stage (synced over the embedding group)."""
    untied = not model.tied_embeddings or pp > 1
    norm = (2 if model.bias else 1) * model.hidden
    return LayerParams(model.padded_vocab(tp) * model.hidden if untied else 0, norm)


def embedding_param_count(model: Model) -> int:
    """Word embedding (+ learned position table) as published: unpadded vocabulary."""
    return (model.vocab + model.positions) * model.hidden


def head_param_count(model: Model, pp: int = 1) -> int:
    """Final norm + LM head (unpadded vocabulary), held by the last stage."""
    untied = not model.tied_embeddings or pp > 1
    return (2 if model.bias else 1) * model.hidden + (model.vocab * model.hidden if untied else 0)


def param_count(model: Model) -> int:
    """Exact count: layers + embeddings (+ position table) + final norm (+ untied LM head).

    The published count: unpadded vocabulary. For a GPT-style model this is narayanan_eq2(model)
    + 2h (the final LayerNorm).
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
