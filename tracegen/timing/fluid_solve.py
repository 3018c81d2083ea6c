"""Max-min fair rates of one component of the fluid engine (fluid.py's module doc): which links
can bind (hot), and progressive filling with link weights and per-item rate caps."""
from __future__ import annotations

import numba
import numpy as np

HOT = 1e-9         # a link is hot when its items' caps exceed its capacity by more than this share


@numba.njit(cache=True)
def hot(n_inf, dem_bytes_per_ns, cap_bytes_per_ns):
    """A link that can bind: an uncapped item on it, or its items' caps over its capacity."""
    return n_inf > 0 or dem_bytes_per_ns > cap_bytes_per_ns * (1.0 + HOT)


@numba.njit(cache=True)
def solve(comp, n_comp, hl, n_h, hmark, p_lo, p_hi, lk_id, lk_w, cap, rate_cap, nr, wsum, rcap, frozen):
    """Max-min fair rates nr of the items comp[:n_comp] under the hot links hl[:n_h] (every active
    item on them is in comp): progressive filling with link weights; an item also stops rising at
    its own rate cap; an item on no hot link gets its cap. Item i's links: entries [p_lo[i], p_hi[i])."""
    for j in range(n_h):
        ln = hl[j]
        wsum[ln] = 0.0
        rcap[ln] = cap[ln]
    left = 0
    for a in range(n_comp):
        i = comp[a]
        frozen[i] = True
        nr[i] = rate_cap[i]
        for k in range(p_lo[i], p_hi[i]):
            ln = lk_id[k]
            if hmark[ln]:
                wsum[ln] += lk_w[k]
                frozen[i] = False
        if not frozen[i]:
            nr[i] = 0.0
            left += 1
    level = 0.0
    while left > 0:
        best = np.inf
        for j in range(n_h):
            ln = hl[j]
            if wsum[ln] > 1e-12:
                v = rcap[ln] / wsum[ln]
                if v < best:
                    best = v
        for a in range(n_comp):
            i = comp[a]
            if not frozen[i] and rate_cap[i] - level < best:
                best = rate_cap[i] - level
        if best < 0.0:
            best = 0.0
        level += best
        for j in range(n_h):
            ln = hl[j]
            if wsum[ln] > 1e-12:
                rcap[ln] -= best * wsum[ln]
                if rcap[ln] <= cap[ln] * 1e-12:
                    rcap[ln] = 0.0
        for a in range(n_comp):
            i = comp[a]
            if frozen[i]:
                continue
            sat = level >= rate_cap[i] * (1.0 - 1e-12)
            for k in range(p_lo[i], p_hi[i]):
                if hmark[lk_id[k]] and rcap[lk_id[k]] == 0.0:
                    sat = True
                    break
            if sat:
                frozen[i] = True
                nr[i] = level
                left -= 1
                for k in range(p_lo[i], p_hi[i]):
                    if hmark[lk_id[k]]:
                        wsum[lk_id[k]] -= lk_w[k]
