"""How fast does the collectives stage turn ops into transfers?

One AllReduce per algorithm over a whole cluster (default 1,024 ranks, 8 GPUs per node, 1 GiB,
bf16), expanded: "cold" builds the template (first op of its shape), "warm" (best of 3) reuses the
cached template and only maps it to ranks (what every further op of that shape costs). The first
runs also pay for the OS handing the process fresh memory. Printed:
transfers, seconds, transfers per second; then a workload-like mix (many ops of a few shapes).

Run: python bench/bench_collectives.py [--ranks 1024] [--gpn 8] [--gib 1] [--channels 2] [--pxn]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tracegen.collectives import expand  # noqa: E402
from tracegen.collectives import hierarchical, ring, tree  # noqa: E402
from tracegen.config import Cluster, Job, Nccl, Parallelism  # noqa: E402
from tracegen.tables import COMMOP_DTYPE, CollKind, CommOps, Ragged  # noqa: E402
from tracegen.fabric.topology import build_fabric  # noqa: E402


def ops_of(specs) -> CommOps:
    rows = np.zeros(len(specs), dtype=COMMOP_DTYPE)
    rows["op_id"] = np.arange(len(specs))
    rows["kind"] = [int(k) for k, _, _ in specs]
    rows["bytes"] = [b for _, _, b in specs]
    rows["elem_bytes"] = 2
    groups = Ragged.from_lists([list(g) for _, g, _ in specs])
    return CommOps(rows, groups, Ragged.empty(len(specs)))


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--gpn", type=int, default=8)
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--channels", type=int, default=2)
    ap.add_argument("--pxn", action="store_true")
    a = ap.parse_args()
    fabric = build_fabric(Job(parallelism=Parallelism(dp=a.ranks, tp=1, pp=1, global_batch=a.ranks),
                              cluster=Cluster(gpus_per_node=a.gpn)))
    nbytes = int(a.gib * (1 << 30))
    ops = ops_of([(CollKind.ALLREDUCE, range(a.ranks), nbytes)])
    print(f"AllReduce {a.gib:g} GiB over {a.ranks} ranks ({a.ranks // a.gpn} nodes x {a.gpn}), "
          f"{a.channels} channels{', PXN' if a.pxn else ''}")
    print(f"{'algorithm':<14}{'transfers':>12}{'cold s':>9}{'cold tr/s':>13}{'warm s':>9}"
          f"{'warm tr/s':>13}")
    for algo in ("ring", "tree", "hierarchical"):
        for mod in (ring, tree, hierarchical):
            mod.allreduce.cache_clear()
        nccl = Nccl(algorithm=algo, channels=a.channels, pxn=a.pxn)
        tr, cold = timed(lambda: expand(ops, fabric, nccl))
        n = len(tr)
        del tr
        warm = min(timed(lambda: len(expand(ops, fabric, nccl)))[1] for _ in range(3))
        print(f"{algo:<14}{n:>12,}{cold:>9.2f}{n / cold:>13,.0f}{warm:>9.2f}{n / warm:>13,.0f}")
    # a workload-like mix: 200 TP AllReduces in 8-rank groups + 20 DP buckets over rails
    gpn = a.gpn
    nodes = a.ranks // gpn
    mix = [(CollKind.ALLREDUCE, range(k * gpn, (k + 1) * gpn), 8 << 20)
           for _ in range(200 // nodes + 1) for k in range(nodes)][:200]
    mix += [(CollKind.ALLREDUCE, range(g, a.ranks, gpn), 25_000_000) for g in range(gpn)] * 3
    mops = ops_of(mix)
    nccl = Nccl(algorithm="ring", channels=a.channels, pxn=a.pxn)
    tr, dt = timed(lambda: expand(mops, fabric, nccl))
    print(f"mix of {len(mops)} ops: {len(tr):,} transfers in {dt:.2f} s = {len(tr) / dt:,.0f}/s")


if __name__ == "__main__":
    main()
