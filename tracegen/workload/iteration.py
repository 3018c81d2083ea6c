"""One training iteration of a transformer under DP x TP x PP x CP x EP (+ SP, ZeRO, recompute).

Every TP group (one (cp, dp, pp) coordinate) is a stream walked in Megatron's (interleaved) 1F1B
order. Per micro-batch and model chunk:

  forward:  [recv act] [embedding] {attention: SP AG | CP ring | SP RS or TP AR;
                                    MLP: SP AG | TP AR / SP RS   or  MoE: EP AllToAll x2} x layers
            [LM head: SP AG, cross-entropy AllReduces] [send act]
  backward: the same blocks in reverse (their conjugate collectives), with full recompute first
            re-running the layer's forward collectives; gradients released into DP buckets
            (AllReduce, or ReduceScatter under ZeRO-1/2) once the last micro-batch is done.
  ZeRO-3:   every layer's parameters AllGathered (prefetched one layer ahead) in forward and again
            in backward, its gradients ReduceScattered after its backward, each micro-batch.
  end:      wait for the gradient ops; ZeRO-1/2 parameter AllGather; tied-embedding AllReduce
            between first and last stage; an end-of-iteration marker.
Collectives inside a stream (TP/SP) block it; p2p sends block the sender and the receiver waits;
DP buckets and ZeRO-3 prefetches are forked so they overlap compute.
"""
from __future__ import annotations

from ..config import DTYPE_BYTES, Job
from ..tables import CollKind, CommOps, Dim, Phase
from .compute import ComputeModel, moe_rows
from .layout import Layout
from .params import embedding_param_count, head_param_count, layer_params
from .pipeline_order import interleaved_1f1b
from .streams import OpList, Stream

AR, RS, AG, A2A, P2P = (CollKind.ALLREDUCE, CollKind.REDUCESCATTER, CollKind.ALLGATHER,
                        CollKind.ALLTOALL, CollKind.SENDRECV)


class IterationBuilder:
    def __init__(self, job: Job):
        self.job, m, par = job, job.model, job.parallelism
        self.m, self.par = m, par
        self.lay = Layout.of(par)
        self.cm = ComputeModel.of(job)
        self.ops = OpList()
        self.B = m.bytes_per_elem
        self.gB = DTYPE_BYTES[par.grad_dtype] if par.grad_dtype else self.B
        self.tokens = par.micro_batch * m.seq_len // par.cp           # one CP rank's tokens
        self.act_bytes = self.tokens * m.hidden * self.B               # S_act on one CP rank
        split = par.sp or par.pp_scatter_gather
        self.pp_bytes = self.act_bytes // par.tp if split else self.act_bytes
        self.cp_step_bytes = self.tokens * m.kv_elems_per_token // par.tp * self.B
        self.a2a_bytes = moe_rows(job) * m.hidden * self.B if m.experts else 0
        self.chunk_layers = m.layers // (par.pp * par.vpp)
        self.experts_split = m.experts > 0 and par.ep > 1   # experts not TP-split, spread over EP
        self.streams = {(c, d, p): Stream(self.ops, self.lay.tp_group(d, p, c), p)
                        for p in range(par.pp) for d in range(par.dp) for c in range(par.cp)}
        self.it = 0

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

    def _block_start(self, st, sk, phase, layer, mb):
        if self.par.sp:   # forward AllGather / backward its conjugate, both AllGather in ring bytes
            self._tp(st, sk, AG, Dim.SP, phase, layer, mb, self.act_bytes)

    def _block_end(self, st, sk, phase, layer, mb):
        if self.par.sp:
            self._tp(st, sk, RS, Dim.SP, phase, layer, mb, self.act_bytes)
        elif self.par.tp > 1:
            self._tp(st, sk, AR, Dim.TP, phase, layer, mb, self.act_bytes)

    # ---- layer blocks -----------------------------------------------------------------------
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

    def _attention(self, st, sk, phase, layer, mb, scale, tag):
        self._block_start(st, sk, phase, layer, mb)
        st.compute(self.cm.attn_linear_ns * scale // 2)
        self._cp_ring(st, sk, phase, layer, mb, scale, tag)
        st.compute(self.cm.attn_linear_ns * scale - self.cm.attn_linear_ns * scale // 2)
        self._block_end(st, sk, phase, layer, mb)

    def _mlp(self, st, sk, phase, layer, mb, scale, tag):
        if self.m.is_moe_layer(layer) and self.experts_split:
            c, d, p = sk
            block = d - d % self.par.ep
            for which in ("dispatch", "combine"):
                ids = [self._shared(("ep", tag, phase, layer, mb, which, t, c, block, p), A2A, Dim.EP,
                                    phase, p, layer, mb, self.a2a_bytes, self.lay.ep_group(t, d, p, c))
                       for t in range(self.par.tp)]
                st.join(self.ops, ids)
                if which == "dispatch":
                    st.compute(self.cm.moe_ns * scale)
            return
        self._block_start(st, sk, phase, layer, mb)
        st.compute((self.cm.moe_ns if self.m.is_moe_layer(layer) else self.cm.mlp_ns) * scale)
        self._block_end(st, sk, phase, layer, mb)

    # ---- parameters and gradients -----------------------------------------------------------
    def _chunk_params(self, p, chunk):
        """(layer id, dense elems per rank, expert elems per rank) held by one chunk, forward order.

        Layer −1 is the embedding (first chunk of stage 0), −2 the final norm / LM head."""
        par, m = self.par, self.m
        out = []
        first, last = p == 0 and chunk == 0, p == par.pp - 1 and chunk == par.vpp - 1
        if first:
            out.append((-1, embedding_param_count(m) // par.tp, 0))
        for layer in self._layers(p, chunk):
            dense, expert = layer_params(m, layer)
            if self.experts_split:
                out.append((layer, dense // par.tp, expert // par.ep))
            else:
                out.append((layer, (dense + expert) // par.tp, 0))
        if last:
            out.append((-2, head_param_count(m, par.pp) // par.tp, 0))
        return out

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
        edp = self.lay.edp_group(d, p) if self.experts_split else []
        if acc["expert"] and (final or acc["expert"] * self.gB >= par.dp_bucket_bytes) and len(edp) > 1:
            k = acc["expert_n"]
            st.fork(self.ops, self._shared(("edp", k, d % par.ep, p), kind, Dim.EDP, Phase.BWD, p, -1, -1,
                                           acc["expert"] * self.gB, edp, bucket=k, elem=self.gB))
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
            if expert and len(self.lay.edp_group(d, p)) > 1:
                ids.append(self._shared(("z3e", phase, layer, mb, d % self.par.ep, p), AG, Dim.EDP, phase,
                                        p, layer, mb, expert * self.B, self.lay.edp_group(d, p)))
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
        if expert and len(self.lay.edp_group(d, p)) > 1:
            st.fork(self.ops, self._shared(("z3rse", layer, mb, d % self.par.ep, p), RS, Dim.EDP, Phase.BWD,
                                           p, layer, mb, expert * self.gB, self.lay.edp_group(d, p),
                                           elem=self.gB))

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
        if not first:
            self._recv(st, sk, "F", (p - 1, chunk) if p > 0 else (par.pp - 1, chunk - 1), mb)
        params = self._chunk_params(p, chunk)
        zi = 0
        if first:
            if par.zero == 3:
                self._zero3(st, sk, Phase.FWD, mb, params, zi)
            zi += 1
            # vocab-parallel embedding: each TP rank looks up its vocabulary slice, then reduce
            if par.sp:
                self._tp(st, sk, RS, Dim.SP, Phase.FWD, -1, mb, self.act_bytes)
            elif par.tp > 1:
                self._tp(st, sk, AR, Dim.TP, Phase.FWD, -1, mb, self.act_bytes)
        for layer in self._layers(p, chunk):
            if par.zero == 3:
                self._zero3(st, sk, Phase.FWD, mb, params, zi)
            zi += 1
            self._attention(st, sk, Phase.FWD, layer, mb, 1, "f")
            self._mlp(st, sk, Phase.FWD, layer, mb, 1, "f")
        if last:
            if par.zero == 3:
                self._zero3(st, sk, Phase.FWD, mb, params, zi)
            if par.sp:
                self._tp(st, sk, AG, Dim.SP, Phase.FWD, -1, mb, self.act_bytes)
            st.compute(self.cm.logits_ns)
            if par.tp > 1:   # vocab-parallel cross-entropy: max, target logit, sum of exp (fp32)
                for _ in range(3):
                    self._tp(st, sk, AR, Dim.TP, Phase.FWD, -1, mb, self.tokens * 4, elem=4)
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
            st.compute(2 * self.cm.logits_ns)
            if par.sp:
                self._tp(st, sk, RS, Dim.SP, Phase.BWD, -1, mb, self.act_bytes)
            elif par.tp > 1:
                self._tp(st, sk, AR, Dim.TP, Phase.BWD, -1, mb, self.act_bytes)
            self._layer_grads(st, sk, mb, rev[zi], grads_final, acc)
            zi += 1
        for layer in reversed(self._layers(p, chunk)):
            if par.recompute == "full":
                self._attention(st, sk, Phase.BWD, layer, mb, 1, "r")
                self._mlp(st, sk, Phase.BWD, layer, mb, 1, "r")
            elif par.recompute == "selective":
                st.compute(self.cm.attn_core_ns)
            if par.zero == 3:
                self._zero3(st, sk, Phase.BWD, mb, rev, zi)
            self._mlp(st, sk, Phase.BWD, layer, mb, 2, "b")
            self._attention(st, sk, Phase.BWD, layer, mb, 2, "b")
            self._layer_grads(st, sk, mb, rev[zi], grads_final, acc)
            zi += 1
        if first:
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
    def _end_of_iteration(self, st, sk, acc):
        c, d, p = sk
        par, m = self.par, self.m
        self._release(st, sk, acc, final=True)
        st.wait_forked()
        if par.zero in (1, 2):   # distributed optimizer: updated parameter shards gathered back
            for kind_key, k, elems in acc["buckets"]:
                if kind_key == "dp":
                    ids = [self._shared(("dpag", k, t, p), AG, Dim.DP, Phase.OPT, p, -1, -1, elems * self.B,
                                        self.lay.dp_group(t, p), bucket=k) for t in range(par.tp)]
                else:
                    ids = [self._shared(("edpag", k, d % par.ep, p), AG, Dim.EDP, Phase.OPT, p, -1, -1,
                                        elems * self.B, self.lay.edp_group(d, p), bucket=k)]
                st.join(self.ops, ids)
        if m.tied_embeddings and par.pp > 1 and p in (0, par.pp - 1):
            elems = m.vocab * m.hidden // par.tp
            st.join(self.ops, [self._shared(("emb", t, c, d), AR, Dim.EMB, Phase.OPT, -1, -1, -1,
                                            elems * self.gB,
                                            [self.lay.rank(t, d, 0, c), self.lay.rank(t, d, par.pp - 1, c)],
                                            elem=self.gB) for t in range(par.tp)])
        st.mark()

    def build(self) -> CommOps:
        par = self.par
        for it in range(self.job.iterations):
            self.it = it
            for sk, st in self.streams.items():
                st.iteration = it
                acc = {"dense": 0, "expert": 0, "dense_n": 0, "expert_n": 0, "buckets": []}
                for direction, chunk, mb in interleaved_1f1b(par.pp, sk[2], par.microbatches, par.vpp):
                    if direction == "F":
                        self._forward(st, sk, chunk, mb, acc)
                    else:
                        self._backward(st, sk, chunk, mb, acc)
                self._end_of_iteration(st, sk, acc)
        return self.ops.table()


def build_iteration(job: Job) -> CommOps:
    return IterationBuilder(job).build()
