"""Memory per GPU: model states under ZeRO (Rajbhandari et al. 2020) and activations
(Korthikanti et al. 2022) — what an engineer sizes a job with before asking for a fabric.

Mixed-precision Adam keeps 2Ψ of 16-bit parameters, 2Ψ of 16-bit gradients and KΨ of optimizer
state (K = 12: fp32 master weights, momentum, variance). ZeRO partitions, over N_d ranks,
stage 1 the optimizer state, stage 2 also the gradients, stage 3 also the parameters.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..config import GPU_MEMORY_BYTES, Job, grad_elem_bytes
from .layout import Layout
from .volumes import rank_params

ADAM_K = 12


def zero_model_state_bytes(psi: float, n_d: int, stage: int, k: int = ADAM_K,
                           grad_bytes: int = 2) -> float:
    """Bytes of parameters + gradients + optimizer state per GPU (ZeRO paper, Figure 1, with 2-byte
    gradients; Megatron keeps bf16 models' main_grads in fp32: grad_bytes = 4)."""
    g = grad_bytes
    if stage == 0:
        return (2 + g + k) * psi
    if stage == 1:
        return (2 + g) * psi + k * psi / n_d
    if stage == 2:
        return 2 * psi + (g + k) * psi / n_d
    return (2 + g + k) * psi / n_d


def activation_bytes_per_layer(job: Job) -> float:
    """Korthikanti et al. eq. 1-5: s·b·h·(34 + 5·a·s/h) with 16-bit activations, split by t
    (attention and MLP parts; LayerNorm / dropout parts only with sequence parallelism), and s by c.
    Flash attention (model.flash_attention, the default) and selective recompute (Megatron's
    `--recompute-granularity selective`: core attention recomputed) keep no 5·a·s/h scores; full
    recompute keeps only the layer input 2·s·b·h (`--recompute-granularity full`, uniform, 1 layer)."""
    m, par = job.model, job.parallelism
    s, b, h, a, t = m.seq_len / par.cp, par.micro_batch, m.hidden, m.heads, par.tp
    if par.recompute == "full":
        return 2 * s * b * h / (t if par.sp else 1)
    attn_scores = 0 if (par.recompute == "selective" or m.flash_attention) else 5 * a * s / h
    if par.sp:
        return s * b * h * (34 + attn_scores) / t
    return s * b * h * (10 + (24 + attn_scores) / t)


@dataclass(frozen=True)
class MemoryEstimate:
    params_per_gpu: int        # dense + expert elements on the busiest stage's rank
    model_states_bytes: float
    activations_bytes: float   # first stage: the most micro-batches in flight
    gpu_bytes: int = 0         # the GPU's memory (0: unknown)

    @property
    def total_bytes(self) -> float:
        return self.model_states_bytes + self.activations_bytes

    @property
    def fits(self) -> bool:
        return not self.gpu_bytes or self.total_bytes <= self.gpu_bytes

    def warning(self, job: Job) -> str:
        """One line when the plan does not fit the GPU ("" when it does)."""
        if self.fits:
            return ""
        par = job.parallelism
        hints = []
        if self.activations_bytes > self.model_states_bytes:
            if par.recompute != "full":
                hints.append("parallelism.recompute=full")
            hints.append("more parallelism.tp, cp or pp")
        else:
            if par.zero < 1:
                hints.append("parallelism.zero=1 (distributed optimizer)")
            hints.append("more parallelism.tp, pp or ep")
        return (f"memory per GPU {self.total_bytes / 1e9:,.1f} GB (model states "
                f"{self.model_states_bytes / 1e9:,.1f} GB + activations "
                f"{self.activations_bytes / 1e9:,.1f} GB) exceeds the {job.cluster.gpu.upper()}'s "
                f"{self.gpu_bytes / 1e9:,.0f} GB; try " + ", ".join(hints))


def memory_estimate(job: Job) -> MemoryEstimate:
    par = job.parallelism
    lay = Layout.of(par)
    g = grad_elem_bytes(job.model, par)

    def states(st: int) -> float:
        rp = rank_params(job, st)
        return (zero_model_state_bytes(rp.dense, par.dp * par.cp, par.zero, grad_bytes=g)
                + zero_model_state_bytes(rp.expert, lay.edp, par.zero, grad_bytes=g))
    worst = max(range(par.pp), key=states)
    rp = rank_params(job, worst)
    # 1F1B keeps up to p micro-batches of activations on the first stage (its l/p layers each);
    # interleaving adds (p−1)/(p·v) more (Narayanan et al. 2021).
    in_flight = min(par.pp, par.microbatches)
    if par.vpp > 1:
        in_flight = par.pp * (1 + (par.pp - 1) / (par.pp * par.vpp))
    layers_here = job.model.layers / par.pp
    acts = activation_bytes_per_layer(job) * layers_here * in_flight
    return MemoryEstimate(rp.dense + rp.expert, states(worst), acts,
                          GPU_MEMORY_BYTES.get(job.cluster.gpu, 0))
