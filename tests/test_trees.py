"""NCCL's double binary tree, re-derived independently of tracegen/collectives/tree.py.

tree.py computes each node's *parent* with arithmetic on its lowest set bit. Here we start from the
*children* rule that NVIDIA/nccl src/graph/trees.cc describes (and that its ncclGetBtree
implements), build the tree top-down, and read the parents off it:
  - node 0 is the root; its only child is the largest power of two below N;
  - a node r > 0 whose lowest set bit is b has children r - b/2 (when b > 1) and the first of
    r + b/2, r + b/4, .., r + 1 that is below N (when b > 1);
  - the second tree mirrors the first when N is even (node r plays N-1-r) and shifts it by one
    when N is odd (node r plays r-1 mod N).
Besides the 1..64 comparison, the three drawings in trees.cc are checked edge by edge.
"""
from __future__ import annotations

import numpy as np
import pytest

from tracegen.collectives.tree import (btree_parent, channel_head, channel_tree, dtree_parent,
                                       position_parents)


def children_rule(N: int) -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {r: [] for r in range(N)}
    if N < 2:
        return kids
    top = 1
    while top * 2 < N:
        top *= 2
    kids[0] = [top]
    stack = [top]
    while stack:                                    # walk the tree from the root
        r = stack.pop()
        b = r & -r
        if b == 1:
            continue
        below = [r - b // 2]
        half = b // 2
        while half >= 1 and r + half >= N:
            half //= 2
        if half >= 1:
            below.append(r + half)
        kids[r] = below
        stack.extend(below)
    return kids


def parents_of(kids: dict[int, list[int]], N: int) -> np.ndarray:
    par = np.full(N, -1)
    for p, cs in kids.items():
        for c in cs:
            assert par[c] == -1, f"node {c} has two parents"
            par[c] = p
    return par


def relabel(kids: dict[int, list[int]], f) -> dict[int, list[int]]:
    return {f(p): sorted(f(c) for c in cs) for p, cs in kids.items()}


def second_tree(N: int) -> dict[int, list[int]]:
    k0 = children_rule(N)
    return relabel(k0, (lambda r: (r + 1) % N) if N % 2 else (lambda r: N - 1 - r))


def kids_from_parents(par: np.ndarray) -> dict[int, list[int]]:
    return {r: sorted(np.flatnonzero(par == r).tolist()) for r in range(len(par))}


@pytest.mark.parametrize("N", range(1, 65))
def test_both_trees_match_the_children_rule(N):
    k0, k1 = children_rule(N), second_tree(N)
    assert (btree_parent(N) == parents_of(k0, N)).all()
    assert (dtree_parent(N) == parents_of(k1, N)).all()
    assert kids_from_parents(btree_parent(N)) == {r: sorted(c) for r, c in k0.items()}
    assert kids_from_parents(dtree_parent(N)) == {r: sorted(c) for r, c in k1.items()}
    # binary trees spanning all nodes, with one root each
    for par in (btree_parent(N), dtree_parent(N)):
        assert (par < 0).sum() == 1
        assert max((np.bincount(par[par >= 0], minlength=N)).tolist() or [0]) <= 2


def edges(text: str) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for item in text.split(";"):
        p, cs = item.split(":")
        out[int(p)] = sorted(int(c) for c in cs.split(",") if c)
    return out


# The drawings in trees.cc, transcribed: parent: children.
DRAWN = {
    ("btree", 14): "0:8;8:4,12;4:2,6;12:10,13;2:1,3;6:5,7;10:9,11",
    ("mirror", 12): "11:3;3:1,7;1:0,2;7:5,9;5:4,6;9:8,10",
    ("shift", 13): "1:9;9:5,0;5:3,7;0:11;3:2,4;7:6,8;11:10,12",
}


@pytest.mark.parametrize("which,N", list(DRAWN))
def test_trees_match_the_drawings_in_trees_cc(which, N):
    par = btree_parent(N) if which == "btree" else dtree_parent(N)
    got = {p: c for p, c in kids_from_parents(par).items() if c}
    assert got == edges(DRAWN[which, N])


def test_inner_nodes_of_one_tree_are_leaves_of_the_other():
    for N in (8, 16, 32, 64):
        inner0 = set(btree_parent(N)[btree_parent(N) >= 0].tolist())
        inner1 = set(dtree_parent(N)[dtree_parent(N) >= 0].tolist())
        assert len(inner0 & inner1) <= 1, N          # the double binary tree's point


@pytest.mark.parametrize("N,L", [(1, 8), (4, 1), (3, 8), (5, 4)])
@pytest.mark.parametrize("channels", [1, 2, 4])
def test_position_trees_chain_inside_nodes_and_stay_on_rail(N, L, channels):
    par = position_parents(N, L, channels)
    trees = (btree_parent(N), dtree_parent(N))
    for c in range(channels):
        t = channel_tree(channels)[c]
        h = (c % -(-channels // 2)) % L                # channel c and c + ceil(C/2) share a head
        assert t == (0 if channels == 1 else int(c >= -(-channels // 2)))
        for p in range(N * L):
            k, j = divmod(p, L)
            q = par[c, p]
            if j != h:                                 # chain member: parent is the previous local
                assert q == k * L + (j - 1) % L
            elif trees[t][k] < 0:
                assert q == -1
            else:                                      # head: parent node's head, same rail
                assert q == trees[t][k] * L + h and q % L == p % L


@pytest.mark.parametrize("channels,L", [(16, 8), (8, 8), (4, 2), (3, 4)])
def test_every_nic_runs_both_trees(channels, L):
    """NCCL duplicates channel c into c + nChannels (same chain, same NIC) and gives the copy the
    second tree: channel c and c + ceil(C/2) have the same head and different trees."""
    half = -(-channels // 2)
    heads, trees = channel_head(channels, L), channel_tree(channels)
    for c in range(channels - half):
        assert heads[c] == heads[c + half] and (trees[c], trees[c + half]) == (0, 1)
    assert len(set(heads.tolist())) == min(half, L)


def test_tree_pipeline_window_keeps_deps_on_deliveries():
    """The flow-control credit (WINDOW chunks) is a dependency on a transfer that reached the
    sender: every dep still delivers to the sender, and an up-send of chunk k waits for chunk
    k - WINDOW's result coming down to the same member."""
    from tracegen.collectives.tree import WINDOW, allreduce
    t = allreduce(4, 2, (WINDOW + 3) * 2 * 64, 4, 2, 256)      # WINDOW + 3 loops of 2 chunks
    rows = np.repeat(np.arange(len(t)), np.diff(t.deps.ptr))
    assert (t.dst[t.deps.values] == t.src[rows]).all()
    up = t.reduce
    loop = t.chunk // 2
    late = up & (loop >= WINDOW)
    for r in np.flatnonzero(late)[:50]:
        deps = t.deps[r]
        back = [d for d in deps if not t.reduce[d]]               # a broadcast (down) delivery
        assert len(back) == 1 and loop[back[0]] == loop[r] - WINDOW and t.dst[back[0]] == t.src[r]
    assert all(not any(not t.reduce[d] for d in t.deps[r]) for r in np.flatnonzero(up & (loop < WINDOW)))
