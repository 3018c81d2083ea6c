"""How a key is declared (`key()`), the limits every declaration shares (integers, floats, strings,
job names, world size), and the tables of dtypes and GPUs that sections' choices come from."""
from __future__ import annotations

from dataclasses import field
from typing import Any

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}

# Dense peak (TFLOP/s) at the precision training runs in; MFU is the fraction achieved.
# Memory per GPU (bytes) a plan is held against: H100/A100 SXM 80 GB, H200 141 GB, B200 180 GB.
GPU_MEMORY_BYTES = {"a100": 80 * 10**9, "h100": 80 * 10**9, "h200": 141 * 10**9, "b200": 180 * 10**9}

GPU_PEAK_TFLOPS = {
    "a100": {"fp32": 19.5, "bf16": 312.0, "fp16": 312.0, "fp8": 312.0},
    "h100": {"fp32": 67.0, "bf16": 989.0, "fp16": 989.0, "fp8": 1979.0},
    "h200": {"fp32": 67.0, "bf16": 989.0, "fp16": 989.0, "fp8": 1979.0},
    "b200": {"fp32": 80.0, "bf16": 2250.0, "fp16": 2250.0, "fp8": 4500.0},
}

K, M, G, T = 1 << 10, 1 << 20, 1 << 30, 1 << 40   # binary sizes the declarations use
INT_MAX = 2**31 - 1        # integers declared without a range
FLOAT_MAX = 1e9
STR_MAX = 65_536           # characters in any string key
NAME_MAX = 100             # characters in a job name (it names folders and files)
WORLD_MAX = 1 << 20        # GPUs: dp x tp x pp x cp
JOB_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]*"   # a job name becomes a directory name under traces/


def key(default: Any, doc: str, lo: float | None = None, hi: float | None = None, *,
        choices: tuple = (), zero_or: tuple[float, str] | None = None, count: bool | None = None) -> Any:
    """One key: its default and doc, and what it accepts - a number in [lo, hi], one of `choices`,
    or with `zero_or` = (floor, why) 0 or [floor, hi]. `count` (default: an integer with lo >= 1)
    words a value below the range 'must be a positive integer'."""
    return field(default=default, metadata={"doc": doc, "lo": lo, "hi": hi, "choices": tuple(choices),
                                            "zero_or": zero_or, "count": count})
