"""Lab benchmark traffic patterns as jobs of a scenario: CommOps made directly, no model.

The patterns are the ones the IETF BMWG AI-fabric training benchmark runs
(draft-calabria-bmwg-ai-fabric-training-bench-00, "Benchmarking Methodology for AI Training
Network Fabrics"; section numbers as in that revision, titles to find them in later ones):

  incast     N:1 - ranks 1..N-1 each send `bytes` to rank 0 at the same time, `iterations` times
             (section 7.2 "PFC Behavior Under Incast": N:1 at line rate, N = 2..64; section 5.3
             "Back-to-Back Burst Absorption": incast ratios 2:1..32:1). Send/recv as NCCL moves it.
  alltoall   every rank sends bytes/N to every other rank at once, as NCCL's AllToAll (grouped
             send/recv), `iterations` times (section 9.2 "AlltoAll Benchmark": "every accelerator
             simultaneously sends to every other"; sizes as 9.1: 1 MB .. 4 GB).
  allreduce  a steady noisy neighbour: compute `gap_ns` then a ring AllReduce of `bytes`, again and
             again (section 10.1 "Synthetic JCT Under Controlled Conditions": computation C then an
             AllReduce of S; section 10.3 "Multi-Tenant JCT Interference": the other tenant).

Each repetition starts `gap_ns` after the previous one ended (the first `gap_ns` after the job's
start). `bytes` defaults to 8 MiB (8 MB is one of the draft's AllReduce/AlltoAll sizes).
"""
from __future__ import annotations

import numpy as np

from ..tables import COMMOP_DTYPE, CollKind, CommOps, Dim, Phase, Ragged

PATTERNS = ("incast", "alltoall", "allreduce")
DEFAULT_BYTES = 8 << 20


def pattern_ops(kind: str, ranks: int, nbytes: int, gap_ns: int, iterations: int) -> CommOps:
    """The pattern's ops on ranks 0..ranks-1."""
    cols, groups, deps = [], [], []
    prev: list[int] = []
    for it in range(iterations):
        now = []
        if kind == "incast":
            items = [(CollKind.SENDRECV, Dim.PP, [src, 0], 1) for src in range(1, ranks)]
        elif kind == "alltoall":
            items = [(CollKind.ALLTOALL, Dim.EP, list(range(ranks)), 1)]
        else:
            items = [(CollKind.ALLREDUCE, Dim.DP, list(range(ranks)), 4 if nbytes % 4 == 0 else 1)]
        for k, dim, group, elem in items:
            op = len(cols)
            cols.append((op, int(k), int(dim), int(Phase.OPT), 0, -1, -1, -1, it, nbytes, elem, gap_ns))
            groups.append(group)
            deps.append(list(prev))
            now.append(op)
        prev = now
    rows = np.array(cols, dtype=COMMOP_DTYPE)
    return CommOps(rows, Ragged.from_lists(groups), Ragged.from_lists(deps))


def pattern_units(kind: str, ranks: int, nbytes: int, iterations: int) -> int:
    """Work units (~transfers, timing/work.py) a pattern makes: NCCL messages of 128 KiB-1 MiB."""
    if kind == "alltoall":
        return iterations * ranks * (ranks - 1) * max(1, nbytes // ranks // (128 << 10))
    per = {"incast": ranks - 1, "allreduce": 2 * ranks}[kind]
    return iterations * per * max(1, nbytes // (128 << 10))
