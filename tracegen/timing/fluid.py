"""The timing engine: items (byte streams) sharing links max-min fairly, released by dependencies.

One engine for both granularities of the schedule: an item is a chunk transfer (`detail=full`) or
the bytes one NCCL connection carries for one op (`detail=conn`). An item crosses a set of links
(link directions: NIC ports, switch ports, a GPU's NVLink port) with a weight each - the share of
its bytes on that link (1, or 1/q when its messages spread over q QPs that take different paths).

Fluid model: at every moment the active items' rates are the max-min fair allocation under the
link capacities (progressive filling: all unfrozen items rise together until a link saturates;
the items crossing it freeze), recomputed whenever an item starts or ends. This is how a NIC that
serves its QPs with pending work in turn, and switch ports under per-flow fair queueing, share
bandwidth at time scales longer than a packet. An item's bytes finish at `finish`; it has arrived
`extra_ns` later (propagation and store-and-forward, or an op's pipeline fill).

Only what an event changes is recomputed. A link whose active items' rate caps add up to no more
than its capacity ("cool") can never bind: every item on it reaches its cap first. So the
allocation splits into independent parts, the connected components of items over "hot" links
(caps over capacity), and an item on no hot link runs at its cap. An item starting or ending
re-solves only the components of the links it crosses (those hot now or hot before), and each
active item keeps its bytes left, its rate and its predicted finish (in a heap) between changes.
A job of many DP replicas has a few dozen items per component whatever its size, so the cost of
an event does not grow with the job (chunk level, where items have no cap, every loaded link is
hot: the components are the whole connected traffic, as a global solve would see it). The
result is the global re-solve's up to float rounding (the levels of a filling add up in another
order): a finish can land 1 ns to the other side of a whole ns.

Release: an op is released `gap_ns` after the last of its dependency ops ends; an item becomes
active once its op is released and every item it depends on (same op) has arrived. Times are
integer ns (an item finishes at the first whole ns its bytes are through); remaining bytes are
float64 between events.

A fabric that changes during the run (scenario events at t > 0; timing/epochs.py): at each
epoch's instant the links' capacities change and the items whose route differs in the new epoch
leave their links for the new route's with the bytes they have left; the components of every
link touched are re-solved, as for a start or an end. Without epochs nothing of this runs.

Records, on request only: every link's load over time (LinkLoad: the report's utilisation) and
the rate of chosen items over time (ItemRates: the pcap writer paces a flow's packets along its
cumulative sent-bytes curve, progress_times inverts it); fluid_records.py.

This module holds run(), the engine's entry; fluid_engine.py the event loop (fluid_moves.py its
route moves at epochs), fluid_solve.py the max-min filling of a component, fluid_heap.py the finish heap.
"""
from __future__ import annotations

import numpy as np

from .fluid_engine import engine
from .fluid_records import INF, ItemRates, LinkLoad, progress_times  # noqa: F401  (the engine's API)
from ..tables import Ragged


def reverse_csr(r: Ragged, n_targets: int) -> tuple[np.ndarray, np.ndarray]:
    """Who depends on whom, as CSR (ptr, values)."""
    src = np.repeat(np.arange(len(r), dtype=np.int64), r.lengths())
    order = np.argsort(r.values, kind="stable")
    counts = np.bincount(r.values, minlength=n_targets) if len(r.values) else np.zeros(n_targets, np.int64)
    ptr = np.zeros(n_targets + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    return ptr, src[order].astype(np.int64)


def _epoch_args(epochs, n: int, ptr, lk, w) -> tuple:
    """(links ptr, links, weights, then the engine's epoch arrays): the items' own routes, with
    the epochs' route variants appended."""
    z = np.zeros(0, np.int64)
    if epochs is None:
        return (ptr, lk, w, z, z, z, z, np.zeros(1, np.int64), z, np.zeros(0),       # no variants: none listed
                np.zeros(2, np.int64), z, z)
    e = epochs
    ptr = np.r_[ptr[:n + 1], ptr[n] + e.ptr[1:]].astype(np.int64)
    lk = np.r_[lk[:ptr[n]], e.link].astype(np.int64)
    w = np.r_[w[:ptr[n]], e.weight].astype(np.float64)
    return (ptr, lk, w, np.r_[np.arange(n, dtype=np.int64), e.var_item].astype(np.int64), e.ev_t, e.ev_from, e.ev_to,
            e.evc_ptr, e.evc_link, e.evc_cap, e.st_ptr, e.st_item, e.st_var)


def run(op_gap, op_deps: Ragged, op_of, item_deps: Ragged, nbytes, extra_ns, lk_ptr, lk_id, lk_w,
        cap_bytes_per_ns, jit: bool = True, rate_cap=None, queue=None, record_links: int = 0,
        record_max: int = 0, record_items=None, record_items_max: int = 0, epochs=None):
    """Schedule everything. Returns (start, finish, end, op_start, op_end) as int64 arrays, and
    with record_links = L > 0 also the load of links 0..L-1 over time: (t, link, bytes per ns)
    whenever a link's load changes, at most record_max records (0: 64 per item, up to 4 M) (LinkLoad).
    record_items (bool [n], optional): also the rate of each marked item over time, (t, item,
    bytes per ns) whenever it changes, at most record_items_max records (0: 16 per marked item,
    up to 4 M) (ItemRates); the result is then (start, finish, end, op_start, op_end, LinkLoad or
    None, ItemRates). Off by default: nothing is recorded, nothing is paid.

    op_gap [n_ops]; op_deps: op ids each op waits for; op_of [n]: op of each item; item_deps: item
    ids each item needs (items of its own op); nbytes [n] (float); extra_ns [n]; lk_ptr/lk_id/lk_w:
    per item its links and weights (CSR); cap_bytes_per_ns [n_links]; rate_cap [n] (optional): the
    most bytes/ns an item can use whatever the links offer (inf: no limit); queue [n] (optional,
    -1: none): items of one queue - an NCCL connection's QP - are served one at a time, in the
    order they became ready (a QP works through its send queue in order). epochs (optional,
    timing/epochs.EpochTables): the fabric changes at instants - capacities, and items' routes
    (an item in flight moves with its bytes left)."""
    n_ops, n = len(op_gap), len(op_of)
    op_of = np.asarray(op_of, np.int64)
    if len(lk_id) >= 2**31:
        raise ValueError("fluid.run: more than 2^31 item links")
    od_ptr, od_val = reverse_csr(op_deps, n_ops)
    td_ptr, td_val = reverse_csr(item_deps, n)
    ot_val = np.argsort(op_of, kind="stable").astype(np.int64)
    ot_ptr = np.zeros(n_ops + 1, dtype=np.int64)
    np.cumsum(np.bincount(op_of, minlength=n_ops), out=ot_ptr[1:])
    args = (np.asarray(op_gap, np.int64), op_deps.lengths().astype(np.int64), od_ptr, od_val,
            item_deps.lengths().astype(np.int64), td_ptr, td_val, ot_ptr, ot_val, op_of,
            np.asarray(nbytes, np.float64), np.asarray(extra_ns, np.int64),
            np.asarray(lk_ptr, np.int64), np.asarray(lk_id, np.int64), np.asarray(lk_w, np.float64),
            np.asarray(cap_bytes_per_ns, np.float64),
            np.full(n, np.inf) if rate_cap is None else np.asarray(rate_cap, np.float64),
            np.full(n, -1, np.int64) if queue is None else np.asarray(queue, np.int64),
            int(record_links), (int(record_max) or min(4_000_000, 64 * n + 1024)) if record_links else 0)
    ep = _epoch_args(epochs, n, args[12], args[13], args[14])
    args = args[:12] + ep[:3] + args[15:]
    want = np.zeros(1, np.bool_) if record_items is None else np.asarray(record_items, np.bool_)
    imax = 0
    if record_items is not None:
        if len(want) != n:
            raise ValueError("record_items: one flag per item")
        imax = int(record_items_max) or min(4_000_000, 16 * int(want.sum()) + 1024)
    fn = engine if jit else getattr(engine, "py_func", engine)   # NUMBA_DISABLE_JIT: plain
    (start, finish, end, op_start, op_end, done, rec_t, rec_l, rec_v, n_rec,
     it_t, it_i, it_v, n_it, it_lost) = fn(*args, want, imax, *ep[3:])
    if not done:
        raise RuntimeError("schedule: dependency cycle, some items never became ready")
    load = None
    if record_links:
        k = min(n_rec, len(rec_t))
        load = LinkLoad(rec_t[:k], rec_l[:k], rec_v[:k], n_rec > len(rec_t))
    if record_items is not None:
        k = min(n_it, len(it_t))
        o = np.lexsort((it_i[:k], it_t[:k]))          # time order, items in id order at one time
        return start, finish, end, op_start, op_end, load, ItemRates(it_t[o], it_i[o], it_v[o], int(it_lost))
    if record_links:
        return start, finish, end, op_start, op_end, load
    return start, finish, end, op_start, op_end
