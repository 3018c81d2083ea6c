"""The fabric's epochs (fabric/timeline.py) as the fluid engine's input: at each epoch's instant
the links' capacities change and the items whose route differs move.

Routes per epoch: every QP routed again (fabric/timeline.epoch_routes: rehash or resilient; its
5-tuple / DestQP as in epoch 0: QPNs and source ports do not change); epochs with the same table
of routes share a state (a flap alternates two). Per state the connections whose links differ
from epoch 0's are found, and only the items that use one of them get a route variant (the items' links merged as for
epoch 0: weights summed per link, the connection-level item's rows scaled by their share of its
bytes). Memory: the links of the items that move, per state; a fabric without epochs costs
nothing. The engine (fluid_engine.py) relinks an active item at the instant (its bytes left go on
along the new route) and re-solves the components touched; an item not yet started starts on
the route of the epoch it starts in. What an item's bytes need after the last byte (extra_ns:
propagation, store-and-forward) stays its epoch-0 route's.
"""
from __future__ import annotations

import dataclasses
import hashlib
from typing import NamedTuple

import numpy as np

from .connections import Connections


class EpochTables(NamedTuple):
    """fluid.run's `epochs`: route variants beyond the items' own (variant n + j is the j-th here)
    and the transitions between epochs (fluid_engine.py reads them)."""
    ptr: np.ndarray            # [n_extra + 1] CSR of the extra variants' links
    link: np.ndarray
    weight: np.ndarray
    var_item: np.ndarray       # [n_extra] the item of each extra variant
    ev_t: np.ndarray           # [n_ev] instants, ascending
    ev_from: np.ndarray        # [n_ev] route state before / after
    ev_to: np.ndarray
    evc_ptr: np.ndarray        # [n_ev + 1] CSR: link directions whose capacity changes, new bytes/ns
    evc_link: np.ndarray
    evc_cap: np.ndarray
    st_ptr: np.ndarray         # [n_states + 1] CSR per state: items off their own route, their variant
    st_item: np.ndarray        #   (absolute variant ids; state 0 - epoch 0's - is empty)
    st_var: np.ndarray

    @property
    def moved_items(self) -> int:
        return len(np.unique(self.st_item))


def _csr_rows(ptr, lk, w, rows):
    """The CSR rows `rows` concatenated: (lens, links, weights)."""
    lens = ptr[rows + 1] - ptr[rows]
    starts = np.repeat(ptr[rows], lens)
    within = np.arange(int(lens.sum()), dtype=np.int64) - np.repeat(np.cumsum(lens) - lens, lens)
    return lens, lk[starts + within], w[starts + within]


def _key(route: np.ndarray) -> bytes:
    """A table of routes, without its -1 padding columns (routers differ in width), as a digest."""
    used = (route >= 0).any(axis=0)
    w = int(np.flatnonzero(used).max()) + 1 if used.any() else 0
    return hashlib.sha256(np.ascontiguousarray(route[:, :w]).tobytes() + b"|%d" % w).digest()


def _moved(conns, route, base, row_conn, row_item, row_scale, nvl_links, n_items: int, width: int) -> tuple:
    """The items whose links differ under `route` (per QP) from epoch 0's, and their links:
    (items sorted, ptr, links, weights)."""
    csr = dataclasses.replace(conns, route=route).link_csr()
    same = (np.diff(csr[0]) == np.diff(base[0]))
    if len(csr[1]) == len(base[1]) and same.all():
        seg = np.repeat(np.arange(len(conns)), np.diff(csr[0]))
        diff = (csr[1] != base[1]) | (csr[2] != base[2])
        moved_conn = np.zeros(len(conns), bool)
        moved_conn[seg[diff]] = True
    else:
        moved_conn = ~same
        c = np.flatnonzero(same)
        _, l0, w0 = _csr_rows(*base, c)
        _, l1, w1 = _csr_rows(*csr, c)
        seg = np.repeat(c, np.diff(base[0])[c])
        moved_conn[seg[(l0 != l1) | (w0 != w1)]] = True
    moved_item = np.zeros(n_items, bool)
    net = row_conn >= 0
    moved_item[row_item[net][moved_conn[row_conn[net]]]] = True
    rows = np.flatnonzero(moved_item[row_item])          # every row of those items, NVLink ones too
    if not len(rows):
        return np.zeros(0, np.int64), np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0)
    rc = row_conn[rows]
    lens = np.full(len(rows), 2, np.int64)
    n_net = rc >= 0
    lens[n_net], l_net, w_net = _csr_rows(*csr, rc[n_net])
    ptr = np.r_[0, np.cumsum(lens)]
    lk = np.empty(ptr[-1], np.int64)
    w = np.ones(ptr[-1])
    pos = np.arange(ptr[-1])
    is_net = np.repeat(n_net, lens)
    lk[pos[is_net]], w[pos[is_net]] = l_net, w_net
    nv = np.flatnonzero(~n_net)
    lk[ptr[nv]], lk[ptr[nv] + 1] = nvl_links[0][rows[nv]], nvl_links[1][rows[nv]]
    w = w * (np.repeat(np.asarray(row_scale, np.float64)[rows], lens) if np.ndim(row_scale) else row_scale)
    pair = np.repeat(row_item[rows], lens) * width + lk
    k2, inv = np.unique(pair, return_inverse=True)
    ww = np.bincount(inv, weights=w, minlength=len(k2))
    items = k2 // width
    u_items, first = np.unique(items, return_index=True)
    return u_items, np.r_[first, len(k2)], k2 % width, ww


def epoch_tables(fabric, conns: Connections, row_conn, row_item, row_scale, nvl_links, n_items: int,
                 width: int, base_cap: np.ndarray) -> EpochTables | None:
    """fabric.epochs for the engine, or None (a fabric that does not change).
    row_conn: per row its connection (-1: NVLink); row_item: its item; row_scale: the factor on its
    links' weights (connection level: its share of the item's bytes; chunk level 1); nvl_links:
    (tx, rx) per row, the NVLink ports of node-local rows; width: link ids < width; base_cap: the
    engine's capacities in epoch 0 (bytes/ns per link direction, NVLink after the fabric's)."""
    epochs = fabric.epochs
    if not epochs:
        return None
    row_conn = np.asarray(row_conn, np.int64)
    row_item = np.asarray(row_item, np.int64)
    base = conns.link_csr()
    n_fab = fabric.n_link_dirs
    # per state (a distinct table of routes): the items off epoch 0's route and their links
    from ..fabric.timeline import epoch_routes
    routes = epoch_routes(fabric, np.repeat(conns.src_nic, conns.qps), np.repeat(conns.dst_nic, conns.qps),
                          conns.sport, conns.plane, fabric.ip_version, dest_qpn=conns.qpn_dst)
    states: dict = {}
    seen = {_key(next(routes)): 0}
    seq = []                                  # the state of each later epoch
    for route in routes:
        k = _key(route)
        if k not in seen:
            seen[k] = len(seen)
            states[seen[k]] = _moved(conns, route, base, row_conn, row_item, row_scale, nvl_links, n_items, width)
        seq.append(seen[k])
    del routes
    # the variants, state by state
    n_states = 1 + max(states, default=0)
    st_ptr = np.zeros(n_states + 1, np.int64)
    st_item, st_var, v_ptr, v_link, v_w, v_item = [], [], [np.zeros(1, np.int64)], [], [], []
    n_var, n_ent = 0, 0
    for s in range(n_states):
        if s in states:
            u_items, p, lk, ww = states[s]
            st_item.append(u_items)
            st_var.append(n_items + n_var + np.arange(len(u_items)))
            v_ptr.append(n_ent + p[1:])
            v_link.append(lk)
            v_w.append(ww)
            v_item.append(u_items)
            n_var += len(u_items)
            n_ent += len(lk)
        st_ptr[s + 1] = st_ptr[s] + (len(states[s][0]) if s in states else 0)
    cat = lambda parts, dt: np.concatenate(parts).astype(dt) if parts else np.zeros(0, dt)  # noqa: E731
    # capacities: per epoch the fabric's link directions that change
    prev = np.asarray(base_cap[:n_fab], np.float64)
    evc_ptr, evc_link, evc_cap = [0], [], []
    states_seq = [0] + seq
    for e in epochs:
        cap = np.repeat(e.gbps.astype(np.float64), 2) / 8.0
        ch = np.flatnonzero(cap != prev)
        evc_link.append(ch)
        evc_cap.append(cap[ch])
        evc_ptr.append(evc_ptr[-1] + len(ch))
        prev = cap
    return EpochTables(cat(v_ptr, np.int64), cat(v_link, np.int64), cat(v_w, np.float64), cat(v_item, np.int64),
                       np.array([e.at_ns for e in epochs], np.int64), np.array(states_seq[:-1], np.int64),
                       np.array(states_seq[1:], np.int64), np.array(evc_ptr, np.int64), cat(evc_link, np.int64),
                       cat(evc_cap, np.float64), st_ptr, cat(st_item, np.int64), cat(st_var, np.int64))
