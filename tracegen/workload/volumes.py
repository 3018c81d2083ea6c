"""Closed forms (../shared/FORMULAS.md) of what one rank sends per iteration, per dimension.

These are written from the formulas, not from the CommOp table, so the tests can hold the
generated transfers against them. Ring collectives over n ranks send, per rank, 2(n−1)/n·S
(AllReduce) and (n−1)/n·S (AllGather, ReduceScatter, AllToAll) — exact when S splits evenly over
n·channels; summed over a group they are exact for any S. A Broadcast chain from TP rank 0 makes
every member but the last forward S. Results are Fractions so the exact per-rank value survives;
round only for display.

The few-byte AllReduces (loss, grad norm, model-parallel flags) hold per rank
only on average (a 4-byte buffer does not split over n ranks); `small_op_bytes` says how much of a
rank's closed form they are.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from ..config import Job, grad_elem_bytes
from ..tables import Dim
from .compute import moe_rows
from .layout import Layout
from .params import embedding_parts, head_parts, layer_parts

def _ar(n: int, s: int) -> Fraction:
    return Fraction(2 * (n - 1) * s, n)


def _ag(n: int, s: int) -> Fraction:
    return Fraction((n - 1) * s, n)


@dataclass(frozen=True)
class RankParams:
    dense: int       # elements this rank holds that are synced over the DP x CP group
    expert: int      # routed-expert elements synced over the expert-data-parallel group
    replicated: int  # of `dense`: full copies on every TP rank other than the position table
                     # (SP all-reduces their gradients over TP)


def rank_params(job: Job, stage: int) -> RankParams:
    """Parameters held by one rank of `stage`: TP-split ones / t, TP-replicated ones whole, routed
    experts / (ep·etp); vocabulary padded to 128·t, position table max_position_embeddings rows."""
    m, par = job.model, job.parallelism
    dense = expert = replicated = 0
    for layer in _stage_layers(job, stage):
        lp = layer_parts(m, layer)
        d, e = lp.per_rank(par.tp, par.ep, par.etp)
        dense, expert, replicated = dense + d, expert + e, replicated + lp.replicated
    if stage == 0:
        dense += sum(embedding_parts(m, par.tp).per_rank(par.tp))
    if stage == par.pp - 1:
        head = head_parts(m, par.tp, par.pp)
        dense += sum(head.per_rank(par.tp))
        replicated += head.replicated
    return RankParams(dense, expert, replicated)


def _stage_layers(job: Job, stage: int) -> list[int]:
    per = job.model.layers // (job.parallelism.pp * job.parallelism.vpp)
    pp = job.parallelism.pp
    return [l for chunk in range(job.parallelism.vpp)
            for l in range((chunk * pp + stage) * per, (chunk * pp + stage + 1) * per)]


def batch_broadcast_bytes(job: Job, first: bool, last: bool) -> int:
    """Bytes TP rank 0 broadcasts per micro-batch (get_batch_on_this_tp_rank): b·s tokens (int64),
    labels (int64), loss_mask (fp32), position_ids (int64); pp > 1 splits them first/last."""
    n = job.parallelism.micro_batch * job.model.seq_len
    if job.parallelism.tp == 1:
        return 0
    return ((8 + 8) * n if first else 0) + ((8 + 4) * n if last else 0)


def small_op_bytes(job: Job, rank: int) -> Fraction:
    """The part of expected_rank_bytes that comes from few-byte AllReduces (average per rank)."""
    par = job.parallelism
    _, _, st, _ = Layout.of(par).coords(rank)
    mp, world, dpc = par.tp * par.pp, par.world, par.dp * par.cp
    stats = world if par.zero else mp
    n_stats = 2 if job.model.dtype == "fp16" else 1
    out = (n_stats * _ar(stats, 4) if stats > 1 else 0) + (2 * _ar(mp, 4) if mp > 1 else 0)
    if st == par.pp - 1 and dpc > 1:
        out += _ar(dpc, 8)
    return Fraction(out) * job.iterations


def expected_rank_bytes(job: Job, rank: int) -> dict[Dim, Fraction]:
    """Bytes `rank` sends in all iterations, per dimension, by the closed forms."""
    m, par = job.model, job.parallelism
    lay = Layout.of(par)
    t, dp, pp, c, e, v, et = par.tp, par.dp, par.pp, par.cp, par.ep, par.vpp, par.etp
    t_idx, _, st, _ = lay.coords(rank)
    mb = par.microbatches
    B = m.bytes_per_elem
    gB = grad_elem_bytes(m, par)
    tokens = par.micro_batch * m.seq_len // c
    S = tokens * m.hidden * B                      # S_act on one CP rank
    rec = 1 if par.recompute == "full" else 0
    layers = _stage_layers(job, st)
    moe = sum(1 for l in layers if m.is_moe_layer(l))
    first, last = st == 0, st == pp - 1
    out = {d: Fraction(0) for d in Dim}

    # TP / SP blocks (attention, dense MLP, shared experts): SP 2 fwd + 3 bwd AG/RS per block
    # (+2 recompute), TP 1 fwd + 1 bwd AllReduce (+1 recompute)
    blocks = 2 * len(layers) - moe + (moe if m.shared_experts else 0)
    if par.sp:
        out[Dim.SP] += blocks * (5 + 2 * rec) * _ag(t, S) * mb
        if first:   # embedding: fwd AR (learned positions) or RS (RoPE), bwd AG
            out[Dim.SP] += ((_ar(t, S) if m.position_embeddings else _ag(t, S)) + _ag(t, S)) * mb
        if last:    # LM head: fwd AG, bwd AG (re-gather) + RS
            out[Dim.SP] += 3 * _ag(t, S) * mb
        out[Dim.SP] += _ar(t, rank_params(job, st).replicated * gB)   # LayerNorm & co. grads
    elif t > 1:
        out[Dim.TP] += blocks * (2 + rec) * _ar(t, S) * mb
        out[Dim.TP] += ((_ar(t, S) if first else 0) + (_ar(t, S) if last else 0)) * mb
    if t > 1:
        if last:
            out[Dim.TP] += 3 * _ar(t, tokens * 4) * mb                    # cross-entropy (fp32)
        if t_idx < t - 1:                                                  # batch broadcast chain
            out[Dim.TP] += batch_broadcast_bytes(job, first, last) * mb

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

    # EP: dispatch + combine AllToAll over ep, AllGather + ReduceScatter over expert TP, forward and
    # backward (+ forward again under full recompute)
    if moe:
        a2a = moe_rows(job) * m.hidden * B
        per_pass = 2 * _ag(e, a2a) + 2 * _ag(et, et * a2a)
        out[Dim.EP] += moe * (2 + rec) * per_pass * mb

    # DP / expert-DP gradients (and ZeRO parameter gathers)
    params = rank_params(job, st)
    for dim, n, psi in ((Dim.DP, dp * c, params.dense), (Dim.EDP, lay.edp, params.expert)):
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
        out[Dim.EMB] += _ar(2, m.padded_vocab(t) * m.hidden // t * gB)

    # few-byte AllReduces: loss (last stage, DP x CP), grad norm (all ranks with the distributed
    # optimizer, else the model-parallel group), train_step's two model-parallel flags
    mp, stats = t * pp, (par.world if par.zero else t * pp)
    n_stats = 2 if m.dtype == "fp16" else 1
    if stats > 1:
        out[Dim.DP if par.zero else Dim.TP] += n_stats * _ar(stats, 4)
    if mp > 1:
        out[Dim.TP] += 2 * _ar(mp, 4)
    if last and dp * c > 1:
        out[Dim.DP] += _ar(dp * c, 8)
    return {d: x * job.iterations for d, x in out.items() if x}
