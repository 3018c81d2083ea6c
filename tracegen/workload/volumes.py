"""Closed forms (../shared/FORMULAS.md) of what one rank sends per iteration, per dimension.

These are written from the formulas, not from the CommOp table, so the tests can hold the
generated transfers against them. Ring collectives over n ranks send, per rank, 2(n−1)/n·S
(AllReduce) and (n−1)/n·S (AllGather, ReduceScatter, AllToAll) — exact when S splits evenly over
n·channels; summed over a group they are exact for any S. Results are Fractions so the exact
per-rank value survives; round only for display.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from ..config import DTYPE_BYTES, Job
from ..tables import Dim
from .compute import moe_rows
from .layout import Layout
from .params import embedding_param_count, head_param_count, layer_params


def _ar(n: int, s: int) -> Fraction:
    return Fraction(2 * (n - 1) * s, n)


def _ag(n: int, s: int) -> Fraction:
    return Fraction((n - 1) * s, n)


@dataclass(frozen=True)
class RankParams:
    dense: int    # elements this rank holds that are synced over the DP x CP group
    expert: int   # routed-expert elements synced over the expert-data-parallel group


def rank_params(job: Job, stage: int) -> RankParams:
    """Parameters held by one rank of `stage`, rounded per layer as the workload's buckets are."""
    m, par = job.model, job.parallelism
    split = m.experts > 0 and par.ep > 1
    dense = expert = 0
    per_stage = m.layers // par.pp
    for chunk in range(par.vpp):
        first = (chunk * par.pp + stage) * (per_stage // par.vpp)
        for layer in range(first, first + per_stage // par.vpp):
            d, e = layer_params(m, layer)
            if split:
                dense += d // par.tp
                expert += e // par.ep
            else:
                dense += (d + e) // par.tp
    if stage == 0:
        dense += embedding_param_count(m) // par.tp
    if stage == par.pp - 1:
        dense += head_param_count(m, par.pp) // par.tp
    return RankParams(dense, expert)


def _stage_layers(job: Job, stage: int) -> list[int]:
    par = job.model.layers // (job.parallelism.pp * job.parallelism.vpp)
    pp = job.parallelism.pp
    return [l for chunk in range(job.parallelism.vpp)
            for l in range((chunk * pp + stage) * par, (chunk * pp + stage + 1) * par)]


def expected_rank_bytes(job: Job, rank: int) -> dict[Dim, Fraction]:
    """Bytes `rank` sends in all iterations, per dimension, by the closed forms."""
    m, par = job.model, job.parallelism
    lay = Layout.of(par)
    t, dp, pp, c, e, v = par.tp, par.dp, par.pp, par.cp, par.ep, par.vpp
    _, _, st, _ = lay.coords(rank)
    mb = par.microbatches
    B = m.bytes_per_elem
    gB = DTYPE_BYTES[par.grad_dtype] if par.grad_dtype else B
    tokens = par.micro_batch * m.seq_len // c
    S = tokens * m.hidden * B                      # S_act on one CP rank
    rec = 1 if par.recompute == "full" else 0
    split_experts = m.experts > 0 and e > 1
    layers = _stage_layers(job, st)
    moe_layers = sum(1 for l in layers if m.is_moe_layer(l) and split_experts)
    first, last = st == 0, st == pp - 1
    out = {d: Fraction(0) for d in Dim}

    # TP / SP: attention and MLP blocks each: forward, backward (+ forward again under full recompute)
    blocks = (2 * len(layers) - moe_layers) * (2 + rec)
    if par.sp:
        out[Dim.SP] += blocks * 2 * _ag(t, S) * mb                       # AG + RS per block pass
        out[Dim.SP] += (_ag(t, S) if first else 0) * mb                   # embedding RS
        out[Dim.SP] += (2 * _ag(t, S) if last else 0) * mb                # head AG fwd + RS bwd
    elif t > 1:
        out[Dim.TP] += blocks * _ar(t, S) * mb
        out[Dim.TP] += ((_ar(t, S) if first else 0) + (_ar(t, S) if last else 0)) * mb
    if last and t > 1:
        out[Dim.TP] += 3 * _ar(t, tokens * 4) * mb                        # cross-entropy (fp32)

    # PP: v chunks per stage; the very first chunk receives nothing, the very last sends nothing on
    if pp > 1:
        pp_bytes = S // t if (par.sp or par.pp_scatter_gather) else S
        sends = (v - (1 if last else 0)) + (v - (1 if first else 0))
        out[Dim.PP] += sends * pp_bytes * mb
        if par.pp_scatter_gather and not par.sp:
            recvs = (v - (1 if first else 0)) + (v - (1 if last else 0))
            out[Dim.PP] += recvs * _ag(t, S) * mb

    # CP: ring attention, c−1 steps; backward carries dK, dV too
    if c > 1:
        step = tokens * m.kv_elems_per_token // t * B
        out[Dim.CP] += len(layers) * (c - 1) * step * (1 + 2 + rec) * mb

    # EP: dispatch + combine AllToAll, forward and backward (+ forward again under full recompute)
    if split_experts:
        a2a = moe_rows(job) * m.hidden * B
        out[Dim.EP] += moe_layers * 2 * (2 + rec) * _ag(e, a2a) * mb

    # DP / expert-DP gradients (and ZeRO parameter gathers)
    params = rank_params(job, st)
    for dim, n, psi in ((Dim.DP, dp * c, params.dense),
                        (Dim.EDP, len(lay.edp_group(0, 0)) if split_experts else 1, params.expert)):
        if n == 1 or psi == 0:
            continue
        if par.zero == 0:
            out[dim] += _ar(n, psi * gB)
        elif par.zero in (1, 2):
            out[dim] += _ag(n, psi * gB) + _ag(n, psi * B)
        else:   # ZeRO-3: gather for forward, again for backward, reduce-scatter, every micro-batch
            out[dim] += (2 * _ag(n, psi * B) + _ag(n, psi * gB)) * mb

    # tied embeddings: first and last stage AllReduce the word-embedding gradient
    if m.tied_embeddings and pp > 1 and (first or last):
        out[Dim.EMB] += _ar(2, m.vocab * m.hidden // t * gB)
    return {d: x * job.iterations for d, x in out.items() if x}
