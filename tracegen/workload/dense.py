"""One training iteration of a dense transformer under DP x TP x PP, as a table of CommOps.

Each (data-parallel replica, pipeline stage) runs one *stream*: the ordered work of its TP group,
walked in Megatron's 1F1B order. Compute between two collectives is folded into the next op's
`gap_ns`; an op depends on the stream's previous op (and on the PP transfer it waits for), so the
schedule can replay the iteration with real data dependencies:

  forward of micro-batch j on stage p:  [recv act p-1->p] {attn, TP AllReduce, mlp, TP AllReduce} x layers [send act p->p+1]
  backward:                             [recv grad p+1->p] {mlp', TP AllReduce, attn', TP AllReduce} x layers [send grad p->p-1]
  DP gradient buckets (AllReduce over the replicas of one (tp index, stage)) are released during the
  last micro-batch's backward as soon as the layers they hold are done, overlapping later compute.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..config import DTYPE_BYTES, Job
from ..tables import COMMOP_DTYPE, CollKind, CommOps, Dim, Phase, Ragged
from . import params
from .compute import ComputeModel
from .layout import Layout


@dataclass
class _OpList:
    """Column lists for the CommOp table, appended in creation order (op_id = index)."""
    cols: list = field(default_factory=list)
    groups: list = field(default_factory=list)
    deps: list = field(default_factory=list)

    def new(self, kind, dim, phase, stage, layer, mb, bucket, it, nbytes, elem_bytes, group) -> int:
        op_id = len(self.cols)
        self.cols.append([op_id, kind, dim, phase, stage, layer, mb, bucket, it, nbytes, elem_bytes, 0])
        self.groups.append(list(group))
        self.deps.append([])
        return op_id

    def bind(self, op_id: int, deps: list[int], gap_ns: int) -> None:
        self.deps[op_id] = sorted(set(deps))
        self.cols[op_id][-1] = int(gap_ns)

    def table(self) -> CommOps:
        rows = np.array([tuple(c) for c in self.cols], dtype=COMMOP_DTYPE)
        return CommOps(rows, Ragged.from_lists(self.groups), Ragged.from_lists(self.deps))


@dataclass
class _Stream:
    """The serial work of one TP group (one replica, one stage)."""
    last: list = field(default_factory=list)   # ops the next op must follow
    acc_ns: int = 0                             # compute since those ops

    def compute(self, ns: int) -> None:
        self.acc_ns += ns

    def wait(self, op_id: int) -> None:
        self.last.append(op_id)

    def run(self, ops: _OpList, op_ids: list[int]) -> None:
        """The next ops (issued together, e.g. one p2p per TP rank) follow everything so far."""
        for op_id in op_ids:
            ops.bind(op_id, self.last, self.acc_ns)
        self.last, self.acc_ns = list(op_ids), 0


def one_f_one_b(pp: int, stage: int, m: int) -> list[tuple[str, int]]:
    """Megatron's non-interleaved 1F1B order for one stage: warm-up forwards, steady F/B pairs, cool-down."""
    warm = min(pp - stage - 1, m)
    order = [("F", j) for j in range(warm)]
    f, b = warm, 0
    while f < m:
        order.append(("F", f))
        f += 1
        order.append(("B", b))
        b += 1
    order += [("B", j) for j in range(b, m)]
    return order


def build_dense(job: Job) -> CommOps:
    m, par = job.model, job.parallelism
    lay = Layout.of(par)
    cm = ComputeModel.of(job)
    B = m.bytes_per_elem
    gB = DTYPE_BYTES[par.grad_dtype] if par.grad_dtype else B
    act_bytes = par.micro_batch * m.seq_len * m.hidden * B      # S_act of one micro-batch
    nmb = par.microbatches
    lps = m.layers // par.pp
    ops = _OpList()

    # PP p2p ops exist before either end's stream reaches them: one per TP rank, per boundary,
    # per micro-batch, per direction (no scatter/gather optimisation).
    def pp_ops(it: int) -> dict:
        table = {}
        for d in range(par.dp):
            for p in range(par.pp - 1):
                for j in range(nmb):
                    table[("F", d, p, j)] = [
                        ops.new(CollKind.SENDRECV, Dim.PP, Phase.FWD, p, -1, j, -1, it, act_bytes, B,
                                [lay.rank(t, d, p), lay.rank(t, d, p + 1)]) for t in range(par.tp)]
                    table[("B", d, p + 1, j)] = [
                        ops.new(CollKind.SENDRECV, Dim.PP, Phase.BWD, p + 1, -1, j, -1, it, act_bytes, B,
                                [lay.rank(t, d, p + 1), lay.rank(t, d, p)]) for t in range(par.tp)]
        return table

    streams = {(d, p): _Stream() for d in range(par.dp) for p in range(par.pp)}
    for it in range(job.iterations):
        pp_table = pp_ops(it)
        # bucket fork points per stage: list over buckets of {d: (deps, gap)}
        forks: dict[int, list] = {p: [] for p in range(par.pp)}
        for (d, p), st in streams.items():
            layers = range(p * lps, (p + 1) * lps)

            def tp_allreduce(phase, layer, mb):
                if par.tp > 1:
                    st.run(ops, [ops.new(CollKind.ALLREDUCE, Dim.TP, phase, p, layer, mb, -1, it,
                                         act_bytes, B, lay.tp_group(d, p))])

            for direction, j in one_f_one_b(par.pp, p, nmb):
                if direction == "F":
                    if p > 0:
                        for op_id in pp_table[("F", d, p - 1, j)]:
                            st.wait(op_id)
                    for layer in layers:
                        st.compute(cm.attn_fwd_ns)
                        tp_allreduce(Phase.FWD, layer, j)
                        st.compute(cm.mlp_fwd_ns)
                        tp_allreduce(Phase.FWD, layer, j)
                    if p == par.pp - 1:
                        st.compute(cm.logits_fwd_ns)
                    else:
                        st.run(ops, pp_table[("F", d, p, j)])
                else:
                    if p < par.pp - 1:
                        for op_id in pp_table[("B", d, p + 1, j)]:
                            st.wait(op_id)
                    else:
                        st.compute(2 * cm.logits_fwd_ns)
                    bucket_elems = 0
                    for layer in reversed(layers):
                        st.compute(2 * cm.mlp_fwd_ns)
                        tp_allreduce(Phase.BWD, layer, j)
                        st.compute(2 * cm.attn_fwd_ns)
                        tp_allreduce(Phase.BWD, layer, j)
                        if j == nmb - 1:  # gradients complete only after the last micro-batch
                            bucket_elems += params.layer_param_count(m) // par.tp
                            if bucket_elems * gB >= par.dp_bucket_bytes:
                                forks[p].append((d, list(st.last), st.acc_ns, bucket_elems))
                                bucket_elems = 0
                    if j == nmb - 1:
                        bucket_elems += params.stage_extra_param_count(m, p, par.pp) // par.tp
                        if bucket_elems:
                            forks[p].append((d, list(st.last), st.acc_ns, bucket_elems))
                    if p > 0:
                        st.run(ops, pp_table[("B", d, p, j)])

        # DP AllReduce per (tp index, stage, bucket): all replicas must have reached the bucket.
        dp_ops: dict[int, list[int]] = {p: [] for p in range(par.pp)}
        if par.dp > 1:
            for p in range(par.pp):
                per_replica = [[f for f in forks[p] if f[0] == d] for d in range(par.dp)]
                for k in range(len(per_replica[0])):
                    deps = sorted({o for r in per_replica for o in r[k][1]})
                    gap = max(r[k][2] for r in per_replica)
                    elems = per_replica[0][k][3]
                    for t in range(par.tp):
                        op_id = ops.new(CollKind.ALLREDUCE, Dim.DP, Phase.BWD, p, -1, -1, k, it,
                                        elems * gB, gB, lay.dp_group(t, p))
                        ops.bind(op_id, deps, gap)
                        dp_ops[p].append(op_id)
        # The optimizer step: the next iteration starts once this stage's gradients are reduced.
        for (d, p), st in streams.items():
            for op_id in dp_ops[p]:
                st.wait(op_id)
    return ops.table()
