"""The parallelism section's keys: degrees, batches, ZeRO, recomputation, overlap."""
from __future__ import annotations

from dataclasses import dataclass

from .declare import DTYPE_BYTES, M, key


@dataclass(frozen=True)
class ParallelismKeys:
    dp: int = key(2, "data-parallel replicas", 1, M)
    tp: int = key(2, "tensor-parallel ranks", 1, 1024)
    pp: int = key(2, "pipeline stages", 1, 1024)
    micro_batch: int = key(1, "sequences per micro-batch", 1, 65_536)
    global_batch: int = key(8, "sequences per iteration", 1, 16 * M)
    dp_bucket_bytes: int = key(25 * 1000 * 1000, "gradient bucket (huge: one bucket per stage)", 1, 1 << 50)
    grad_dtype: str = key("", "gradients' dtype in DP; '': Megatron's rule (fp32 for bf16 models, else "
                              "the model's)", choices=("",) + tuple(DTYPE_BYTES))
    sp: bool = key(False, "Megatron sequence parallelism: TP AllReduce -> AllGather + ReduceScatter")
    cp: int = key(1, "context-parallel ranks", 1, 1024)
    ep: int = key(1, "expert-parallel ranks", 1, 65_536)
    expert_tp: int = key(0, "expert tensor-parallel ranks; 0: tp", 0, 1024)
    zero: int = key(0, "ZeRO stage", 0, 3)
    vpp: int = key(1, "model chunks per pipeline rank", 1, 1024)
    pp_scatter_gather: bool = key(False, "send 1/t of each activation between stages, AllGather it over "
                                         "TP after")
    recompute: str = key("none", "activation recomputation", choices=("none", "selective", "full"))
    dp_overlap: bool = key(True, "release gradient buckets during backward (false: all after it)")
