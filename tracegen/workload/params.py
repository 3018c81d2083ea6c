"""Parameter count Ψ of a dense decoder-only transformer (it sets the DP gradient volume)."""
from __future__ import annotations

from ..config import Model


def narayanan_eq2(model: Model) -> int:
    """Narayanan et al. 2021, eq. 2: P = 12·l·h²·(1 + 13/(12h) + (V+s)/(12·l·h)), in integers.

    It assumes a GPT layer (biases, LayerNorm, 4h MLP, no GQA) and leaves out the final LayerNorm.
    """
    l, h = model.layers, model.hidden
    return 12 * l * h * h + 13 * l * h + (model.vocab + model.seq_len) * h


def layer_param_count(model: Model) -> int:
    """One transformer layer: attention (q, k, v, o), MLP, two norms."""
    h, f = model.hidden, model.ffn
    kv = (model.kv_heads or model.heads) * (h // model.heads)   # K and V width under GQA
    attn = h * (h + 2 * kv) + h * h
    mlp = (3 if model.gated_mlp else 2) * h * f
    norms = 2 * h
    if model.bias:   # qkv and o biases; up (+ gate) and down biases; LayerNorm betas
        attn += (h + 2 * kv) + h
        mlp += (2 if model.gated_mlp else 1) * f + h
        norms += 2 * h
    return attn + mlp + norms


def _embedding(model: Model) -> int:
    positions = model.seq_len if model.position_embeddings else 0
    return (model.vocab + positions) * model.hidden


def _head(model: Model) -> int:
    """Final norm + LM head (the head is free when tied to the embedding on the same rank)."""
    head = 0 if model.tied_embeddings else model.vocab * model.hidden
    return (2 if model.bias else 1) * model.hidden + head


def param_count(model: Model) -> int:
    """Exact count: layers + embeddings (+ position table) + final norm (+ untied LM head).

    For a GPT-style model this is narayanan_eq2(model) + 2h (the final LayerNorm).
    """
    return model.layers * layer_param_count(model) + _embedding(model) + _head(model)


def stage_extra_param_count(model: Model, stage: int, pp: int) -> int:
    """Parameters outside the layers held by pipeline stage `stage` of `pp` (whole, before TP).

    The first stage holds the embeddings, the last the final norm and LM head. With tied
    embeddings and pp > 1, Megatron keeps a copy of the word embedding on the last stage as its
    head (gradients synced over the embedding group), so that stage holds V·h too.
    """
    extra = _embedding(model) if stage == 0 else 0
    if stage == pp - 1:
        extra += _head(model)
        if model.tied_embeddings and pp > 1:
            extra += model.vocab * model.hidden
    return extra
