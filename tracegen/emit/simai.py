"""CommOp table -> SimAI / AICB workload text (aliyun/SimAI: astra-sim-alibabacloud
Workload::initialize_workload; written like AICB's SimAI_training_workload_generator).

Layout, as SimAI's parser reads it (whitespace-separated tokens):
  line 1  HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: <tp> ep: <ep> pp: <pp>
          vpp: <layers> ga: <micro-batches> all_gpus: <world> checkpoints: 0
          checkpoint_initiates: 0 pp_comm: <bytes of one PP activation send, 0 without PP>
  line 2  number of layer rows
  rows    12 columns: name  dependency(-1)  fwd_compute fwd_comm_type fwd_comm_size
          ig_compute ig_comm_type ig_comm_size  wg_compute wg_comm_type wg_comm_size
          wg_update_time
Compute times are SimAI ticks = ns (astra-sim's CLOCK_PERIOD 1). Comm types: NONE, ALLREDUCE,
ALLGATHER, REDUCESCATTER, ALLTOALL; without suffix the forward / input-gradient columns run on
the tensor-parallel group and the weight-gradient column on the data-parallel group; `_EP` the
expert group, `_DP_EP` the expert-data-parallel group.

From the op table (iteration 0, micro-batch 0, the first rank of every pipeline stage; SimAI
repeats the rows `ga` times and runs every rank and stage itself):
  - each forward TP/SP (and EP AllToAll) op opens a row: its gap as forward compute, its
    collective as forward comm; the backward ops of the same stage and layer fill the rows'
    input-gradient columns in reverse order (extra ones get rows of their own);
  - each data-parallel gradient op (DP, ZeRO ReduceScatter/AllGather; EDP as `_DP_EP`) is a row
    of its own with the collective in the weight-gradient column;
  - PP sends become pp_comm; CP and the tied-embedding sync (EMB) have no place in the format:
    they are listed in the returned notes, not written.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..config import Job
from ..errors import OutputError
from ..tables import CollKind, CommOps, Dim, Phase

SIMAI_TYPES = {CollKind.ALLREDUCE: "ALLREDUCE", CollKind.ALLGATHER: "ALLGATHER",
               CollKind.REDUCESCATTER: "REDUCESCATTER", CollKind.ALLTOALL: "ALLTOALL"}


@dataclass
class Row:
    name: str
    fwd_compute: int = 1
    fwd_type: str = "NONE"
    fwd_size: int = 0
    ig_compute: int = 1
    ig_type: str = "NONE"
    ig_size: int = 0
    wg_compute: int = 1
    wg_type: str = "NONE"
    wg_size: int = 0
    wg_update: int = 100

    def text(self) -> str:
        cols = (self.name, -1, self.fwd_compute, self.fwd_type, self.fwd_size, self.ig_compute,
                self.ig_type, self.ig_size, self.wg_compute, self.wg_type, self.wg_size,
                self.wg_update)
        return "\t".join(str(c) for c in cols)


def simai_workload(job: Job, ops: CommOps) -> tuple[str, list[str], list[int]]:
    """(text, notes, op ids written). See the module docstring."""
    rows = ops.rows
    p = job.parallelism
    replica = _first_replica(ops, job)
    sel = [o for o in range(len(ops)) if rows["iteration"][o] == 0
           and rows["microbatch"][o] in (0, -1) and o in replica]
    out: list[Row] = []
    open_rows: dict[tuple[int, int], list[Row]] = {}
    notes: list[str] = []
    written: list[int] = []
    pp_bytes = 0
    for o in sel:
        kind, dim, phase = CollKind(int(rows["kind"][o])), Dim(int(rows["dim"][o])), Phase(
            int(rows["phase"][o]))
        size, gap = int(rows["bytes"][o]), max(1, int(rows["gap_ns"][o]))
        key = (int(rows["stage"][o]), int(rows["layer"][o]))
        if dim == Dim.PP and kind == CollKind.SENDRECV:
            pp_bytes = pp_bytes or size
            continue
        if kind == CollKind.MARKER:
            continue
        if kind not in SIMAI_TYPES or dim in (Dim.CP, Dim.EMB):
            notes.append(f"op {o} ({dim.name} {kind.label}, {size} B) has no SimAI column: "
                         "not written")
            continue
        ctype = SIMAI_TYPES[kind]
        if dim in (Dim.DP, Dim.EDP):
            out.append(Row(f"grad_{dim.name.lower()}_op{o}", wg_compute=gap,
                           wg_type=ctype + ("_DP_EP" if dim == Dim.EDP else ""), wg_size=size))
        elif phase == Phase.FWD:
            suffix = "_EP" if dim == Dim.EP else ""
            r = Row(f"{_where(key)}_op{o}", fwd_compute=gap, fwd_type=ctype + suffix,
                    fwd_size=size)
            out.append(r)
            open_rows.setdefault(key, []).append(r)
        else:
            suffix = "_EP" if dim == Dim.EP else ""
            pending = open_rows.get(key)
            if pending:
                r = pending.pop()          # backward runs the layer's ops in reverse
                r.ig_compute, r.ig_type, r.ig_size = gap, ctype + suffix, size
            else:
                out.append(Row(f"{_where(key)}_bwd_op{o}", ig_compute=gap,
                               ig_type=ctype + suffix, ig_size=size))
        written.append(o)
    header = (f"HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: {p.tp} ep: {p.ep} "
              f"pp: {p.pp} vpp: {job.model.layers} ga: {p.microbatches} all_gpus: {job.world} "
              f"checkpoints: 0 checkpoint_initiates: 0 pp_comm: {pp_bytes if p.pp > 1 else 0}")
    text = "\n".join([header, str(len(out))] + [r.text() for r in out]) + "\n"
    return text, notes, written


def _where(key: tuple[int, int]) -> str:
    stage, layer = key
    return f"stage{stage}_" + (f"layer{layer}" if layer >= 0 else "embedding_head")


def _first_replica(ops: CommOps, job: Job) -> set[int]:
    """Ops of the rank SimAI's rows describe: per pipeline stage its first rank (Megatron's
    tp-cp-dp-pp order: stage s starts at s * world / pp), i.e. ops whose group holds one."""
    per_stage = job.world // job.parallelism.pp
    reps = {s * per_stage for s in range(job.parallelism.pp)}
    return {o for o in range(len(ops)) if reps & set(ops.groups[o].tolist())}


def write_simai(job: Job, ops: CommOps, dest: Path) -> tuple[Path, list[str]]:
    text, notes, _ = simai_workload(job, ops)
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / f"{job.name}.txt"
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text, encoding="ascii")
        os.replace(tmp, path)
    except OSError as e:
        raise OutputError(f"cannot write {path}: {e.strerror}") from None
    finally:
        tmp.unlink(missing_ok=True)
    return path, notes


def tp_dp_bytes(ops: CommOps, written: list[int]) -> dict[str, int]:
    """Bytes per dim of the written ops (for checks)."""
    out: dict[str, int] = {}
    for o in written:
        d = Dim(int(ops.rows["dim"][o])).name
        out[d] = out.get(d, 0) + int(ops.rows["bytes"][o])
    return out

