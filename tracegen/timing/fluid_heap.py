"""The fluid engine's finish heap: (predicted finish ns, item) pairs on two arrays, ordered by
(finish, item); an entry gone stale (the item's rate changed) is skipped when it surfaces, or
dropped when the heap is compacted."""
from __future__ import annotations

import numba

@numba.njit(cache=True)
def fcompact(hf, hi, hn, fin, active):
    """The finish heap without its stale entries (items no longer active or predicted
    elsewhere), re-heapified: at most one entry per active item."""
    m = 0
    for k in range(hn):
        j = hi[k]
        if active[j] and fin[j] == hf[k]:
            hf[m], hi[m] = hf[k], j
            m += 1
            active[j] = False                      # one entry per item
    for k in range(m):
        active[hi[k]] = True
    for top in range(m // 2 - 1, -1, -1):          # bottom-up heapify
        f, i = hf[top], hi[top]
        pos = top
        while True:
            c = 2 * pos + 1
            if c >= m:
                break
            if c + 1 < m and (hf[c + 1] < hf[c] or (hf[c + 1] == hf[c] and hi[c + 1] < hi[c])):
                c += 1
            if hf[c] < f or (hf[c] == f and hi[c] < i):
                hf[pos], hi[pos] = hf[c], hi[c]
                pos = c
            else:
                break
        hf[pos], hi[pos] = f, i
    return m


@numba.njit(cache=True, inline="always")
def fpush(hf, hi, hn, f, i):
    """Push (f, i) onto the finish heap (arrays hf, hi of hn < len(hf) entries, by (f, i))."""
    pos = hn
    while pos > 0:
        par = (pos - 1) >> 1
        if hf[par] < f or (hf[par] == f and hi[par] <= i):
            break
        hf[pos], hi[pos] = hf[par], hi[par]
        pos = par
    hf[pos], hi[pos] = f, i
    return hn + 1


@numba.njit(cache=True, inline="always")
def fpop(hf, hi, hn):
    """Drop the top of the finish heap; returns its new size."""
    hn -= 1
    f, i = hf[hn], hi[hn]
    pos = 0
    while True:
        c = 2 * pos + 1
        if c >= hn:
            break
        if c + 1 < hn and (hf[c + 1] < hf[c] or (hf[c + 1] == hf[c] and hi[c + 1] < hi[c])):
            c += 1
        if hf[c] < f or (hf[c] == f and hi[c] < i):
            hf[pos], hi[pos] = hf[c], hi[c]
            pos = c
        else:
            break
    hf[pos], hi[pos] = f, i
    return hn
