"""schedule stage: Transfers + compute gaps + the fabric -> Flows with integer-ns start/end.

Every transfer is an item of the fluid engine (fluid.py): a NET transfer crosses the links of its
NCCL connection's route (NIC transmit port, leaf/spine/core ports, the receiving NIC's port; with
several QPs per connection its bytes spread evenly over the QPs' routes), an NVLink transfer the
sending GPU's NVLink transmit port and the receiving GPU's NVLink receive port. Active items share
every link max-min fairly; a transfer has arrived `latency` after its last byte left: the route's
link latencies plus one last-packet time per switch (store-and-forward, at the egress link's
rate). A CommOp is released `gap_ns` after its dependency ops end; a transfer starts once its op
is released and the transfers whose data it needs have arrived.
"""
from __future__ import annotations

import numpy as np

from . import fluid
from ..collectives.edges import net_wire_bytes, packet_overhead_bytes
from ..config import Job
from .connections import Connections, build_connections, communicator
from ..tables import FLOW_DTYPE, CollKind, CommOps, Flows, LinkKind, Ragged, Transfers
from ..fabric.topology import Fabric

JIT_MIN_TRANSFERS = 20_000        # smaller jobs run the engine as Python (no compile wait)


def duration_ns(nbytes: np.ndarray, gbps: int) -> np.ndarray:
    """Integer-ns serialization time, rounded up: bits / (Gb/s) = ns."""
    return -(-(np.asarray(nbytes, dtype=np.int64) * 8) // gbps)


def link_capacity(fabric: Fabric) -> np.ndarray:
    """Bytes/ns of every resource: fabric link directions, then NVLink tx/rx per GPU."""
    gbps = np.r_[np.repeat(fabric.links["gbps"].astype(np.float64), 2),
                 np.full(2 * fabric.world, float(fabric.nvlink_gbps))]
    return gbps / 8.0


def nvlink_ports(fabric: Fabric, src_rank, dst_rank) -> tuple[np.ndarray, np.ndarray]:
    base = fabric.n_link_dirs
    return base + 2 * np.asarray(src_rank, np.int64), base + 2 * np.asarray(dst_rank, np.int64) + 1


def stream_ordered(ops: CommOps) -> CommOps:
    """The op table with NCCL's stream order made explicit: collectives on one communicator (a
    group of ranks of one dimension) run one after another in issue order, so each waits for the
    previous one on the same communicator. Issue order is a topological order of the op graph
    (ties by op id), so the added dependencies never close a cycle."""
    n = len(ops)
    rows = ops.rows
    data = (rows["kind"] != CollKind.MARKER) & (ops.groups.lengths() >= 2)
    if not data.any():
        return ops
    order = _topo_order(ops.deps.ptr, ops.deps.values, n)
    if order is None:
        return ops                       # a cycle: the engine reports it
    rank = np.empty(n, np.int64)
    rank[order] = np.arange(n)
    comm = communicator(rows["dim"])
    gid = {}
    key = np.full(n, -1, np.int64)
    ptr, vals = ops.groups.ptr, ops.groups.values
    for i in np.flatnonzero(data).tolist():
        key[i] = gid.setdefault((int(comm[i]), vals[ptr[i]:ptr[i + 1]].tobytes()), len(gid))
    idx = np.flatnonzero(data)
    idx = idx[np.lexsort((rank[idx], key[idx]))]
    same = key[idx[1:]] == key[idx[:-1]]
    after, before = idx[1:][same], idx[:-1][same]
    extra_ptr = np.zeros(n + 1, np.int64)
    np.add.at(extra_ptr, after + 1, 1)
    lens = ops.deps.lengths() + np.diff(np.cumsum(extra_ptr))
    new_ptr = np.zeros(n + 1, np.int64)
    np.cumsum(lens, out=new_ptr[1:])
    vals_out = np.empty(int(new_ptr[-1]), np.int64)
    old_len = ops.deps.lengths()
    # old deps first, then the stream predecessor
    pos = np.repeat(new_ptr[:-1], old_len) + (np.arange(len(ops.deps.values)) - np.repeat(ops.deps.ptr[:-1], old_len))
    vals_out[pos] = ops.deps.values
    vals_out[new_ptr[after] + old_len[after]] = before
    return CommOps(rows, ops.groups, Ragged(new_ptr, vals_out))


def _topo_order(ptr, vals, n):
    """Kahn's algorithm, smallest id first among the ready; None on a cycle."""
    import heapq
    indeg = np.diff(ptr).astype(np.int64)
    rev_ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(vals, minlength=n), out=rev_ptr[1:])
    src = np.repeat(np.arange(n), np.diff(ptr))
    rev = src[np.argsort(vals, kind="stable")]
    ready = np.flatnonzero(indeg == 0).tolist()
    heapq.heapify(ready)
    out = np.empty(n, np.int64)
    k = 0
    indeg = indeg.tolist()
    rev_ptr, rev = rev_ptr.tolist(), rev.tolist()
    while ready:
        o = heapq.heappop(ready)
        out[k] = o
        k += 1
        for j in range(rev_ptr[o], rev_ptr[o + 1]):
            d = rev[j]
            indeg[d] -= 1
            if indeg[d] == 0:
                heapq.heappush(ready, d)
    return out if k == n else None


def transfer_connections(ops: CommOps, rows: np.ndarray, fabric: Fabric, qps: int) -> tuple[Connections, np.ndarray]:
    """The NCCL connections the NET rows use, and each row's connection (-1: NVLink)."""
    net = rows["link"] == LinkKind.NET
    comm = communicator(ops.rows["dim"][rows["op_id"][net]])
    conns = build_connections(rows["src_rank"][net], rows["dst_rank"][net], comm, rows["channel"][net],
                              fabric, qps)
    row_conn = np.full(len(rows), -1, np.int64)
    row_conn[net] = conns.lookup(rows["src_rank"][net], rows["dst_rank"][net], comm, rows["channel"][net])
    return conns, row_conn


def _gather_csr(ptr, rows):
    """Index arrays to take CSR rows `rows` in order: (new ptr, positions in the old values)."""
    lens = ptr[rows + 1] - ptr[rows]
    out = np.zeros(len(rows) + 1, np.int64)
    np.cumsum(lens, out=out[1:])
    within = np.arange(out[-1], dtype=np.int64) - np.repeat(out[:-1], lens)
    return out, np.repeat(ptr[rows], lens) + within


def item_links(fabric: Fabric, conns: Connections, row_conn, src_rank, dst_rank, csr=None):
    """Per item (NET: its connection's links and weights; NVLink: the two GPU ports), as CSR.
    csr: conns.link_csr(), when the caller has it (called block by block)."""
    c_ptr, c_link, c_w = conns.link_csr() if csr is None else csr
    nvl = row_conn < 0
    lens = np.where(nvl, 2, 0)
    net_idx = np.flatnonzero(~nvl)
    lens[net_idx] = c_ptr[row_conn[net_idx] + 1] - c_ptr[row_conn[net_idx]]
    ptr = np.zeros(len(row_conn) + 1, np.int64)
    np.cumsum(lens, out=ptr[1:])
    lk = np.empty(ptr[-1], np.int64)
    w = np.ones(ptr[-1], np.float64)
    _, take = _gather_csr(c_ptr, row_conn[net_idx])
    dst_pos = _gather_csr(ptr, net_idx)[1]
    lk[dst_pos], w[dst_pos] = c_link[take], c_w[take]
    nv = np.flatnonzero(nvl)
    tx, rx = nvlink_ports(fabric, src_rank[nv], dst_rank[nv])
    lk[ptr[nv]], lk[ptr[nv] + 1] = tx, rx
    return ptr, lk, w


def send_queues(ops: CommOps, rows, row_conn) -> np.ndarray:
    """Per row the send queue it waits in: its NCCL connection's QP on the network; on NVLink the
    (sender, receiver, communicator, channel) stream, which NCCL's channel works through in order."""
    q = np.asarray(row_conn, np.int64).copy()
    nvl = q < 0
    if nvl.any():
        comm = communicator(ops.rows["dim"][rows["op_id"][nvl]])
        key = ((rows["src_rank"][nvl].astype(np.int64) * (int(rows["dst_rank"].max()) + 1)
                + rows["dst_rank"][nvl]) * 16 + comm) * 128 + rows["channel"][nvl]
        _, inv = np.unique(key, return_inverse=True)
        q[nvl] = int(q.max(initial=-1)) + 1 + inv
    return q


def nic_only_links(fabric: Fabric, src_rank, dst_rank, net):
    """The NIC-only model: NIC ports (whole NIC rate) and NVLink ports only, every item crosses
    exactly two, the switches never limit anything. (ptr, links, weights, capacities)."""
    nic_tx = 2 * fabric.rank_nic[src_rank].astype(np.int64)
    nic_rx = 2 * fabric.rank_nic[dst_rank].astype(np.int64) + 1
    base = 2 * fabric.n_nics
    tx = np.where(net, nic_tx, base + 2 * np.asarray(src_rank, np.int64))
    rx = np.where(net, nic_rx, base + 2 * np.asarray(dst_rank, np.int64) + 1)
    lk = np.stack([tx, rx], axis=1).reshape(-1)
    cap = np.r_[np.full(2 * fabric.n_nics, fabric.nic_gbps / 8.0),
                np.full(2 * fabric.world, fabric.nvlink_gbps / 8.0)]
    return np.arange(0, 2 * len(tx) + 1, 2), lk, np.ones(len(lk)), cap


def net_latency_ns(conns: Connections, row_conn, on_wire, pmtu: int, vlan: bool = True,
                   ip_version: int = 4) -> np.ndarray:
    """Propagation + store-and-forward of each NET row (the slowest of its connection's QPs)."""
    last_pkt = np.minimum(on_wire, pmtu + packet_overhead_bytes(vlan, ip_version))
    row_conn = np.asarray(row_conn, np.int64)
    if len(row_conn) <= len(conns):
        return _qp_latency_ns(conns, row_conn, last_pkt)
    # rows repeat connections (every op on them: 131k GPUs, 20 M rows): the largest last packet's
    # latency (a full packet: most rows) once per connection, gathered; the other rows one by one
    full = int(last_pkt.max())
    lat = _qp_latency_ns(conns, np.arange(len(conns)), np.full(len(conns), full, np.int64))[row_conn]
    other = np.flatnonzero(last_pkt != full)
    lat[other] = _qp_latency_ns(conns, row_conn[other], last_pkt[other])
    return lat


def _qp_latency_ns(conns: Connections, row_conn, last_pkt) -> np.ndarray:
    lat = np.zeros(len(row_conn), np.int64)
    for q in range(conns.qps):
        lat = np.maximum(lat, conns.latency_ns(row_conn * conns.qps + q, last_pkt))
    return lat


def schedule(ops: CommOps, tr: Transfers, fabric: Fabric, job: Job, shared_fabric: bool = True,
             rates: bool | None = None) -> Flows:
    """shared_fabric=False: the NIC-only model (switch ports never limit), for comparison.
    rates: keep every NET flow's rate changes (Flows.item_rates: the pcap writer paces each
    message at the rate its flow had while sending it); None: when the job writes pcaps."""
    rows = tr.rows
    n = len(rows)
    net = rows["link"] == LinkKind.NET
    src, dst = rows["src_rank"], rows["dst_rank"]
    src_nic = np.where(net, fabric.rank_nic[src], -1)
    dst_nic = np.where(net, fabric.rank_nic[dst], -1)
    conns, row_conn = transfer_connections(ops, rows, fabric, job.nccl.qps_per_connection)
    out = job.output
    on_wire = np.where(net, net_wire_bytes(rows["wire_bytes"], np.maximum(rows["max_msg_bytes"], 1),
                                           out.pmtu, out.vlan, out.ip_version), rows["wire_bytes"])
    lat = np.zeros(n, np.int64)
    lat[net] = net_latency_ns(conns, row_conn[net], on_wire[net], out.pmtu, out.vlan, out.ip_version)
    epochs = None
    if shared_fabric:
        ptr, lk, w = item_links(fabric, conns, row_conn, src, dst)
        cap = link_capacity(fabric)
        if fabric.epochs:           # events during the run: routes and capacities per epoch
            from .epochs import epoch_tables
            epochs = epoch_tables(fabric, conns, row_conn, np.arange(n), 1.0, nvlink_ports(fabric, src, dst),
                                  n, len(cap), cap)
    else:
        ptr, lk, w, cap = nic_only_links(fabric, src, dst, net)
    start, finish, end, op_start, op_end, *load = fluid.run(
        ops.rows["gap_ns"], stream_ordered(ops).deps, rows["op_id"], tr.deps, on_wire.astype(np.float64), lat,
        ptr, lk, w, cap, record_links=fabric.n_link_dirs if shared_fabric else 0, jit=n >= JIT_MIN_TRANSFERS,
        queue=send_queues(ops, rows, row_conn),
        record_items=net if (job.output.pcap if rates is None else rates) else None, epochs=epochs)
    load, item_rates = (load + [None, None])[:2]
    flows = np.zeros(n, dtype=FLOW_DTYPE)
    for name in rows.dtype.names:
        flows[name] = rows[name]
    flows["src_nic"], flows["dst_nic"] = src_nic, dst_nic
    flows["start_ns"], flows["end_ns"] = start, end
    return Flows(flows, tr.deps, ops, op_start, op_end, conns=conns, row_conn=row_conn, finish_ns=finish,
                 row_net_wire=np.where(net, on_wire, 0), link_load=load, item_rates=item_rates)
