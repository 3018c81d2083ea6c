"""Megatron rank order and process groups (`parallel_state.initialize_model_parallel`).

Dense grid, order tp-cp-dp-pp (tensor-parallel index fastest):

  rank(t, c, d, p) = t + tp·(c + cp·(d + dp·p))

Expert grid (Megatron-core's second `RankGenerator`, order tp-ep-dp-pp with cp folded away): the
tp·cp·dp ranks of a pipeline stage, numbered q = t + tp·(c + cp·d), are re-cut as

  q = et + etp·(e + ep·k)      et: expert-TP index, e: expert-parallel index, k: expert-DP index

so with expert_tp = 1 the EP group of rank 0 is {0..ep-1} (NVLink inside a node) and its
expert-DP group {0, ep, 2·ep, ..}; with expert_tp = tp the expert-TP group is the TP group.
Groups are lists of global ranks in ascending order (NCCL ring order follows rank order).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from ..config import Parallelism


@dataclass(frozen=True)
class Layout:
    tp: int
    dp: int
    pp: int
    cp: int = 1
    ep: int = 1
    etp: int = 0    # 0: = tp

    @staticmethod
    def of(par: Parallelism) -> "Layout":
        return Layout(par.tp, par.dp, par.pp, par.cp, par.ep, par.etp)

    @property
    def stage_ranks(self) -> int:
        return self.tp * self.cp * self.dp

    @property
    def expert_tp(self) -> int:
        return self.etp or self.tp

    @property
    def edp(self) -> int:
        return self.stage_ranks // (self.expert_tp * self.ep)

    def rank(self, t: int, d: int, p: int, c: int = 0) -> int:
        return t + self.tp * (c + self.cp * (d + self.dp * p))

    def coords(self, rank: int) -> tuple[int, int, int, int]:
        """rank -> (tp index, dp index, pp stage, cp index)."""
        t, rest = rank % self.tp, rank // self.tp
        c, rest = rest % self.cp, rest // self.cp
        return t, rest % self.dp, rest // self.dp, c

    def tp_group(self, d: int, p: int, c: int = 0) -> list[int]:
        return [self.rank(t, d, p, c) for t in range(self.tp)]

    def cp_group(self, t: int, d: int, p: int) -> list[int]:
        return [self.rank(t, d, p, c) for c in range(self.cp)]

    def dp_group(self, t: int, p: int) -> list[int]:
        """Dense gradients are reduced over data- and context-parallel ranks (they share weights).
        Made once per (t, p): every stream of the stage asks for it per bucket (the list is only read)."""
        return _dp_group(self, t, p)

    # ---- expert grid ------------------------------------------------------------------------
    def expert_coords(self, rank: int) -> tuple[int, int, int, int]:
        """rank -> (expert-TP index, EP index, expert-DP index, pp stage)."""
        p, q = divmod(rank, self.stage_ranks)
        et, rest = q % self.expert_tp, q // self.expert_tp
        return et, rest % self.ep, rest // self.ep, p

    def expert_rank(self, et: int, e: int, k: int, p: int) -> int:
        return et + self.expert_tp * (e + self.ep * k) + self.stage_ranks * p

    def ep_group(self, rank: int) -> list[int]:
        et, _, k, p = self.expert_coords(rank)
        return [self.expert_rank(et, e, k, p) for e in range(self.ep)]

    def etp_group(self, rank: int) -> list[int]:
        _, e, k, p = self.expert_coords(rank)
        return [self.expert_rank(et, e, k, p) for et in range(self.expert_tp)]

    def edp_group(self, rank: int) -> list[int]:
        et, e, _, p = self.expert_coords(rank)
        return [self.expert_rank(et, e, k, p) for k in range(self.edp)]


@functools.lru_cache(maxsize=4096)
def _dp_group(lay: Layout, t: int, p: int) -> list[int]:
    return sorted(lay.rank(t, d, p, c) for d in range(lay.dp) for c in range(lay.cp))
