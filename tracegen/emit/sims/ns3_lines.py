"""flow.txt's lines and the NCCL connections (QPs) they ride: which NET transfers become lines, how
one over 2^32-1 bytes splits, the source port each line gets in the simulators' fct files, and the
QP table (numbered as the pcap writer numbers QPs)."""
from __future__ import annotations

import numpy as np

from ...errors import OutputError
from ...tables import Dim, Flows
from ...fabric.topology import Fabric
from ..packets.roce import udp_sport

T0_NS = 2_000_000_000          # simulators' convention: traffic starts at 2.0 s
MAX_FLOW_BYTES = 2**32 - 1     # HPCC reads the size into a uint32
PG = 3                         # RoCE data priority group (lossless queue 3)
DPORT = 100
SPORT_BASE = 10000

LINE_DTYPE = np.dtype([
    ("row", "i8"),          # index into flows.rows
    ("part", "i4"),         # which piece of a split transfer
    ("parts", "i4"),
    ("src", "i4"),          # host id = NIC index
    ("dst", "i4"),
    ("bytes", "i8"),        # payload carried by this line (a split transfer's payload is split too)
    ("wire_bytes", "i8"),   # flow.txt size: bytes on the wire, LL/LL128 flags included
    ("start_ns", "i8"),     # relative to t0
    ("hpcc_sport", "i4"),   # fct sport in HPCC (>= 2020-07) and SimAI: per (src, dst) pair
    ("host_sport", "i4"),   # fct sport in HPCC before 2020-07: per source host
    ("qp", "i8"),           # index into qp_table(): the NCCL connection (RC QP) carrying it
])
FIRST_QPN = 0x100           # as the pcap writer numbers QPs (QP 0/1 are SMI/GSI)


def flow_lines(flows: Flows, fabric: Fabric) -> np.ndarray:
    """The flow.txt lines in file order (LINE_DTYPE): NET rows with wire bytes > 0, stably sorted
    by start, transfers over 2^32-1 wire bytes split into equal parts that start together (the
    payload split into as many equal parts)."""
    rows = flows.rows
    net = np.flatnonzero(flows.net & (rows["wire_bytes"] > 0))
    if (np.any(rows["bytes"][flows.net] < 0) or np.any(rows["wire_bytes"][flows.net] < 0)
            or np.any(rows["start_ns"][net] < 0)):
        raise OutputError("ns3: flow table has negative bytes or start_ns on NET rows")
    src, dst = rows["src_nic"][net], rows["dst_nic"][net]
    bad = (src < 0) | (src >= fabric.n_nics) | (dst < 0) | (dst >= fabric.n_nics) | (src == dst)
    if np.any(bad):
        i = int(net[np.argmax(bad)])
        raise OutputError(f"ns3: flow row {i} has NICs {int(rows['src_nic'][i])} -> "
                          f"{int(rows['dst_nic'][i])}, not two distinct NICs of the fabric")

    order = net[np.argsort(rows["start_ns"][net], kind="stable")]
    total = rows["wire_bytes"][order].astype(np.int64)
    parts = -(-total // MAX_FLOW_BYTES)
    out = np.zeros(int(parts.sum()), dtype=LINE_DTYPE)
    out["row"] = np.repeat(order, parts)
    out["parts"] = np.repeat(parts, parts)
    first = np.repeat(np.cumsum(parts) - parts, parts)
    out["part"] = np.arange(len(out)) - first
    # Equal pieces; the first (total % parts) get one byte more, so they sum to the total.
    for key, tot in (("wire_bytes", total), ("bytes", rows["bytes"][order].astype(np.int64))):
        b = np.repeat(tot, parts)
        out[key] = b // out["parts"] + (out["part"] < b % out["parts"])
    out["src"] = rows["src_nic"][out["row"]]
    out["dst"] = rows["dst_nic"][out["row"]]
    out["start_ns"] = rows["start_ns"][out["row"]]
    n = np.int64(fabric.n_nics)
    out["hpcc_sport"] = (SPORT_BASE + _occurrence(out["src"] * n + out["dst"])) % 65536
    out["host_sport"] = (SPORT_BASE + _occurrence(out["src"].astype(np.int64))) % 65536
    row_qp, _ = qp_table(flows, fabric)
    out["qp"] = row_qp[out["row"]]
    return out


QP_DTYPE = np.dtype([("src", "i4"), ("dst", "i4"), ("sqpn", "i8"), ("dqpn", "i8"),
                     ("sport", "i4")])


def qp_table(flows: Flows, fabric: Fabric) -> tuple[np.ndarray, np.ndarray]:
    """NCCL's connections over the fabric as the pcap writer numbers them: one per (src NIC, dst
    NIC, src rank, dst rank, communicator, channel), QPNs from 0x100 per NIC in that sorted order
    (the first QP of a connection when nccl.qps_per_connection > 1 is ignored here: one QP per
    connection), UDP source port from the QPN pair (mlx5). Returns (row -> qp index, -1 off the
    fabric; QP_DTYPE table).

    Routing seam: when the Fabric offers `qp_paths(src, dst, sport, sqpn, dqpn, reverse)` ->
    per QP simulator node ids (src host, switches..., dst host), e.g. the schedule's own ECMP
    choice, the manifest's qps records carry it as `path` (and the way back as `rpath`) and
    `tracegen ns3 run` routes each QP and its ACKs exactly that way; without it the scenario
    hashes the QP's 5-tuple itself."""
    rows = flows.rows
    net = np.flatnonzero(flows.net)
    row_qp = np.full(len(rows), -1, dtype=np.int64)
    if len(net) == 0:
        return row_qp, np.zeros(0, dtype=QP_DTYPE)
    ops = flows.ops.rows
    op = rows["op_id"][net].astype(np.int64)
    known = (op >= 0) & (op < len(ops))
    comm = np.zeros(len(net), np.int64)
    dim = ops["dim"][op[known]].astype(np.int64)
    comm[known] = np.where(dim == Dim.SP, Dim.TP, dim) + 1   # SP rides TP's communicator
    key = [rows[k][net].astype(np.int64) for k in ("src_nic", "dst_nic", "src_rank", "dst_rank")]
    key += [comm, rows["channel"][net].astype(np.int64)]
    order = np.lexsort(key[::-1])
    sk = [k[order] for k in key]
    new = np.ones(len(net), dtype=bool)
    new[1:] = np.any([k[1:] != k[:-1] for k in sk], axis=0)
    conn = np.cumsum(new) - 1
    row_qp[net[order]] = conn
    c_src, c_dst = sk[0][new], sk[1][new]
    ends = np.column_stack([c_src, c_dst]).ravel()
    qpn = FIRST_QPN + _occurrence(ends)
    table = np.zeros(len(c_src), dtype=QP_DTYPE)
    table["src"], table["dst"] = c_src, c_dst
    table["sqpn"], table["dqpn"] = qpn[0::2], qpn[1::2]
    table["sport"] = udp_sport(table["sqpn"], table["dqpn"])
    return row_qp, table


def _occurrence(keys: np.ndarray) -> np.ndarray:
    """k for the k-th (0-based) appearance of each key, scanning in array order."""
    n = len(keys)
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    new = np.ones(n, dtype=bool)
    new[1:] = sk[1:] != sk[:-1]
    pos = np.arange(n)
    group_start = np.maximum.accumulate(np.where(new, pos, 0)) if n else pos
    occ = np.empty(n, dtype=np.int64)
    occ[order] = pos - group_start
    return occ


def seconds(ns: int) -> str:
    """Exact "%.9f" of ns * 1e-9 (no float rounding)."""
    return f"{ns // 10**9}.{ns % 10**9:09d}"


BATCH = 1 << 16


def batches(lines: np.ndarray):
    for lo in range(0, len(lines), BATCH):
        yield lines[lo:lo + BATCH]
