"""The collectives of one micro-batch's compute blocks, as Megatron-LM issues them: TP / SP
column -> row-parallel blocks, ring attention (CP), MoE dispatch and combine (EP, expert TP), the
vocab-parallel embedding and LM head, and the batch broadcast (module doc of iteration.py).
BlockOps is mixed into IterationBuilder, whose op helpers (_new, _shared, _tp, _groups) it uses."""
from __future__ import annotations

from ..config import Job
from ..tables import CollKind, Dim, Phase

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


# the routed experts' collectives in issue order: forward dispatch then combine; backward
# combine's conjugates first (A2A, then RS's conjugate AG), then dispatch's
_FWD_STEPS = (("a2a", "dispatch"), ("ag", "dispatch"), ("rs", "combine"), ("a2a", "combine"))
_BWD_STEPS = (("a2a", "combine"), ("ag", "combine"), ("rs", "dispatch"), ("a2a", "dispatch"))


class BlockOps:
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
        # the stream's EP and expert-TP groups: the same for every layer and micro-batch
        ep_groups = self._groups(sk, self.lay.ep_group) if par.ep > 1 else ()
        etp_groups = self._groups(sk, self.lay.etp_group) if par.etp > 1 else ()
        stage_ranks = self.lay.stage_ranks
        for i, (what, which) in enumerate(_FWD_STEPS if fwd else _BWD_STEPS):
            if i == 2:
                st.compute(self.cm.moe_ns * scale)
            if what == "a2a":
                if ep_groups:
                    st.join(self.ops, [self._shared(("ep", tag, phase, layer, mb, which, g[0]), A2A, Dim.EP,
                                                    phase, g[0] // stage_ranks, layer, mb, self.a2a_bytes, g)
                                       for g in ep_groups])
            elif etp_groups:
                st.join(self.ops, [self._shared(("etp", tag, phase, layer, mb, which, g[0]),
                                                AG if what == "ag" else RS, Dim.EP, phase, g[0] // stage_ranks,
                                                layer, mb, self.etp_bytes, g)
                                   for g in etp_groups])

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
