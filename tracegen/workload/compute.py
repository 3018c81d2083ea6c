"""Compute time between collectives: FLOPs / (GPU peak x MFU), in integer nanoseconds, per GPU.

Forward FLOPs of one layer for one micro-batch are 2·tokens·(matmul weights) + 4·b·s_q·s·(heads·d)
(attention scores and values); for a GPT layer (weights 12h²) that is FORMULAS.md's
24bsh² + 4bs²h. Backward costs twice the forward. TP divides a layer's work by t, CP the
queries by c; MoE experts see tokens·top_k·capacity_factor rows spread over the EP group.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..config import GPU_PEAK_TFLOPS, Job
from .params import attention_weights, mlp_weights


def moe_rows(job: Job) -> int:
    """Token rows one rank dispatches per MoE AllToAll (and its experts compute on): Megatron-core's
    drop-and-pad buffer, capacity x experts with the capacity of each expert rounded up
    (moe_utils.get_capacity(tokens·top_k, experts, capacity_factor) = ceil(tokens·top_k/experts·cf))."""
    m, par = job.model, job.parallelism
    tokens = par.micro_batch * m.seq_len // (par.cp * par.tp)
    return math.ceil((tokens * m.top_k / m.experts) * m.capacity_factor) * m.experts


@dataclass(frozen=True)
class ComputeModel:
    """Per-GPU forward compute times (ns) of the pieces between two collectives, one micro-batch."""
    attn_linear_ns: int     # QKV and output projections
    attn_core_ns: int       # scores and weighted values (what selective recompute redoes)
    mlp_ns: int             # dense MLP
    moe_ns: int             # router + routed experts
    shared_ns: int          # shared experts (DeepSeek): a TP-split dense MLP
    logits_ns: int
    flops_per_ns: float

    @staticmethod
    def of(job: Job) -> "ComputeModel":
        m, par = job.model, job.parallelism
        per_ns = GPU_PEAK_TFLOPS[job.cluster.gpu][m.dtype] * 1e3 * job.cluster.mfu
        t, c = par.tp, par.cp
        tokens = par.micro_batch * m.seq_len / c            # this CP rank's queries

        def ns(flops: float) -> int:
            return max(1, round(flops / per_ns))
        moe = shared = 0.0
        if m.experts:
            rows = moe_rows(job)
            local = par.micro_batch * m.seq_len / (c * t)
            moe = 2 * local * m.hidden * m.experts + 2 * rows * mlp_weights(m, m.moe_ffn)
            shared = 2 * tokens * m.shared_experts * mlp_weights(m, m.moe_ffn) / t   # TP-split MLP
        return ComputeModel(
            attn_linear_ns=ns(2 * tokens * attention_weights(m) / t),
            attn_core_ns=ns(4 * tokens * m.seq_len * m.heads * m.dhead / t),
            mlp_ns=ns(2 * tokens * mlp_weights(m, m.ffn) / t),
            moe_ns=ns(moe) if m.experts else 0,
            shared_ns=ns(shared) if m.shared_experts else 0,
            logits_ns=ns(2 * tokens * m.hidden * m.padded_vocab(t) / t),
            flops_per_ns=per_ns)

    def attention_ns(self) -> int:
        return self.attn_linear_ns + self.attn_core_ns

    def layer_fwd_ns(self, moe: bool) -> int:
        return self.attention_ns() + (self.moe_ns + self.shared_ns if moe else self.mlp_ns)
