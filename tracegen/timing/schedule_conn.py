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
from ..collectives.ring_edges import (RingShape, ShardShape, ring_allreduce_alone_ns, ring_allreduce_edges,
                                      ring_shard_alone_ns)
from ..config import Job
from .conn_edges import CLOSED_FORM_ROWS, edge_table
from .conn_items import GROUP_STEPS, group_items
from .connections import build_connections, communicator
from .schedule import nic_only_links
from ..tables import FLOW_DTYPE, CommOps, Flows, LinkKind, Ragged
from ..fabric.topology import Fabric


# A ring ReduceScatter / AllGather of one loop across nodes listing more chunks than this is timed
# alone in closed form (ring_edges.ring_shard_alone_ns, equal to the chunk level's to the ns on
# every such shape of llama3-405b at 32k and 64k GPUs), not chunk by chunk: 0.5 M chunks a shape
# at 64k GPUs (dp 512), 2.1 M at 131k.
SHARD_ALONE_ROWS = 1 << 16


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

    def alone_ns(self, op: int, sig: bytes, edge_lat_ns: np.ndarray) -> int:
        """edge_lat_ns: the op's edges' latencies, in edge order (0 on NVLink)."""
        hit = self.cache.get(sig)
        if hit is not None:
            return hit
        f, job = self.fabric, self.job
        latency_ns = int(edge_lat_ns.max(initial=0))
        big = op_templates(self.ops, f, job.nccl, [op], max_rows=CLOSED_FORM_ROWS, shard_rows=SHARD_ALONE_ROWS)
        if big and isinstance(big[0][2], ShardShape):
            _, group, shape, plan = big[0]
            t = None
            if not f.same_node(group, np.roll(group, -1)).any():
                out = job.output
                t = ring_shard_alone_ns(shape, int(plan.proto), plan.max_msg_bytes, self.pmtu, out.vlan,
                                        out.ip_version, f.nic_gbps, edge_lat_ns)
            if t is not None:
                self.cache[sig] = t
                return t
            big = None                      # chunk level below
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
        op_alone[op] = fill.alone_ns(op, sig, lat[lo:hi])
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
