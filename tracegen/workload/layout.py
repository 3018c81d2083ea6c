"""Megatron rank order: tensor-parallel index fastest, then data-parallel, then pipeline stage."""
from __future__ import annotations

from dataclasses import dataclass

from ..config import Parallelism


@dataclass(frozen=True)
class Layout:
    tp: int
    dp: int
    pp: int

    @staticmethod
    def of(par: Parallelism) -> "Layout":
        return Layout(par.tp, par.dp, par.pp)

    def rank(self, t: int, d: int, p: int) -> int:
        return t + self.tp * (d + self.dp * p)

    def coords(self, rank: int) -> tuple[int, int, int]:
        """rank -> (tp index, dp index, pp stage)."""
        return rank % self.tp, (rank // self.tp) % self.dp, rank // (self.tp * self.dp)

    def tp_group(self, d: int, p: int) -> list[int]:
        return [self.rank(t, d, p) for t in range(self.tp)]

    def dp_group(self, t: int, p: int) -> list[int]:
        return [self.rank(t, d, p) for d in range(self.dp)]
