"""The switch graph's kernels routes are chosen from (numba): BFS distances, connected components,
twin leaves (same neighbours: one BFS serves them all), the farthest switch, and each packet's
next hop among the neighbours one hop closer to its goal, picked by its hash."""
from __future__ import annotations

import numba
import numpy as np

# Sparse, so a fabric costs its links, not its switches squared: the adjacency is CSR (a leaf with
# 65,536 spines holds 65,536 entries, not every switch a row that wide), and distances are kept per
# class of twin leaves (same neighbours: every leaf of a two-tier plane, every leaf of a fat-tree
# pod), one BFS each, instead of one column per leaf. Routes are the same as over dense tables.


@numba.njit(cache=True)
def bfs(ptr: np.ndarray, nbr: np.ndarray, source: int, dist: np.ndarray) -> None:
    """dist[v] = hops from switch `source` to switch v (-1: unreachable), over the CSR adjacency."""
    dist[:] = -1
    queue = np.empty(len(dist), np.int64)
    queue[0] = source
    dist[source] = 0
    head, tail = 0, 1
    while head < tail:
        u = queue[head]
        head += 1
        for k in range(ptr[u], ptr[u + 1]):
            v = nbr[k]
            if dist[v] < 0:
                dist[v] = dist[u] + 1
                queue[tail] = v
                tail += 1


@numba.njit(cache=True)
def components(ptr: np.ndarray, nbr: np.ndarray) -> np.ndarray:
    """Connected component number of every switch."""
    n = len(ptr) - 1
    comp = np.full(n, -1, np.int64)
    queue = np.empty(max(n, 1), np.int64)
    c = 0
    for s in range(n):
        if comp[s] >= 0:
            continue
        comp[s] = c
        queue[0] = s
        head, tail = 0, 1
        while head < tail:
            u = queue[head]
            head += 1
            for k in range(ptr[u], ptr[u + 1]):
                v = nbr[k]
                if comp[v] < 0:
                    comp[v] = c
                    queue[tail] = v
                    tail += 1
        c += 1
    return comp


@numba.njit(cache=True)
def _same_neighbours(ptr: np.ndarray, nbr: np.ndarray, a: int, b: int) -> bool:
    if ptr[a + 1] - ptr[a] != ptr[b + 1] - ptr[b]:
        return False
    for k in range(ptr[a + 1] - ptr[a]):
        if nbr[ptr[a] + k] != nbr[ptr[b] + k]:
            return False
    return True


@numba.njit(cache=True)
def twin_leaves(ptr: np.ndarray, nbr: np.ndarray, leaves: np.ndarray) -> np.ndarray:
    """rep[i]: the first leaf (position in `leaves`) whose neighbours are exactly leaf i's, i
    itself if none before it has them or it has none. Twins G, H are two hops apart (a common
    neighbour, no link between them: H would be its own neighbour) and every other switch is
    equally far from both - a shortest path to G ends through a neighbour of G, which is one of
    H's - so one BFS serves the whole class."""
    n = len(leaves)
    h = np.empty(n, np.uint64)
    for i in range(n):
        x = np.uint64(14695981039346656037)          # FNV-1a over the sorted neighbour list
        u = leaves[i]
        for k in range(ptr[u], ptr[u + 1]):
            x = (x ^ np.uint64(nbr[k])) * np.uint64(1099511628211)
        h[i] = x
    order = np.argsort(h, kind="mergesort")
    rep = np.arange(n)
    i = 0
    while i < n:
        j = i + 1
        while j < n and h[order[j]] == h[order[i]]:
            j += 1
        for a in range(i, j):                         # a run of equal hashes: compare exactly
            la = order[a]
            if rep[la] != la or ptr[leaves[la] + 1] == ptr[leaves[la]]:
                continue
            for b in range(a + 1, j):
                lb = order[b]
                if rep[lb] == lb and _same_neighbours(ptr, nbr, leaves[la], leaves[lb]):
                    rep[lb] = la
        i = j
    return rep


@numba.njit(cache=True)
def farthest(ptr: np.ndarray, nbr: np.ndarray, sources: np.ndarray, keep: np.ndarray) -> int:
    """The most hops any switch is from any source (BFS from each); source k's distances are
    left in keep[k] while k < len(keep)."""
    scratch = np.empty(len(ptr) - 1, np.int32)
    far = -1
    for k in range(len(sources)):
        dist = keep[k] if k < len(keep) else scratch
        bfs(ptr, nbr, sources[k], dist)
        far = max(far, dist.max())
    return far


@numba.njit(cache=True)
def _hops_to(dist: np.ndarray, v: int, goal: int, twin: int) -> int:
    """Hops from switch v to leaf `goal`; dist is the BFS of goal's class representative `twin`."""
    if v == goal:
        return 0
    if v == twin:
        return 2
    return dist[v]


@numba.njit(cache=True)
def next_hops(ptr, nbr, ndir, dist, row, cur, goal, twin, h, out_sw, out_dir) -> None:
    """Per packet at switch cur[i] bound for leaf goal[i]: of the n neighbours one hop closer to
    the goal, in ascending switch order, the (h[i] mod n)-th (out_sw -1 if there is none)."""
    for i in range(len(cur)):
        c, g, t = cur[i], goal[i], twin[i]
        d = dist[row[i]]
        want = _hops_to(d, c, g, t) - 1
        out_sw[i], out_dir[i] = -1, -1
        if want == 0:       # the goal itself (a spine's 16,384 leaves need no scan): its link(s)
            lo = ptr[c] + np.searchsorted(nbr[ptr[c]:ptr[c + 1]], g)
            n = ptr[c] + np.searchsorted(nbr[ptr[c]:ptr[c + 1]], g, side="right") - lo
            if n > 0:
                k = lo + np.int64(h[i]) % n
                out_sw[i], out_dir[i] = nbr[k], ndir[k]
            continue
        n = 0
        for k in range(ptr[c], ptr[c + 1]):
            if _hops_to(d, nbr[k], g, t) == want:
                n += 1
        if n == 0:
            continue
        pick = np.int64(h[i]) % n
        for k in range(ptr[c], ptr[c + 1]):
            if _hops_to(d, nbr[k], g, t) == want:
                if pick == 0:
                    out_sw[i], out_dir[i] = nbr[k], ndir[k]
                    break
                pick -= 1
