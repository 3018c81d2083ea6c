"""Closed-form sizes of the collectives stage's templates, per op (timing/work.py's estimate and
`tracegen collective`): the rows a template makes, and which share of them crosses the network."""
from __future__ import annotations


def transfers(kind: int, plan, n: int, N: int, L: int, nbytes: int, elem_bytes: int) -> int:
    """Rows the collectives stage's template for one op has (see collectives/*.py)."""
    from ..tables import CollKind as K
    elems = nbytes // elem_bytes
    if n < 2 or elems < 1:
        return 0
    ch = plan.channels
    chunk = max(1, plan.chunk_bytes // elem_bytes)
    algo = plan.algo
    if elems < n and n <= 4096 and algo != "ring":
        # fewer elements than ranks: some pieces are empty and their steps move nothing (templates
        # drop 0-byte rows), which the closed forms below do not see - a tiny op (a loss or a flag
        # AllReduce), so count its template's rows themselves. Not a ring's: its closed form counts
        # only non-empty pieces (_pieces), and its template has 2 n (n - 1) rows per channel (the
        # 4k preset's grad-norm over 4,096 ranks: 4 GB and 24 s of the estimate)
        from ..collectives import ALGORITHMS
        build = ALGORITHMS.get((algo, kind))
        if build is not None:
            return len(build(N, L, elems, elem_bytes, ch, plan.chunk_bytes))
    if algo == "p2p":
        rows = min(ch, elems)
    elif algo == "direct":
        rows = n * (n - 1) * min(ch, -(-elems // n))
    elif algo == "tree":
        rows = -(-elems // (ch * chunk)) * ch * 2 * (n - 1)
    elif algo == "halving_doubling":
        p2 = 1 << (n.bit_length() - 1)
        logp = p2.bit_length() - 1
        steps = {K.ALLREDUCE: 2 * logp * p2, K.REDUCESCATTER: logp * p2, K.ALLGATHER: logp * p2}
        rows = steps.get(kind, n - 1) + 2 * (n - p2)
    elif algo == "hierarchical":
        if kind == K.ALLTOALL:
            rows = n * ((L - 1) + (N - 1)) * ch
        else:
            unit = chunk * (n if kind == K.ALLREDUCE else 1)
            span = -(-elems // n) if kind in (K.REDUCESCATTER, K.ALLGATHER) else elems
            units = -(-span // (ch * unit)) * ch
            per = {K.ALLREDUCE: 2 * n * ((L - 1) + (N - 1)), K.REDUCESCATTER: n * ((L - 1) + (N - 1)),
                   K.ALLGATHER: n * ((L - 1) + (N - 1))}.get(kind, (N - 1) + N * (L - 1))
            rows = units * per
    else:                                                   # ring
        if kind == K.ALLREDUCE:
            rows = pieces(elems, ch * n, chunk) * 2 * (n - 1)
        elif kind in (K.REDUCESCATTER, K.ALLGATHER):
            rows = pieces(-(-elems // n), ch, chunk) * (n - 1) * n
        else:
            rows = pieces(elems, ch, chunk) * (n - 1)
    return int(rows)


def pieces(total: int, parts: int, chunk: int) -> int:
    """Non-empty pieces of NCCL's loop over `total` elements in `parts` pieces of at most `chunk`
    (collectives/template.chunk_loops): every full loop gives `parts`, the last shrinks its
    pieces evenly and may leave some empty."""
    full, rem = divmod(total, parts * chunk)
    if not rem:
        return full * parts
    real = min(chunk, -(-rem // parts))
    return full * parts + min(parts, -(-rem // real))


def cross_rail(algo: str, group, node, rail, N: int, L: int) -> float:
    """With nccl.pxn, the share of an op's transfers that cross nodes *and* rails (each becomes
    an NVLink hop + a NET hop on the destination's rail)."""
    import numpy as np
    g = np.asarray(group)
    nd, rl = node[g], rail[g]
    if N <= 1 or (algo in ("hierarchical", "tree") and L > 1):   # node-major: NET hops stay on rail
        return 0.0
    if algo == "ring" and L > 1:
        return N / len(g)                          # every channel leaves a node from another rail
    if algo in ("ring", "tree", "p2p", "hierarchical"):   # flat: member order; p2p: 0 -> 1
        nxt = np.roll(np.arange(len(g)), -1)
        hop = (nd != nd[nxt]) & (rl != rl[nxt])
        return float(hop[:1].mean() if algo == "p2p" else hop.mean())
    if algo == "halving_doubling":                 # partners at distances 1, 2, 4, ...
        p2 = 1 << (len(g).bit_length() - 1)
        i = np.arange(p2)
        hops = [(nd[i] != nd[i ^ d]) & (rl[i] != rl[i ^ d]) for d in (1 << k for k in range(p2.bit_length() - 1))]
        return float(np.mean(hops)) if hops else 0.0
    # every ordered pair (AllToAll): not same node, not same rail
    n = len(g)
    same = lambda k: int((np.bincount(k) ** 2).sum())                     # noqa: E731
    both = int((np.unique(nd * (int(rl.max()) + 1) + rl, return_counts=True)[1] ** 2).sum())
    pairs = n * n - same(nd) - same(rl) + both
    return pairs / max(n * (n - 1), 1)


def net_share(algo: str, n: int, N: int, L: int) -> float:
    """The fraction of an op's transfers (and bytes) that cross the network (not NVLink)."""
    if N <= 1:
        return 0.0
    if algo == "p2p":
        return 1.0
    if algo == "ring":
        return N / n
    if algo == "tree":
        return (N - 1) / (n - 1)
    if algo == "direct":
        return (n - L) / (n - 1)
    if algo == "hierarchical":
        return (N - 1) / ((L - 1) + (N - 1))
    return 1.0


def op_transfers(kind: int, plan, n: int, N: int, L: int, nbytes: int, elem_bytes: int) -> int:
    """Rows the collectives stage's template makes for one op of `n` ranks on N nodes x L GPUs
    (the estimate's per-op count; `tracegen collective` sums it over its sizes)."""
    return transfers(kind, plan, n, N, L, nbytes, elem_bytes)
