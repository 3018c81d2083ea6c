"""How fast is the schedule stage? One job's transfers scheduled two ways, side by side:

  compiled   the list scheduler as numba compiles it (what jobs of >= 20k transfers run)
  python     the very same function run by the Python interpreter (what small jobs run)

Both give identical flows (checked here). The compile itself is timed apart: numba caches it
on disk, so only the first big job on a machine pays it. Printed: transfers, seconds,
transfers per second, and the ratio.

Run: python bench/bench_schedule.py [--preset llama3-8b] [--python-max 300000]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tracegen import schedule as sched  # noqa: E402
from tracegen.collectives import expand  # noqa: E402
from tracegen.config import load_job  # noqa: E402
from tracegen.tables import CommOps, Ragged, Transfers  # noqa: E402
from tracegen.topology import build_fabric  # noqa: E402
from tracegen.workload import build_commops  # noqa: E402


def timed_schedule(ops, tr, fabric, job, threshold: int):
    sched.JIT_MIN_TRANSFERS = threshold
    t0 = time.perf_counter()
    flows = sched.schedule(ops, tr, fabric, job)
    return time.perf_counter() - t0, flows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="llama3-8b", help="job preset to schedule")
    ap.add_argument("--python-max", type=int, default=300_000,
                    help="schedule only this many transfers' worth of ops when timing Python")
    args = ap.parse_args()

    job = load_job(None, preset=args.preset)
    fabric = build_fabric(job)
    ops = build_commops(job)
    tr = expand(ops, fabric, job.nccl)
    print(f"{args.preset}: {len(ops):,} ops, {len(tr):,} transfers, {fabric.world} GPUs\n")

    first_s, _ = timed_schedule(ops, tr, fabric, job, 0)      # loads (or compiles) the code
    warm_s, _ = timed_schedule(ops, tr, fabric, job, 0)

    # Python on the whole job when small enough; else on the leading ops whose transfers fit
    # (same per-transfer work, fewer of them).
    sub_ops, sub_tr = ops, tr
    if len(tr) > args.python_max:
        per_op = np.bincount(tr.rows["op_id"], minlength=len(ops))
        n_ops = max(1, int(np.searchsorted(np.cumsum(per_op), args.python_max)))
        idx = np.flatnonzero(tr.rows["op_id"] < n_ops)
        new_id = np.full(len(tr), -1, np.int64)
        new_id[idx] = np.arange(len(idx))
        deps = [new_id[tr.deps[i]].tolist() for i in idx]
        assert all(d >= 0 for ds in deps for d in ds), "a kept transfer needs one left out"
        sub_ops = CommOps(ops.rows[:n_ops], Ragged.from_lists([ops.groups[i].tolist() for i in range(n_ops)]),
                          Ragged.from_lists([ops.deps[i].tolist() for i in range(n_ops)]))
        sub_tr = Transfers(tr.rows[idx], Ragged.from_lists(deps))
    n_py = len(sub_tr)
    py_s, py_flows = timed_schedule(sub_ops, sub_tr, fabric, job, 1 << 62)
    c_s, c_flows = timed_schedule(sub_ops, sub_tr, fabric, job, 0)
    assert py_flows.rows.tobytes() == c_flows.rows.tobytes(), "compiled and Python schedules differ"

    print(f"{'scheduler':34s} {'transfers':>12s} {'seconds':>9s} {'transfers/s':>13s}")
    print(f"{'compiled, whole job (warm)':34s} {len(tr):12,} {warm_s:9.2f} {len(tr) / warm_s:13,.0f}")
    print(f"{'compiled, same part as Python':34s} {n_py:12,} {c_s:9.2f} {n_py / c_s:13,.0f}")
    print(f"{'python (same function)':34s} {n_py:12,} {py_s:9.2f} {n_py / py_s:13,.0f}")
    print(f"\ncompiled vs python: {py_s / c_s:.1f}x faster (identical flows); "
          f"first call in a process (cache load, or compile on a new machine) +{max(first_s - warm_s, 0):.1f} s")


if __name__ == "__main__":
    main()
