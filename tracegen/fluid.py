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

Release: an op is released `gap_ns` after the last of its dependency ops ends; an item becomes
active once its op is released and every item it depends on (same op) has arrived. Times are
integer ns (an item finishes at the first whole ns its bytes are through); remaining bytes are
float64 between events.

Records, on request only: every link's load over time (LinkLoad: the report's utilisation) and
the rate of chosen items over time (ItemRates: the pcap writer paces a flow's packets along its
cumulative sent-bytes curve, progress_times inverts it).
"""
from __future__ import annotations

import heapq
from typing import NamedTuple

import numba
import numpy as np

from . import progress
from .tables import Ragged

INF = np.iinfo(np.int64).max // 4


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
        return start, finish, end, op_start, op_end, load, ItemRates(it_t[:k], it_i[:k], it_v[:k], int(it_lost))
    if record_links:
        return start, finish, end, op_start, op_end, load
    return start, finish, end, op_start, op_end


def progress_times(rates: "ItemRates", items, frac, finish) -> tuple[np.ndarray, np.ndarray]:
    """When (float ns) each queried item had sent fraction `frac` of what it sent by `finish`
    (per query: its item, the fraction, the item's finish), on its cumulative sent-bytes curve
    (piecewise linear from its rate records). ok: the item's rate changed while it sent and its
    records are complete - elsewhere the time is nan (one rate: a straight line, the caller's)."""
    items, frac = np.asarray(items, np.int64), np.asarray(frac, np.float64)
    finish = np.asarray(finish, np.int64)
    out, ok = np.full(len(items), np.nan), np.zeros(len(items), bool)
    if rates is None or not len(rates.t) or not len(items):
        return out, ok
    o = np.argsort(rates.item, kind="stable")              # per item, in time order
    k_it, k_t, k_v = rates.item[o], rates.t[o].astype(np.int64), rates.bytes_per_ns[o]
    n = max(int(k_it.max()), int(items.max())) + 1
    count = np.bincount(k_it, minlength=n)
    fin = np.full(n, -1, np.int64)
    fin[items] = finish
    want = (count >= 2) & (fin >= 0) & (fin <= rates.complete_until)
    keep = want[k_it]
    k_it, k_t, k_v = k_it[keep], k_t[keep], k_v[keep]
    if not len(k_it):
        return out, ok
    last = np.r_[k_it[1:] != k_it[:-1], True]
    seg = k_v * np.maximum(np.where(last, fin[k_it], np.r_[k_t[1:], 0]) - k_t, 0)
    g0 = np.cumsum(seg) - seg                              # cumulative bytes, items concatenated
    lo = np.flatnonzero(np.r_[True, k_it[1:] != k_it[:-1]])
    hi = np.r_[lo[1:], len(k_it)] - 1
    it_lo, it_hi, it_off, it_bytes = (np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n), np.zeros(n))
    it_lo[k_it[lo]], it_hi[k_it[lo]], it_off[k_it[lo]] = lo, hi, g0[lo]
    np.add.at(it_bytes, k_it, seg)
    ok = want[items]
    q, f = items[ok], np.clip(frac[ok], 0.0, 1.0)
    g = it_off[q] + f * it_bytes[q]
    k = np.clip(np.searchsorted(g0, g, "right") - 1, it_lo[q], it_hi[q])
    v = k_v[k]
    out[ok] = k_t[k] + np.where(v > 0, (g - g0[k]) / np.where(v > 0, v, 1), 0.0)
    return out, ok


class ItemRates(NamedTuple):
    """Piecewise-constant rates of items: from t[k] on, item[k] sends bytes_per_ns[k] (until its
    next record or its finish). Records are in time order. complete_until: the records of an item
    that finishes at or before it are complete (INF: none was dropped); the memory bound dropped
    every rate change from then on."""
    t: np.ndarray
    item: np.ndarray
    bytes_per_ns: np.ndarray
    complete_until: int

    @property
    def truncated(self) -> bool:
        return self.complete_until < INF

    def within(self, items, t0, t1) -> "ItemRates":
        """Per query q: the records of item items[q] over [t0[q], t1[q]) - the rate in effect at
        t0 (stamped t0) and its changes before t1 - as item q (time order per query)."""
        items, t0, t1 = (np.asarray(a, np.int64) for a in (items, t0, t1))
        if not len(self.t) or not len(items):
            return ItemRates(self.t[:0], self.item[:0], self.bytes_per_ns[:0], self.complete_until)
        o = np.lexsort((self.t, self.item))
        it, t, v = self.item[o], self.t[o].astype(np.int64), self.bytes_per_ns[o]
        span = int(max(t.max(), t1.max(), 0)) + 1
        key = it * span + t
        first = np.searchsorted(it, items)                  # the item's first record
        a = np.maximum(np.searchsorted(key, items * span + np.maximum(t0, 0), "right") - 1, first)
        b = np.searchsorted(key, items * span + np.maximum(t1, 0), "left")
        has = (first < len(it)) & (it[np.minimum(first, len(it) - 1)] == items)
        n = np.where(has, np.maximum(b - a, 0), 0)
        q = np.repeat(np.arange(len(items)), n)
        k = np.repeat(a, n) + np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
        return ItemRates(np.maximum(t[k], t0[q]), q, v[k], self.complete_until)

    def take(self, items: np.ndarray) -> "ItemRates":
        """The records of `items` (ids), renumbered 0..len(items)-1 in that order."""
        items = np.asarray(items, np.int64)
        if not len(self.item) or not len(items):
            return ItemRates(self.t[:0], self.item[:0], self.bytes_per_ns[:0], self.complete_until)
        new = np.full(max(int(self.item.max()), int(items.max())) + 1, -1, np.int64)
        new[items] = np.arange(len(items))
        k = new[self.item]
        keep = k >= 0
        return ItemRates(self.t[keep], k[keep], self.bytes_per_ns[keep], self.complete_until)


class LinkLoad(NamedTuple):
    """Piecewise-constant load of links: from t[k] on, link[k] carries bytes_per_ns[k]."""
    t: np.ndarray
    link: np.ndarray
    bytes_per_ns: np.ndarray
    truncated: bool

    def binned_used(self, bin_ns: int, bins: int) -> tuple[np.ndarray, np.ndarray]:
        """(links, bytes per bin) of only the links with records: a fabric of 65,536 spines has
        262,000 link directions, a small job loads a few dozen (binned() would hold them all)."""
        used, compact = np.unique(self.link, return_inverse=True)
        return used, self._replace(link=compact.reshape(-1)).binned(len(used), bin_ns, bins)

    def binned(self, n_links: int, bin_ns: int, bins: int) -> np.ndarray:
        """Bytes each link carried in each bin [k bin_ns, (k+1) bin_ns)."""
        out = np.zeros((n_links, bins + 2))
        if not len(self.t):
            return out[:, :bins]
        o = np.lexsort((self.t, self.link))
        t, ln, v = self.t[o], self.link[o], self.bytes_per_ns[o]
        last = np.r_[ln[1:] != ln[:-1], True]
        b = np.where(last, t, np.r_[t[1:], 0])       # each record holds until the link's next one
        keep = (b > t) & (v > 0) & (t < bins * bin_ns)
        a, b, v, ln = t[keep], np.minimum(b[keep], bins * bin_ns), v[keep], ln[keep]
        b0, b1 = a // bin_ns, (b - 1) // bin_ns
        one = b0 == b1
        np.add.at(out, (ln[one], b0[one]), v[one] * (b[one] - a[one]))
        m = ~one
        np.add.at(out, (ln[m], b0[m]), v[m] * ((b0[m] + 1) * bin_ns - a[m]))
        np.add.at(out, (ln[m], b1[m]), v[m] * (b[m] - b1[m] * bin_ns))
        inner = m & (b1 > b0 + 1)
        diff = np.zeros_like(out)
        np.add.at(diff, (ln[inner], b0[inner] + 1), v[inner] * bin_ns)
        np.add.at(diff, (ln[inner], b1[inner]), -v[inner] * bin_ns)
        return (out + np.cumsum(diff, axis=1))[:, :bins]
        o = np.lexsort((self.t, self.link))
        t, ln, v = self.t[o], self.link[o], self.bytes_per_ns[o]
        nxt = np.r_[t[1:], t[-1]]
        last = np.r_[ln[1:] != ln[:-1], True]
        nxt = np.where(last, t, nxt)                      # a link's last record: load 0 from then on
        edges = np.arange(bins + 1) * bin_ns
        # integral of v over [a, b) split on bin edges: via the cumulative load at every edge
        a, b = t, nxt
        keep = (b > a) & (v > 0)
        a, b, v, ln = a[keep], b[keep], v[keep], ln[keep]
        for_a = np.minimum(a[:, None], edges[None, 1:])
        for_b = np.minimum(b[:, None], edges[None, 1:])
        lo = np.maximum(np.maximum(a[:, None], edges[None, :-1]), 0)
        span = np.maximum(0, np.minimum(for_b, edges[None, 1:]) - np.maximum(lo, for_a * 0 + lo))
        np.add.at(out, ln, span * v[:, None])
        return out


@numba.njit(cache=True)
def _maxmin(act, n_act, lk_ptr, lk_id, lk_w, cap, rate, wsum, rcap, touched, frozen, rate_cap):
    """Max-min fair rates of the active items (progressive filling with link weights; an item
    also stops rising at its own rate cap)."""
    n_t = 0
    for a in range(n_act):
        i = act[a]
        frozen[i] = False
        rate[i] = 0.0
        for k in range(lk_ptr[i], lk_ptr[i + 1]):
            ln = lk_id[k]
            if wsum[ln] == 0.0 and rcap[ln] >= 0.0:
                touched[n_t] = ln
                n_t += 1
                rcap[ln] = -1.0            # mark as touched
            wsum[ln] += lk_w[k]
    for t in range(n_t):
        rcap[touched[t]] = cap[touched[t]]
    left = 0
    for a in range(n_act):
        i = act[a]
        if lk_ptr[i] == lk_ptr[i + 1]:
            rate[i] = rate_cap[i]          # crosses no link: only its cap limits it
            frozen[i] = True
        else:
            left += 1
    level = 0.0
    while left > 0:
        best = np.inf
        for t in range(n_t):
            ln = touched[t]
            if wsum[ln] > 1e-12:
                v = rcap[ln] / wsum[ln]
                if v < best:
                    best = v
        for a in range(n_act):
            i = act[a]
            if not frozen[i] and rate_cap[i] - level < best:
                best = rate_cap[i] - level
        if best < 0.0:
            best = 0.0
        level += best
        for t in range(n_t):
            ln = touched[t]
            if wsum[ln] > 1e-12:
                rcap[ln] -= best * wsum[ln]
                if rcap[ln] <= cap[ln] * 1e-12:
                    rcap[ln] = 0.0
        for a in range(n_act):
            i = act[a]
            if frozen[i]:
                continue
            sat = level >= rate_cap[i] * (1.0 - 1e-12)
            for k in range(lk_ptr[i], lk_ptr[i + 1]):
                if rcap[lk_id[k]] == 0.0:
                    sat = True
                    break
            if sat:
                frozen[i] = True
                rate[i] = level
                left -= 1
                for k in range(lk_ptr[i], lk_ptr[i + 1]):
                    wsum[lk_id[k]] -= lk_w[k]
    for t in range(n_t):
        wsum[touched[t]] = 0.0
        rcap[touched[t]] = 0.0


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
    rem = nbytes.copy()
    rate = np.zeros(n, np.float64)
    frozen = np.zeros(n, np.bool_)
    wsum = np.zeros(n_links, np.float64)
    rcap = np.zeros(n_links, np.float64)
    touched = np.zeros(n_links, np.int64)
    act = np.zeros(n, np.int64)            # active items (order irrelevant)
    pos = np.full(n, -1, np.int64)         # place in act
    n_act = 0
    heap = [(np.int64(0), np.int64(0))]
    heap.pop()
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
    dirty = False
    fin = np.zeros(n, np.int64)
    # link load records (record_links): per link the load last recorded, and the links loaded
    rec_t = np.zeros(rec_max, np.int64)
    rec_l = np.zeros(rec_max, np.int64)
    rec_v = np.zeros(rec_max, np.float64)
    n_rec = 0
    last_load = np.zeros(max(rec_links, 1), np.float64)
    cur_load = np.zeros(max(rec_links, 1), np.float64)
    loaded = np.zeros(max(rec_links, 1), np.int64)
    n_loaded = 0
    mark = np.zeros(max(rec_links, 1), np.bool_)
    tl = np.zeros(max(rec_links, 1), np.int64)
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
        if rec_links > 0 and dirty:
            if n_act > 0:
                _maxmin(act, n_act, lk_ptr, lk_id, lk_w, cap, rate, wsum, rcap, touched, frozen, rate_cap)
                dirty = False
                if it_max > 0:
                    n_it, it_lost = _record_items(t, act, n_act, rate, want, last_rate, it_t, it_i, it_v, n_it, it_lost)
            n_rec, n_loaded = _record(t, act, n_act, rate, lk_ptr, lk_id, lk_w, rec_links, cur_load, last_load,
                                      loaded, n_loaded, mark, tl, rec_t, rec_l, rec_v, n_rec)
        if len(heap) == 0 and n_act == 0:
            break
        t_arr = heap[0][0] if len(heap) > 0 else INF
        t_fin = INF
        if n_act > 0:
            if dirty:
                _maxmin(act, n_act, lk_ptr, lk_id, lk_w, cap, rate, wsum, rcap, touched, frozen, rate_cap)
                dirty = False
                if it_max > 0:
                    n_it, it_lost = _record_items(t, act, n_act, rate, want, last_rate, it_t, it_i, it_v, n_it, it_lost)
            for a in range(n_act):
                i = act[a]
                r = rate[i]
                if r == np.inf:
                    f = t
                else:
                    q = rem[i] / r
                    f = t + np.int64(np.ceil(q - 1e-9)) if q > 1e-9 else t
                fin[i] = f
                if f < t_fin:
                    t_fin = f
        if t_arr < t_fin or (t_arr == t_fin and n_act == 0):
            dt = t_arr - t
            if dt > 0:
                for a in range(n_act):
                    i = act[a]
                    rem[i] -= rate[i] * dt
                    if rem[i] < 1e-9:
                        rem[i] = 1e-9
            t = t_arr
            while len(heap) > 0 and heap[0][0] <= t:
                _, it = heapq.heappop(heap)
                q = queue[it]
                if q >= 0 and q_busy[q]:          # its QP is busy: wait in line
                    if q_tail[q] >= 0:
                        q_next[q_tail[q]] = it
                    else:
                        q_head[q] = it
                    q_tail[q] = it
                    continue
                if q >= 0:
                    q_busy[q] = True
                start[it] = t
                fin[it] = INF
                act[n_act] = it
                pos[it] = n_act
                n_act += 1
            dirty = True
            continue
        # Completions at t_fin.
        dt = t_fin - t
        t = t_fin
        a = 0
        while a < n_act:
            i = act[a]
            if fin[i] == t:
                finish[i] = t
                n_finished += 1
                e = t + extra[i]
                end[i] = e
                rem[i] = 0.0
                # remove from act (swap with last)
                n_act -= 1
                last = act[n_act]
                act[a] = last
                pos[last] = a
                pos[i] = -1
                q = queue[i]
                if q >= 0:                        # the next in its QP's line starts now
                    nxt = q_head[q]
                    if nxt >= 0:
                        q_head[q] = q_next[nxt]
                        if q_head[q] < 0:
                            q_tail[q] = -1
                        start[nxt] = t
                        fin[nxt] = INF
                        rate[nxt] = 0.0
                        act[n_act] = nxt
                        pos[nxt] = n_act
                        n_act += 1
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
                continue
            rem[i] -= rate[i] * dt
            if rem[i] < 1e-9:
                rem[i] = 1e-9
            a += 1
        dirty = True
        if n_finished >= next_tick:
            next_tick = n_finished + PROGRESS_EVERY
            with numba.objmode():
                _report(n_finished, n)
    done = True
    for o in range(n_ops):
        if op_left[o] > 0 or op_deps_left[o] > 0:
            done = False
    return start, finish, end, op_start, op_end, done, rec_t, rec_l, rec_v, n_rec, it_t, it_i, it_v, n_it, it_lost


@numba.njit(cache=True)
def _record_items(t, act, n_act, rate, want, last_rate, it_t, it_i, it_v, n_it, it_lost):
    """Record every marked active item whose rate changed at t; returns (n_it, it_lost): records
    beyond the buffer are counted, not kept, and it_lost is when the first of them was due."""
    for a in range(n_act):
        i = act[a]
        if not want[i]:
            continue
        r = rate[i]
        if r == np.inf:
            continue
        p = last_rate[i]
        if abs(r - p) > 1e-9 * max(r, p):
            if n_it < len(it_t):
                it_t[n_it], it_i[n_it], it_v[n_it] = t, i, r
            elif t < it_lost:
                it_lost = t
            n_it += 1
            last_rate[i] = r
    return n_it, it_lost


@numba.njit(cache=True)
def _record(t, act, n_act, rate, lk_ptr, lk_id, lk_w, rec_links, cur, last, loaded, n_loaded, mark, tl,
            rec_t, rec_l, rec_v, n_rec):
    """Record every link (< rec_links) whose load changed at t; returns (n_rec, n_loaded)."""
    n_t = 0
    for a in range(n_act):
        i = act[a]
        r = rate[i]
        if r == np.inf:
            continue
        for k in range(lk_ptr[i], lk_ptr[i + 1]):
            ln = lk_id[k]
            if ln < rec_links:
                if not mark[ln]:
                    mark[ln] = True
                    tl[n_t] = ln
                    n_t += 1
                cur[ln] += r * lk_w[k]
    for j in range(n_loaded):                # loaded before, idle now
        ln = loaded[j]
        if not mark[ln]:
            mark[ln] = True
            tl[n_t] = ln
            n_t += 1
    m = 0
    for j in range(n_t):
        ln = tl[j]
        c, p = cur[ln], last[ln]
        if abs(c - p) > 1e-9 * max(c, p):
            if n_rec < len(rec_t):
                rec_t[n_rec], rec_l[n_rec], rec_v[n_rec] = t, ln, c
            n_rec += 1
            last[ln] = c
        if last[ln] > 0.0:
            loaded[m] = ln
            m += 1
        cur[ln] = 0.0
        mark[ln] = False
    return n_rec, m
