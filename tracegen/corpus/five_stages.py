"""The seed tutorial's five stages as one table ("The Life of a Token", arXiv:2609.19924):
words -> tokens -> tensors (S_act, S_θ, S_grad) -> collectives -> bytes on the wire, for its
GPT-2-small baseline (s=1024, b=32, fp16) on 8 GPUs under DP-8, TP-8, PP-8 and DP-2·TP-2·PP-2.

Stages 3-5 are the tutorial's closed forms (../shared/FORMULAS.md), per GPU per iteration, with
the busiest GPU where they differ. The global batch is 256 sequences for every strategy (one
micro-batch per replica under DP-8), so the columns move the same tokens. Beside them, the bytes
tracegen's own schedule sends from the busiest NIC with each GPU behind its own 400G NIC (every
counted byte crosses the wire) — or why tracegen refuses the layout (TP-8: 12 heads; PP-8:
12 layers do not split 8 ways; the closed forms ignore that).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from ..config import Model, load_job
from ..errors import ConfigError
from ..workload.params import param_count

MICRO_BATCH = 32
GLOBAL_BATCH = 256
NIC_GBPS = 400
STRATEGIES = (("DP-8", 8, 1, 1), ("TP-8", 1, 8, 1), ("PP-8", 1, 1, 8), ("DP-2·TP-2·PP-2", 2, 2, 2))


@dataclass(frozen=True)
class Strategy:
    name: str
    dp: int
    tp: int
    pp: int
    microbatches: int           # per replica per iteration
    s_theta_gpu_bytes: int      # Ψ·B/(t·p): parameters one GPU holds (even split)
    collectives: str            # what one GPU joins per iteration
    dp_bytes: int               # bytes the busiest GPU sends per iteration, per dimension
    tp_bytes: int
    pp_bytes: int
    all_gpus_bytes: int         # all 8 GPUs, one iteration
    tracegen_bytes: int | None  # busiest NIC in tracegen's schedule (None: layout refused)
    tracegen_note: str

    @property
    def gpu_bytes(self) -> int:
        return self.dp_bytes + self.tp_bytes + self.pp_bytes


@dataclass(frozen=True)
class FiveStages:
    corpus: str
    tokenizer: str
    words: int
    tokens: int
    model: Model
    params: int
    strategies: list[Strategy]

    @property
    def s_act_bytes(self) -> int:
        return MICRO_BATCH * self.model.seq_len * self.model.hidden * self.model.bytes_per_elem

    @property
    def sequences(self) -> int:
        return math.ceil(self.tokens / self.model.seq_len)

    @property
    def iterations(self) -> int:
        return math.ceil(self.sequences / GLOBAL_BATCH)


def _strategy(m: Model, params: int, name: str, d: int, t: int, p: int, measure: bool) -> Strategy:
    B = m.bytes_per_elem
    mb = GLOBAL_BATCH // (MICRO_BATCH * d)
    s_act = MICRO_BATCH * m.seq_len * m.hidden * B
    s_grad = params * B // (t * p)
    layers = Fraction(m.layers, p)
    dp = round(Fraction(2 * (d - 1), d) * s_grad)
    tp = round(layers * mb * 4 * Fraction(2 * (t - 1), t) * s_act)   # 2 AllReduce fwd + 2 bwd per layer
    pp = (2 if p > 2 else 1 if p == 2 else 0) * mb * s_act           # inner stages send both ways
    world = d * t * p
    all_gpus = world * (round(Fraction(2 * (d - 1), d) * s_grad) + tp) + d * t * (p - 1) * 2 * mb * s_act
    parts = []
    if d > 1:
        parts.append(f"AllReduce(S_grad) over {d}")
    if t > 1:
        parts.append(f"{4 * layers * mb} × AllReduce(S_act) over {t}")
    if p > 1:
        parts.append(f"{(2 if p > 2 else 1) * mb} × send(S_act)")
    measured, note = _tracegen_bytes(d, t, p) if measure else (None, "not run")
    return Strategy(name, d, t, p, mb, s_grad, " + ".join(parts), dp, tp, pp, all_gpus, measured, note)


def _tracegen_bytes(d: int, t: int, p: int) -> tuple[int | None, str]:
    from ..pipeline import run_pipeline
    sets = [f"parallelism.dp={d}", f"parallelism.tp={t}", f"parallelism.pp={p}",
            f"parallelism.micro_batch={MICRO_BATCH}", f"parallelism.global_batch={GLOBAL_BATCH}",
            "cluster.gpus_per_node=1", f"cluster.nodes={d * t * p}", f"cluster.nic_gbps={NIC_GBPS}"]
    try:
        report = run_pipeline(load_job(preset="gpt2-small", sets=sets)).report
    except ConfigError as e:
        return None, f"refused: {e}"
    return int(report.nic_tx_bytes.max()), "busiest NIC, 8 nodes × 1 GPU (incl. embedding/head/CE)"


def five_stages(words: int, tokens: int, corpus: str = "", tokenizer: str = "",
                measure: bool = True) -> FiveStages:
    m = load_job(preset="gpt2-small").model
    params = param_count(m)
    return FiveStages(corpus, tokenizer, words, tokens, m, params,
                      [_strategy(m, params, *s, measure=measure) for s in STRATEGIES])


def stage_table(fs: FiveStages) -> tuple[list[str], list[list[str]], list[str]]:
    """(header, rows, footnotes): one row per quantity, stage 1 to 5 top-down, one column per
    strategy."""
    from .traffic import fmt_bytes, fmt_ns
    S = fs.strategies
    notes = [f"({k}) {s.name}: tracegen {s.tracegen_note}"
             for k, s in enumerate((s for s in S if s.tracegen_bytes is None), 1)]
    refused = iter(range(1, len(S) + 1))
    same = lambda v: [v] * len(S)   # noqa: E731 — stages 1-2 do not depend on the parallelism
    rows = [
        ["1 words", f"words in {fs.corpus}", *same(f"{fs.words:,}")],
        ["2 tokens", f"tokens ({fs.tokenizer})", *same(f"{fs.tokens:,} ({fs.tokens / fs.words:.2f}/word)")],
        ["2 tokens", f"sequences (s={fs.model.seq_len}) / iterations", *same(f"{fs.sequences:,} / {fs.iterations:,}")],
        ["3 tensors", "micro-batches m per replica", *[str(s.microbatches) for s in S]],
        ["3 tensors", "S_act = b·s·h·B", *same(fmt_bytes(fs.s_act_bytes))],
        ["3 tensors", "S_θ = S_grad per GPU", *[fmt_bytes(s.s_theta_gpu_bytes) for s in S]],
        ["4 collectives", "per GPU per iteration", *[s.collectives for s in S]],
        ["5 bytes", "per GPU per iteration", *[fmt_bytes(s.gpu_bytes) for s in S]],
        ["5 bytes", "tracegen: busiest NIC", *[fmt_bytes(s.tracegen_bytes) if s.tracegen_bytes is not None
                                             else f"— ({next(refused)})" for s in S]],
        ["5 bytes", "wire time at 400 Gb/s", *[fmt_ns(math.ceil(s.gpu_bytes * 8 / NIC_GBPS)) for s in S]],
        ["5 bytes", "all 8 GPUs, one epoch", *[fmt_bytes(fs.iterations * s.all_gpus_bytes) for s in S]],
    ]
    return ["stage", "quantity", *(s.name for s in S)], rows, notes
