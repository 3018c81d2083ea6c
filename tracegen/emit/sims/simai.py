"""CommOp table -> SimAI / AICB workload text, laid out as SimAI reads and runs it.

Reader (aliyun/SimAI astra-sim-alibabacloud): `Workload::initialize_workload` reads a header line
  HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: <tp> ep: <ep> pp: <pp> vpp: <v>
  ga: <micro-batches> all_gpus: <world> checkpoints: 0 checkpoint_initiates: 0 pp_comm: <bytes>
the row count, then rows of 12 whitespace-separated fields: name, dependency, then compute /
comm type / comm size of the forward, input-gradient and weight-gradient columns, and an update
time. Compute is in ticks = ns. A comm type is ALLREDUCE, ALLGATHER, REDUCESCATTER, ALLTOALL or
NONE plus the group: no suffix = TP in the forward / input-gradient columns and DP in the weight-
gradient column, `_EP` the expert group, `_DP_EP` the expert-data group (anything else gets no
group and no time). Sizes follow nccl-tests (Layer::compute_time: size·(n-1)/n per rank, 2x for
AllReduce), i.e. tracegen's buffer size S (AllGather: the gathered output, as AICB writes it).

Runner (`Workload::iterate_hybrid_parallel_Transformer_fwd_in_bckwd`): every row's forward
column top to bottom (compute, then the collective, blocking), then every row bottom to top:
input-gradient column (blocking), weight-gradient column (non-blocking). `ga` and `vpp` are read
only by the report (Layer::report): bubble = (row time)·(pp-1)/(ga·vpp), exposed PP traffic
= 2·vpp·ga·pp_comm / bandwidth. Nothing is repeated: AICB (SimAI_training_workload_generator
`workload_generate`) writes the layers' rows once per micro-batch (`for _ in range(ga_num)`).

So, per pipeline stage, for its first rank (iteration 0):
  - the forward ops in the order the rank runs them make the forward column, the backward and
    optimizer ops the backward columns from the bottom row up (row i: forward op i, backward op
    N-1-i), so both of SimAI's sweeps replay tracegen's order; forward micro-batches are listed
    last first, so a row's two halves are mostly the same micro-batch and layer;
  - each collective is labelled by the SimAI group holding exactly its ranks (groups built as
    MockNcclGroup builds them: TP consecutive, DP strided by tp, EP = ep consecutive TP groups,
    DP_EP strided by ep TP groups; TP/EP in forward and input-gradient columns, DP/DP_EP in
    weight-gradient ones); gradient syncs (DP, EDP) go into weight-gradient columns, right
    after the backward op they follow; the expert-TP AllGather/ReduceScatter runs on the TP
    group, so it has no suffix (AICB: moelayer `forward_comm3/4`);
  - ops SimAI cannot run (Broadcast, CP ring steps, the tied-embedding sync, ZeRO-3's forward
    parameter gathers, groups SimAI does not have) keep their compute, their traffic is listed in the notes; PP sends become
    `pp_comm`; the rank's compute (rank_steps: a forked op's gap and a sender's are not
    counted again) is in the columns once, so SimAI adds up the rank's compute per iteration;
  - `vpp` is the job's model chunks per rank (1 without interleaving): with it SimAI's bubble is
    Narayanan's (p-1)/(v·m). AICB writes layers per stage there, which SimAI reads as that many
    chunks; `update time` 0 (SimAI adds it after every collective of the row; AICB's 100).
SimAI runs one file on every rank: `<job>.txt` holds the busiest stage; with pp > 1 every
stage's own file is `<job>.stage<s>.txt`.
"""
from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field
from pathlib import Path

from ...config import Job
from ...errors import OutputError
from ...tables import CollKind, CommOps, Dim, Phase
from .rank_steps import rank_steps, topo_order

SIMAI_TYPES = {CollKind.ALLREDUCE: "ALLREDUCE", CollKind.ALLGATHER: "ALLGATHER",
               CollKind.REDUCESCATTER: "REDUCESCATTER", CollKind.ALLTOALL: "ALLTOALL"}
# the suffix naming each group, per column (Workload::initialize_workload): only the pairs whose
# size Layer::report takes from the same group (forward / input gradient: EP_size for _EP, else
# TP_size; weight gradient: DP/EP for _DP_EP, else DP), so the analytical mode and the simulator
# (MockNcclGroup's ranks) agree; e.g. `_DP_EP` in a forward column would be timed over tp ranks
FWD_IG_GROUPS = {"TP": "", "EP": "_EP"}
WG_GROUPS = {"DP": "", "DP_EP": "_DP_EP"}
GRAD_SYNC = (Dim.DP, Dim.EDP)


@dataclass
class Slot:
    """One column of a row: compute, then a collective (or NONE)."""
    name: str
    compute: int = 0
    ctype: str = "NONE"
    size: int = 0


@dataclass
class Back:
    ig: Slot | None = None
    wg: Slot | None = None


@dataclass
class StageFile:
    stage: int
    rank: int                  # the rank whose ops the rows are
    text: str
    compute_ns: int            # sum of every compute column
    written: list[int] = field(default_factory=list)   # op ids whose traffic is in a column


def simai_groups(job: Job, rank: int) -> dict[str, tuple[int, ...]]:
    """The ranks of each SimAI group holding `rank`, as MockNcclGroup::MockNcclGroup lays them
    out, within the rank's pipeline stage (SimAI sizes DP as all_gpus / (tp·pp))."""
    p = job.parallelism
    n = job.world // p.pp
    base = rank // n * n
    tp, ep = p.tp, p.ep
    g, k = (rank - base) // tp, (rank - base) % tp
    ep_first = g // ep * ep
    return {
        "TP": tuple(base + g * tp + j for j in range(tp)),
        "DP": tuple(base + k + j * tp for j in range(n // tp)),
        "EP": tuple(base + (ep_first + j) * tp + k for j in range(ep)),
        "DP_EP": tuple(base + (g % ep + j * ep) * tp + k for j in range(n // (tp * ep))),
    }


def _label(o: int, ops: CommOps) -> str:
    r = ops.rows
    mb, layer = int(r["microbatch"][o]), int(r["layer"][o])
    return (f"mb{mb}." if mb >= 0 else "") + (f"L{layer}." if layer >= 0 else "") + \
        f"{Dim(int(r['dim'][o])).name}.{CollKind(int(r['kind'][o])).label}.op{o}"


def _stage_rows(job: Job, ops: CommOps, rank: int, order: list[int],
                skipped: dict) -> tuple[list[Slot], list[Back], list[int], int]:
    """(forward items, backward items, written op ids, PP message bytes) of `rank`."""
    r = ops.rows
    groups = {name: set(g) for name, g in simai_groups(job, rank).items()}
    fwd: list[tuple[int, Slot]] = []
    back: list[Back] = []
    written: list[int] = []
    pp_bytes = 0
    for step in rank_steps(ops, rank, order):
        o = step.op
        if r["iteration"][o] != 0:
            continue
        kind, dim, phase = CollKind(int(r["kind"][o])), Dim(int(r["dim"][o])), Phase(int(r["phase"][o]))
        slot = Slot(_label(o, ops), compute=step.compute_ns)
        column = "fwd" if phase == Phase.FWD else ("wg" if dim in GRAD_SYNC else "ig")
        suffix = None
        if kind in SIMAI_TYPES:
            ranks = set(ops.groups[o].tolist())
            names = WG_GROUPS if column == "wg" else FWD_IG_GROUPS
            suffix = next((s for g, s in names.items() if groups[g] == ranks), None)
        if suffix is not None:
            slot.ctype, slot.size = SIMAI_TYPES[kind] + suffix, int(r["bytes"][o])
            written.append(o)
        elif dim == Dim.PP and kind == CollKind.SENDRECV:
            pp_bytes = pp_bytes or int(r["bytes"][o])
        elif kind != CollKind.MARKER:      # no SimAI type or group: compute only
            key = (dim.name, kind.label, len(ops.groups[o]))
            n, b = skipped.get(key, (0, 0))
            skipped[key] = (n + 1, b + int(r["bytes"][o]))
        if slot.ctype == "NONE" and slot.compute == 0:
            continue                       # nothing for SimAI to run
        if column == "fwd":
            fwd.append((int(r["microbatch"][o]), slot))
        elif column == "wg" and slot.ctype != "NONE":
            if back and back[-1].wg is None:
                back[-1].wg = slot         # runs right after the backward op it follows
            else:
                back.append(Back(wg=slot))
        else:
            back.append(Back(ig=slot))
    # forward micro-batches last first (see the module docstring); an op of no micro-batch
    # stays with the micro-batch that follows it
    nxt, keyed = -1, []
    for mb, slot in reversed(fwd):
        nxt = mb if mb >= 0 else nxt
        keyed.append((nxt, slot))
    blocks = [list(g) for _, g in itertools.groupby(reversed(keyed), key=lambda x: x[0])]
    fwd_slots = [s for blk in reversed(blocks) for _, s in blk]
    return fwd_slots, back, written, pp_bytes


def _text(job: Job, fwd: list[Slot], back: list[Back], pp_bytes: int) -> str:
    p = job.parallelism
    n = max(len(fwd), len(back))
    lines = [f"HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: {p.tp} ep: {p.ep} "
             f"pp: {p.pp} vpp: {p.vpp} ga: {p.microbatches} all_gpus: {job.world} "
             f"checkpoints: 0 checkpoint_initiates: 0 pp_comm: {pp_bytes if p.pp > 1 else 0}",
             str(n)]
    none = Slot("")
    for i in range(n):
        f = fwd[i] if i < len(fwd) else none
        b = back[n - 1 - i] if n - 1 - i < len(back) else Back()
        ig, wg = b.ig or none, b.wg or none
        name = "|".join(s.name for s in (f, ig, wg) if s.name) or f"row{i}"
        cols = (name, -1, f.compute, f.ctype, f.size, ig.compute, ig.ctype, ig.size,
                wg.compute, wg.ctype, wg.size, 0)
        lines.append("\t".join(str(c) for c in cols))
    return "\n".join(lines) + "\n"


def simai_stages(job: Job, ops: CommOps) -> tuple[list[StageFile], list[str]]:
    """One StageFile per pipeline stage and the notes (what SimAI cannot hold)."""
    order = topo_order(ops)
    per_stage = job.world // job.parallelism.pp
    files, skipped = [], {}
    for s in range(job.parallelism.pp):
        rank = s * per_stage
        fwd, back, written, pp_bytes = _stage_rows(job, ops, rank, order, skipped)
        compute = sum(x.compute for x in fwd) + sum(
            x.compute for b in back for x in (b.ig, b.wg) if x is not None)
        files.append(StageFile(s, rank, _text(job, fwd, back, pp_bytes), compute, written))
    ranks = "rank 0" if len(files) == 1 else "the stages' first ranks"
    notes = [f"{n} {dim} {kind} ops of {size} ranks ({b:,} B per iteration on {ranks}): SimAI "
             "has no type or group for them; their compute is kept, their traffic not written"
             for (dim, kind, size), (n, b) in sorted(skipped.items())]
    if len(files) > 1:
        notes.insert(0, f"pp={len(files)}: SimAI runs one stage's rows on every rank; "
                        f"{job.name}.txt is stage {busiest(files).stage} (the busiest), each "
                        f"stage's own rows are in {job.name}.stage<s>.txt")
    return files, notes


def busiest(files: list[StageFile]) -> StageFile:
    return max(files, key=lambda f: (f.compute_ns, -f.stage))


def write_simai(job: Job, ops: CommOps, dest: Path) -> tuple[Path, list[str]]:
    """`<job>.txt` (the busiest stage) and with pp > 1 `<job>.stage<s>.txt`; (path, notes)."""
    files, notes = simai_stages(job, ops)
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    out = [(dest / f"{job.name}.txt", busiest(files).text)]
    if len(files) > 1:
        out += [(dest / f"{job.name}.stage{f.stage}.txt", f.text) for f in files]
    for path, text in out:
        tmp = path.with_name(f".{path.name}.tmp")
        try:
            tmp.write_text(text, encoding="ascii")
            os.replace(tmp, path)
        except OSError as e:
            raise OutputError(f"cannot write {path}: {e.strerror}") from None
        finally:
            tmp.unlink(missing_ok=True)
    return out[0][0], notes
