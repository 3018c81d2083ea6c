"""A timed scenario as tables, JSON and the text of its files (pure: the CLI writes them).

Per job: where it runs, its time in the scenario beside the same job alone at the same placement
(slowdown = scenario / alone, the JCT ratio), its iterations, busbw (median over its ops that cross
the fabric: op bytes / op time x NCCL's bus factor, % of the NIC port rate - report/kpi.py);
across jobs: Jain's fairness index of the slowdowns.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..config import show, show_path
from ..errors import ConfigError
from ..report.kpi import jain
from ..tables import CollKind, Dim


def _nodes_text(nodes: np.ndarray) -> str:
    nodes = [int(x) for x in nodes]
    runs, k = [], 0
    while k < len(nodes):
        j = k
        while j + 1 < len(nodes) and nodes[j + 1] == nodes[j] + 1:
            j += 1
        runs.append(f"{nodes[k]}" if j == k else f"{nodes[k]}-{nodes[j]}")
        k = j + 1
    return ",".join(runs)


def _pct(x) -> str:
    return "—" if x is None else f"{x:.1f}"


def scenario_tables(run) -> list[tuple[str, list[str], list[list[str]]]]:
    sc = run.scenario
    rows = []
    for j in run.jobs:
        rows.append([j.name, _nodes_text(j.nodes), f"{j.start_ns:,}", str(j.iterations), f"{j.jct_ns / 1e6:,.3f}",
                     f"{j.alone_jct_ns / 1e6:,.3f}", f"{j.slowdown:.3f}", _pct(j.busbw_pct), _pct(j.alone_busbw_pct)])
    fab = run.fabric
    ev = [_event_text(e, sc) for e in sc.events] or ["none"]
    head = [["jobs", str(len(run.jobs))], ["nodes", f"{sc.nodes} x {sc.hardware.cluster.gpus_per_node} GPUs"],
            ["fabric", f"{fab.kind}: {fab.switch_ids_text()}"], ["placement", sc.placement +
                                                                  (f" (seed {sc.seed})" if sc.placement == "random" else "")],
            *[["events" if k == 0 else "", text] for k, text in enumerate(ev)],     # one a row, in time
            ["ecmp on failure", sc.ecmp_on_failure], ["detail", run.detail],
            ["Jain fairness of slowdowns", f"{run.fairness:.4f}"]]
    return [(f"Scenario {sc.name}", ["what", "value"], head),
            ("Jobs: time in the scenario vs alone (same nodes, same fabric)",
             ["job", "nodes", "start ns", "iters", "JCT ms", "alone ms", "slowdown", "busbw %", "alone busbw %"], rows)]


def _when(e) -> str:
    if not e.at_ns and e.until_ns is None:
        return ""
    return f" from {e.at_ns:,} ns" + ("" if e.until_ns is None else f" until {e.until_ns:,} ns")


def _event_text(e, sc) -> str:
    if e.type == "down":
        return f"{e.switch or e.link} down{_when(e)}"
    if e.type == "degrade":
        return f"{e.link} at {e.gbps} Gb/s{_when(e)}"
    return f"{sc.jobs[e.job].name} rank {e.rank} x{e.factor:g} compute"


def _event_json(e, sc) -> dict:
    """One event of scenario.json: a flap of the file is listed as its down intervals."""
    when = {"at_ns": e.at_ns, "until_ns": e.until_ns}
    if e.type == "down":
        return {"type": "down", **({"switch": e.switch} if e.switch else {"link": e.link}), **when}
    if e.type == "degrade":
        return {"type": "degrade", "link": e.link, "gbps": e.gbps, **when}
    return {"type": "straggler", "job": sc.jobs[e.job].name, "rank": e.rank, "factor": e.factor}


def scenario_json(run) -> dict:
    sc = run.scenario
    return {
        "scenario": sc.name, "nodes": sc.nodes, "gpus_per_node": sc.hardware.cluster.gpus_per_node,
        "placement": sc.placement, "seed": sc.seed, "ecmp_on_failure": sc.ecmp_on_failure, "detail": run.detail,
        "events": [_event_json(e, sc) for e in sc.events],
        "fairness_jain": run.fairness,
        "jobs": [{"name": j.name, "source": e.source, "nodes": [int(x) for x in j.nodes], "start_ns": j.start_ns,
                  "iterations": j.iterations, "end_ns": j.end_ns, "jct_ns": j.jct_ns, "alone_jct_ns": j.alone_jct_ns,
                  "slowdown": j.slowdown, "iteration_ns": j.iteration_ns, "alone_iteration_ns": j.alone_iteration_ns,
                  "busbw_pct": j.busbw_pct, "alone_busbw_pct": j.alone_busbw_pct,
                  "dscp": e.job.output.dscp if e.dscp is None else e.dscp,
                  "pcp": (e.job.output.pcp if e.pcp is None else e.pcp) if e.job.output.vlan else None}
                 for j, e in zip(run.jobs, sc.jobs)],
    }


def ops_csv(run) -> str:
    """Every op of every job: job, its op id in the job, kind, dimension, iteration, scenario GPUs
    (first..last), bytes, start and end ns."""
    ops, f = run.ops, run.flows
    lines = ["job,op_id,job_op_id,kind,dim,iteration,ranks,bytes,start_ns,end_ns"]
    lens = ops.groups.lengths()
    names = [j.name for j in run.jobs]
    los = [j.op_lo for j in run.jobs]
    for o in range(len(ops)):
        r = ops.rows[o]
        if r["kind"] == CollKind.MARKER:
            continue
        j = int(run.op_job[o])
        g = ops.groups[o]
        lines.append(f"{names[j]},{o},{o - los[j]},{CollKind(int(r['kind'])).label},{Dim(int(r['dim'])).name},"
                     f"{int(r['iteration'])},{int(lens[o])}:{int(g[0]) if len(g) else -1}..{int(g[-1]) if len(g) else -1},"
                     f"{int(r['bytes'])},{int(f.op_start_ns[o])},{int(f.op_end_ns[o])}")
    return "\n".join(lines) + "\n"


def link_bytes_csv(run) -> str:
    """Per fabric link direction between switches or NIC->leaf: bytes each job put on it (from
    the flows' routes; with events during the run, flows move between routes: the engine's
    per-link bytes over time, split between the jobs as link_time.csv splits them)."""
    f, fab = run.flows, run.fabric
    got = link_time(run) if fab.epochs else None
    if got is not None:
        edges, links, jobs, gbps = got
        width = int(edges[1] - edges[0])
        names = [j.name for j in run.jobs]
        tot = gbps.sum(axis=1) * width / 8
        lines = ["link,job,bytes"]
        for ln, j, v in zip(links.tolist(), jobs.tolist(), tot.tolist()):
            if v > 0:
                lines.append(f"{fab.link_dir_name(ln)},{names[j]},{int(round(v))}")
        return "\n".join(lines) + "\n"
    r = f.rows
    net = r["link"] == 1
    if f.conns is None or not net.any():
        return "link,job,bytes\n"
    job_of_row = run.op_job[r["op_id"]]
    conn = f.row_conn[net]
    q = f.conns.qps
    out: dict[tuple[int, int], float] = {}
    wire = (f.row_net_wire[net] if f.row_net_wire is not None else r["wire_bytes"][net]).astype(float)
    for k in range(q):
        route = f.conns.route[conn * q + k]
        for col in range(route.shape[1]):
            d = route[:, col]
            ok = d >= 0
            key = d[ok] * 1024 + job_of_row[net][ok]
            u, inv = np.unique(key, return_inverse=True)
            s = np.bincount(inv, weights=wire[ok] / q)
            for kk, v in zip(u.tolist(), s.tolist()):
                out[(kk // 1024, kk % 1024)] = out.get((kk // 1024, kk % 1024), 0.0) + v
    names = [j.name for j in run.jobs]
    lines = ["link,job,bytes"]
    for (d, j), v in sorted(out.items()):
        lines.append(f"{fab.link_dir_name(d)},{names[j]},{int(round(v))}")
    return "\n".join(lines) + "\n"


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


def link_time_csv(run) -> str | None:
    """link_time.csv (see link_time): per link direction and job, the link's rate and the job's
    Gb/s in each time bin (columns gbps_START_END); None when too big to tabulate."""
    got = link_time(run)
    if got is None:
        return None
    edges, links, jobs, gbps = got
    names = [j.name for j in run.jobs]
    rate = run.fabric.links["gbps"]
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


def summary_md(run) -> str:
    out = []
    for title, header, rows in scenario_tables(run):
        out.append(f"## {title}\n")
        if any(header):
            out.append("| " + " | ".join(header) + " |")
            out.append("|" + "---|" * len(header))
        else:
            out.append("| | |\n|---|---|")
        out += ["| " + " | ".join(r) + " |" for r in rows]
        out.append("")
    return "\n".join(out)


SCENARIO_FILES = ("scenario.json", "ops.csv", "link_bytes.csv", "link_time.csv", "summary.md", "jobs_gantt.png",
                  "slowdowns.png", "link_load_by_job.png")


def scenario_files(run) -> dict[str, str]:
    """The files `generate --scenario` writes, by name (link_time.csv unless too big)."""
    out = {"scenario.json": json.dumps(scenario_json(run), indent=1) + "\n", "ops.csv": ops_csv(run),
           "link_bytes.csv": link_bytes_csv(run), "summary.md": summary_md(run)}
    timeline = link_time_csv(run)
    if timeline is not None:
        out["link_time.csv"] = timeline
    return out


# --- a scenario's files read back: `tracegen report DIR`, and generate's pictures ---------------

SCENARIO_JSON_MAX_BYTES = 64 << 20
TABLE_MAX_BYTES = 4 << 30          # ops.csv / link_time.csv: larger is refused, not read
_FIX = "the file is damaged: write the scenario again (tracegen generate --scenario FILE)"


@dataclass(frozen=True)
class SavedJob:
    name: str
    nodes: list
    start_ns: int
    iterations: int
    end_ns: int
    jct_ns: int
    alone_jct_ns: int
    busbw_pct: float | None
    alone_busbw_pct: float | None

    @property
    def slowdown(self) -> float:
        return self.jct_ns / self.alone_jct_ns if self.alone_jct_ns else float("nan")


@dataclass(frozen=True)
class SavedOps:
    """ops.csv: per op (markers left out) its job (index), dimension, release and end."""
    job: np.ndarray
    dim: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray


@dataclass(frozen=True)
class SavedLinkTime:
    """link_time.csv: per row a link direction's name, a job (index), the link's Gb/s and the
    job's Gb/s per time bin (edges ns)."""
    edges: np.ndarray
    link_names: list
    jobs: np.ndarray
    link_gbps: list
    gbps: np.ndarray


@dataclass(frozen=True)
class SavedScenario:
    """What the pictures and `report` read of a scenario folder: scenario.json's jobs, and (when
    the folder has them) ops.csv and link_time.csv."""
    name: str
    jobs: list
    ops: SavedOps | None = None
    link_time: SavedLinkTime | None = None

    @property
    def fairness(self) -> float:
        return jain(np.array([j.slowdown for j in self.jobs])) if len(self.jobs) > 1 else 1.0


def _bad(path, where: str, what: str) -> ConfigError:
    return ConfigError(f"{path}{': ' + where if where else ''}: {what}; {_FIX}")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _get(path, doc: dict, key: str, kind: str, where: str = ""):
    if key not in doc:
        raise _bad(path, where.rstrip("."), f"no key {key!r}")
    v = doc[key]
    ok = {"int": lambda x: _is_int(x) and 0 <= x < 2**63, "str": lambda x: isinstance(x, str),
          "list": lambda x: isinstance(x, list),
          "pct": lambda x: x is None or (isinstance(x, (int, float)) and not isinstance(x, bool) and np.isfinite(x))}[kind](v)
    if not ok:
        what = {"int": "a non-negative integer", "str": "a string", "list": "a list", "pct": "a number or null"}[kind]
        raise _bad(path, f"{where}{key}", f"{show(v)} is not {what}")
    return v


def _text(path: Path, limit: int) -> str:
    shown = show_path(path)
    if path.stat().st_size > limit:
        raise _bad(shown, "", f"larger than {limit >> 20} MiB")
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise _bad(shown, f"byte {e.start}", "not UTF-8 text") from None


def read_scenario_folder(folder: Path) -> SavedScenario:
    """A folder `generate --scenario` wrote, type-checked: scenario.json, and ops.csv and
    link_time.csv when there; ConfigError (one line naming the file and the key or line) when
    damaged."""
    folder = Path(folder)
    texts = {"scenario.json": _text(folder / "scenario.json", SCENARIO_JSON_MAX_BYTES)}
    for name in ("ops.csv", "link_time.csv"):
        if (folder / name).is_file():
            texts[name] = _text(folder / name, TABLE_MAX_BYTES)
    return read_scenario_texts(texts, folder)


def read_scenario_texts(texts: dict, folder: Path = Path(".")) -> SavedScenario:
    """The SavedScenario of a scenario's file texts (name -> text; scenario.json required)."""
    saved = _read_json(texts["scenario.json"], show_path(Path(folder) / "scenario.json"))
    names = [j.name for j in saved.jobs]
    ops = _read_ops(texts["ops.csv"], show_path(Path(folder) / "ops.csv"), names) if "ops.csv" in texts else None
    lt = (_read_link_time(texts["link_time.csv"], show_path(Path(folder) / "link_time.csv"), names)
          if "link_time.csv" in texts else None)
    return SavedScenario(saved.name, saved.jobs, ops, lt)


def _read_json(text: str, shown: str) -> SavedScenario:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise _bad(shown, f"line {e.lineno} column {e.colno}", f"not JSON ({e.msg})") from None
    except RecursionError:
        raise _bad(shown, "", "nested too deeply") from None
    if not isinstance(doc, dict):
        raise _bad(shown, "", f"a JSON object is expected, not {type(doc).__name__}")
    name = _get(shown, doc, "scenario", "str")
    jobs_doc = _get(shown, doc, "jobs", "list")
    if not jobs_doc:
        raise _bad(shown, "jobs", "no jobs")
    jobs = []
    for i, j in enumerate(jobs_doc):
        where = f"jobs[{i}]."
        if not isinstance(j, dict):
            raise _bad(shown, f"jobs[{i}]", f"{show(j)} is not an object")
        nodes = _get(shown, j, "nodes", "list", where)
        if not all(_is_int(n) and n >= 0 for n in nodes):
            raise _bad(shown, f"{where}nodes", "a list of node numbers is expected")
        got = [_get(shown, j, k, kind, where) for k, kind in (
            ("name", "str"), ("start_ns", "int"), ("iterations", "int"), ("jct_ns", "int"), ("alone_jct_ns", "int"),
            ("busbw_pct", "pct"), ("alone_busbw_pct", "pct"))]
        if got[4] == 0:
            raise _bad(shown, f"{where}alone_jct_ns", "0: no time alone to compare with")
        jobs.append(SavedJob(got[0], nodes, got[1], got[2], _get(shown, j, "end_ns", "int", where), *got[3:]))
    if len({j.name for j in jobs}) != len(jobs):
        raise _bad(shown, "jobs", "two jobs have one name")
    return SavedScenario(name, jobs)


OPS_HEADER = "job,op_id,job_op_id,kind,dim,iteration,ranks,bytes,start_ns,end_ns"


def _lines(text: str, shown: str, header_ok, header_what: str) -> list[str]:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines or not header_ok(lines[0]):
        raise _bad(shown, "line 1", f"the header is not {header_what}")
    return lines


def _int(text: str, shown: str, line: int, what: str) -> int:
    if not text.isascii() or not text.isdigit() or len(text) > 18:
        raise _bad(shown, f"line {line}", f"{what} {text[:40]!r} is not a non-negative integer")
    return int(text)


def _read_ops(text: str, shown: str, names: list) -> SavedOps:
    lines = _lines(text, shown, lambda h: h == OPS_HEADER, repr(OPS_HEADER))
    job_of = {n: k for k, n in enumerate(names)}
    dims = {d.name: int(d) for d in Dim}
    n = len(lines) - 1
    job, dim, start, end = (np.zeros(n, np.int64) for _ in range(4))
    for i, line in enumerate(lines[1:]):
        f = line.split(",")
        if len(f) != 10:
            raise _bad(shown, f"line {i + 2}", f"{len(f)} fields, not 10")
        if f[0] not in job_of:
            raise _bad(shown, f"line {i + 2}", f"job {f[0][:40]!r} is not in scenario.json")
        if f[4] not in dims:
            raise _bad(shown, f"line {i + 2}", f"dim {f[4][:40]!r} is none of {', '.join(dims)}")
        job[i], dim[i] = job_of[f[0]], dims[f[4]]
        start[i], end[i] = _int(f[8], shown, i + 2, "start_ns"), _int(f[9], shown, i + 2, "end_ns")
    return SavedOps(job, dim, start, end)


def _read_link_time(text: str, shown: str, names: list) -> SavedLinkTime:
    lines = _lines(text, shown, lambda h: h.startswith("link,job,link_gbps,gbps_"),
                   "link,job,link_gbps,gbps_START_END,...")
    head = lines[0].split(",")[3:]
    edges = [0]
    for k, h in enumerate(head):
        a, _, b = h.removeprefix("gbps_").partition("_")
        if not (h.startswith("gbps_") and a.isdigit() and b.isdigit() and int(a) == edges[-1] and int(b) > int(a)):
            raise _bad(shown, "line 1", f"column {k + 4} {h[:40]!r} is not gbps_START_END of the next time bin")
        edges.append(int(b))
    job_of = {n: k for k, n in enumerate(names)}
    links, jobs, rates, rows = [], [], [], []
    for i, line in enumerate(lines[1:]):
        f = line.split(",")
        if len(f) != 3 + len(head):
            raise _bad(shown, f"line {i + 2}", f"{len(f)} fields, not {3 + len(head)}")
        if f[1] not in job_of:
            raise _bad(shown, f"line {i + 2}", f"job {f[1][:40]!r} is not in scenario.json")
        try:
            vals = [float(x) for x in f[2:]]
        except ValueError:
            raise _bad(shown, f"line {i + 2}", "a rate is not a number") from None
        if not all(np.isfinite(v) and v >= 0 for v in vals) or vals[0] <= 0:
            raise _bad(shown, f"line {i + 2}", "a rate is negative, zero or not finite")
        links.append(f[0])
        jobs.append(job_of[f[1]])
        rates.append(vals[0])
        rows.append(vals[1:])
    return SavedLinkTime(np.array(edges, np.int64), links, np.array(jobs, np.int64), rates,
                         np.array(rows, np.float64).reshape(len(rows), len(head)))


def saved_tables(saved: SavedScenario) -> list[tuple[str, list[str], list[list[str]]]]:
    """The jobs' table of scenario_tables (slowdown = JCT / alone, recomputed) and Jain's index."""
    rows = [[j.name, _nodes_text(np.array(j.nodes)), f"{j.start_ns:,}", str(j.iterations), f"{j.jct_ns / 1e6:,.3f}",
             f"{j.alone_jct_ns / 1e6:,.3f}", f"{j.slowdown:.3f}", _pct(j.busbw_pct), _pct(j.alone_busbw_pct)]
            for j in saved.jobs]
    return [(f"Scenario {saved.name}", ["what", "value"],
             [["jobs", str(len(saved.jobs))], ["Jain fairness of slowdowns", f"{saved.fairness:.4f}"]]),
            ("Jobs: time in the scenario vs alone (same nodes, same fabric)",
             ["job", "nodes", "start ns", "iters", "JCT ms", "alone ms", "slowdown", "busbw %", "alone busbw %"], rows)]
