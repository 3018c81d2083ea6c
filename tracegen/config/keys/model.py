"""The model section's keys: the transformer's shape, MoE, MLA, Megatron's sizing rules."""
from __future__ import annotations

from dataclasses import dataclass

from .declare import DTYPE_BYTES, M, key


@dataclass(frozen=True)
class ModelKeys:
    name: str = key("tiny", "the model's name (a preset names it)")
    layers: int = key(4, "transformer layers (the largest models have ~100)", 1, 10_000)
    hidden: int = key(256, "hidden size", 1, M)
    heads: int = key(8, "attention heads", 1, 65_536)
    kv_heads: int = key(0, "query groups; 0: same as heads", 0, 65_536)
    ffn_hidden: int = key(0, "MLP width; 0: 4 x hidden", 0, 4 * M)
    vocab: int = key(4096, "vocabulary size", 1, 16 * M)
    seq_len: int = key(256, "tokens per sequence", 1, 16 * M)
    dtype: str = key("bf16", "precision of weights and activations", choices=tuple(DTYPE_BYTES))
    # Switches that only change the parameter count (GPT-style defaults; llama flips all four).
    gated_mlp: bool = key(False, "SwiGLU: 3 MLP matrices (gate, up, down) instead of 2")
    position_embeddings: bool = key(True, "a learned s x h position table (GPT); false for RoPE")
    tied_embeddings: bool = key(True, "the LM head shares the input embedding; false: its own V x h")
    bias: bool = key(True, "biases on linears and LayerNorms; false: none (RMSNorm)")
    head_dim: int = key(0, "0: hidden / heads", 0, 65_536)
    # Mixture of experts (experts = 0: dense). Layers after the first `first_k_dense` are MoE.
    experts: int = key(0, "routed experts per MoE layer", 0, 65_536)
    top_k: int = key(2, "experts per token", 1, 1024)
    moe_ffn_hidden: int = key(0, "expert MLP width; 0: ffn_hidden", 0, 4 * M)
    shared_experts: int = key(0, "always-on experts", 0, 1024)
    first_k_dense: int = key(0, "leading dense layers", 0, 10_000)
    capacity_factor: float = key(1.0, "dispatch buffer over even routing", 0.001, 64.0)
    # Multi-head latent attention (DeepSeek-V2/V3); kv_lora_rank > 0 turns it on.
    q_lora_rank: int = key(0, "MLA query rank", 0, M)
    kv_lora_rank: int = key(0, "MLA key/value rank", 0, M)
    rope_head_dim: int = key(0, "MLA decoupled RoPE width", 0, 65_536)
    v_head_dim: int = key(0, "0: head_dim", 0, 65_536)
    # Megatron's sizing rules: position table rows (`--max-position-embeddings`, >= seq_len) and the
    # vocabulary padded to a multiple of make_vocab_size_divisible_by x tp (`_vocab_size_with_padding`)
    max_position_embeddings: int = key(0, "rows of a learned position table; 0: seq_len", 0, 16 * M)
    make_vocab_size_divisible_by: int = key(128, "vocabulary padding multiple (x tp)", 1, 65_536)
    flash_attention: bool = key(True, "no s x s attention scores kept for backward (memory model)")
