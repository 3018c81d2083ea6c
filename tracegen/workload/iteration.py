"""One training iteration of a transformer under DP x TP x PP x CP x EP (+ SP, ZeRO, recompute),
with the collectives Megatron-LM (megatron/core) issues, function by function.

Every TP group (one (cp, dp, pp) coordinate) is a stream walked in Megatron's (interleaved) 1F1B
order. Per micro-batch and model chunk:

  forward:  [recv act] [batch broadcast over TP] [embedding] {attention, MLP or MoE} x layers
            [LM head, cross-entropy] [send act]
  backward: the same blocks in reverse with their conjugate collectives (full recompute first
            re-runs the layer's forward collectives); gradients released into DP buckets
            (AllReduce, or ReduceScatter under ZeRO-1/2) once the last micro-batch is done.
  ZeRO-3:   every layer's parameters AllGathered (prefetched one layer ahead) in forward and again
            in backward, its gradients ReduceScattered after its backward, each micro-batch.
  end:      gradient ops; SP's TP AllReduce of the replicated (LayerNorm, ...) gradients; the
            tied-embedding AllReduce; the optimizer's grad-norm AllReduce and ZeRO-1/2 parameter
            AllGather; train_step's model-parallel AllReduces and the loss AllReduce.

A column-parallel -> row-parallel block (attention: QKV -> proj; MLP: fc1 -> fc2):
  TP:  forward AllReduce after the row-parallel linear (`reduce_from_tensor_model_parallel_region`);
       backward AllReduce of the column-parallel input gradient.
  SP:  forward AllGather of the column-parallel input and ReduceScatter of the row-parallel output;
       backward AllGather of the output gradient, AllGather again of the column-parallel input (not
       kept from forward: `LinearWithGradAccumulationAndAsyncCommunication.backward` re-gathers it
       for the weight gradient) and ReduceScatter of the input gradient: 6 AG + 4 RS per layer.
MoE layers (Megatron-core's `MoEAlltoAllTokenDispatcher`): dispatch = AllToAll over the EP group,
then AllGather over the expert-TP group (`dispatch_postprocess`); combine = ReduceScatter over the
expert-TP group, then AllToAll; backward the conjugates. Shared experts are a TP-split MLP block.
Collectives inside a stream (TP/SP/EP) block it; p2p sends block the sender and the receiver
waits; DP buckets and ZeRO-3 prefetches are forked so they overlap compute.
"""
from __future__ import annotations

import dataclasses

from .. import progress
from ..config import Job, grad_elem_bytes
from ..tables import CollKind, CommOps, Dim, Phase
from .compute import ComputeModel, moe_rows
from .layout import Layout
from .params import embedding_parts, head_parts, layer_parts
from .pipeline_order import interleaved_1f1b
from .streams import OpList, Stream

AR, RS, AG, A2A, P2P, BC = (CollKind.ALLREDUCE, CollKind.REDUCESCATTER, CollKind.ALLGATHER,
                            CollKind.ALLTOALL, CollKind.SENDRECV, CollKind.BROADCAST)
FP32, INT64 = 4, 8


def batch_broadcasts(job: Job, first: bool, last: bool) -> list[tuple[int, int]]:
    """(bytes, element bytes) of each tensor TP rank 0 broadcasts to its TP group per micro-batch
    (`get_batch_on_this_tp_rank`, megatron/core/utils.py): with pp = 1 tokens, labels, loss_mask,
    position_ids; else the first stage tokens and position_ids, the last labels and loss_mask.
    b x s each (the full sequence: CP slices after the broadcast), int64 but loss_mask fp32.
    The s x s attention mask is not sent (flash attention: --no-create-attention-mask-in-dataloader)."""
    if job.parallelism.tp == 1 or not (first or last):
        return []
    n = job.parallelism.micro_batch * job.model.seq_len
    tokens, labels, loss_mask, positions = (n * INT64, INT64), (n * INT64, INT64), (n * FP32, FP32), \
        (n * INT64, INT64)
    if first and last:
        return [tokens, labels, loss_mask, positions]
    return [tokens, positions] if first else [labels, loss_mask]


def foldable(job: Job) -> bool:
    """Can the workload be built for DP replica 0 alone (CommOps.replicas)? Needs DP replicas
    whose ops are the same up to a rank offset and whose ranks fill whole nodes, so an offset
    keeps every rank's NVLink peers, rail and PXN proxy: dp > 1, no expert parallelism (EP groups
    cut across replicas) and tp x cp a multiple of the GPUs per node."""
    par = job.parallelism
    return par.dp > 1 and par.ep == 1 and (par.tp * par.cp) % job.cluster.gpus_per_node == 0


class IterationBuilder:
    def __init__(self, job: Job, fold: bool = False):
        self.job, m, par = job, job.model, job.parallelism
        self.m, self.par = m, par
        self.lay = Layout.of(par)
        self.cm = ComputeModel.of(job)
        self.ops = OpList()
        self.B = m.bytes_per_elem
        self.gB = grad_elem_bytes(m, par)
        self.tokens = par.micro_batch * m.seq_len // par.cp           # one CP rank's tokens
        self.act_bytes = self.tokens * m.hidden * self.B               # S_act on one CP rank
        split = par.sp or par.pp_scatter_gather
        self.pp_bytes = self.act_bytes // par.tp if split else self.act_bytes
        self.cp_step_bytes = self.tokens * m.kv_elems_per_token // par.tp * self.B
        rows = moe_rows(job) if m.experts else 0
        self.a2a_bytes = rows * m.hidden * self.B                      # one rank's dispatch buffer
        self.etp_bytes = par.etp * self.a2a_bytes                      # gathered over expert TP
        self.chunk_layers = m.layers // (par.pp * par.vpp)
        # Folded: replica 0's streams only; ops it shares with the other replicas (DP buckets,
        # the loss and grad-norm AllReduces) are still made whole, once.
        self.fold = fold and foldable(job)
        self.streams = {(c, d, p): Stream(self.ops, self.lay.tp_group(d, p, c), p)
                        for p in range(par.pp) for d in range(1 if self.fold else par.dp) for c in range(par.cp)}
        self.it = 0
        self._group_cache: dict = {}

    # ---- op helpers -------------------------------------------------------------------------
    def _new(self, kind, dim, phase, p, layer, mb, nbytes, group, bucket=-1, elem=None):
        return self.ops.new(kind, dim, phase, p, layer, mb, bucket, self.it, nbytes,
                            elem or self.B, group)

    def _shared(self, key, kind, dim, phase, p, layer, mb, nbytes, group, bucket=-1, elem=None):
        return self.ops.shared((self.it,) + key, kind, dim, phase, p, layer, mb, bucket, self.it,
                               nbytes, elem or self.B, group)

    def _tp(self, st, sk, kind, dim, phase, layer, mb, nbytes, elem=None):
        c, d, p = sk
        st.join(self.ops, [self._new(kind, dim, phase, p, layer, mb, nbytes,
                                     self.lay.tp_group(d, p, c), elem=elem)])

    def _groups(self, sk, group_of):
        """Distinct groups (by `group_of(rank)`) the stream's ranks belong to, in rank order.
        Cached per stream: the same groups recur for every MoE layer and micro-batch."""
        key = (sk, group_of.__name__)
        got = self._group_cache.get(key)
        if got is None:
            seen = {}
            for r in self.streams[sk].group:
                g = group_of(r)
                seen.setdefault(g[0], g)
            got = self._group_cache[key] = list(seen.values())
        return got

    # ---- layer blocks -----------------------------------------------------------------------
    def _block(self, st, sk, phase, layer, mb, fwd, body):
        """Column-parallel -> row-parallel block; `body` runs the compute between (module doc)."""
        par = self.par
        if par.sp:
            self._tp(st, sk, AG, Dim.SP, phase, layer, mb, self.act_bytes)    # input / grad out
        body()
        if par.sp:
            if not fwd:   # the column-parallel input, re-gathered for the weight gradient
                self._tp(st, sk, AG, Dim.SP, phase, layer, mb, self.act_bytes)
            self._tp(st, sk, RS, Dim.SP, phase, layer, mb, self.act_bytes)
        elif par.tp > 1:
            self._tp(st, sk, AR, Dim.TP, phase, layer, mb, self.act_bytes)

    def _cp_ring(self, st, sk, phase, layer, mb, scale, tag):
        """Ring attention: c−1 steps, each passing the K/V block (backward: K, V, dK, dV) on."""
        core = self.cm.attn_core_ns * scale
        cp = self.par.cp
        if cp == 1:
            st.compute(core)
            return
        c, d, p = sk
        nbytes = self.cp_step_bytes * scale
        lay = self.lay

        def send(src_c, k, t):
            dst_c = (src_c + 1) % cp
            return self._shared(("cp", tag, phase, layer, mb, k, src_c, t, d, p), P2P, Dim.CP, phase,
                                p, layer, mb, nbytes, [lay.rank(t, d, p, src_c), lay.rank(t, d, p, dst_c)])
        mine = []
        for k in range(cp - 1):
            sends = [send(c, k, t) for t in range(self.par.tp)]
            for op_id in sends:
                # the block forwarded at step k was received at step k−1: no compute in between
                self.ops.meet(op_id, st.last, st.acc_ns if k == 0 else 0)
            mine += sends
            st.compute(core // cp)
            for t in range(self.par.tp):
                st.wait(send((c - 1) % cp, k, t))
        st.compute(core - (cp - 1) * (core // cp))
        for op_id in mine:
            st.wait(op_id)

    def _attention(self, st, sk, phase, layer, mb, scale, tag, fwd):
        lin = self.cm.attn_linear_ns * scale

        def body():
            st.compute(lin // 2)
            self._cp_ring(st, sk, phase, layer, mb, scale, tag)
            st.compute(lin - lin // 2)
        self._block(st, sk, phase, layer, mb, fwd, body)

    def _mlp(self, st, sk, phase, layer, mb, scale, tag, fwd):
        if not self.m.is_moe_layer(layer):
            self._block(st, sk, phase, layer, mb, fwd, lambda: st.compute(self.cm.mlp_ns * scale))
            return
        shared = lambda: self._shared_experts(st, sk, phase, layer, mb, scale, fwd)
        if fwd:
            shared()
        self._routed(st, sk, phase, layer, mb, scale, tag, fwd)
        if not fwd:
            shared()

    def _shared_experts(self, st, sk, phase, layer, mb, scale, fwd):
        if self.m.shared_experts:   # SharedExpertMLP: TP-split like a dense MLP
            self._block(st, sk, phase, layer, mb, fwd, lambda: st.compute(self.cm.shared_ns * scale))

    def _routed(self, st, sk, phase, layer, mb, scale, tag, fwd):
        """Routed experts through the AllToAll dispatcher: forward A2A -> AG(etp) -> experts ->
        RS(etp) -> A2A; backward the conjugates in reverse order (A2A, AG, experts, RS, A2A)."""
        par = self.par
        steps = [("a2a", "dispatch"), ("ag", "dispatch"), ("rs", "combine"), ("a2a", "combine")]
        if not fwd:   # combine's backward first: A2A, then RS's conjugate AG; then dispatch's
            steps = [("a2a", "combine"), ("ag", "combine"), ("rs", "dispatch"), ("a2a", "dispatch")]
        for i, (what, which) in enumerate(steps):
            if i == 2:
                st.compute(self.cm.moe_ns * scale)
            if what == "a2a" and par.ep > 1:
                ids = [self._shared(("ep", tag, phase, layer, mb, which, g[0]), A2A, Dim.EP, phase,
                                    g[0] // self.lay.stage_ranks, layer, mb, self.a2a_bytes, g)
                       for g in self._groups(sk, self.lay.ep_group)]
                st.join(self.ops, ids)
            elif what != "a2a" and par.etp > 1:
                ids = [self._shared(("etp", tag, phase, layer, mb, which, g[0]), AG if what == "ag" else RS,
                                    Dim.EP, phase, g[0] // self.lay.stage_ranks, layer, mb,
                                    self.etp_bytes, g)
                       for g in self._groups(sk, self.lay.etp_group)]
                st.join(self.ops, ids)

    # ---- embedding and LM head --------------------------------------------------------------
    def _embedding(self, st, sk, mb, fwd):
        """Vocab-parallel embedding (`VocabParallelEmbedding`, `LanguageModelEmbedding`): forward
        AllReduce of the looked-up rows; under SP a ReduceScatter instead when there is no learned
        position table (RoPE), else AllReduce then a local scatter. Backward: SP AllGathers the
        gradient (the scatter's / ReduceScatter's conjugate); plain TP has nothing to do."""
        par = self.par
        if fwd:
            if par.sp and not self.m.position_embeddings:
                self._tp(st, sk, RS, Dim.SP, Phase.FWD, -1, mb, self.act_bytes)
            elif par.tp > 1:
                self._tp(st, sk, AR, Dim.SP if par.sp else Dim.TP, Phase.FWD, -1, mb, self.act_bytes)
        elif par.sp:
            self._tp(st, sk, AG, Dim.SP, Phase.BWD, -1, mb, self.act_bytes)

    def _head(self, st, sk, mb, fwd):
        """LM head = column-parallel linear: the SP block's first half (AG forward; AG re-gather +
        RS backward) or TP's backward AllReduce; forward the vocab-parallel cross-entropy's 3 fp32
        AllReduces (max, target logit, sum of exp: `_VocabParallelCrossEntropy.forward`)."""
        par = self.par
        if fwd:
            if par.sp:
                self._tp(st, sk, AG, Dim.SP, Phase.FWD, -1, mb, self.act_bytes)
            st.compute(self.cm.logits_ns)
            if par.tp > 1:
                for _ in range(3):
                    self._tp(st, sk, AR, Dim.TP, Phase.FWD, -1, mb, self.tokens * FP32, elem=FP32)
            return
        st.compute(2 * self.cm.logits_ns)
        if par.sp:
            self._tp(st, sk, AG, Dim.SP, Phase.BWD, -1, mb, self.act_bytes)
            self._tp(st, sk, RS, Dim.SP, Phase.BWD, -1, mb, self.act_bytes)
        elif par.tp > 1:
            self._tp(st, sk, AR, Dim.TP, Phase.BWD, -1, mb, self.act_bytes)

    def _get_batch(self, st, sk, mb, first, last):
        c, d, p = sk
        group = self.lay.tp_group(d, p, c)      # root: TP rank 0, the group's first member
        for nbytes, elem in batch_broadcasts(self.job, first, last):
            st.join(self.ops, [self._new(BC, Dim.TP, Phase.FWD, p, -1, mb, nbytes, group, elem=elem)])

    # ---- parameters and gradients -----------------------------------------------------------
    def _chunk_params(self, p, chunk):
        """(layer id, dense elems per rank, expert elems per rank) held by one chunk, forward order.

        Layer −1 is the embedding (first chunk of stage 0), −2 the final norm / LM head."""
        par, m = self.par, self.m
        out = []
        first, last = p == 0 and chunk == 0, p == par.pp - 1 and chunk == par.vpp - 1
        if first:
            out.append((-1, *embedding_parts(m, par.tp).per_rank(par.tp)))
        for layer in self._layers(p, chunk):
            out.append((layer, *layer_parts(m, layer).per_rank(par.tp, par.ep, par.etp)))
        if last:
            out.append((-2, *head_parts(m, par.tp, par.pp).per_rank(par.tp)))
        return out

    def _replicated(self, p):
        """TP-replicated elements of stage p whose gradients SP leaves partial per TP rank: every
        replicated parameter but the position table (added before the scatter, full sequence)."""
        par, m = self.par, self.m
        n = sum(layer_parts(m, layer).replicated for chunk in range(par.vpp)
                for layer in self._layers(p, chunk))
        return n + (head_parts(m, par.tp, par.pp).replicated if p == par.pp - 1 else 0)

    def _layers(self, p, chunk):
        first = (chunk * self.par.pp + p) * self.chunk_layers
        return range(first, first + self.chunk_layers)

    def _grad_ready(self, st, sk, dense, expert, acc):
        """Gradients of one layer are final: fill the DP buckets, release the full ones."""
        acc["dense"] += dense
        acc["expert"] += expert
        if self.par.dp_overlap:
            self._release(st, sk, acc, final=False)

    def _release(self, st, sk, acc, final):
        c, d, p = sk
        par = self.par
        kind = RS if par.zero in (1, 2) else AR
        if acc["dense"] and (final or acc["dense"] * self.gB >= par.dp_bucket_bytes) \
                and par.dp * par.cp > 1:
            k = acc["dense_n"]
            for t in range(par.tp):
                st.fork(self.ops, self._shared(("dp", k, t, p), kind, Dim.DP, Phase.BWD, p, -1, -1,
                                               acc["dense"] * self.gB, self.lay.dp_group(t, p),
                                               bucket=k, elem=self.gB))
            acc["buckets"].append(("dp", k, acc["dense"]))
            acc["dense"], acc["dense_n"] = 0, k + 1
        # routed experts live in their own buffers, reduced over the expert-DP group
        # (`_ParamAndGradBuffer` of params with allreduce=False)
        if acc["expert"] and (final or acc["expert"] * self.gB >= par.dp_bucket_bytes) \
                and self.lay.edp > 1:
            k = acc["expert_n"]
            for g in self._groups(sk, self.lay.edp_group):
                st.fork(self.ops, self._shared(("edp", k, g[0]), kind, Dim.EDP, Phase.BWD, p, -1, -1,
                                               acc["expert"] * self.gB, g, bucket=k, elem=self.gB))
            acc["buckets"].append(("edp", k, acc["expert"]))
            acc["expert"], acc["expert_n"] = 0, k + 1

    def _zero3(self, st, sk, phase, mb, params, i):
        """ZeRO-3: wait for this layer's parameters, prefetch the next layer's."""
        c, d, p = sk

        def gather(j):
            layer, dense, expert = params[j]
            ids = []
            if dense and self.par.dp * self.par.cp > 1:
                ids += [self._shared(("z3", phase, layer, mb, t, p), AG, Dim.DP, phase, p, layer, mb,
                                     dense * self.B, self.lay.dp_group(t, p)) for t in range(self.par.tp)]
            if expert and self.lay.edp > 1:
                ids += [self._shared(("z3e", phase, layer, mb, g[0]), AG, Dim.EDP, phase, p, layer, mb,
                                     expert * self.B, g) for g in self._groups(sk, self.lay.edp_group)]
            return ids
        if i == 0:
            for op_id in gather(0):
                st.fork(self.ops, op_id)
        if i + 1 < len(params):
            for op_id in gather(i + 1):
                st.fork(self.ops, op_id)
        for op_id in gather(i):
            st.wait(op_id)

    def _zero3_reduce(self, st, sk, mb, layer, dense, expert):
        c, d, p = sk
        if dense and self.par.dp * self.par.cp > 1:
            for t in range(self.par.tp):
                st.fork(self.ops, self._shared(("z3rs", layer, mb, t, p), RS, Dim.DP, Phase.BWD, p, layer,
                                               mb, dense * self.gB, self.lay.dp_group(t, p), elem=self.gB))
        if expert and self.lay.edp > 1:
            for g in self._groups(sk, self.lay.edp_group):
                st.fork(self.ops, self._shared(("z3rse", layer, mb, g[0]), RS, Dim.EDP, Phase.BWD, p,
                                               layer, mb, expert * self.gB, g, elem=self.gB))

    # ---- pipeline ---------------------------------------------------------------------------
    def _pp_op(self, direction, src_stage, src_chunk, mb, t, c, d):
        par = self.par
        if direction == "F":
            dst = (src_stage + 1, src_chunk) if src_stage < par.pp - 1 else (0, src_chunk + 1)
        else:
            dst = (src_stage - 1, src_chunk) if src_stage > 0 else (par.pp - 1, src_chunk - 1)
        phase = Phase.FWD if direction == "F" else Phase.BWD
        return self._shared(("pp", direction, src_stage, src_chunk, mb, t, c, d), P2P, Dim.PP, phase,
                            src_stage, -1, mb, self.pp_bytes,
                            [self.lay.rank(t, d, src_stage, c), self.lay.rank(t, d, dst[0], c)])

    def _recv(self, st, sk, direction, src, mb):
        c, d, p = sk
        for t in range(self.par.tp):
            st.wait(self._pp_op(direction, src[0], src[1], mb, t, c, d))
        if self.par.pp_scatter_gather and not self.par.sp:   # re-assemble the 1/t slices over TP
            self._tp(st, sk, AG, Dim.PP, Phase.FWD if direction == "F" else Phase.BWD, -1, mb,
                     self.act_bytes)

    def _send(self, st, sk, direction, chunk, mb):
        c, d, p = sk
        st.join(self.ops, [self._pp_op(direction, p, chunk, mb, t, c, d) for t in range(self.par.tp)])

    def _forward(self, st, sk, chunk, mb, acc):
        c, d, p = sk
        par = self.par
        first, last = p == 0 and chunk == 0, p == par.pp - 1 and chunk == par.vpp - 1
        if not first:   # recv_forward, then forward_step (which calls get_batch)
            self._recv(st, sk, "F", (p - 1, chunk) if p > 0 else (par.pp - 1, chunk - 1), mb)
        self._get_batch(st, sk, mb, first, last)
        params = self._chunk_params(p, chunk)
        zi = 0
        if first:
            if par.zero == 3:
                self._zero3(st, sk, Phase.FWD, mb, params, zi)
            zi += 1
            self._embedding(st, sk, mb, fwd=True)
        for layer in self._layers(p, chunk):
            if par.zero == 3:
                self._zero3(st, sk, Phase.FWD, mb, params, zi)
            zi += 1
            self._attention(st, sk, Phase.FWD, layer, mb, 1, "f", fwd=True)
            self._mlp(st, sk, Phase.FWD, layer, mb, 1, "f", fwd=True)
        if last:
            if par.zero == 3:
                self._zero3(st, sk, Phase.FWD, mb, params, zi)
            self._head(st, sk, mb, fwd=True)
        else:
            self._send(st, sk, "F", chunk, mb)

    def _backward(self, st, sk, chunk, mb, acc):
        c, d, p = sk
        par = self.par
        first, last = p == 0 and chunk == 0, p == par.pp - 1 and chunk == par.vpp - 1
        grads_final = mb == par.microbatches - 1
        params = self._chunk_params(p, chunk)
        rev = params[::-1]
        zi = 0
        if not last:
            self._recv(st, sk, "B", (p + 1, chunk) if p < par.pp - 1 else (0, chunk + 1), mb)
        else:
            if par.zero == 3:
                self._zero3(st, sk, Phase.BWD, mb, rev, zi)
            self._head(st, sk, mb, fwd=False)
            self._layer_grads(st, sk, mb, rev[zi], grads_final, acc)
            zi += 1
        for layer in reversed(self._layers(p, chunk)):
            if par.recompute == "full":
                self._attention(st, sk, Phase.BWD, layer, mb, 1, "r", fwd=True)
                self._mlp(st, sk, Phase.BWD, layer, mb, 1, "r", fwd=True)
            elif par.recompute == "selective":
                st.compute(self.cm.attn_core_ns)
            if par.zero == 3:
                self._zero3(st, sk, Phase.BWD, mb, rev, zi)
            self._mlp(st, sk, Phase.BWD, layer, mb, 2, "b", fwd=False)
            self._attention(st, sk, Phase.BWD, layer, mb, 2, "b", fwd=False)
            self._layer_grads(st, sk, mb, rev[zi], grads_final, acc)
            zi += 1
        if first:
            self._embedding(st, sk, mb, fwd=False)
            if par.zero == 3:
                self._zero3(st, sk, Phase.BWD, mb, rev, zi)
            self._layer_grads(st, sk, mb, rev[zi], grads_final, acc)
        else:
            self._send(st, sk, "B", chunk, mb)

    def _layer_grads(self, st, sk, mb, param, grads_final, acc):
        layer, dense, expert = param
        if self.par.zero == 3:
            self._zero3_reduce(st, sk, mb, layer, dense, expert)
        elif grads_final:
            self._grad_ready(st, sk, dense, expert, acc)

    # ---- the iteration ----------------------------------------------------------------------
    def _mp_group(self, c, d):
        """Megatron's model-parallel group of (c, d): every TP rank of every stage."""
        return sorted(self.lay.rank(t, d, q, c) for q in range(self.par.pp) for t in range(self.par.tp))

    def _end_of_iteration(self, st, sk, acc):
        c, d, p = sk
        par, m = self.par, self.m
        last_stage = p == par.pp - 1
        # finalize_model_grads: DP grad sync, then SP's TP AllReduce of the replicated gradients
        # (`_allreduce_non_tensor_model_parallel_grads`, one coalesced buffer of main_grads), then
        # the word-embedding AllReduce between the first and last stage
        self._release(st, sk, acc, final=True)
        st.wait_forked()
        if par.sp:
            self._tp(st, sk, AR, Dim.SP, Phase.OPT, -1, -1, self._replicated(p) * self.gB, elem=self.gB)
        if m.tied_embeddings and par.pp > 1 and p in (0, par.pp - 1):
            elems = m.padded_vocab(par.tp) * m.hidden // par.tp
            st.join(self.ops, [self._shared(("emb", t, c, d), AR, Dim.EMB, Phase.OPT, -1, -1, -1,
                                            elems * self.gB,
                                            [self.lay.rank(t, d, 0, c), self.lay.rank(t, d, par.pp - 1, c)],
                                            elem=self.gB) for t in range(par.tp)])
        # optimizer.step: [fp16: found-inf] grad-norm AllReduce of one fp32 over the grad-stats
        # group (`get_grad_norm_fp32`): every rank with the distributed optimizer (ZeRO >= 1,
        # distrib_optimizer.get_grad_stats_parallel_group), else the model-parallel group
        world = list(range(self.lay.stage_ranks * par.pp))
        mp = self._mp_group(c, d)
        stats, stats_key = (world, ("world",)) if par.zero else (mp, ("mp", c, d))
        for what in (("found_inf",) if m.dtype == "fp16" else ()) + ("grad_norm",):
            if len(stats) > 1:
                st.join(self.ops, [self._shared((what,) + stats_key, AR, Dim.DP if par.zero else Dim.TP,
                                                Phase.OPT, -1, -1, -1, FP32, stats, elem=FP32)])
        if par.zero in (1, 2):   # distributed optimizer: updated parameter shards gathered back
            for kind_key, k, elems in acc["buckets"]:
                if kind_key == "dp":
                    ids = [self._shared(("dpag", k, t, p), AG, Dim.DP, Phase.OPT, p, -1, -1, elems * self.B,
                                        self.lay.dp_group(t, p), bucket=k) for t in range(par.tp)]
                else:
                    ids = [self._shared(("edpag", k, g[0]), AG, Dim.EDP, Phase.OPT, p, -1, -1,
                                        elems * self.B, g, bucket=k)
                           for g in self._groups(sk, self.lay.edp_group)]
                st.join(self.ops, ids)
        # train_step: update_successful (logical and) and grad_norm (max) over the model-parallel
        # group, then the last stage's loss AllReduce [loss sum, tokens] over DP x CP
        if len(mp) > 1:
            for what in ("update_ok", "grad_norm_max"):
                st.join(self.ops, [self._shared((what, "mp", c, d), AR, Dim.TP, Phase.OPT, -1, -1, -1,
                                                FP32, mp, elem=FP32)])
        if last_stage and par.dp * par.cp > 1:
            st.join(self.ops, [self._shared(("loss", t), AR, Dim.DP, Phase.OPT, p, -1, -1, 2 * FP32,
                                            self.lay.dp_group(t, p), elem=FP32) for t in range(par.tp)])
        st.mark()

    def build(self) -> CommOps:
        par = self.par
        n_streams = len(self.streams) * self.job.iterations
        for it in range(self.job.iterations):
            self.it = it
            for k, (sk, st) in enumerate(self.streams.items()):
                progress.report(it * len(self.streams) + k, n_streams)
                st.iteration = it
                acc = {"dense": 0, "expert": 0, "dense_n": 0, "expert_n": 0, "buckets": []}
                for direction, chunk, mb in interleaved_1f1b(par.pp, sk[2], par.microbatches, par.vpp):
                    if direction == "F":
                        self._forward(st, sk, chunk, mb, acc)
                    else:
                        self._backward(st, sk, chunk, mb, acc)
                self._end_of_iteration(st, sk, acc)
        ops = self.ops.table()
        if self.fold:
            ops = dataclasses.replace(ops, replicas=par.dp, replica_stride=par.tp * par.cp)
        return ops


def build_iteration(job: Job, fold: bool = False) -> CommOps:
    return IterationBuilder(job, fold).build()
