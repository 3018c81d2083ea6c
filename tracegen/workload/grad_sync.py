"""Parameters and gradients over an iteration: what each model chunk holds, DP and expert-DP
gradient buckets (AllReduce, or ReduceScatter under ZeRO-1/2), ZeRO-3's gathers and reductions,
and the end of the iteration (finalize_model_grads, the optimizer's and train_step's collectives).
GradSync is mixed into IterationBuilder, whose op helpers (_shared, _tp, _groups) it uses."""
from __future__ import annotations

from ..tables import Dim, Phase
from .blocks import AG, AR, FP32, RS
from .params import embedding_parts, head_parts, layer_parts


class GradSync:
    # ---- parameters and gradients -----------------------------------------------------------
    def _chunk_params(self, p, chunk):
        """(layer id, dense elems per rank, expert elems per rank) held by one chunk, forward order.

        Layer −1 is the embedding (first chunk of stage 0), −2 the final norm / LM head. The same
        for every stream and micro-batch of a stage: made once per (stage, chunk)."""
        cache = self.__dict__.setdefault("_params_cache", {})
        hit = cache.get((p, chunk))
        if hit is None:
            hit = cache[p, chunk] = self._chunk_params_of(p, chunk)
        return hit

    def _chunk_params_of(self, p, chunk):
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

    def _layer_grads(self, st, sk, mb, param, grads_final, acc):
        layer, dense, expert = param
        if self.par.zero == 3:
            self._zero3_reduce(st, sk, mb, layer, dense, expert)
        elif grads_final:
            self._grad_ready(st, sk, dense, expert, acc)

    # ---- the iteration's end ----------------------------------------------------------------
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
