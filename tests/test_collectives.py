"""Collective expansions against closed forms and a simulated data movement.

The first tests cover the flat ring AllReduce and the p2p split; the matrix below runs every
algorithm x collective x group size (1 and 8 GPUs per node) through the data-movement oracle in
collsim.py; the last part checks expand(): ranks, links, PXN, protocols and the auto rule.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from collsim import own_inputs, owned_blocks, replay, row_elements, sent_recv
from test_trees import children_rule, second_tree

from tracegen.collectives import ALGORITHMS, build_template, expand, node_layout, tuning
from tracegen.collectives.p2p import p2p_template
from tracegen.collectives.protocol import LL128_STEP_DATA_BYTES, LL_STEP_DATA_BYTES
from tracegen.collectives.ring import ring_allreduce_template
from tracegen.config import Cluster, Job, Nccl, Parallelism
from tracegen.tables import COMMOP_DTYPE, Algo, CollKind, CommOps, LinkKind, Proto, Ragged
from tracegen.fabric.topology import build_fabric


def simulate_ring(t, n):
    """Replay the transfers step by step on contribution counters: counts[rank][chunk] is a vector of
    how many times each rank's input is summed in. Reduce-scatter steps add, all-gather steps copy.
    Returns the final counters."""
    chunks = np.unique(t["chunk"])
    counts = {r: {c: np.eye(n, dtype=int)[r].copy() for c in chunks} for r in range(n)}
    steps = t["step"]
    for k in range(steps.max() + 1):
        snap = {r: {c: v.copy() for c, v in d.items()} for r, d in counts.items()}
        for i in np.nonzero(steps == k)[0]:
            src, dst, c = t["pos"][i], (t["pos"][i] + 1) % n, t["chunk"][i]
            if k < n - 1:
                counts[dst][c] = counts[dst][c] + snap[src][c]
            else:
                counts[dst][c] = snap[src][c].copy()
    return counts


@pytest.mark.parametrize("n", range(2, 10))
@pytest.mark.parametrize("channels", [1, 2, 4])
def test_ring_bytes_per_rank_equal_closed_form(n, channels):
    elem = 2
    S = n * channels * elem * 3000          # divisible: every chunk the same size
    t = ring_allreduce_template(n, S // elem, elem, channels, 2 << 20)
    sent = np.bincount(t["pos"], weights=t["bytes"], minlength=n)
    recv = np.bincount((t["pos"] + 1) % n, weights=t["bytes"], minlength=n)
    assert (sent * n == 2 * (n - 1) * S).all()
    assert (recv * n == 2 * (n - 1) * S).all()
    assert t["step"].max() == 2 * (n - 1) - 1


@pytest.mark.parametrize("n", [2, 3, 5, 7, 8, 9])
@pytest.mark.parametrize("S", [2, 1000, 6 * 1024 * 1024 + 10, 40 << 20])
def test_ring_moves_every_byte_and_reduces_once(n, S):
    elem = 2
    t = ring_allreduce_template(n, S // elem, elem, 2, 2 << 20)
    # every chunk crosses 2(n-1) links: total = 2(n-1) S for any size
    assert t["bytes"].sum() == 2 * (n - 1) * S
    counts = simulate_ring(t, n)
    for r in range(n):
        for c, v in counts[r].items():
            assert (v == 1).all(), f"rank {r} chunk {c}: contributions {v}"
    # chunks never exceed NCCL's 2 MiB chunk size
    assert t["bytes"].max() <= 2 << 20


@pytest.mark.parametrize("n", [2, 3, 4, 7])
def test_ring_dependencies_carry_the_same_chunk(n):
    t = ring_allreduce_template(n, 3 * n * 2 * (1 << 20) // 2 + 17, 2, 2, 2 << 20)
    dep = t["dep"]
    first = t["step"] == 0
    assert (dep[first] == -1).all()
    d = dep[~first]
    assert (d >= 0).all() and (d < np.nonzero(~first)[0]).all(), "deps point to earlier rows"
    # the transfer this one waits for delivered this very chunk to this rank one step earlier
    assert ((t["pos"][d] + 1) % n == t["pos"][~first]).all()
    assert (t["chunk"][d] == t["chunk"][~first]).all()
    assert (t["step"][d] == t["step"][~first] - 1).all()
    assert (t["channel"][d] == t["channel"][~first]).all()


@pytest.mark.parametrize("elems,channels", [(1, 2), (5, 2), (65536, 2), (1000001, 4)])
def test_p2p_split_covers_buffer(elems, channels):
    t = p2p_template(elems, 2, channels)
    assert t["bytes"].sum() == elems * 2
    assert len(t["channel"]) == min(channels, elems)


# ---------------------------------------------------------------------------------------------
# Every algorithm x collective x group size, 1 and 8 GPUs per node (templates on positions).
# Positions are node-major: position k*L + j is local member j of node k.

K = CollKind
ALGOS = ["ring", "tree", "halving_doubling", "hierarchical"]
KINDS = [K.ALLREDUCE, K.REDUCESCATTER, K.ALLGATHER, K.ALLTOALL, K.BROADCAST, K.REDUCE]
NS = [2, 3, 4, 5, 7, 8, 16, 24, 64]
EB, CHANNELS, CHUNK_BYTES = 2, 2, 4            # 2 B elements, 2 channels, 2-element chunks


def layout(n: int, gpn: int) -> tuple[int, int]:
    if gpn == 1:
        return n, 1
    return (1, n) if n <= gpn else (n // gpn, gpn)


def template(algo, kind, n, gpn, elems):
    N, L = layout(n, gpn)
    plan = tuning.plan(kind, Nccl(algorithm=algo), n, N, L, elems * EB, 400, 3600)
    return plan.algo, ALGORITHMS[(plan.algo, kind)](N, L, elems, EB, CHANNELS, CHUNK_BYTES)


def tree_bytes(N, L, S):
    """Per-position bytes sent (= received) by the tree AllReduce, from the re-derived trees:
    a member sends its channel's share up once (unless root) and once to each child."""
    n = N * L
    out = np.zeros(n, np.int64)
    trees = [children_rule(N), second_tree(N)]
    for c in range(CHANNELS):
        kids_of_node = trees[0 if c < (CHANNELS + 1) // 2 else 1]
        root_node = next(r for r in range(N) if all(r not in cs for cs in kids_of_node.values()))
        h = (c % ((CHANNELS + 1) // 2)) % L                  # channel c and c + C/2 share a NIC
        for p in range(n):
            k, j = divmod(p, L)
            m = (j - h) % L                                   # place in the node's chain
            kids = (m < L - 1) + (len(kids_of_node[k]) if m == 0 else 0)
            out[p] += S // CHANNELS * (kids + (0 if (m == 0 and k == root_node) else 1))
    return out, out


def expected_bytes(algo, kind, N, L, S):
    """Closed forms (sent, received) per position, or totals for the non-power-of-two
    halving-doubling ReduceScatter/AllGather: ("total", sent_total, recv_per_rank or None)."""
    n = N * L
    full = np.full(n, S, np.int64)
    pos = np.arange(n)
    if algo == "tree":
        return tree_bytes(N, L, S)
    if kind == K.ALLTOALL:
        blk = S // n
        if algo == "hierarchical":
            return None                                       # checked per link below
        return full * (n - 1) // n, full * (n - 1) // n
    if algo == "hierarchical":
        if kind == K.BROADCAST:
            k, j = divmod(pos, L)
            sent = S * (((j == 0) & (k < N - 1)).astype(int) + (j < L - 1))
            return sent, np.where(pos == 0, 0, S)
        if kind == K.REDUCE:
            k, j = divmod(pos, L)
            recv = S * ((j < L - 1).astype(int) + ((j == 0) & (k < N - 1)))
            return np.where(pos == 0, 0, S), recv
        return None                                           # per link below
    if algo == "halving_doubling":
        p2 = 1 << (n.bit_length() - 1)
        r = n - p2
        if kind == K.ALLREDUCE:
            act = 2 * (p2 - 1) * S // p2
            v = np.where(pos >= 2 * r, act, np.where(pos % 2, act + S, S))
            return v, v
        if kind in (K.REDUCESCATTER, K.ALLGATHER):
            if r == 0:
                return full * (n - 1) // n, full * (n - 1) // n
            sh = S // n
            if kind == K.REDUCESCATTER:
                return ("total", r * S + (p2 - 1) * S + r * sh, None)
            return ("total", r * sh + (p2 - 1) * S + r * (S - sh), full * (n - 1) // n)
        steps = range((n - 1).bit_length())
        if kind == K.BROADCAST:
            sent = [S * sum(1 for s in steps if (1 << s) > q and q + (1 << s) < n) for q in pos]
            return np.array(sent), np.where(pos == 0, 0, S)
        recv = [S * sum(1 for s in steps if q % (2 << s) == 0 and q + (1 << s) < n) for q in pos]
        return np.where(pos == 0, 0, S), np.array(recv)
    # ring (and the ring fallbacks of tree)
    if kind == K.ALLREDUCE:
        return full * 2 * (n - 1) // n, full * 2 * (n - 1) // n
    if kind in (K.REDUCESCATTER, K.ALLGATHER):
        return full * (n - 1) // n, full * (n - 1) // n
    return None                                               # Broadcast/Reduce: below


def link_masks(t, L):
    same = (t.src // L) == (t.dst // L)
    return same, ~same


@pytest.mark.parametrize("gpn", [1, 8])
@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.label)
@pytest.mark.parametrize("algo", ALGOS)
def test_bytes_per_rank_equal_closed_forms(algo, kind, n, gpn):
    N, L = layout(n, gpn)
    E = 4 * n                       # every chunk, shard, block and halving step divides evenly
    S = E * EB
    used, t = template(algo, kind, n, gpn, E)
    sent, recv = sent_recv(t, n)
    exp = expected_bytes(used, kind, N, L, S)
    if isinstance(exp, tuple) and isinstance(exp[0], str):
        assert sent.sum() == exp[1]
        if exp[2] is not None:
            assert (recv == exp[2]).all()
    elif exp is not None:
        assert (sent == exp[0]).all(), (sent, exp[0])
        assert (recv == exp[1]).all(), (recv, exp[1])
    elif kind in (K.BROADCAST, K.REDUCE):                     # ring chains
        root_side = recv if kind == K.BROADCAST else sent
        assert (np.delete(root_side, 0) == S).all() and root_side[0] == 0
        assert sent.sum() == (n - 1) * S
        assert (sent if kind == K.BROADCAST else recv)[0] == S
    else:                                                     # hierarchical: per link
        nvl, net = link_masks(t, L)
        if kind == K.ALLTOALL:
            blk_bytes = S // n
            f_nvl, f_net = (L - 1) * N * blk_bytes, (N - 1) * L * blk_bytes
        else:
            mult = 2 if kind == K.ALLREDUCE else 1
            f_nvl, f_net = mult * (L - 1) * S // L, mult * (N - 1) * S // (N * L)
        for mask, f in ((nvl, f_nvl), (net, f_net)):
            s, r = sent_recv(t, n, mask)
            assert (s == f).all() and (r == f).all(), (s, r, f)


def check_result(kind, n, elems, t, check_deps=True):
    if kind == K.ALLTOALL:
        blk = -(-elems // n)
        E = n * blk
        state = [np.zeros((n * E, 1), np.int64) for _ in range(n)]
        for i in range(n):
            state[i][i * E:(i + 1) * E] = 1
        replay(t, state, check_deps)
        for j in range(n):                                    # block (i, j) landed at j
            items = (np.arange(n)[:, None] * E + j * blk + np.arange(blk)).ravel()
            assert (state[j][items] == 1).all(), j
        return
    if kind in (K.REDUCESCATTER, K.ALLGATHER):
        sh = -(-elems // n)
        E = n * sh
        if kind == K.REDUCESCATTER:
            state = replay(t, own_inputs(n, E), check_deps)
            for p in range(n):                      # p holds shard p, summed once over all ranks
                assert (state[p][p * sh:(p + 1) * sh] == 1).all(), p
        else:
            owner = np.arange(E) // sh
            state = replay(t, owned_blocks(n, E, owner), check_deps)
            for p in range(n):                                # everyone holds every shard
                assert (state[p] == np.eye(n, dtype=np.int64)[owner]).all(), p
        return
    if kind == K.BROADCAST:
        state = replay(t, owned_blocks(n, elems, np.zeros(elems, int)), check_deps)
        for p in range(n):
            assert (state[p] == np.eye(n, dtype=np.int64)[0]).all(), p
        return
    state = replay(t, own_inputs(n, elems), check_deps)
    for p in (range(n) if kind == K.ALLREDUCE else [0]):      # each input summed exactly once
        assert (state[p] == 1).all(), p


@pytest.mark.parametrize("gpn", [1, 8])
@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.label)
@pytest.mark.parametrize("algo", ALGOS)
def test_data_reaches_every_rank_and_deps_deliver_inputs(algo, kind, n, gpn):
    for elems, check in ((4 * n, True), (4 * n + 3, n <= 16)):    # even and ragged splits
        _, t = template(algo, kind, n, gpn, elems)
        check_result(kind, n, elems, t, check)
        # deps point to transfers that delivered data to this transfer's sender
        rows = np.repeat(np.arange(len(t)), np.diff(t.deps.ptr))
        assert (t.dst[t.deps.values] == t.src[rows]).all()
        assert (t.deps.values < rows).all()


def drop_deps(t, keep):
    rows = np.repeat(np.arange(len(t)), np.diff(t.deps.ptr))
    k = keep(rows, t.deps.values)
    ptr = np.zeros(len(t) + 1, np.int64)
    np.cumsum(np.bincount(rows[k], minlength=len(t)), out=ptr[1:])
    return dataclasses.replace(t, deps=Ragged(ptr, t.deps.values[k]))


@pytest.mark.parametrize("algo,kind", [("ring", K.ALLREDUCE), ("tree", K.ALLREDUCE),
                                       ("halving_doubling", K.ALLREDUCE),
                                       ("hierarchical", K.ALLREDUCE),
                                       ("hierarchical", K.ALLGATHER)])
def test_oracle_catches_a_missing_dependency(algo, kind):
    """The dependency check is not vacuous: drop every transfer's first dep and it must fail."""
    _, t = template(algo, kind, 16, 8, 64)
    first = lambda rows, v: np.r_[False, rows[1:] == rows[:-1]]   # noqa: E731
    with pytest.raises(AssertionError, match="not among its dependencies"):
        check_result(kind, 16, 64, drop_deps(t, first))


# ---------------------------------------------------------------------------------------------
# expand(): ranks, links, PXN, protocols, auto.

def fabric_for(world, gpn):
    return build_fabric(Job(parallelism=Parallelism(dp=world, tp=1, pp=1, global_batch=world),
                            cluster=Cluster(gpus_per_node=gpn)))


def ops_of(specs):
    """specs: (kind, group, bytes) -> CommOps."""
    rows = np.zeros(len(specs), dtype=COMMOP_DTYPE)
    rows["op_id"] = np.arange(len(specs))
    rows["kind"] = [int(k) for k, _, _ in specs]
    rows["bytes"] = [b for _, _, b in specs]
    rows["elem_bytes"] = EB
    return CommOps(rows, Ragged.from_lists([list(g) for _, g, _ in specs]),
                   Ragged.empty(len(specs)))


SPECS_16 = [(k, range(16), 64 << 10) for k in KINDS] + [(K.SENDRECV, [3, 12], 1 << 20)]


@pytest.mark.parametrize("algo", ALGOS)
def test_expand_links_follow_nodes_and_pxn_keeps_net_on_rail(algo):
    fab = fabric_for(16, 8)
    ops = ops_of(SPECS_16)
    nccl = Nccl(algorithm=algo, channels=4)
    tr = expand(ops, fab, nccl)
    r = tr.rows
    same = fab.rank_node[r["src_rank"]] == fab.rank_node[r["dst_rank"]]
    assert ((r["link"] == LinkKind.NVLINK) == same).all()     # intra-node never on the fabric
    assert (r["transfer_id"] == np.arange(len(r))).all()
    px = expand(ops, fab, dataclasses.replace(nccl, pxn=True))
    p = px.rows
    net = p["link"] == LinkKind.NET
    rail = fab.nic_rail[fab.rank_nic]
    assert (rail[p["src_rank"][net]] == rail[p["dst_rank"][net]]).all()
    assert (fab.rank_node[p["src_rank"]] == fab.rank_node[p["dst_rank"]])[~net].all()
    # the fabric carries the same bytes, to the same receivers; NVLink carries the extra hops
    before = r["link"] == LinkKind.NET
    assert p["bytes"][net].sum() == r["bytes"][before].sum()
    assert (np.bincount(p["dst_rank"][net], p["bytes"][net], 16)
            == np.bincount(r["dst_rank"][before], r["bytes"][before], 16)).all()
    cross = before & (rail[r["src_rank"]] != rail[r["dst_rank"]])
    assert len(p) == len(r) + cross.sum()
    for t in (tr, px):                                        # deps deliver to the sender, earlier
        rows = np.repeat(np.arange(len(t.rows)), np.diff(t.deps.ptr))
        assert (t.rows["dst_rank"][t.deps.values] == t.rows["src_rank"][rows]).all()
        assert (t.deps.values < rows).all()
    # each NET hop made by PXN needs exactly its NVLink hop (to the proxy), nothing else
    split_net = (np.arange(len(r)) + np.cumsum(cross))[cross]
    for i in split_net:
        d = px.deps[i]
        assert len(d) == 1 and d[0] == i - 1 and p["link"][i - 1] == LinkKind.NVLINK
        assert p["dst_rank"][i - 1] == p["src_rank"][i]


def test_pxn_matches_dependencies_of_the_plain_expansion():
    fab = fabric_for(16, 8)
    ops = ops_of([(K.ALLREDUCE, range(16), 1 << 20)])
    nccl = Nccl(algorithm="ring", channels=2, pxn=False)
    tr, px = expand(ops, fab, nccl), expand(ops, fab, dataclasses.replace(nccl, pxn=True))
    r, p = tr.rows, px.rows
    rail = fab.nic_rail[fab.rank_nic]
    cross = (r["link"] == LinkKind.NET) & (rail[r["src_rank"]] != rail[r["dst_rank"]])
    assert cross.any()
    new = np.arange(len(r)) + np.cumsum(cross)                # where each original row landed
    assert (p["dst_rank"][new] == r["dst_rank"]).all() and (p["bytes"][new] == r["bytes"]).all()
    for i in range(len(r)):
        owner = new[i] - 1 if cross[i] else new[i]
        assert (px.deps[owner] == new[tr.deps[i]]).all()
        if cross[i]:
            assert p["src_rank"][owner] == r["src_rank"][i]
            assert rail[p["dst_rank"][owner]] == rail[r["dst_rank"][i]]


def test_ring_channels_leave_nodes_on_different_rails():
    fab = fabric_for(32, 8)
    tr = expand(ops_of([(K.ALLREDUCE, range(32), 64 << 20)]), fab, Nccl(channels=8, pxn=False))
    r = tr.rows
    net = r["link"] == LinkKind.NET
    rails = fab.nic_rail[fab.rank_nic[r["src_rank"][net]]]
    ch = r["channel"][net]
    assert len(np.unique(ch)) == 8
    for c in range(8):                                        # channel c enters on rail c
        assert set(fab.nic_rail[fab.rank_nic[r["dst_rank"][net][ch == c]]]) == {c}
        assert set(rails[ch == c]) == {(c - 1) % 8}


@pytest.mark.parametrize("proto", ["simple", "ll", "ll128"])
@pytest.mark.parametrize("algo", ["ring", "tree"])
def test_protocol_sizes_on_the_wire(algo, proto):
    fab = fabric_for(16, 8)
    ops = ops_of([(K.ALLREDUCE, range(16), 48 << 20), (K.ALLGATHER, range(16), 16 << 20)])
    r = expand(ops, fab, Nccl(algorithm=algo, protocol=proto, channels=4)).rows
    b, w = r["bytes"], r["wire_bytes"]
    if proto == "simple":
        assert (w == b).all() and (r["proto"] == Proto.SIMPLE).all()
    elif proto == "ll":
        assert (w == -(-b // 8) * 16).all() and (r["proto"] == Proto.LL).all()
        assert b.max() <= LL_STEP_DATA_BYTES and (r["max_msg_bytes"] == 65536).all()
    else:
        assert (w == -(-b // 120) * 128).all() and (r["proto"] == Proto.LL128).all()
        assert b.max() <= LL128_STEP_DATA_BYTES and (r["max_msg_bytes"] == 614400).all()
    assert (w <= np.maximum(r["max_msg_bytes"], w)).all()
    if proto == "simple":
        ar = r["op_id"] == 0
        from tracegen.collectives.tree import tree_chunk_bytes
        # ring: 1 MiB messages of 2 MiB chunks; tree: one chunk per message, NCCL-shrunk for
        # depth 8 (7 chain hops + log2 2 nodes): 48 MiB / (4 x 512 KiB) < 8 x 8 -> 128 KiB
        tree_chunk = tree_chunk_bytes(48 << 20, 4, 8, 512 << 10)
        assert tree_chunk == 128 << 10
        want = {"ring": (1 << 20, 2 << 20), "tree": (tree_chunk, tree_chunk)}[algo]
        assert (r["max_msg_bytes"][ar] == want[0]).all() and b[ar].max() <= want[1]
        assert (r["algo"][ar] == (Algo.RING if algo == "ring" else Algo.TREE)).all()
        assert (r["algo"][~ar] == Algo.RING).all()            # NCCL: Tree is AllReduce only


def test_tree_chunk_shrinks_like_nccl():
    from tracegen.collectives.tree import tree_chunk_bytes
    assert tree_chunk_bytes(1 << 30, 2, 14, 512 << 10) == 512 << 10
    # 8 MiB over 2 channels, depth 10: 8 chunks per channel < 8 x 10 -> halve to 128 KiB (floor
    # of the first rule); 32 < 4 x 10 -> 64 KiB; 64 >= 10 keeps it
    assert tree_chunk_bytes(8 << 20, 2, 10, 512 << 10) == 64 << 10
    assert tree_chunk_bytes(64 << 10, 2, 10, 512 << 10) == 32 << 10     # ... and to the floor


def test_channels_trimmed_for_small_ops_and_p2p_split():
    fab = fabric_for(8, 8)
    r = expand(ops_of([(K.ALLREDUCE, range(8), 40 << 10), (K.ALLREDUCE, range(8), 8 << 20),
                       (K.SENDRECV, [0, 5], 40 << 10)]), fab, Nccl(channels=4)).rows
    assert set(r["channel"][r["op_id"] == 0]) == {0}          # 40 KiB < 2 x 32 KiB
    assert set(r["channel"][r["op_id"] == 1]) == {0, 1, 2, 3}
    assert set(r["channel"][r["op_id"] == 2]) == {0, 1, 2, 3}  # send/recv keeps its channels


def test_auto_rule():
    nc = Nccl(algorithm="auto", protocol="auto", channels=16)
    order = {Proto.LL: 0, Proto.LL128: 1, Proto.SIMPLE: 2}
    for N, L in [(1, 8), (2, 8), (16, 8), (64, 1)]:
        plans = [tuning.plan(K.ALLREDUCE, nc, N * L, N, L, 1 << e, 400, 3600) for e in range(8, 32)]
        ranks = [order[p.proto] for p in plans]
        assert ranks == sorted(ranks), (N, L)                 # LL -> LL128 -> Simple as size grows
        assert plans[0].proto == Proto.LL
        if N > 1:
            assert plans[0].algo == "tree"                    # log-depth latency wins small
        for p, e in zip(plans, range(8, 32)):                 # the choice is the model's argmin
            cost = {(a, q): tuning.predict_us(a, q, K.ALLREDUCE, N * L, N, L, 1 << e,
                                              tuning.trim_channels(a, q, N * L, 1 << e, 16),
                                              400, 3600)
                    for a in ("ring", "tree") for q in order}
            assert (p.algo, p.proto) == min(cost, key=cost.get)
    assert tuning.plan(K.ALLREDUCE, nc, 16, 2, 8, 1 << 31, 400, 3600).algo == "ring"
    for kind in (K.REDUCESCATTER, K.ALLGATHER, K.BROADCAST, K.REDUCE):
        assert tuning.plan(kind, nc, 1024, 128, 8, 1 << 20, 400, 3600).algo == "ring"
    assert tuning.plan(K.SENDRECV, nc, 2, 2, 1, 8 << 10, 400, 3600).proto == Proto.LL
    assert tuning.plan(K.SENDRECV, nc, 2, 2, 1, 1 << 20, 400, 3600).proto == Proto.SIMPLE


def test_layout_of_groups():
    fab = fabric_for(32, 8)
    assert node_layout(np.arange(32), fab) == (4, 8)
    assert node_layout(np.arange(0, 32, 8), fab) == (4, 1)              # one per node (DP)
    assert node_layout(np.array([0, 2, 4, 6, 8, 10, 12, 14]), fab) == (2, 4)
    assert node_layout(np.array([0, 1, 2, 8]), fab) == (4, 1)           # uneven: flat
    assert node_layout(np.array([0, 8, 1, 9]), fab) == (4, 1)           # not node-major: flat


def test_markers_and_bad_settings():
    fab = fabric_for(8, 8)
    ops = ops_of([(K.MARKER, [0], 0), (K.ALLREDUCE, [3], 1 << 20)])
    assert len(expand(ops, fab, Nccl())) == 0
    from tracegen.errors import ConfigError
    for bad in (Nccl(algorithm="bogus"), Nccl(protocol="ll256")):
        with pytest.raises(ConfigError):
            expand(ops, fab, bad)


def test_template_cache_is_shared_and_read_only():
    p1, t1 = build_template(K.ALLREDUCE, 2, 8, 1 << 20, 2, Nccl())
    p2, t2 = build_template(K.ALLREDUCE, 2, 8, 1 << 20, 2, Nccl())
    assert t1 is t2 and p1 == p2
    with pytest.raises(ValueError):
        t1.bytes[0] = 0
    assert all(len(row_elements(t1, i)) * EB == t1.bytes[i] for i in range(0, len(t1), 97))


@pytest.mark.parametrize("channels", [1, 3])
def test_sendrecv_moves_the_buffer_once(channels):
    _, t = build_template(K.SENDRECV, 2, 1, 1000, EB, Nccl(channels=channels))
    assert (t.src == 0).all() and (t.dst == 1).all() and len(t.deps.values) == 0
    assert t.bytes.sum() == 1000 and len(t) == channels
