"""Compute time between collectives: FLOPs / (GPU peak x MFU), in integer nanoseconds.

Forward FLOPs of one layer for one micro-batch are 2*b*s*(matmul weights) + 4*b*s^2*h (attention
scores and values); for a GPT layer (weights 12h^2) that is FORMULAS.md's 24bsh^2 + 4bs^2h.
Backward costs twice the forward. Tensor parallelism divides a layer's work by t.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..config import GPU_PEAK_TFLOPS, Job, Model


def attention_weights(m: Model) -> int:
    """q and o projections are h x h; k and v shrink with grouped-query attention."""
    kv_dim = m.hidden * (m.kv_heads or m.heads) // m.heads
    return 2 * m.hidden * m.hidden + 2 * m.hidden * kv_dim


def mlp_weights(m: Model) -> int:
    mats = 3 if getattr(m, "gated_mlp", False) else 2
    return mats * m.hidden * m.ffn


@dataclass(frozen=True)
class ComputeModel:
    """Per-GPU compute times (ns) of the pieces between two collectives."""
    attn_fwd_ns: int
    mlp_fwd_ns: int
    logits_fwd_ns: int
    flops_per_ns: float

    @staticmethod
    def of(job: Job) -> "ComputeModel":
        m, par = job.model, job.parallelism
        peak = GPU_PEAK_TFLOPS[job.cluster.gpu][m.dtype] * 1e12 * job.cluster.mfu
        per_ns = peak / 1e9
        b, s, h = par.micro_batch, m.seq_len, m.hidden
        attn = 2 * b * s * attention_weights(m) + 4 * b * s * s * h
        mlp = 2 * b * s * mlp_weights(m)
        logits = 2 * b * s * h * m.vocab
        t = par.tp

        def ns(flops: float) -> int:
            return max(1, round(flops / t / per_ns))
        return ComputeModel(ns(attn), ns(mlp), ns(logits), per_ns)

    @property
    def layer_fwd_ns(self) -> int:
        return self.attn_fwd_ns + self.mlp_fwd_ns
