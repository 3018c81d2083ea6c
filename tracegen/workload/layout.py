"""Megatron rank order and process groups: tensor-parallel index fastest, then context, data, pipeline.

  rank(t, c, d, p) = t + tp·(c + cp·(d + dp·p))

Expert parallelism is carved out of data parallelism: the EP group of (t, c, d, p) is the ep
consecutive data-parallel indices of d's block. Experts are not tensor-split (expert TP = 1, as in
Megatron-core's MoE with `expert_tensor_parallel_size=1`): for expert weights the TP and CP ranks
act as data-parallel replicas, so the expert-data-parallel group of (t, c, d, p) is every
(t', c', d', p) whose d' sits at the same place of its EP block.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..config import Parallelism


@dataclass(frozen=True)
class Layout:
    tp: int
    dp: int
    pp: int
    cp: int = 1
    ep: int = 1

    @staticmethod
    def of(par: Parallelism) -> "Layout":
        return Layout(par.tp, par.dp, par.pp, par.cp, par.ep)

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
        """Dense gradients are reduced over data- and context-parallel ranks (they share weights)."""
        return sorted(self.rank(t, d, p, c) for d in range(self.dp) for c in range(self.cp))

    def ep_group(self, t: int, d: int, p: int, c: int = 0) -> list[int]:
        base = d - d % self.ep
        return [self.rank(t, base + e, p, c) for e in range(self.ep)]

    def edp_group(self, d: int, p: int) -> list[int]:
        e = d % self.ep
        return sorted(self.rank(t, k + e, p, c) for t in range(self.tp) for c in range(self.cp)
                      for k in range(0, self.dp, self.ep))
