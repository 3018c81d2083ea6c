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

Records, on request only: every link's load over time (LinkLoad: the report's utilisation) and
the rate of chosen items over time (ItemRates: the pcap writer paces a flow's packets along its
cumulative sent-bytes curve, progress_times inverts it); fluid_records.py.
"""
from __future__ import annotations

import heapq

import numba
import numpy as np

from .. import progress
from .fluid_records import INF, ItemRates, LinkLoad, progress_times  # noqa: F401  (the engine's API)
from ..tables import Ragged

HOT = 1e-9         # a link is hot when its items' caps exceed its capacity by more than this share


def reverse_csr(r: Ragged, n_targets: int) -> tuple[np.ndarray, np.ndarray]:
    """Who depends on whom, as CSR (ptr, values)."""
    src = np.repeat(np.arange(len(r), dtype=np.int64), r.lengths())
    order = np.argsort(r.values, kind="stable")
    counts = np.bincount(r.values, minlength=n_targets) if len(r.values) else np.zeros(n_targets, np.int64)
    ptr = np.zeros(n_targets + 1, dtype=np.int64)
    np.cumsum(counts, out=ptr[1:])
    return ptr, src[order].astype(np.int64)


# Progress of a long run: progress.report(items finished, items) about every PROGRESS_EVERY items
# (the engine calls back through numba's object mode; nothing happens without a hook).
PROGRESS_EVERY = 1 << 13


def _report(done: int, total: int) -> None:
    progress.report(done, total)


def run(op_gap, op_deps: Ragged, op_of, item_deps: Ragged, nbytes, extra_ns, lk_ptr, lk_id, lk_w,
        cap_bytes_per_ns, jit: bool = True, rate_cap=None, queue=None, record_links: int = 0,
        record_max: int = 0, record_items=None, record_items_max: int = 0):
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
    order they became ready (a QP works through its send queue in order)."""
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
    want = np.zeros(1, np.bool_) if record_items is None else np.asarray(record_items, np.bool_)
    imax = 0
    if record_items is not None:
        if len(want) != n:
            raise ValueError("record_items: one flag per item")
        imax = int(record_items_max) or min(4_000_000, 16 * int(want.sum()) + 1024)
    fn = _engine if jit else getattr(_engine, "py_func", _engine)   # NUMBA_DISABLE_JIT: plain
    (start, finish, end, op_start, op_end, done, rec_t, rec_l, rec_v, n_rec,
     it_t, it_i, it_v, n_it, it_lost) = fn(*args, want, imax)
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


@numba.njit(cache=True)
def _hot(n_inf, dem_bytes_per_ns, cap_bytes_per_ns):
    """A link that can bind: an uncapped item on it, or its items' caps over its capacity."""
    return n_inf > 0 or dem_bytes_per_ns > cap_bytes_per_ns * (1.0 + HOT)


@numba.njit(cache=True)
def _solve(comp, n_comp, hl, n_h, hmark, lk_ptr, lk_id, lk_w, cap, rate_cap, nr, wsum, rcap, frozen):
    """Max-min fair rates nr of the items comp[:n_comp] under the hot links hl[:n_h] (every active
    item on them is in comp): progressive filling with link weights; an item also stops rising at
    its own rate cap; an item on no hot link gets its cap."""
    for j in range(n_h):
        ln = hl[j]
        wsum[ln] = 0.0
        rcap[ln] = cap[ln]
    left = 0
    for a in range(n_comp):
        i = comp[a]
        frozen[i] = True
        nr[i] = rate_cap[i]
        for k in range(lk_ptr[i], lk_ptr[i + 1]):
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
            for k in range(lk_ptr[i], lk_ptr[i + 1]):
                if hmark[lk_id[k]] and rcap[lk_id[k]] == 0.0:
                    sat = True
                    break
            if sat:
                frozen[i] = True
                nr[i] = level
                left -= 1
                for k in range(lk_ptr[i], lk_ptr[i + 1]):
                    if hmark[lk_id[k]]:
                        wsum[lk_id[k]] -= lk_w[k]


@numba.njit(cache=True)
def _fcompact(hf, hi, hn, fin, active):
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
def _fpush(hf, hi, hn, f, i):
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
def _fpop(hf, hi, hn):
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


@numba.njit(cache=True)
def _engine(gap, op_deps_left, od_ptr, od_val, tr_deps_left, td_ptr, td_val, ot_ptr, ot_val, op_of,
            nbytes, extra, lk_ptr, lk_id, lk_w, cap, rate_cap, queue, rec_links, rec_max, want, it_max):
    n_ops, n = len(gap), len(op_of)
    n_links = len(cap)
    op_deps_left, tr_deps_left = op_deps_left.copy(), tr_deps_left.copy()
    op_left = np.diff(ot_ptr)
    op_ready = np.zeros(n_ops, np.int64)
    op_start = np.zeros(n_ops, np.int64)
    op_end = np.zeros(n_ops, np.int64)
    released = np.zeros(n_ops, np.bool_)
    ready = np.zeros(n, np.int64)
    start = np.zeros(n, np.int64)
    finish = np.zeros(n, np.int64)
    end = np.zeros(n, np.int64)
    # per active item: bytes left at t_upd, its rate since then, its predicted finish
    rem = nbytes.copy()
    rate = np.zeros(n, np.float64)
    t_upd = np.zeros(n, np.int64)
    fin = np.full(n, INF, np.int64)
    active = np.zeros(n, np.bool_)
    n_act = 0
    # per link: its active items' link entries (a doubly linked list), the sum of their caps
    head = np.full(n_links, -1, np.int32)
    lk_item = np.zeros(len(lk_id), np.int32)     # the item whose link list holds entry k
    for i in range(n):
        lk_item[lk_ptr[i]:lk_ptr[i + 1]] = i
    nxt = np.full(len(lk_id), -1, np.int32)
    prv = np.full(len(lk_id), -1, np.int32)
    n_on = np.zeros(n_links, np.int64)
    dem = np.zeros(n_links, np.float64)
    n_inf = np.zeros(n_links, np.int64)
    # one event's scratch: touched links, the component being solved, its hot links
    lmark = np.zeros(n_links, np.bool_)
    was_hot = np.zeros(n_links, np.bool_)
    touched = np.zeros(n_links, np.int64)
    n_touch = 0
    in_comp = np.zeros(n, np.bool_)
    comp = np.zeros(n, np.int64)
    n_comp = 0
    hmark = np.zeros(n_links, np.bool_)
    hl = np.zeros(n_links, np.int64)
    nr = np.zeros(n, np.float64)
    frozen = np.zeros(n, np.bool_)
    wsum = np.zeros(n_links, np.float64)
    rcap = np.zeros(n_links, np.float64)
    heap = [(np.int64(0), np.int64(0))]          # (ready, item): items waiting to start
    heap.pop()
    hf = np.zeros(4 + n // 8, np.int64)          # finish heap: (finish, item) predictions, by (hf, hi);
    hi = np.zeros(4 + n // 8, np.int64)          # stale ones are skipped when they surface
    hn = 0
    rel_op = np.zeros(n_ops, np.int64)
    rel_t = np.zeros(n_ops, np.int64)
    n_rel = 0
    for o in range(n_ops):
        if op_deps_left[o] == 0:
            rel_op[n_rel], rel_t[n_rel] = o, gap[o]
            n_rel += 1
    done_ops = np.zeros(n_ops, np.int64)   # completed ops whose dependents are not yet released
    n_done = 0
    t = np.int64(0)
    # link load records (record_links): per link the load last recorded
    rec_t = np.zeros(rec_max, np.int64)
    rec_l = np.zeros(rec_max, np.int64)
    rec_v = np.zeros(rec_max, np.float64)
    n_rec = 0
    last_load = np.zeros(max(rec_links, 1), np.float64)
    # item rate records (record_items): per marked item the rate last recorded
    it_t = np.zeros(it_max, np.int64)
    it_i = np.zeros(it_max, np.int64)
    it_v = np.zeros(it_max, np.float64)
    n_it = 0
    it_lost = INF
    last_rate = np.zeros(n if it_max > 0 else 1, np.float64)
    n_q = queue.max() + 1 if n > 0 else 0
    q_busy = np.zeros(max(n_q, 1), np.bool_)     # a queue's item is active
    q_head = np.full(max(n_q, 1), -1, np.int64)  # parked items per queue: a linked list, FIFO
    q_tail = np.full(max(n_q, 1), -1, np.int64)
    q_next = np.full(n, -1, np.int64)
    now = np.zeros(max(n_q, 1), np.int64)        # QPs' next items, starting at t
    n_now = 0
    n_finished, next_tick = 0, PROGRESS_EVERY
    while True:
        # Settle op completions / releases (they only schedule future activations).
        while n_rel > 0 or n_done > 0:
            if n_done > 0:
                n_done -= 1
                o = done_ops[n_done]
                t_end = op_end[o]
                for k in range(od_ptr[o], od_ptr[o + 1]):
                    p = od_val[k]
                    if t_end > op_ready[p]:
                        op_ready[p] = t_end
                    op_deps_left[p] -= 1
                    if op_deps_left[p] == 0:
                        rel_op[n_rel], rel_t[n_rel] = p, op_ready[p] + gap[p]
                        n_rel += 1
                continue
            n_rel -= 1
            o, t0 = rel_op[n_rel], rel_t[n_rel]
            op_start[o] = t0
            released[o] = True
            if ot_ptr[o] == ot_ptr[o + 1]:
                op_end[o] = t0
                done_ops[n_done] = o
                n_done += 1
                continue
            for k in range(ot_ptr[o], ot_ptr[o + 1]):
                it = ot_val[k]
                if t0 > ready[it]:
                    ready[it] = t0
                if tr_deps_left[it] == 0:
                    heapq.heappush(heap, (ready[it], it))
        # Items that start now: a QP's next item (its line moved up at t), items ready by t (their
        # QP free; else they wait in its line). Each goes onto its links' lists and demands
        # (inline, as its end below: numba counts references to every array passed to a call,
        # which cost more than this work per item).
        while n_now > 0 or (len(heap) > 0 and heap[0][0] <= t):
            if n_now > 0:
                n_now -= 1
                it = now[n_now]
            else:
                _, it = heapq.heappop(heap)
                q = queue[it]
                if q >= 0 and q_busy[q]:
                    if q_tail[q] >= 0:
                        q_next[q_tail[q]] = it
                    else:
                        q_head[q] = it
                    q_tail[q] = it
                    continue
                if q >= 0:
                    q_busy[q] = True
            start[it] = t
            active[it] = True
            rate[it] = 0.0
            t_upd[it] = t
            rc = rate_cap[it]
            for k in range(lk_ptr[it], lk_ptr[it + 1]):
                ln = lk_id[k]
                if not lmark[ln]:                    # touched: note whether it was hot before
                    lmark[ln] = True
                    was_hot[ln] = _hot(n_inf[ln], dem[ln], cap[ln])
                    touched[n_touch] = ln
                    n_touch += 1
                prv[k] = -1
                nxt[k] = head[ln]
                if head[ln] >= 0:
                    prv[head[ln]] = k
                head[ln] = k
                n_on[ln] += 1
                if rc == np.inf:
                    n_inf[ln] += 1
                else:
                    dem[ln] += rc * lk_w[k]
            if not in_comp[it]:
                in_comp[it] = True
                comp[n_comp] = it
                n_comp += 1
            n_act += 1
        # New rates where something changed: the components of the touched links.
        if n_touch > 0 or n_comp > 0:
            for j in range(n_touch):
                ln = touched[j]
                if was_hot[ln] or _hot(n_inf[ln], dem[ln], cap[ln]):
                    e = head[ln]
                    while e >= 0:
                        i = lk_item[e]
                        if not in_comp[i]:
                            in_comp[i] = True
                            comp[n_comp] = i
                            n_comp += 1
                        e = nxt[e]
            n_h = 0
            a = 0
            while a < n_comp:                        # grow over hot links
                i = comp[a]
                a += 1
                for k in range(lk_ptr[i], lk_ptr[i + 1]):
                    ln = lk_id[k]
                    if hmark[ln] or not _hot(n_inf[ln], dem[ln], cap[ln]):
                        continue
                    hmark[ln] = True
                    hl[n_h] = ln
                    n_h += 1
                    e = head[ln]
                    while e >= 0:
                        d = lk_item[e]
                        if not in_comp[d]:
                            in_comp[d] = True
                            comp[n_comp] = d
                            n_comp += 1
                        e = nxt[e]
            _solve(comp, n_comp, hl, n_h, hmark, lk_ptr, lk_id, lk_w, cap, rate_cap, nr, wsum, rcap, frozen)
            for a in range(n_comp):
                i = comp[a]
                in_comp[i] = False
                r = nr[i]
                if r == rate[i] and fin[i] < INF:
                    continue
                if t > t_upd[i]:
                    rem[i] -= rate[i] * (t - t_upd[i])
                    if rem[i] < 1e-9:
                        rem[i] = 1e-9
                t_upd[i] = t
                rate[i] = r
                if r == np.inf:
                    f = t
                elif r > 0.0:
                    q = rem[i] / r
                    f = t + np.int64(np.ceil(q - 1e-9)) if q > 1e-9 else t
                else:
                    f = INF
                fin[i] = f
                if f < INF:
                    if hn == len(hf):                # full: drop the stale entries; mostly live: grow
                        hn = _fcompact(hf, hi, hn, fin, active)
                        if 2 * hn > len(hf):
                            hf2, hi2 = np.zeros(2 * len(hf), np.int64), np.zeros(2 * len(hf), np.int64)
                            hf2[:hn], hi2[:hn] = hf[:hn], hi[:hn]
                            hf, hi = hf2, hi2
                    hn = _fpush(hf, hi, hn, f, i)
                if it_max > 0 and want[i] and r != np.inf:
                    p = last_rate[i]
                    if abs(r - p) > 1e-9 * max(r, p):
                        if n_it < it_max:
                            it_t[n_it], it_i[n_it], it_v[n_it] = t, i, r
                        elif t < it_lost:
                            it_lost = t
                        n_it += 1
                        last_rate[i] = r
                if rec_links > 0:                    # its links' loads change: record them below
                    for k in range(lk_ptr[i], lk_ptr[i + 1]):
                        ln = lk_id[k]
                        if ln < rec_links and not lmark[ln]:
                            lmark[ln] = True
                            touched[n_touch] = ln
                            n_touch += 1
            for j in range(n_h):
                hmark[hl[j]] = False
            for j in range(n_touch):
                ln = touched[j]
                lmark[ln] = False
                if ln < rec_links:               # its load now, from its items' rates
                    c = 0.0
                    e = head[ln]
                    while e >= 0:
                        r = rate[lk_item[e]]
                        if r != np.inf:
                            c += r * lk_w[e]
                        e = nxt[e]
                    p = last_load[ln]
                    if abs(c - p) > 1e-9 * max(c, p):
                        if n_rec < rec_max:
                            rec_t[n_rec], rec_l[n_rec], rec_v[n_rec] = t, ln, c
                        n_rec += 1
                        last_load[ln] = c
            n_touch = 0
            n_comp = 0
        # The next event: an item ready to start, or the earliest predicted finish.
        while hn > 0 and (not active[hi[0]] or fin[hi[0]] != hf[0]):
            hn = _fpop(hf, hi, hn)
        t_arr = heap[0][0] if len(heap) > 0 else INF
        t_fin = hf[0] if hn > 0 else INF
        if t_arr >= INF and t_fin >= INF:
            break
        if t_arr < t_fin:
            t = t_arr
            continue
        t = t_fin
        while hn > 0 and hf[0] == t:
            i = hi[0]
            hn = _fpop(hf, hi, hn)
            if active[i] and fin[i] == t:
                finish[i] = t
                n_finished += 1
                e = t + extra[i]
                end[i] = e
                rem[i] = 0.0
                active[i] = False                 # off its links' lists and demands
                rc = rate_cap[i]
                for k in range(lk_ptr[i], lk_ptr[i + 1]):
                    ln = lk_id[k]
                    if not lmark[ln]:
                        lmark[ln] = True
                        was_hot[ln] = _hot(n_inf[ln], dem[ln], cap[ln])
                        touched[n_touch] = ln
                        n_touch += 1
                    if prv[k] >= 0:
                        nxt[prv[k]] = nxt[k]
                    else:
                        head[ln] = nxt[k]
                    if nxt[k] >= 0:
                        prv[nxt[k]] = prv[k]
                    n_on[ln] -= 1
                    if rc == np.inf:
                        n_inf[ln] -= 1
                    else:
                        dem[ln] -= rc * lk_w[k]
                    if n_on[ln] == 0:
                        dem[ln] = 0.0             # an emptied link's demand is exactly 0
                n_act -= 1
                q = queue[i]
                if q >= 0:                        # the next in its QP's line starts now
                    nq = q_head[q]
                    if nq >= 0:
                        q_head[q] = q_next[nq]
                        if q_head[q] < 0:
                            q_tail[q] = -1
                        now[n_now] = nq
                        n_now += 1
                    else:
                        q_busy[q] = False
                for k in range(td_ptr[i], td_ptr[i + 1]):
                    d = td_val[k]
                    if e > ready[d]:
                        ready[d] = e
                    tr_deps_left[d] -= 1
                    if tr_deps_left[d] == 0 and released[op_of[d]]:
                        heapq.heappush(heap, (ready[d], d))
                o = op_of[i]
                if e > op_end[o]:
                    op_end[o] = e
                op_left[o] -= 1
                if op_left[o] == 0:
                    done_ops[n_done] = o
                    n_done += 1
        if n_finished >= next_tick:
            next_tick = n_finished + PROGRESS_EVERY
            with numba.objmode():
                _report(n_finished, n)
    done = n_act == 0
    for o in range(n_ops):
        if op_left[o] > 0 or op_deps_left[o] > 0:
            done = False
    return start, finish, end, op_start, op_end, done, rec_t, rec_l, rec_v, n_rec, it_t, it_i, it_v, n_it, it_lost
