"""The job's top-level keys: its name, iterations, seed and schedule granularity."""
from __future__ import annotations

from dataclasses import dataclass

from .declare import key


@dataclass(frozen=True)
class JobKeys:
    name: str = key("default", "names the output folder traces/<name>")
    iterations: int = key(1, "training iterations traced in one run", 1, 1000)
    seed: int = key(0, "32-bit seed", 0, 2**32 - 1)
    detail: str = key("auto", "schedule granularity: every chunk (full), per connection per op (conn), "
                              "or by size (auto)", choices=("auto", "full", "conn"))
