"""schedule stage: Transfers + compute gaps + link rates -> Flows with integer-ns start/end.

A list scheduler over the dependency graph. A CommOp is released `gap_ns` after the last of its
dependency ops completes; a transfer is ready once its op is released and every transfer it needs
has arrived. Ready transfers take their links in order of readiness (a heap): a NET transfer holds
its source NIC's transmit side and its destination NIC's receive side for its wire time; an NVLink
transfer holds the GPUs' NVLink ports the same way. Non-preemptive per transfer, so the time a
transfer occupies a port is exactly the wire time of its frames.
"""
from __future__ import annotations

import heapq
import numpy as np

from .config import Job
from .tables import FLOW_DTYPE, CommOps, Flows, LinkKind, Ragged, Transfers
from .topology import Fabric

# RoCEv2 bytes a data packet adds on the wire: Eth 14 + 802.1Q 4 + IPv4 20 + UDP 8 + BTH 12 +
# ICRC 4, plus FCS 4 + preamble/SFD 8 + inter-frame gap 12.
PKT_WIRE_OVERHEAD_BYTES = 14 + 4 + 20 + 8 + 12 + 4 + 4 + 8 + 12
MSG_WIRE_OVERHEAD_BYTES = 16 + 4  # RETH on the first packet, ImmDt on the last


def net_wire_bytes(nbytes: np.ndarray, max_msg_bytes: np.ndarray, pmtu: int) -> np.ndarray:
    """Bytes a transfer occupies on the wire: payload + per-packet and per-message headers + padding."""
    nbytes = np.asarray(nbytes, dtype=np.int64)
    max_msg = np.asarray(max_msg_bytes, dtype=np.int64)
    full_msgs, last_msg = nbytes // max_msg, nbytes % max_msg
    pkts_full = -(-max_msg // pmtu)
    pkts_last = -(-last_msg // pmtu)
    msgs = full_msgs + (last_msg > 0)
    pkts = full_msgs * pkts_full + pkts_last
    pad = (-(last_msg % pmtu)) % 4 + full_msgs * ((-(max_msg % pmtu)) % 4)
    return nbytes + pkts * PKT_WIRE_OVERHEAD_BYTES + msgs * MSG_WIRE_OVERHEAD_BYTES + pad


def duration_ns(nbytes: np.ndarray, gbps: int) -> np.ndarray:
    """Integer-ns serialization time, rounded up: bits / (Gb/s) = ns."""
    return -(-(np.asarray(nbytes, dtype=np.int64) * 8) // gbps)


def schedule(ops: CommOps, tr: Transfers, fabric: Fabric, job: Job) -> Flows:
    rows = tr.rows
    n = len(rows)
    net = rows["link"] == LinkKind.NET
    src, dst = rows["src_rank"], rows["dst_rank"]
    src_nic = np.where(net, fabric.rank_nic[src], -1)
    dst_nic = np.where(net, fabric.rank_nic[dst], -1)
    dur = np.where(net,
                   duration_ns(net_wire_bytes(rows["wire_bytes"], rows["max_msg_bytes"], job.output.pmtu),
                               fabric.nic_gbps),
                   duration_ns(rows["wire_bytes"], fabric.nvlink_gbps))
    lat = np.where(net, fabric.hops(np.maximum(src_nic, 0), np.maximum(dst_nic, 0))
                   * fabric.link_latency_ns, 0)
    # Ports: NIC tx/rx for NET, NVLink out/in per GPU otherwise; one id space for both.
    tx_port = np.where(net, src_nic, fabric.n_nics + src)
    rx_port = np.where(net, dst_nic, fabric.n_nics + dst)
    start, end, op_start, op_end = _list_schedule(ops, tr, dur.tolist(), lat.tolist(), tx_port.tolist(),
                                rx_port.tolist(), fabric.n_nics + fabric.world)
    flows = np.zeros(n, dtype=FLOW_DTYPE)
    for name in rows.dtype.names:
        flows[name] = rows[name]
    flows["src_nic"], flows["dst_nic"] = src_nic, dst_nic
    flows["start_ns"], flows["end_ns"] = start, end
    return Flows(flows, tr.deps, ops, op_start, op_end)


def _reverse(r: Ragged, n_targets: int) -> list[list[int]]:
    out: list[list[int]] = [[] for _ in range(n_targets)]
    ptr, vals = r.ptr.tolist(), r.values.tolist()
    for i in range(len(ptr) - 1):
        for v in vals[ptr[i]:ptr[i + 1]]:
            out[v].append(i)
    return out


def _list_schedule(ops: CommOps, tr: Transfers, dur, lat, tx_port, rx_port, n_ports):
    n_ops, n = len(ops), len(tr)
    op_of = tr.rows["op_id"].tolist()
    gap = ops.rows["gap_ns"].tolist()
    op_deps_left = ops.deps.lengths().tolist()
    op_dependents = _reverse(ops.deps, n_ops)
    tr_deps_left = tr.deps.lengths().tolist()
    tr_dependents = _reverse(tr.deps, n)
    op_transfers: list[list[int]] = [[] for _ in range(n_ops)]
    for t, o in enumerate(op_of):
        op_transfers[o].append(t)
    op_left = [len(x) for x in op_transfers]
    op_ready = [0] * n_ops
    op_end = [0] * n_ops
    ready = [0] * n
    start = [0] * n
    end = [0] * n
    tx_free = [0] * n_ports
    rx_free = [0] * n_ports
    heap: list[tuple[int, int]] = []

    def finish_op(o: int, t_end: int) -> None:
        op_end[o] = t_end
        for p in op_dependents[o]:
            op_ready[p] = max(op_ready[p], t_end)
            op_deps_left[p] -= 1
            if op_deps_left[p] == 0:
                release(p, op_ready[p] + gap[p])

    op_start = [0] * n_ops

    def release(o: int, t0: int) -> None:
        op_start[o] = t0
        if not op_transfers[o]:
            finish_op(o, t0)
            return
        for t in op_transfers[o]:
            ready[t] = max(ready[t], t0)
            if tr_deps_left[t] == 0:
                heapq.heappush(heap, (ready[t], t))

    for o in range(n_ops):
        if op_deps_left[o] == 0:
            release(o, gap[o])
    while heap:
        r, t = heapq.heappop(heap)
        tp, rp, lt = tx_port[t], rx_port[t], lat[t]
        s = max(r, tx_free[tp], rx_free[rp] - lt)
        busy = s + dur[t]
        tx_free[tp] = busy
        rx_free[rp] = busy + lt
        e = busy + lt
        start[t], end[t] = s, e
        for d in tr_dependents[t]:
            if e > ready[d]:
                ready[d] = e
            tr_deps_left[d] -= 1
            if tr_deps_left[d] == 0:
                heapq.heappush(heap, (ready[d], d))
        o = op_of[t]
        if e > op_end[o]:
            op_end[o] = e
        op_left[o] -= 1
        if op_left[o] == 0:
            finish_op(o, op_end[o])
    if any(x > 0 for x in op_left) or any(x > 0 for x in op_deps_left):
        raise RuntimeError("schedule: dependency cycle, some transfers never became ready")
    return (np.array(start, dtype=np.int64), np.array(end, dtype=np.int64),
            np.array(op_start, dtype=np.int64), np.array(op_end, dtype=np.int64))
