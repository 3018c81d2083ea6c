"""Connection-level schedule: the whole job timed per NCCL connection per op, not per chunk.

A collective's time is set by its connections - a ring channel's neighbour streams, a tree's
edges, a p2p pair - sharing the fabric, and by its pipeline. So every op becomes fluid items over
its edges (collectives/edges.py: the bytes one connection carries for the op), crossing the links
its chunks would cross (the connection's route, or the GPUs' NVLink ports) and sharing them
max-min with everything in flight (fluid.py). The edges of one channel of a collective move in
lockstep (each ring step, tree level or halving-doubling round needs the previous one), so they
are one item; send/recv and AllToAll pairs are an item each.

The pipeline: for each distinct op signature (shape, where its ranks sit up to renaming, the
latency of its routes) the op is scheduled once alone at chunk level on an ideal fabric (NIC and
NVLink ports only). That time, less its last arrival latency, caps its items' rate: alone an op
takes exactly its chunk-level time; sharing can only slow it further, and then - as chunks do -
other traffic uses the gaps its steps and hop latencies leave. Node-local ops (TP, most EP) are
timed the same way on NVLink, so their closed form is their steps at NVLink rate.

The result is a Flows table with one row per (op, edge): bytes summed, step and chunk -1, start
and end of the edge's item. Per-rank, per-NIC and per-link byte totals are the chunk level's.
"""
from __future__ import annotations

import numpy as np

from . import fluid
from .. import progress
from ..collectives import expand, op_templates
from ..collectives.edges import pxn_split_columns, template_edges
from ..collectives.ring_edges import RingShape, ring_allreduce_alone_ns, ring_allreduce_edges
from ..config import Job
from .connections import build_connections, communicator
from .order import stable_order
from .schedule import nic_only_links
from ..tables import FLOW_DTYPE, CollKind, CommOps, Flows, LinkKind, Ragged
from ..fabric.topology import Fabric


# A ring AllReduce listing more chunks than this (a whole 16k-GPU job's grad-norm AllReduce: half a
# billion) has its edges and its time alone in closed form (collectives/ring_edges.py).
CLOSED_FORM_ROWS = 16_000_000


# Narrow columns of the edge table (a 64k-GPU job's has ~11 M rows): ranks < world (config caps
# it far below 2^31), channels < 1024 (edges.py packs them in 10 bits), algorithm and protocol ids.
# Every user widens them before arithmetic (connections._pack, send_queues) or stores them in FLOW_DTYPE.
RANK_DTYPE = np.int32


def edge_table(ops: CommOps, fabric: Fabric, job: Job, which=None, per_op: dict | None = None) -> dict:
    """Every op's edges mapped to ranks (PXN applied), sorted by op: a dict of columns (ranks
    RANK_DTYPE, channel int16, algo and proto uint8, the rest int64). per_op (a dict): algo,
    proto and max_msg_bytes - one NCCL plan per op - go there, one entry per op, not per row,
    and no `copies` column (the rows a folded job's row stands for)."""
    if fabric.world >= np.iinfo(RANK_DTYPE).max:
        raise ValueError(f"{fabric.world:,} ranks do not fit the edge table's {np.dtype(RANK_DTYPE)} ranks")
    nccl, pmtu = job.nccl, job.output.pmtu
    groups: dict[tuple, list] = {}
    for i, group, t, plan in op_templates(ops, fabric, nccl, which, max_rows=CLOSED_FORM_ROWS):
        tkey = t if isinstance(t, RingShape) else id(t)
        groups.setdefault((tkey, plan), [t, plan, [], []])
        g = groups[(tkey, plan)]
        g[2].append(i)
        g[3].append(group)
    cols: dict[str, list] = {k: [] for k in ("op_id", "src_rank", "dst_rank", "channel", "transfers",
                                             "messages", "packets", "payload", "nvl_wire", "net_wire",
                                             "algo", "proto", "max_msg_bytes")}
    # the CLI's bar, in % of the work (about a quarter each at 2k-16k GPUs): the op shapes' edges,
    # PXN, the replicas' network edges, sorting by op
    shapes = list(groups.values())
    for k, (t, plan, op_ids, grps) in enumerate(shapes):
        progress.report(40 * k // len(shapes), 100)
        e = (ring_allreduce_edges if isinstance(t, RingShape) else template_edges)(
            t, int(plan.proto), plan.max_msg_bytes, pmtu, job.output.vlan, job.output.ip_version)
        G = np.asarray(grps, dtype=RANK_DTYPE)                    # [k, n] ranks by position
        k, m = len(op_ids), len(e)
        cols["op_id"].append(np.repeat(np.asarray(op_ids, np.int64), m))
        cols["src_rank"].append(G[:, e.src].reshape(-1))
        cols["dst_rank"].append(G[:, e.dst].reshape(-1))
        cols["channel"].append(np.tile(e.channel.astype(np.int16), k))
        for name, v in (("transfers", e.transfers), ("messages", e.messages),
                        ("packets", e.packets), ("payload", e.payload),
                        ("nvl_wire", e.nvl_wire), ("net_wire", e.net_wire)):
            cols[name].append(np.tile(v, k))
        for name, v, dt in (("algo", int(plan.algo_id), np.uint8), ("proto", int(plan.proto), np.uint8),
                            ("max_msg_bytes", plan.max_msg_bytes, np.int64)):
            if per_op is None:
                cols[name].append(np.full(k * m, v, dt))
            else:
                per_op.setdefault(name, np.zeros(len(ops), dt))[op_ids] = v
    empty = {"src_rank": RANK_DTYPE, "dst_rank": RANK_DTYPE, "channel": np.int16, "algo": np.uint8, "proto": np.uint8}
    if per_op is not None:
        for name, dt in (("algo", np.uint8), ("proto", np.uint8), ("max_msg_bytes", np.int64)):
            per_op.setdefault(name, np.zeros(len(ops), dt))
            del cols[name]
    out = {}
    for k in list(cols):                    # one column at a time: its parts freed as it is made
        parts = cols.pop(k)
        out[k] = np.concatenate(parts) if parts else np.zeros(0, empty.get(k, np.int64))
        del parts
    link = np.where(fabric.same_node(out["src_rank"], out["dst_rank"]), LinkKind.NVLINK,
                    LinkKind.NET).astype(np.uint8)
    progress.report(40, 100)
    if nccl.pxn and len(link):
        link = pxn_split_columns(out, link, fabric)
    progress.report(60, 100)
    out["link"] = link
    out["copies"] = np.ones(len(link), np.int64)
    sel, rep_of = np.arange(len(link)), None
    if ops.replicas > 1 and len(link):
        sel, rep_of = _unfold_net_edges(out, ops)
    if per_op is not None:                  # the caller makes `copies` again where it needs them
        del out["copies"]
    progress.report(80, 100)
    # one gather per column, unfolded and sorted by op at once (a folded 32k-GPU job's table is
    # ~10 M rows: gathering the replicas' rows, concatenating, then sorting cost three copies)
    order = stable_order(out["op_id"][sel])        # counting: O(rows), as argsort(kind="stable")
    sel = sel[order]
    shift = None
    if rep_of is not None:
        shift = rep_of[order]
        del rep_of, order
        shift *= ops.replica_stride
    for k in list(out):                     # column by column: one old column held at a time
        out[k] = out[k][sel]
    del sel
    if shift is not None:                   # in place: the ranks stay RANK_DTYPE (< world)
        np.add(out["src_rank"], shift, out=out["src_rank"], casting="unsafe")
        np.add(out["dst_rank"], shift, out=out["dst_rank"], casting="unsafe")
    progress.report(100, 100)
    return out


def _unfold_net_edges(out: dict, ops: CommOps) -> tuple[np.ndarray, np.ndarray]:
    """A folded job's edges (CommOps.replicas): an op of replica 0 gets its NET edges once per
    replica, ranks shifted by d x stride - they share the fabric with every other replica's and
    their routes differ (ECMP) - while its NVLink edges stay once, standing for all replicas
    (`copies`, set here). Returns the rows of the unfolded table (replica 0's rows, then each
    further replica's NET rows) as rows of `out`, and the replica d of each."""
    tiled = ops.tiled()[out["op_id"]]
    net = out["link"] == LinkKind.NET
    out["copies"] = np.where(tiled & ~net, ops.replicas, 1)
    idx = np.flatnonzero(tiled & net)
    n = len(net)
    if not len(idx):
        return np.arange(n), None
    sel = np.concatenate([np.arange(n), np.tile(idx, ops.replicas - 1)])
    rep_of = np.concatenate([np.zeros(n, np.int64), np.repeat(np.arange(1, ops.replicas, dtype=np.int64), len(idx))])
    return sel, rep_of


GROUP_STEPS = 5     # the links and items bar: item links, send queues, item keys, item links merged, done


# Rows whose links are merged at once in group_items: the (item, link) pairs of all rows at once
# held ~65 B per pair (keys, sort, inverse, weights; 32k GPUs: 1.8 GB over a 1.1 GB table).
GROUP_BLOCK_ROWS = 1 << 18


def group_items(op_id, channel, kind, queue, nbytes, links, width: int, block_rows: int | None = None,
                row_lens=None):
    """Rows -> fluid items. The edges of one channel of a collective move in lockstep (a ring step,
    a tree level or a halving-doubling round needs the one before it), so they form one item that
    crosses all their links, each edge's weight scaled by its share of the largest edge's bytes:
    the channel runs at the rate of its most loaded link. Send/recv and AllToAll pairs have no
    such coupling: an item per send queue (the pairs an op sends on one QP go one after the
    other). links: the rows' links as CSR (ptr, link, weight), or a function (lo, hi) -> that
    CSR for rows [lo, hi) (made block by block: never all at once) with row_lens, the number of
    links of each row; every link < width. Returns (item of each row, op, bytes, ptr, links, weights).

    An item lies within one op; with rows sorted by op, blocks of whole ops merge their items'
    links alone (each pair's weights summed in row order, as all at once). Item ids follow the
    sorted keys: per-queue items (negative keys) of later ops first, then the channels' in op
    order - so each block's pairs go straight to their place in one output (untouched pages of
    its upper bound are never resident), per-queue ones backwards from the end of theirs."""
    block_rows = GROUP_BLOCK_ROWS if block_rows is None else block_rows
    if isinstance(links, tuple):
        ptr0, lk0, w0 = links
        links = lambda lo, hi: (ptr0[lo:hi + 1] - ptr0[lo], lk0[ptr0[lo]:ptr0[hi]], w0[ptr0[lo]:ptr0[hi]])  # noqa: E731
        row_lens = np.diff(ptr0)
    coupled = (kind != CollKind.SENDRECV) & (kind != CollKind.ALLTOALL)
    key = np.where(coupled, op_id * 65536 + channel, -1 - (op_id * (int(queue.max(initial=0)) + 1) + queue))
    uk, item = np.unique(key, return_inverse=True)
    n_free = int(np.searchsorted(uk, 0))      # per-queue items: ids [0, n_free)
    del key, uk
    progress.report(3, GROUP_STEPS)
    n = len(op_id)
    m = int(item.max(initial=-1)) + 1
    big = np.zeros(m)
    np.maximum.at(big, item, nbytes)
    scale = np.where(big[item] > 0, nbytes / np.maximum(big[item], 1e-300), 1.0)
    ordered = n < 2 or bool((op_id[1:] >= op_id[:-1]).all())
    bounds = [0, n]
    if ordered and n > block_rows:            # cut between ops only
        cuts = np.searchsorted(op_id, op_id[np.arange(block_rows, n, block_rows)], "left")
        bounds = sorted({0, n, *cuts.tolist()})
    if len(bounds) > 2:
        e_free = int(row_lens[~coupled].sum())
        size = int(row_lens.sum())
        out_k, out_w = np.empty(size, np.int64), np.empty(size)
        u_lo, c_hi = e_free, e_free           # per-queue pairs fill [u_lo, e_free), channels' from e_free on
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        ptr, lk, w = links(lo, hi)
        lens = np.diff(ptr)
        pair = np.repeat(item[lo:hi].astype(np.int64), lens) * width + lk
        k2, inv = np.unique(pair, return_inverse=True)
        del pair
        ww = np.bincount(inv, weights=w * np.repeat(scale[lo:hi], lens), minlength=len(k2))
        del inv, ptr, lk, w
        if len(bounds) == 2:
            break
        split = int(np.searchsorted(k2, n_free * width))     # this block's per-queue pairs, then channels'
        out_k[u_lo - split:u_lo], out_w[u_lo - split:u_lo] = k2[:split], ww[:split]
        u_lo -= split
        c = len(k2) - split
        out_k[c_hi:c_hi + c], out_w[c_hi:c_hi + c] = k2[split:], ww[split:]
        c_hi += c
        del k2, ww
    if len(bounds) > 2:
        k2, ww = out_k[u_lo:c_hi], out_w[u_lo:c_hi]
    progress.report(4, GROUP_STEPS)
    it_ptr = np.searchsorted(k2, np.arange(m + 1, dtype=np.int64) * width).astype(np.int64)
    np.remainder(k2, width, out=k2)           # the pairs' links, in place
    it_op = np.zeros(m, np.int64)
    it_op[item] = op_id
    progress.report(GROUP_STEPS, GROUP_STEPS)
    return item, it_op, big, it_ptr, k2, ww


def _alone(item_deps, nbytes, extra, links, queue=None):
    """One op alone from t = 0: (its end, its items' last byte)."""
    ptr, lk, w, cap = links
    n = len(nbytes)
    with progress.muted():          # the fill's bar counts ops, not this op's items
        _, finish, end, _, op_end = fluid.run(np.zeros(1, np.int64), Ragged.empty(1), np.zeros(n, np.int64),
                                              item_deps, nbytes, extra, ptr, lk, w, cap, jit=n >= 2000,
                                              queue=queue)
    return int(op_end[0]), int(finish.max()) if n else 0


class _Fill:
    """Per op signature: the op's chunk-level time alone on an ideal fabric; cached."""

    def __init__(self, ops, fabric, job, conns, pmtu):
        self.ops, self.fabric, self.job, self.conns, self.pmtu = ops, fabric, job, conns, pmtu
        self.cache: dict[bytes, tuple] = {}
        self.groups: dict[bytes, bytes] = {}

    def pattern(self, op: int) -> bytes:
        """Where the op's ranks sit, up to renaming of nodes, NICs and rails (alone on an ideal
        fabric only which ranks share a node, a NIC or a rail matters: NVLink, NIC ports, PXN
        proxies; a DP group of each of the 8 TP ranks is one shape, not 8)."""
        g = self.ops.groups[op]
        key = g.tobytes()
        if key not in self.groups:
            f = self.fabric
            parts = []
            for v in (f.rank_node[g], f.rank_nic[g], f.nic_rail[f.rank_nic[g]]):
                _, first, inv = np.unique(v, return_index=True, return_inverse=True)
                parts.append(np.argsort(np.argsort(first))[inv].astype(np.int32).tobytes())
            self.groups[key] = b"|".join(parts)
        return self.groups[key]

    def alone_ns(self, op: int, sig: bytes, latency_ns: int = 0) -> int:
        hit = self.cache.get(sig)
        if hit is not None:
            return hit
        f, job = self.fabric, self.job
        big = op_templates(self.ops, f, job.nccl, [op], max_rows=CLOSED_FORM_ROWS)
        if big and isinstance(big[0][2], RingShape):
            _, group, shape, plan = big[0]
            net = not f.same_node(group, np.roll(group, -1)).all()
            e = ring_allreduce_edges(shape, int(plan.proto), plan.max_msg_bytes, self.pmtu, job.output.vlan,
                                     job.output.ip_version)
            rate = f.port_gbps if net else f.nvlink_gbps
            self.cache[sig] = ring_allreduce_alone_ns(shape, e, rate, latency_ns)
            return self.cache[sig]
        # chunk level, this op alone
        tr = expand(self.ops, f, job.nccl, which=[op])
        r = tr.rows
        net = r["link"] == LinkKind.NET
        from .schedule import net_latency_ns, net_wire_bytes, send_queues
        out = job.output
        wire = np.where(net, net_wire_bytes(r["wire_bytes"], np.maximum(r["max_msg_bytes"], 1), self.pmtu,
                                            out.vlan, out.ip_version), r["wire_bytes"]).astype(np.float64)
        lat = np.zeros(len(r), np.int64)
        row_conn = np.full(len(r), -1, np.int64)
        if net.any():
            comm = communicator(np.full(int(net.sum()), self.ops.rows["dim"][op]))
            rc = row_conn[net] = self.conns.lookup(r["src_rank"][net], r["dst_rank"][net], comm, r["channel"][net])
            lat[net] = net_latency_ns(self.conns, rc, wire[net].astype(np.int64), self.pmtu, out.vlan,
                                      out.ip_version)
        links = nic_only_links(f, r["src_rank"], r["dst_rank"], net)
        t_chunk, _ = _alone(tr.deps, wire, lat, links, send_queues(self.ops, r, row_conn))
        self.cache[sig] = t_chunk
        return self.cache[sig]


def schedule_connections(ops: CommOps, fabric: Fabric, job: Job, shared_fabric: bool = True,
                         rates: bool | None = None, aggregate: bool | None = None) -> Flows:
    """shared_fabric=False: the NIC-only model (switch ports never limit), for comparison.
    rates: keep the rate changes of the items with NET rows (Flows.item_rates, Flows.row_item):
    placed pcaps (emit/views/placed.py) put their chunks on those curves; None: when the job writes pcaps.
    aggregate: time AllToAlls per sending rank (alltoall_agg.py); None: beyond AGG_PAIRS rank pairs."""
    from .schedule import item_links, link_capacity, net_latency_ns
    from . import alltoall_agg
    pmtu = job.output.pmtu
    progress.stage(f"connections: edges of {len(ops):,} ops", "%")
    per_op: dict = {}
    agg, which = None, None
    if (alltoall_agg.wanted(job) if aggregate is None else aggregate) and shared_fabric and ops.replicas == 1:
        a_ops = alltoall_agg.agg_ops(ops)
        if len(a_ops):
            keep = np.ones(len(ops), bool)
            keep[a_ops] = False
            which = np.flatnonzero(keep)
    rows = edge_table(ops, fabric, job, which=which, per_op=per_op)
    prow = None
    if which is not None:
        agg = alltoall_agg.Aggregate(ops, a_ops, fabric, job, per_op)
        rows, prow = _merge_rows(rows, agg.table())
    n = len(rows["op_id"])
    net = rows["link"] == LinkKind.NET
    plain = net if prow is None else net & (prow < 0)       # rows of one connection each
    comm = communicator(ops.rows["dim"][rows["op_id"]])
    progress.stage(f"connections: QPs, source ports and routes of {int(net.sum()):,} network edges", "steps")
    keys = [rows["src_rank"][plain], rows["dst_rank"][plain], comm[plain], rows["channel"][plain]]
    if agg is not None:             # the aggregated ops' pairs: the connections the pairwise form has
        keys = [np.concatenate([np.asarray(a, np.int64), b]) for a, b in zip(keys, agg.net_pairs())]
    conns, key_rows = build_connections(*keys, fabric, job.nccl.qps_per_connection, rows=True)
    del keys
    progress.report(1, 3)
    row_conn = np.full(n, -1, np.int64)
    row_conn[plain] = key_rows[:int(plain.sum())]            # the plain rows' keys come first
    del key_rows
    progress.report(2, 3)
    lat = np.zeros(n, np.int64)
    lat[plain] = net_latency_ns(conns, row_conn[plain], rows["net_wire"][plain], pmtu, job.output.vlan,
                                job.output.ip_version)
    a_csr = None
    if agg is not None:
        is_agg = prow >= 0
        *a_csr, a_lat, a_big = agg.links(conns, pmtu, job.output.vlan, job.output.ip_version)
        lat[is_agg] = a_lat[prow[is_agg]]
    del comm                # per-row arrays the engine no longer needs are dropped as they go (64k GPUs: ~90 MB each)
    progress.report(3, 3)
    # per op: its rows [lo, hi) and its signature
    n_ops = len(ops)
    cnt = np.bincount(rows["op_id"], minlength=n_ops)
    op_lo = np.r_[0, np.cumsum(cnt)[:-1]]
    fill = _Fill(ops, fabric, job, conns, pmtu)
    op_fill = np.zeros(n_ops, np.int64)
    op_alone = np.zeros(n_ops, np.int64)
    live = np.flatnonzero(cnt).tolist()
    progress.stage(f"fill: {len(live):,} ops, each shape timed alone at chunk level", "ops")
    for op in progress.counted(live):
        lo, hi = int(op_lo[op]), int(op_lo[op] + cnt[op])
        sig = b"%d|%d|%d|%d|" % (ops.rows["kind"][op], ops.rows["bytes"][op], ops.rows["elem_bytes"][op],
                                 ops.rows["dim"][op]) + fill.pattern(op) + b"|" + lat[lo:hi].tobytes()
        op_alone[op] = fill.alone_ns(op, sig, int(lat[lo:hi].max()))
        op_fill[op] = int(lat[lo:hi].max())     # the last arrival (0 on NVLink)
    del lat
    # items: every op's edges, grouped per channel (group_items), on their links (fabric routes,
    # or NVLink ports for node-local edges, so concurrent node-local ops share NVLink too)
    progress.stage(f"connections: links of {n:,} edges, grouped into items", "steps")
    ebytes = np.where(net, rows["net_wire"], rows["nvl_wire"]).astype(np.float64)
    if agg is not None:
        ebytes[is_agg] = a_big[prow[is_agg]]
        del a_big
    if shared_fabric:          # block by block (group_items): a 32k-GPU job's rows cross ~20 M links
        csr = conns.link_csr()
        src_r, dst_r = rows["src_rank"], rows["dst_rank"]
        links = lambda lo, hi: item_links(fabric, conns, row_conn[lo:hi], src_r[lo:hi], dst_r[lo:hi], csr)  # noqa: E731
        row_lens = np.full(n, 2, np.int64)          # NVLink: the two GPU ports
        row_lens[plain] = csr[0][row_conn[plain] + 1] - csr[0][row_conn[plain]]
        if a_csr is not None:
            row_lens[is_agg] = np.diff(a_csr[0])[prow[is_agg]]
            links = _with_agg_links(links, prow, a_csr)
        cap = link_capacity(fabric)
    else:
        *links, cap = nic_only_links(fabric, rows["src_rank"], rows["dst_rank"], net)
        links, row_lens, csr = tuple(links), None, None
    progress.report(1, GROUP_STEPS)
    from .schedule import send_queues
    row_q = send_queues(ops, rows, row_conn)
    if agg is not None:     # a sender's aggregated items in one communicator (its group), NVLink or NET:
        # one queue, as its connections of the group are (pairwise: one per connection)
        gid = agg.op_gid[rows["op_id"][is_agg]]
        _, inv = np.unique((gid * fabric.world + rows["src_rank"][is_agg]) * 2 + net[is_agg], return_inverse=True)
        row_q[is_agg] = int(row_q.max(initial=-1)) + 1 + inv
        del inv, gid
    progress.report(2, GROUP_STEPS)
    item, it_op, it_bytes, ptr, lk, w = group_items(rows["op_id"], rows["channel"],
                                                    ops.rows["kind"][rows["op_id"]], row_q, ebytes, links, len(cap),
                                                    row_lens=row_lens)
    epochs = None
    if shared_fabric and fabric.epochs:     # events during the run: routes and capacities per epoch
        from .epochs import epoch_tables
        from .schedule import nvlink_ports
        share = np.where(it_bytes[item] > 0, ebytes / np.maximum(it_bytes[item], 1e-300), 1.0)   # as group_items
        epochs = epoch_tables(fabric, conns, row_conn, item, share, nvlink_ports(fabric, rows["src_rank"], rows["dst_rank"]),
                              len(it_op), len(cap), cap)
    links = row_lens = csr = None           # the connections' link CSR: only the items' links from here
    # An item alone moves its bytes in its op's chunk-level time less the last arrival latency:
    # steps, hop latencies and pipeline bubbles cap its rate; sharing links can only lower it
    # (and then other traffic fills the gaps its pipeline leaves, as chunks would).
    busy = np.maximum(op_alone[it_op] - op_fill[it_op], 1)
    # Ops on the same connections (a communicator's stream) run one after the other: an item
    # waits in the send queue of its first edge's connection.
    it_queue = np.full(len(it_op), -1, np.int64)
    it_queue[item[::-1]] = row_q[::-1]
    del row_q, ebytes
    from .schedule import stream_ordered
    folded = f" (DP replica 0 of {ops.replicas}, network edges of all)" if ops.replicas > 1 else ""
    progress.stage(f"schedule: {len(ops):,} ops{folded}, per connection: {len(it_op):,} items sharing the fabric",
                   "items")
    start, finish, end, op_start, op_end, *load = fluid.run(
        ops.rows["gap_ns"], stream_ordered(ops).deps, it_op, Ragged.empty(len(it_op)), it_bytes, op_fill[it_op], ptr, lk, w,
        cap, jit=len(it_op) >= 2000, rate_cap=it_bytes / busy, queue=it_queue,
        record_links=fabric.n_link_dirs if shared_fabric else 0,
        record_items=np.bincount(item[net], minlength=len(it_op)) > 0
        if (job.output.pcap if rates is None else rates) else None, epochs=epochs)
    load, item_rates = (load + [None, None])[:2]
    progress.report(len(it_op), len(it_op))          # the engine tells every PROGRESS_EVERY items
    # the flow table, column by column: each edge column dropped once copied (64k GPUs: ~1 GB each way)
    flows = np.zeros(n, dtype=FLOW_DTYPE)
    flows["transfer_id"] = np.arange(n)
    op_id = rows["op_id"]
    copies = np.where(ops.tiled()[op_id] & ~net, ops.replicas, 1) if ops.replicas > 1 else None
    for name in ("algo", "proto", "max_msg_bytes"):
        flows[name] = per_op[name][op_id]
    flows["src_nic"] = np.where(net, fabric.rank_nic[rows["src_rank"]], -1)
    flows["dst_nic"] = np.where(net, fabric.rank_nic[rows["dst_rank"]], -1)
    agg_rx = agg_lw = None
    if agg is not None:         # many receivers: their bytes per NIC and per link kept beside the rows
        flows["dst_nic"][is_agg] = -1
        agg_rx, agg_lw = agg.totals(prow[is_agg], fabric.n_link_dirs, fabric.n_nics)
    del op_id
    for name in ("op_id", "src_rank", "dst_rank", "channel", "link"):
        flows[name] = rows.pop(name)
    flows["step"], flows["chunk"] = -1, -1
    flows["bytes"], flows["wire_bytes"] = rows.pop("payload"), rows.pop("nvl_wire")
    flows["start_ns"] = start[item]
    flows["end_ns"] = end[item]
    del start, end
    r_fin = finish[item]
    return Flows(flows, Ragged.empty(n), ops, op_start, op_end, conns=conns, row_conn=row_conn,
                 finish_ns=r_fin, detail="conn", fill_ns=op_fill, row_transfers=rows["transfers"],
                 row_messages=rows["messages"], row_packets=rows["packets"],
                 row_net_wire=np.where(net, rows["net_wire"], 0), link_load=load,
                 item_rates=item_rates, row_item=item if item_rates is not None else None,
                 row_copies=copies, agg_rx_nic_bytes=agg_rx, agg_link_wire=agg_lw)


def _merge_rows(rows: dict, extra: dict) -> tuple[dict, np.ndarray]:
    """The edge table and the aggregated AllToAll rows in one table sorted by op; and each row's
    pattern row (-1: an ordinary edge)."""
    prow = np.r_[np.full(len(rows["op_id"]), -1, np.int64), extra.pop("prow")]
    order = np.argsort(np.r_[rows["op_id"], extra["op_id"]], kind="stable")
    out = {}
    for k in list(rows):
        a = rows.pop(k)
        out[k] = np.concatenate([a, extra.pop(k).astype(a.dtype)])[order]
        del a
    return out, prow[order]


def _with_agg_links(links, prow, a_csr):
    """links(lo, hi) of item_links, with each aggregated row's links taken from its pattern row."""
    a_ptr, a_lk, a_w = a_csr

    def both(lo, hi):
        pr = prow[lo:hi]
        ag = pr >= 0
        if not ag.any():
            return links(lo, hi)
        idx = np.flatnonzero(~ag)
        lens = np.zeros(hi - lo, np.int64)
        ptr = np.zeros(hi - lo + 1, np.int64)
        p1 = l1 = w1 = None
        if len(idx):
            p1, l1, w1 = links(lo, hi)          # every row's; the aggregated ones' replaced below
            lens[idx] = np.diff(p1)[idx]
        ai = np.flatnonzero(ag)
        alen = a_ptr[pr[ai] + 1] - a_ptr[pr[ai]]
        lens[ai] = alen
        np.cumsum(lens, out=ptr[1:])
        lk, w = np.empty(int(ptr[-1]), np.int64), np.empty(int(ptr[-1]))
        if len(idx):
            olen = np.diff(p1)[idx]
            off = np.arange(int(olen.sum())) - np.repeat(np.r_[0, np.cumsum(olen)[:-1]], olen)
            src = np.repeat(p1[idx], olen) + off
            dst = np.repeat(ptr[idx], olen) + off
            lk[dst], w[dst] = l1[src], w1[src]
        off = np.arange(int(alen.sum())) - np.repeat(np.r_[0, np.cumsum(alen)[:-1]], alen)
        dst = np.repeat(ptr[ai], alen) + off
        take = np.repeat(a_ptr[pr[ai]], alen) + off
        lk[dst], w[dst] = a_lk[take], a_w[take]
        return ptr, lk, w
    return both
