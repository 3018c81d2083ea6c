"""Test oracle for collective templates: replay the rows on per-rank contribution counters and check
that no row reads data its dependencies do not guarantee.

State: state[r] is an [elements, width] int array. For reductions an element's row counts how many
times each rank's input is summed in (width n); for copies it is a one-hot of the element's owner.
A row's payload is the sender's state on its element set; `reduce` rows add it at the receiver,
the others overwrite.

Dependency check: when a row is replayed, every earlier row that wrote any element it reads at
the sender must be among its transitive dependencies — otherwise a schedule that honours the deps
could start the row before that data arrived.
"""
from __future__ import annotations

import numpy as np


def row_elements(t, r: int) -> np.ndarray:
    base = np.arange(int(t.lo[r]), int(t.hi[r]))
    return (base[None, :] + int(t.stride[r]) * np.arange(int(t.count[r]))[:, None]).ravel()


def ancestors(t) -> list[int]:
    """Transitive dependency sets as int bitsets (deps must point to earlier rows)."""
    anc = [0] * len(t)
    ptr, vals = t.deps.ptr.tolist(), t.deps.values.tolist()
    for i in range(len(t)):
        a = 0
        for d in vals[ptr[i]:ptr[i + 1]]:
            assert d < i, f"row {i} depends on later row {d}"
            a |= anc[d] | (1 << d)
        anc[i] = a
    return anc


def replay(t, state: list[np.ndarray], check_deps: bool = True) -> list[np.ndarray]:
    anc = ancestors(t) if check_deps else None
    writers = [[0] * len(s) for s in state] if check_deps else None
    cols = (t.src.tolist(), t.dst.tolist(), t.lo.tolist(), t.hi.tolist(), t.stride.tolist(),
            t.count.tolist(), t.reduce.tolist())
    for i, (s, d, lo, hi, stride, count, red) in enumerate(zip(*cols)):
        idx = slice(lo, hi) if count == 1 else row_elements(t, i)
        if check_deps:
            elems = range(lo, hi) if count == 1 else idx.tolist()
            seen = 0
            ws = writers[s]
            for e in elems:
                seen |= ws[e]
            missing = seen & ~anc[i]
            assert not missing, (f"row {i} ({s}->{d}, step {int(t.step[i])}) reads data written by "
                                 f"rows {[b for b in range(i) if missing >> b & 1][:5]} "
                                 "that are not among its dependencies")
            wd, bit = writers[d], 1 << i
            for e in elems:
                wd[e] |= bit
        if red:
            state[d][idx] += state[s][idx]
        else:
            state[d][idx] = state[s][idx]
    return state


def own_inputs(n: int, elems: int) -> list[np.ndarray]:
    """Reductions: every rank holds its own contribution on every element."""
    return [np.tile(np.eye(n, dtype=np.int64)[r], (elems, 1)) for r in range(n)]


def owned_blocks(n: int, elems: int, owner) -> list[np.ndarray]:
    """Copies: rank r holds a one-hot(r) on the elements it owns, nothing elsewhere."""
    owner = np.asarray(owner)
    return [np.where((owner == r)[:, None], np.eye(n, dtype=np.int64)[r][None, :], 0)
            for r in range(n)]


def sent_recv(t, n: int, mask=None) -> tuple[np.ndarray, np.ndarray]:
    sel = slice(None) if mask is None else mask
    w = t.bytes[sel].astype(np.int64)
    return (np.bincount(t.src[sel], weights=w, minlength=n).astype(np.int64),
            np.bincount(t.dst[sel], weights=w, minlength=n).astype(np.int64))
