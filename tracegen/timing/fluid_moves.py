"""The fluid engine's route moves (fabric epochs, timing/epochs.py), apart from its event loop
(fluid_engine.py): they run once per epoch change, not per item."""
from __future__ import annotations

import numba
import numpy as np

from .fluid_solve import hot


@numba.njit(cache=True)
def move_routes(x_ev, evc_ptr, evc_link, evc_cap, ev_from, ev_to, st_ptr, st_item, st_var, cap, tgt, cur,
                active, rate_cap, lk_ptr, lk_id, lk_w, p_lo, p_hi, head, nxt, prv, n_on, n_inf, dem,
                lmark, was_hot, touched, n_touch, in_comp, comp, n_comp):
    """Epoch x_ev starts: links' capacities change, and the items whose route differs move - an
    active one leaves its old links and joins its new ones with the bytes it has left (the loop
    re-solves it with everything on the links touched). Finishes at this instant came first;
    items starting at it start on the new routes. Updates the engine's arrays in place; returns
    (n_touch, n_comp), the loop's counts of touched links and items to re-solve."""
    for k in range(evc_ptr[x_ev], evc_ptr[x_ev + 1]):
        ln = evc_link[k]
        if not lmark[ln]:
            lmark[ln] = True
            was_hot[ln] = hot(n_inf[ln], dem[ln], cap[ln])
            touched[n_touch] = ln
            n_touch += 1
        cap[ln] = evc_cap[k]
    a_s, b_s = ev_from[x_ev], ev_to[x_ev]
    for k in range(st_ptr[a_s], st_ptr[a_s + 1]):      # the old epoch's moved items: back to epoch 0's
        tgt[st_item[k]] = st_item[k]
    for k in range(st_ptr[b_s], st_ptr[b_s + 1]):      # the new epoch's: their variant
        tgt[st_item[k]] = st_var[k]
    for pas in range(2):
        s_ = a_s if pas == 0 else b_s
        for kk in range(st_ptr[s_], st_ptr[s_ + 1]):
            i = st_item[kk]
            v = tgt[i]
            if cur[i] == v:
                continue
            if active[i]:
                rc = rate_cap[i]
                for k in range(p_lo[i], p_hi[i]):       # off the old route's links
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
                        dem[ln] = 0.0
                for k in range(lk_ptr[v], lk_ptr[v + 1]):  # onto the new route's
                    ln = lk_id[k]
                    if not lmark[ln]:
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
                if not in_comp[i]:
                    in_comp[i] = True
                    comp[n_comp] = i
                    n_comp += 1
            cur[i] = v
            p_lo[i], p_hi[i] = lk_ptr[v], lk_ptr[v + 1]
    return n_touch, n_comp
