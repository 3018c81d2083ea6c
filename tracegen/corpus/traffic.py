"""Tokens joined with the workload: one epoch over the corpus as iterations of the job, and what
those iterations put on the fabric.

Per-iteration bytes are the workload stage's own — `run_pipeline(job).report.nic_tx_bytes`
divided by `job.iterations`, the numbers `tracegen plan` prints — so an epoch is exactly
iterations × those. Sequences are packed: ceil(tokens / s); an epoch is ceil(sequences / global
batch) full iterations (the last one padded, as a fixed-shape training step would run it).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..config import Job
from ..report.build import Report
from ..workload.compute import ComputeModel


@dataclass(frozen=True)
class IterationTraffic:
    """One iteration of the job on the fabric (payload bytes NICs send) and its times."""
    job: str
    seq_len: int
    global_batch: int           # sequences per iteration
    nic_gbps: int
    nic_tx_bytes: tuple[int, ...]
    compute_ns: int             # busiest pipeline stage's GPU time (no bubble, no waiting)
    scheduled_ns: int           # tracegen's schedule: compute, bubble and exposed communication

    @property
    def tokens(self) -> int:
        return self.seq_len * self.global_batch

    @property
    def aggregate_bytes(self) -> int:
        return sum(self.nic_tx_bytes)

    @property
    def busiest_nic_bytes(self) -> int:
        return max(self.nic_tx_bytes, default=0)

    @property
    def wire_ns(self) -> int:
        """The busiest NIC's bytes at line rate: the least time the fabric needs per iteration."""
        return math.ceil(self.busiest_nic_bytes * 8 / self.nic_gbps)


def compute_ns_per_iteration(job: Job) -> int:
    """GPU time of the busiest stage per iteration: per layer forward + 2× backward (+ recompute),
    the last stage's logits likewise, × micro-batches. Same ComputeModel the schedule uses."""
    m, par = job.model, job.parallelism
    cm = ComputeModel.of(job)
    per_chunk = m.layers // (par.pp * par.vpp)
    busiest = 0
    for stage in range(par.pp):
        ns = 0
        for chunk in range(par.vpp):
            first = (chunk * par.pp + stage) * per_chunk
            for layer in range(first, first + per_chunk):
                fwd = cm.layer_fwd_ns(m.is_moe_layer(layer))
                ns += 3 * fwd + {"full": fwd, "selective": cm.attn_core_ns}.get(par.recompute, 0)
        if stage == par.pp - 1:
            ns += 3 * cm.logits_ns
        busiest = max(busiest, ns)
    return busiest * par.microbatches


def iteration_traffic(job: Job, report: Report | None = None) -> IterationTraffic:
    """From `report` (run_pipeline(job).report; computed when not given)."""
    if report is None:
        from ..pipeline import run_pipeline
        report = run_pipeline(job).report
    its = job.iterations   # the report covers all of the job's (identical) iterations
    return IterationTraffic(
        job=job.name, seq_len=job.model.seq_len, global_batch=job.parallelism.global_batch,
        nic_gbps=job.cluster.nic_gbps, nic_tx_bytes=tuple(int(b) // its for b in report.nic_tx_bytes),
        compute_ns=compute_ns_per_iteration(job), scheduled_ns=report.iteration_ns // its)


@dataclass(frozen=True)
class EpochTraffic:
    corpus: str
    tokenizer: str
    tokens: int
    sequences: int
    iterations: int             # whole iterations in one epoch
    iterations_exact: float     # tokens / tokens per iteration: what a premium scales
    aggregate_bytes: int        # all NICs, one epoch
    busiest_nic_bytes: int
    wire_ns: int                # busiest NIC at line rate, one epoch
    compute_ns: int
    scheduled_ns: int


def epoch_traffic(tokens: int, it: IterationTraffic, corpus: str = "",
                  tokenizer: str = "") -> EpochTraffic:
    sequences = math.ceil(tokens / it.seq_len)
    n = math.ceil(sequences / it.global_batch)
    return EpochTraffic(corpus, tokenizer, tokens, sequences, n, tokens / it.tokens,
                        n * it.aggregate_bytes, n * it.busiest_nic_bytes, n * it.wire_ns,
                        n * it.compute_ns, n * it.scheduled_ns)


def fmt_bytes(n: int) -> str:
    for unit, k in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            return f"{n / k:,.2f} {unit}"
    return f"{n:,} B"


def fmt_ns(ns: int) -> str:
    for unit, k in (("h", 3600e9), ("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= k:
            return f"{ns / k:,.2f} {unit}"
    return f"{ns:,} ns"


def corpus_plan(job: Job, corpus_path: str, tokenizer: str = "cl100k_base",
                report: Report | None = None) -> dict:
    """The corpus as epochs of this job, as `tracegen plan --json --corpus PATH` prints it under
    "corpus" (README): the counts, one iteration's traffic and one epoch's. Pass the plan's
    report to avoid running the pipeline twice."""
    from .reader import open_corpus
    from .stats import count_corpus
    from .tokenizers import resolve_tokenizer
    corpus, tok = open_corpus(corpus_path), resolve_tokenizer(tokenizer)
    c = count_corpus(corpus, [tok])
    it = iteration_traffic(job, report)
    e = epoch_traffic(c.tokens[tok.name], it, corpus.label, tok.name)
    return {
        "corpus": corpus.label, "files": c.files, "utf8_bytes": c.utf8_bytes, "words": c.words,
        "chars": c.chars, "tokenizer": tok.name, "tokens": e.tokens,
        "iteration": {"seq_len": it.seq_len, "global_batch": it.global_batch, "tokens": it.tokens,
                      "nics": len(it.nic_tx_bytes), "nic_gbps": it.nic_gbps,
                      "aggregate_bytes": it.aggregate_bytes, "busiest_nic_bytes": it.busiest_nic_bytes},
        "epoch": {"sequences": e.sequences, "iterations": e.iterations,
                  "iterations_exact": e.iterations_exact, "aggregate_bytes": e.aggregate_bytes,
                  "busiest_nic_bytes": e.busiest_nic_bytes, "wire_ns": e.wire_ns,
                  "compute_ns": e.compute_ns, "scheduled_ns": e.scheduled_ns},
    }


def corpus_plan_lines(job: Job, corpus_path: str, tokenizer: str = "cl100k_base",
                      report: Report | None = None, doc: dict | None = None) -> list[str]:
    """Lines for `tracegen plan JOB --corpus PATH`: corpus_plan's numbers (`doc`, computed when
    not given) in words."""
    d = doc if doc is not None else corpus_plan(job, corpus_path, tokenizer, report)
    it, e = d["iteration"], d["epoch"]
    return [
        f"corpus {d['corpus']} ({d['files']} file(s), {fmt_bytes(d['utf8_bytes'])}): {d['words']:,} words, "
        f"{d['chars']:,} characters -> {d['tokens']:,} tokens ({d['tokenizer']}), "
        f"{d['tokens'] / d['words']:.3f} tokens/word",
        f"one epoch at s={it['seq_len']}, global batch {it['global_batch']} ({it['tokens']:,} tokens/iteration): "
        f"{e['sequences']:,} sequences -> {e['iterations']:,} iterations ({e['iterations_exact']:,.3f} exact)",
        f"per iteration on the fabric: {it['aggregate_bytes']:,} B all NICs, {it['busiest_nic_bytes']:,} B "
        f"busiest NIC ({it['nics']} NICs)",
        f"per epoch on the fabric: {e['aggregate_bytes']:,} B ({fmt_bytes(e['aggregate_bytes'])}) all NICs, "
        f"{e['busiest_nic_bytes']:,} B ({fmt_bytes(e['busiest_nic_bytes'])}) busiest NIC",
        f"per epoch: wire {fmt_ns(e['wire_ns'])} at {it['nic_gbps']} Gb/s (busiest NIC), compute "
        f"{fmt_ns(e['compute_ns'])} (busiest stage), scheduled {fmt_ns(e['scheduled_ns'])}",
    ]
