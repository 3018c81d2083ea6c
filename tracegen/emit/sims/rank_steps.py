"""One rank's ops in the order it runs them, with the compute it runs before each: what the
per-rank exports (Chakra ET, SimAI rows) write.

An op's gap_ns is the compute of the stream that met it, counted from the op's deps
(workload/streams.py): an op the stream joins resets the count, one it forks off (a DP gradient
bucket, a ZeRO prefetch, a CP ring send) does not, so a fork and the next join carry overlapping
gaps of ONE compute span. A point-to-point op's gap is its sender's compute: the receiver only
waits. Summing gaps would count spans twice; simulators with one compute engine per rank
(ASTRA-sim's HardwareResource, SimAI's sweep) would run them twice. So, per rank: ops with the
same deps among the rank's own ops start from the same point of its stream; sorted by gap they
split that span into consecutive pieces, each run right before its op, and the rank's compute
is the sum of the spans (the largest gap of each).
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from ...errors import OutputError
from ...tables import CollKind, CommOps


def topo_order(ops: CommOps) -> list[int]:
    """Op ids in dependency order (a dep may have a higher id than the op that waits for it);
    ties by op id, so the order is deterministic."""
    n = len(ops)
    left = ops.deps.lengths().astype(np.int64).copy()
    users: list[list[int]] = [[] for _ in range(n)]
    for o in range(n):
        for d in ops.deps[o].tolist():
            users[d].append(o)
    heap = [o for o in range(n) if left[o] == 0]
    heapq.heapify(heap)
    out = []
    while heap:
        o = heapq.heappop(heap)
        out.append(o)
        for u in users[o]:
            left[u] -= 1
            if left[u] == 0:
                heapq.heappush(heap, u)
    if len(out) != n:
        raise OutputError("the op table has a dependency cycle")
    return out


@dataclass(frozen=True)
class Step:
    op: int
    after: frozenset      # the rank's own ops this one waits for (its stream point)
    compute_ns: int       # compute the rank runs right before it, after the previous step of
    first: bool           # ... the same stream point (first: right after `after` completes)


def rank_steps(ops: CommOps, rank: int, order: list[int]) -> list[Step]:
    """The rank's ops (its group holds it), in a dependency order, each stream point's ops
    together and by increasing gap, with the compute piece before each (module docstring)."""
    rows = ops.rows
    owner = np.repeat(np.arange(len(ops)), ops.groups.lengths())
    member = np.zeros(len(ops), dtype=bool)
    member[owner[ops.groups.values == rank]] = True
    p2p = rows["kind"] == CollKind.SENDRECV
    points: dict[frozenset, list[int]] = {}
    after_of: dict[int, frozenset] = {}
    for o in np.flatnonzero(member).tolist():
        after_of[o] = frozenset(d for d in ops.deps[o].tolist() if member[d])
        points.setdefault(after_of[o], []).append(o)

    def gap(o: int) -> int:              # a receiver computes nothing for the sender
        return 0 if p2p[o] and int(ops.groups[o][0]) != rank else int(rows["gap_ns"][o])

    steps, done = [], set()
    for o in order:
        if not member[o] or o in done:
            continue
        key = after_of[o]
        run = 0
        for i, x in enumerate(sorted(points[key], key=lambda x: (gap(x), x))):
            steps.append(Step(x, key, max(0, gap(x) - run), i == 0))
            run = max(run, gap(x))
            done.add(x)
    return steps
