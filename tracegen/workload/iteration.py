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

This module walks the streams (the pipeline schedule, p2p sends and receives); blocks.py issues
the blocks' collectives, grad_sync.py the parameters' and gradients'.
"""
from __future__ import annotations

import dataclasses

from .. import progress
from ..config import Job, grad_elem_bytes
from ..tables import CommOps, Dim, Phase
from .blocks import AG, P2P, BlockOps
from .compute import ComputeModel, moe_rows
from .grad_sync import GradSync
from .layout import Layout
from .pipeline_order import interleaved_1f1b
from .streams import OpList, Stream


def foldable(job: Job) -> bool:
    """Can the workload be built for DP replica 0 alone (CommOps.replicas)? Needs DP replicas
    whose ops are the same up to a rank offset and whose ranks fill whole nodes, so an offset
    keeps every rank's NVLink peers, rail and PXN proxy: dp > 1, no expert parallelism (EP groups
    cut across replicas) and tp x cp a multiple of the GPUs per node."""
    par = job.parallelism
    return par.dp > 1 and par.ep == 1 and (par.tp * par.cp) % job.cluster.gpus_per_node == 0


class IterationBuilder(BlockOps, GradSync):
    """One iteration's CommOps: the streams walked in 1F1B order (here), the blocks' collectives
    (blocks.py) and the gradients' (grad_sync.py)."""

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
        key = (self.it,) + key
        op_id = self.ops.keys.get(key)          # OpList.shared, inlined: millions of calls at 2k GPUs
        if op_id is None:
            op_id = self.ops.keys[key] = self.ops.new(kind, dim, phase, p, layer, mb, bucket, self.it,
                                                      nbytes, elem or self.B, group)
        return op_id

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

    # ---- the iteration ----------------------------------------------------------------------

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
