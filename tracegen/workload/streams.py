"""Building blocks of the CommOp table: an op list with shared keys, and per-TP-group streams.

A *stream* is the serial work of one TP group (one (cp, dp, pp) coordinate). Compute between two
collectives is folded into the next op's `gap_ns`; the three ways a stream meets an op:
  join  - the stream takes part and blocks on it (TP AllReduce, AllToAll, p2p send),
  fork  - the stream releases it and goes on (DP gradient bucket, ZeRO-3 prefetch),
  wait  - the stream blocks on an op someone else released (p2p receive, a forked bucket).
An op met by several streams (DP, EP, CP groups) depends on all of them: its deps are the union of
their positions and its gap the largest of their compute gaps (the members are symmetric).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..tables import COMMOP_DTYPE, CollKind, CommOps, Dim, Phase, Ragged


@dataclass
class OpList:
    cols: list = field(default_factory=list)
    groups: list = field(default_factory=list)
    deps: list = field(default_factory=list)
    keys: dict = field(default_factory=dict)

    def new(self, kind, dim, phase, stage, layer, mb, bucket, it, nbytes, elem_bytes, group) -> int:
        op_id = len(self.cols)
        self.cols.append([op_id, kind, dim, phase, stage, layer, mb, bucket, it, nbytes, elem_bytes, 0])
        self.groups.append(list(group))
        self.deps.append(set())
        return op_id

    def shared(self, key, *args) -> int:
        """The op for `key`, created with `args` (as for `new`) by the first stream that meets it."""
        op_id = self.keys.get(key)
        if op_id is None:
            op_id = self.keys[key] = self.new(*args)
        return op_id

    def meet(self, op_id: int, deps, gap_ns: int) -> None:
        self.deps[op_id].update(deps)
        self.cols[op_id][-1] = max(self.cols[op_id][-1], int(gap_ns))

    def table(self) -> CommOps:
        rows = np.array([tuple(c) for c in self.cols], dtype=COMMOP_DTYPE)
        return CommOps(rows, Ragged.from_lists(self.groups), Ragged.from_lists([sorted(d) for d in self.deps]))


@dataclass
class Stream:
    ops: OpList
    group: list                                   # the TP group's ranks
    stage: int
    iteration: int = 0
    last: list = field(default_factory=list)     # ops the stream's next op must follow
    acc_ns: int = 0                               # compute since then
    forked: list = field(default_factory=list)   # released, not yet waited for

    def compute(self, ns: int) -> None:
        self.acc_ns += int(ns)

    def join(self, ops: OpList, op_ids: list[int]) -> None:
        """Take part in `op_ids` (issued together, e.g. one per TP rank) and block on all of them."""
        for op_id in op_ids:
            ops.meet(op_id, self.last, self.acc_ns)
        self.last, self.acc_ns = list(op_ids), 0

    def fork(self, ops: OpList, op_id: int) -> None:
        ops.meet(op_id, self.last, self.acc_ns)
        self.forked.append(op_id)

    def mark(self, phase: Phase = Phase.OPT) -> int:
        """A data-less op at the stream's current point: pins the compute done so far in time."""
        op_id = self.ops.new(CollKind.MARKER, Dim.NONE, phase, self.stage, -1, -1, -1, self.iteration,
                             0, 1, self.group)
        self.join(self.ops, [op_id])
        return op_id

    def wait(self, op_id: int) -> None:
        """Block on `op_id` before the next op. Compute done before the wait is pinned by a marker,
        so it runs while the awaited op is in flight instead of after it."""
        if self.acc_ns:
            self.mark()
        if op_id not in self.last:
            self.last.append(op_id)

    def wait_forked(self) -> None:
        for op_id in self.forked:
            self.wait(op_id)
        self.forked = []
