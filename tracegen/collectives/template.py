"""The template contract every algorithm module returns, and the helpers that build one.

A `Template` is one collective on `n` member *positions* (0..n-1, node-major: position k*L + j is
local member j of node k), independent of which ranks run it, so it is built once per shape and
cached; `expand` maps positions to ranks with array indexing.

Rows are in a valid sequential execution order: replaying them top to bottom moves the data
correctly, and every row's deps (row-local ids, CSR) point to earlier rows that deliver data the
sender needs. Each row carries a set of buffer elements: `count` copies of [lo, hi) every `stride`
elements (count 1 = one contiguous range). For AllToAll the element space is every rank's send
buffer laid end to end (element e of rank i is item i*elems + e). `reduce` says whether the
receiver adds the data into its buffer (reduce phases) or stores it (copy phases).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..tables import Ragged

COLUMNS = (("src", np.int32), ("dst", np.int32), ("channel", np.int16), ("step", np.int32),
           ("chunk", np.int64), ("lo", np.int64), ("hi", np.int64), ("stride", np.int64),
           ("count", np.int32), ("reduce", np.bool_))


@dataclass(frozen=True, eq=False)
class Template:
    src: np.ndarray
    dst: np.ndarray
    channel: np.ndarray
    step: np.ndarray
    chunk: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    stride: np.ndarray
    count: np.ndarray
    reduce: np.ndarray
    bytes: np.ndarray     # payload bytes: (hi - lo) * count * elem_bytes
    deps: Ragged          # row-local ids of the transfers whose data this one needs

    def __len__(self) -> int:
        return len(self.src)


def ragged_from_padded(pad: np.ndarray) -> Ragged:
    """[rows, k] ids with -1 for "none" -> CSR (row order and in-row order kept)."""
    pad = np.asarray(pad, dtype=np.int64)
    if pad.ndim == 1:
        pad = pad[:, None]
    keep = pad >= 0
    ptr = np.zeros(len(pad) + 1, dtype=np.int64)
    np.cumsum(keep.sum(axis=1), out=ptr[1:])
    return Ragged(ptr, pad[keep])


def ragged_gather(ptr: np.ndarray, values: np.ndarray, rows: np.ndarray) -> Ragged:
    """Rows `rows` of the CSR (ptr, values), as a new CSR, without a Python loop."""
    rows = np.asarray(rows, dtype=np.int64)
    lens = ptr[rows + 1] - ptr[rows]
    out_ptr = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lens, out=out_ptr[1:])
    within = np.arange(out_ptr[-1], dtype=np.int64) - np.repeat(out_ptr[:-1], lens)
    return Ragged(out_ptr, values[np.repeat(ptr[rows], lens) + within])


def tile_deps(deps: Ragged, copies: int, rows_per_copy: int) -> Ragged:
    """Repeat a pattern's deps `copies` times, shifting copy t's ids by t * rows_per_copy."""
    lens = np.tile(np.diff(deps.ptr), copies)
    ptr = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=ptr[1:])
    shift = np.repeat(np.arange(copies, dtype=np.int64) * rows_per_copy, len(deps.values))
    return Ragged(ptr, np.tile(deps.values, copies) + shift)


class Builder:
    """Collects row blocks (each added with array columns) and their deps in global row ids."""

    def __init__(self) -> None:
        self.blocks: list[dict] = []
        self.deps: list[Ragged] = []
        self.n = 0

    def add(self, *, src, dst, channel, step, chunk, lo, hi, reduce, deps=None, stride=0,
            count=1) -> np.ndarray:
        """Append rows (columns broadcast together, flattened C-order); returns their row ids.

        deps: None, a Ragged (one row per added row), or a [rows, k] array padded with -1."""
        cols = dict(src=src, dst=dst, channel=channel, step=step, chunk=chunk, lo=lo, hi=hi,
                    stride=stride, count=count, reduce=reduce)
        arrs = np.broadcast_arrays(*(np.asarray(v) for v in cols.values()))
        m = arrs[0].size
        block = {name: np.ascontiguousarray(a, dtype=dt).reshape(-1)
                 for (name, dt), a in zip(COLUMNS, arrs)}
        if deps is None:
            deps = Ragged.empty(m)
        elif not isinstance(deps, Ragged):
            deps = ragged_from_padded(np.asarray(deps).reshape(m, -1))
        assert len(deps) == m, (len(deps), m)
        self.blocks.append(block)
        self.deps.append(deps)
        ids = np.arange(self.n, self.n + m, dtype=np.int64)
        self.n += m
        return ids

    def build(self, elem_bytes: int) -> Template:
        """Concatenate, drop rows that carry no data (and deps on them), freeze."""
        if not self.blocks:
            z = {name: np.zeros(0, dtype=dt) for name, dt in COLUMNS}
            return _freeze(Template(**z, bytes=np.zeros(0, np.int64), deps=Ragged.empty(0)))
        if len(self.blocks) == 1:                      # the big single-block templates: no copy
            cols, deps = self.blocks[0], self.deps[0]
        else:
            cols = {name: np.concatenate([b[name] for b in self.blocks]) for name, _ in COLUMNS}
            deps = Ragged.concat(self.deps)
        count = cols["count"].astype(np.int64)
        nbytes = np.maximum(cols["hi"] - cols["lo"], 0) * count * elem_bytes
        keep = nbytes > 0
        if not keep.all():
            cols = {k: v[keep] for k, v in cols.items()}
            deps = _filter_rows(deps, keep)
            nbytes = nbytes[keep]
        return _freeze(Template(**cols, bytes=nbytes, deps=deps))


def _filter_rows(deps: Ragged, keep: np.ndarray) -> Ragged:
    """Keep rows `keep` and renumber; deps on dropped rows go (they delivered no data)."""
    new_id = np.cumsum(keep) - 1
    row_of = np.repeat(np.arange(len(deps)), np.diff(deps.ptr))
    ok = keep[row_of] & keep[deps.values]
    rows = new_id[row_of[ok]]
    ptr = np.zeros(int(keep.sum()) + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=len(ptr) - 1), out=ptr[1:])
    return Ragged(ptr, new_id[deps.values[ok]])


def _freeze(t: Template) -> Template:
    for v in (*t.__dict__.values(), t.deps.ptr, t.deps.values):
        if isinstance(v, np.ndarray):
            v.flags.writeable = False
    return t


def chunk_loops(total: int, parts: int, chunk: int) -> tuple[np.ndarray, np.ndarray]:
    """NCCL's loop over a buffer: each loop gives `parts` pieces of `chunk` elements; the last loop
    shrinks its pieces evenly (realChunkSize = min(chunk, divUp(remaining, parts))).
    Returns (loop offsets, real piece size per loop)."""
    if total <= 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    offs = np.arange(0, total, parts * chunk, dtype=np.int64)
    real = np.minimum(chunk, -(-(total - offs) // parts))
    return offs, real
