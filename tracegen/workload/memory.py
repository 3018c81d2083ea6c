"""Memory per GPU: model states under ZeRO (Rajbhandari et al. 2020) and activations
(Korthikanti et al. 2022) — what an engineer sizes a job with before asking for a fabric.

Mixed-precision Adam keeps 2Ψ of 16-bit parameters, 2Ψ of 16-bit gradients and KΨ of optimizer
state (K = 12: fp32 master weights, momentum, variance). ZeRO partitions, over N_d ranks,
stage 1 the optimizer state, stage 2 also the gradients, stage 3 also the parameters.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..config import Job
from .layout import Layout
from .volumes import rank_params

ADAM_K = 12


def zero_model_state_bytes(psi: int, n_d: int, stage: int, k: int = ADAM_K) -> float:
    """Bytes of parameters + gradients + optimizer state per GPU (ZeRO paper, Figure 1)."""
    if stage == 0:
        return (2 + 2 + k) * psi
    if stage == 1:
        return 2 * psi + 2 * psi + k * psi / n_d
    if stage == 2:
        return 2 * psi + (2 + k) * psi / n_d
    return (2 + 2 + k) * psi / n_d


def activation_bytes_per_layer(job: Job) -> float:
    """Korthikanti et al. eq. 1-5: s·b·h·(34 + 5·a·s/h) with 16-bit activations, split by t
    (attention and MLP parts; LayerNorm / dropout parts only with sequence parallelism), and s by c.
    Selective recompute drops the 5·a·s/h term; full recompute keeps only the layer input 2·s·b·h."""
    m, par = job.model, job.parallelism
    s, b, h, a, t = m.seq_len / par.cp, par.micro_batch, m.hidden, m.heads, par.tp
    if par.recompute == "full":
        return 2 * s * b * h / (t if par.sp else 1)
    attn_scores = 0 if par.recompute == "selective" else 5 * a * s / h
    if par.sp:
        return s * b * h * (34 + attn_scores) / t
    return s * b * h * (10 + (24 + attn_scores) / t)


@dataclass(frozen=True)
class MemoryEstimate:
    params_per_gpu: int        # dense + expert elements on the busiest stage's rank
    model_states_bytes: float
    activations_bytes: float   # first stage: the most micro-batches in flight

    @property
    def total_bytes(self) -> float:
        return self.model_states_bytes + self.activations_bytes


def memory_estimate(job: Job) -> MemoryEstimate:
    par = job.parallelism
    lay = Layout.of(par)
    worst = max(range(par.pp), key=lambda st: sum(vars(rank_params(job, st)).values()))
    rp = rank_params(job, worst)
    states = zero_model_state_bytes(rp.dense, par.dp * par.cp, par.zero)
    if rp.expert:
        states += zero_model_state_bytes(rp.expert, len(lay.edp_group(0, 0)), par.zero)
    # 1F1B keeps up to p micro-batches of activations on the first stage (its l/p layers each);
    # interleaving adds (p−1)/(p·v) more (Narayanan et al. 2021).
    in_flight = min(par.pp, par.microbatches)
    if par.vpp > 1:
        in_flight = par.pp * (1 + (par.pp - 1) / (par.pp * par.vpp))
    layers_here = job.model.layers / par.pp
    acts = activation_bytes_per_layer(job) * layers_here * in_flight
    return MemoryEstimate(rp.dense + rp.expert, states, acts)
