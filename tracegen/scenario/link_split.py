"""link_time.csv and link_bytes.csv of a scenario with events: each link direction's bytes over time, split
between the jobs (exact from the items' rates when the schedule kept them, else in proportion to the
jobs' flows); report.py writes them."""
from __future__ import annotations

import numpy as np


TIME_BINS = 50                 # link_time.csv: the scenario's span in this many equal bins
MAX_TIME_CELLS = 20_000_000    # (route entries x bins) beyond which link_time.csv is left out


def _route_entries(run):
    """Per (NET row, QP, hop): the row, its link direction and its share of the row's bytes."""
    f = run.flows
    r = f.rows
    net = np.flatnonzero(r["link"] == 1)
    if f.conns is None or not len(net):
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    q = f.conns.qps
    qp = (f.row_conn[net][:, None] * q + np.arange(q)[None, :]).reshape(-1)
    route = f.conns.route[qp]                                 # [rows x q, hops]
    rows = np.repeat(np.repeat(net, q), route.shape[1])
    links = route.reshape(-1)
    ok = links >= 0
    rows, links = rows[ok], links[ok]
    if run.fabric.epochs:
        # events during the run: a row's QP also crosses its routes of the later epochs (the
        # engine moved it there); each route's entries count for the row's share between jobs
        # (link_time splits the engine's exact per-link bytes by them)
        from ..fabric.timeline import epoch_routes
        c = f.conns
        tables = epoch_routes(run.fabric, np.repeat(c.src_nic, q), np.repeat(c.dst_nic, q), c.sport, c.plane,
                              run.fabric.ip_version, dest_qpn=c.qpn_dst)
        next(tables)
        seen = set()
        for alt in tables:
            alt = alt[qp]
            w = max(alt.shape[1], route.shape[1])
            a = np.pad(alt, ((0, 0), (0, w - alt.shape[1])), constant_values=-1)
            b = np.pad(route, ((0, 0), (0, w - route.shape[1])), constant_values=-1)
            moved = np.flatnonzero((a != b).any(axis=1))
            key = a[moved].tobytes() + moved.tobytes()
            if key in seen:
                continue
            seen.add(key)
            r2 = np.repeat(np.repeat(net, q)[moved], w)
            l2 = a[moved].reshape(-1)
            rows, links = np.r_[rows, r2[l2 >= 0]], np.r_[links, l2[l2 >= 0]]
    return rows, links, np.full(len(rows), 1.0 / q)


def link_rate_gbps(fabric) -> np.ndarray:
    """Per link, its rate over the run: the highest of its epochs' (fabric/timeline.py). A fabric
    with timed events keeps epoch 0's rates in fabric.links - a link degraded over [0, T) only
    would show its degraded rate for the whole run (and the pictures would clip its load after
    T); one degraded over the whole run shows that rate in every epoch."""
    rate = fabric.links["gbps"].astype(np.int64)
    for e in fabric.epochs:
        rate = np.maximum(rate, e.gbps)
    return rate


def link_time_csv(run) -> str | None:
    """link_time.csv (see link_time): per link direction and job, the link's rate and the job's
    Gb/s in each time bin (columns gbps_START_END); None when too big to tabulate."""
    got = link_time(run)
    if got is None:
        return None
    edges, links, jobs, gbps = got
    names = [j.name for j in run.jobs]
    rate = link_rate_gbps(run.fabric)
    lines = ["link,job,link_gbps," + ",".join(f"gbps_{int(a)}_{int(b)}" for a, b in zip(edges[:-1], edges[1:]))]
    for ln, j, row in zip(links.tolist(), jobs.tolist(), gbps):
        lines.append(f"{run.fabric.link_dir_name(ln)},{names[j]},{float(rate[ln >> 1]):g},"
                     + ",".join(f"{x:.3f}" for x in row))
    return "\n".join(lines) + "\n"


def link_time(run):
    """Per link direction, job and time bin: the Gb/s the job's bytes on it average over the bin.
    (bin edges ns, link of each row, job of each row, Gb/s [rows, bins]), or None when too big to
    tabulate. Exact (_exact_split) when the schedule kept its items' rates (Flows.item_rates, not
    truncated): each job's share of a link is its own items' rates on it; else the engine's link
    load split in proportion to the jobs' flows spread evenly over each flow's start..end."""
    f = run.flows
    r = f.rows
    rows, links, share = _route_entries(run)
    if len(rows) * TIME_BINS > MAX_TIME_CELLS:
        return None
    end = int(r["end_ns"].max()) if len(r) else 0
    width = max(1, -(-end // TIME_BINS))
    edges = np.arange(TIME_BINS + 1, dtype=np.int64) * width
    exact = _exact_split(run, width)
    if exact is not None:
        key, acc = exact
        n_jobs = len(run.jobs)
        return edges, key // n_jobs, key % n_jobs, acc * 8 / width
    s, e = r["start_ns"][rows].astype(np.int64), r["end_ns"][rows].astype(np.int64)
    wire = (f.row_net_wire if f.row_net_wire is not None else r["wire_bytes"])[rows] * share
    over = np.clip(np.minimum(e[:, None], edges[None, 1:]) - np.maximum(s[:, None], edges[None, :-1]), 0, None)
    span = np.maximum(e - s, 1)
    frac = np.where((e == s)[:, None], (s[:, None] >= edges[None, :-1]) & (s[:, None] < edges[None, 1:]),
                    over / span[:, None])
    job = run.op_job[r["op_id"][rows]]
    n_jobs = len(run.jobs)
    key, inv = np.unique(links * n_jobs + job, return_inverse=True)
    acc = np.zeros((len(key), TIME_BINS))
    np.add.at(acc, inv, frac * wire[:, None])
    load = f.link_load
    if load is not None and len(key):
        used, exact = load.binned_used(width, TIME_BINS)
        total = np.zeros((int(key.max()) // n_jobs + 1, TIME_BINS))
        ok = used < len(total)
        total[used[ok]] = exact[ok][:, :TIME_BINS]
        lk = key // n_jobs
        est = np.zeros_like(total)
        np.add.at(est, lk, acc)
        whole = acc.sum(axis=1)
        # jobs' shares of each bin; a bin the spread misses (a flow's tail) goes by whole-run shares
        per_link = np.zeros(len(total))
        np.add.at(per_link, lk, whole)
        fallback = whole / np.maximum(per_link[lk], 1e-300)
        shares = np.where(est[lk] > 0, acc / np.maximum(est[lk], 1e-300), fallback[:, None])
        acc = shares * total[lk]
    return edges, key // n_jobs, key % n_jobs, acc * 8 / width


MAX_SPLIT_EVENTS = 50_000_000   # (rate changes x the item's (link, job) pairs) beyond which the split is approximate


def _conn_csr(route: np.ndarray, q: int, n_conn: int):
    """Per connection the link directions its q QP routes cross and the share on each (count/q):
    Connections.link_csr of another route table (an epoch's)."""
    rows = np.repeat(np.arange(len(route)) // q, route.shape[1])
    links = route.reshape(-1)
    ok = links >= 0
    rows, links = rows[ok], links[ok].astype(np.int64)
    width = int(links.max(initial=0)) + 1
    uniq, counts = np.unique(rows * width + links, return_counts=True)
    ptr = np.zeros(n_conn + 1, np.int64)
    np.cumsum(np.bincount(uniq // width, minlength=n_conn), out=ptr[1:])
    return ptr, uniq % width, counts / q


def _exact_split(run, width: int):
    """Each (link direction, job)'s bytes per bin from the engine's own records: an item (a chunk,
    or per connection one op channel's edges - conn_items.group_items) sends at its recorded
    rate (Flows.item_rates) from each record until the next or its last byte (Flows.finish_ns),
    and puts rate x weight on each link it crosses, the weight being what the engine gives it:
    per NET row of the item, (row bytes / the item's largest row's bytes) x its connection's share
    on the link (Connections.link_csr: 1/q per QP route). A fabric that changes during the run
    (Fabric.epochs) moves the items at each epoch's instant onto that epoch's routes
    (fabric.timeline.epoch_routes, as the engine moves them): each item's rate counts on the
    links of the epoch it is in. An item lies in one op, so in one job: summed over jobs this is
    the engine's link load (Flows.link_load) exactly, up to float rounding. (keys link x n_jobs +
    job, bytes [keys, bins]) or None (no records, or truncated: the caller splits in proportion)."""
    f = run.flows
    rates = f.item_rates
    if rates is None or rates.truncated or f.conns is None:
        return None
    r = f.rows
    n = len(r)
    net = np.flatnonzero(r["link"] == 1)
    item = f.row_item if f.row_item is not None else np.arange(n)
    ebytes = np.where(r["link"] == 1, f.row_net_wire if f.row_net_wire is not None else r["wire_bytes"],
                      r["wire_bytes"]).astype(np.float64)
    n_items = int(item.max()) + 1 if n else 0
    big = np.zeros(n_items)
    np.maximum.at(big, item, ebytes)                     # the item's bytes (group_items: its largest row)
    fin = np.zeros(n_items, np.int64)
    fin[item] = f.finish_ns
    # the routes of every epoch (epoch 0: the connections' own)
    c, q = f.conns, f.conns.qps
    epochs = getattr(run.fabric, "epochs", ())
    csrs = [c.link_csr()]
    if epochs:
        from ..fabric.timeline import epoch_routes
        tables = epoch_routes(run.fabric, np.repeat(c.src_nic, q), np.repeat(c.dst_nic, q), c.sport, c.plane,
                              run.fabric.ip_version, dest_qpn=c.qpn_dst)
        next(tables)
        csrs += [_conn_csr(t, q, len(c)) for t in tables]
    n_ep = len(csrs)
    starts = np.array([0] + [int(e.at_ns) for e in epochs], np.int64)
    n_jobs = len(run.jobs)
    conn = f.row_conn[net]
    vkeys, vweights = [], []                             # per epoch: (virtual item, key) pairs
    for ep, (c_ptr, c_link, c_w) in enumerate(csrs):
        lens = c_ptr[conn + 1] - c_ptr[conn]
        pos = np.repeat(c_ptr[conn], lens) + np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens)
        rows = np.repeat(net, lens)
        key = c_link[pos].astype(np.int64) * n_jobs + run.op_job[r["op_id"][rows]]
        vkeys.append(((item[rows].astype(np.int64) * n_ep + ep), key))
        vweights.append(c_w[pos] * ebytes[rows] / np.maximum(big[item[rows]], 1e-300))
    v_item = np.concatenate([a for a, _ in vkeys])
    v_key = np.concatenate([b for _, b in vkeys])
    span = int(v_key.max(initial=0)) + 1
    pair, inv = np.unique(v_item * span + v_key, return_inverse=True)
    pw = np.bincount(inv, weights=np.concatenate(vweights), minlength=len(pair))
    p_item, p_key = pair // span, pair % span
    # each item's rate changes: +v_k - v_(k-1) at its records, -v_last at its last byte, each in
    # the epoch of its instant; at an epoch's start, the rate then moves from the old epoch's links
    o = np.lexsort((rates.t, rates.item))
    it, t, v = rates.item[o].astype(np.int64), rates.t[o].astype(np.int64), rates.bytes_per_ns[o]
    first = np.r_[True, it[1:] != it[:-1]] if len(it) else np.zeros(0, bool)
    last = np.r_[it[1:] != it[:-1], True] if len(it) else np.zeros(0, bool)
    dv = v - np.where(first, 0.0, np.r_[0.0, v[:-1]])
    end = np.maximum(fin[it[last]], t[last])
    ep_of = lambda x: np.searchsorted(starts, x, "right") - 1      # noqa: E731
    ev = [(t, it * n_ep + ep_of(t), dv), (end, it[last] * n_ep + ep_of(end - 1), -v[last])]
    if len(it):
        t_first = np.full(n_items, np.iinfo(np.int64).max)
        t_first[it[first]] = t[first]
        fin_eff = np.zeros(n_items, np.int64)
        fin_eff[it[last]] = end
        rec_key = it * (int(max(t.max(), end.max())) + 2) + t
        mul = int(max(t.max(), end.max())) + 2
        for i in range(1, n_ep):
            tb = starts[i]
            items = np.unique(it)
            live = items[(t_first[items] < tb) & (tb < fin_eff[items])]
            k = np.searchsorted(rec_key, live * mul + tb, "left") - 1     # the last record before tb
            vb = v[k]
            ev.append((np.full(len(live), tb), live * n_ep + (i - 1), -vb))
            ev.append((np.full(len(live), tb), live * n_ep + i, vb))
    ev_t = np.concatenate([a for a, _, _ in ev]).astype(np.int64)
    ev_item = np.concatenate([b for _, b, _ in ev]).astype(np.int64)
    ev_d = np.concatenate([d for _, _, d in ev])
    # events x the virtual item's pairs (p_item is sorted)
    lo, hi = np.searchsorted(p_item, ev_item, "left"), np.searchsorted(p_item, ev_item, "right")
    cnt = hi - lo
    total = int(cnt.sum())
    if total > MAX_SPLIT_EVENTS:
        return None
    idx = np.repeat(lo, cnt) + np.arange(total) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    k_t, k_key, k_d = np.repeat(ev_t, cnt), p_key[idx], np.repeat(ev_d, cnt) * pw[idx]
    keys, k_compact = np.unique(k_key, return_inverse=True)
    o = np.lexsort((k_t, k_compact))
    k_t, k_compact, k_d = k_t[o], k_compact[o], k_d[o]
    level = np.cumsum(k_d)
    start = np.r_[True, k_compact[1:] != k_compact[:-1]] if len(k_d) else np.zeros(0, bool)
    at = np.maximum.accumulate(np.where(start, np.arange(len(k_d)), 0)) if len(k_d) else np.zeros(0, np.int64)
    level = level - (level - k_d)[at]                   # per key: the sum of its own changes
    level = np.where(np.abs(level) < 1e-9, 0.0, level)    # float residue once the key's items are done
    # the level after the last change at each instant (binned() holds each record to the next)
    keep = np.r_[(k_compact[1:] != k_compact[:-1]) | (k_t[1:] != k_t[:-1]), True] if len(k_d) else np.zeros(0, bool)
    from ..timing.fluid import LinkLoad
    load = LinkLoad(k_t[keep], k_compact[keep], level[keep], False)
    return keys, load.binned(len(keys), width, TIME_BINS)
