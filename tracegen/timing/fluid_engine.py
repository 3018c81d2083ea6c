"""The fluid engine's event loop (numba): ops released after their dependencies, items started
when ready (one at a time per queue), rates re-solved for the components an event touches, items
finished at their predicted times; links' loads and items' rates recorded on request. fluid.run
prepares its arrays and reads its results (fluid.py's module doc says what it computes)."""
from __future__ import annotations

import heapq

import numba
import numpy as np

from .. import progress
from .fluid_heap import fcompact, fpop, fpush
from .fluid_moves import move_routes
from .fluid_records import INF
from .fluid_solve import hot, solve

# Progress of a long run: progress.report(items finished, items) about every PROGRESS_EVERY items
# (the engine calls back through numba's object mode; nothing happens without a hook).
PROGRESS_EVERY = 1 << 13


def _report(done: int, total: int) -> None:
    progress.report(done, total)


@numba.njit(cache=True)
def engine(gap, op_deps_left, od_ptr, od_val, tr_deps_left, td_ptr, td_val, ot_ptr, ot_val, op_of,
            nbytes, extra, lk_ptr, lk_id, lk_w, cap, rate_cap, queue, rec_links, rec_max, want, it_max,
            var_item, ev_t, ev_from, ev_to, evc_ptr, evc_link, evc_cap, st_ptr, st_item, st_var):
    n_ops, n = len(gap), len(op_of)
    n_links = len(cap)
    # route variants (fabric epochs, timing/epochs.py): variant v's links are entries
    # [lk_ptr[v], lk_ptr[v + 1]), of item var_item[v]; item i starts on variant i, its route in
    # epoch 0. The links an item crosses now: [p_lo[i], p_hi[i]).
    n_ev = len(ev_t)
    if n_ev > 0:
        p_lo = lk_ptr[:n].copy()
        p_hi = lk_ptr[1:n + 1].copy()
    else:                   # routes never change: no per-item copies (131k GPUs: 16 M items, 3 x 130 MB)
        p_lo = lk_ptr[:n]
        p_hi = lk_ptr[1:n + 1]
    cur = np.arange(n if n_ev > 0 else 1)
    if n_ev > 0:
        cap = cap.copy()                              # the epochs change it
    tgt = np.zeros(n if n_ev > 0 else 1, np.int64)
    x_ev = 0
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
    if len(var_item) == 0:                       # no route variants: entry k's item owns it
        for i in range(n):
            lk_item[lk_ptr[i]:lk_ptr[i + 1]] = i
    for v in range(len(var_item)):
        lk_item[lk_ptr[v]:lk_ptr[v + 1]] = var_item[v]
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
            for k in range(p_lo[it], p_hi[it]):
                ln = lk_id[k]
                if not lmark[ln]:                    # touched: note whether it was hot before
                    lmark[ln] = True
                    was_hot[ln] = hot(n_inf[ln], dem[ln], cap[ln])
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
                if was_hot[ln] or hot(n_inf[ln], dem[ln], cap[ln]):
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
                for k in range(p_lo[i], p_hi[i]):
                    ln = lk_id[k]
                    if hmark[ln] or not hot(n_inf[ln], dem[ln], cap[ln]):
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
            solve(comp, n_comp, hl, n_h, hmark, p_lo, p_hi, lk_id, lk_w, cap, rate_cap, nr, wsum, rcap, frozen)
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
                        hn = fcompact(hf, hi, hn, fin, active)
                        if 2 * hn > len(hf):
                            hf2, hi2 = np.zeros(2 * len(hf), np.int64), np.zeros(2 * len(hf), np.int64)
                            hf2[:hn], hi2[:hn] = hf[:hn], hi[:hn]
                            hf, hi = hf2, hi2
                    hn = fpush(hf, hi, hn, f, i)
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
                    for k in range(p_lo[i], p_hi[i]):
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
            hn = fpop(hf, hi, hn)
        t_arr = heap[0][0] if len(heap) > 0 else INF
        t_fin = hf[0] if hn > 0 else INF
        if t_arr >= INF and t_fin >= INF:
            break
        t_ev = ev_t[x_ev] if x_ev < n_ev else INF
        if t_ev < t_fin and t_ev <= t_arr:
            # The fabric changes (an epoch starts): fluid_moves.py moves the items whose route differs.
            t = t_ev
            n_touch, n_comp = move_routes(x_ev, evc_ptr, evc_link, evc_cap, ev_from, ev_to, st_ptr, st_item, st_var,
                                          cap, tgt, cur, active, rate_cap, lk_ptr, lk_id, lk_w, p_lo, p_hi, head,
                                          nxt, prv, n_on, n_inf, dem, lmark, was_hot, touched, n_touch, in_comp,
                                          comp, n_comp)
            x_ev += 1
            continue
        if t_arr < t_fin:
            t = t_arr
            continue
        t = t_fin
        while hn > 0 and hf[0] == t:
            i = hi[0]
            hn = fpop(hf, hi, hn)
            if active[i] and fin[i] == t:
                finish[i] = t
                n_finished += 1
                e = t + extra[i]
                end[i] = e
                rem[i] = 0.0
                active[i] = False                 # off its links' lists and demands
                rc = rate_cap[i]
                for k in range(p_lo[i], p_hi[i]):
                    ln = lk_id[k]
                    if not lmark[ln]:
                        lmark[ln] = True
                        was_hot[ln] = hot(n_inf[ln], dem[ln], cap[ln])
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
