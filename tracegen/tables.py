"""The tables that cross stage boundaries: one numpy structured-array row per CommOp / Transfer / Flow.

Variable-length lists (a CommOp's group of ranks, a row's dependency ids) are kept in CSR form
(`Ragged`) beside the rows, so a 16k-GPU iteration stays a handful of flat arrays and every stage
can work on whole columns at once.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np


class CollKind(enum.IntEnum):
    ALLREDUCE = 0
    REDUCESCATTER = 1
    ALLGATHER = 2
    ALLTOALL = 3
    BROADCAST = 4
    REDUCE = 5
    SENDRECV = 6  # point-to-point: group = (src, dst)
    MARKER = 7    # no data: marks a point of a rank's timeline (end of iteration) for the schedule

    @property
    def label(self) -> str:
        return {0: "AllReduce", 1: "ReduceScatter", 2: "AllGather", 3: "AllToAll",
                4: "Broadcast", 5: "Reduce", 6: "SendRecv", 7: "Marker"}[int(self)]


class Dim(enum.IntEnum):
    """The parallelism dimension that issued a CommOp."""
    DP = 0
    TP = 1
    PP = 2
    SP = 3
    CP = 4
    EP = 5
    EMB = 6   # tied input/output embedding gradient sync between the first and last stage
    NONE = 7  # markers
    EDP = 8   # expert-data-parallel gradient sync of routed experts' weights


class Phase(enum.IntEnum):
    FWD = 0
    BWD = 1
    OPT = 2  # after backward: gradient sync / optimizer


class Algo(enum.IntEnum):
    RING = 0
    P2P = 1               # send/recv and NCCL's AllToAll (grouped send/recv)
    TREE = 2
    HALVING_DOUBLING = 3
    HIERARCHICAL = 4      # intra-node over NVLink, inter-node per rail


class Proto(enum.IntEnum):
    """NCCL protocol: what a transfer's bytes look like on the wire (see TRANSFER_DTYPE.wire_bytes)."""
    SIMPLE = 0   # payload as is
    LL = 1       # 16 B lines of 8 B data + 8 B flags: wire = 2x payload
    LL128 = 2    # 128 B lines of 120 B data + 8 B flag


class LinkKind(enum.IntEnum):
    NVLINK = 0   # same node: gates timing, never reaches the fabric
    NET = 1      # crosses the RoCE fabric


@dataclass(frozen=True)
class Ragged:
    """A list of int lists in CSR form: row i is values[ptr[i]:ptr[i+1]]."""
    ptr: np.ndarray     # int64, len n+1
    values: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.ptr) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        return self.values[self.ptr[i]:self.ptr[i + 1]]

    def lengths(self) -> np.ndarray:
        return np.diff(self.ptr)

    @staticmethod
    def from_lists(lists) -> "Ragged":
        lens = np.fromiter((len(x) for x in lists), dtype=np.int64, count=len(lists))
        ptr = np.zeros(len(lists) + 1, dtype=np.int64)
        np.cumsum(lens, out=ptr[1:])
        values = (np.fromiter((v for x in lists for v in x), dtype=np.int64, count=int(ptr[-1]))
                  if ptr[-1] else np.zeros(0, dtype=np.int64))
        return Ragged(ptr, values)

    @staticmethod
    def empty(n: int) -> "Ragged":
        return Ragged(np.zeros(n + 1, dtype=np.int64), np.zeros(0, dtype=np.int64))

    @staticmethod
    def concat(parts: list["Ragged"], offsets: list[int] | None = None) -> "Ragged":
        """Stack row lists; `offsets[k]` is added to the values of part k (id renumbering)."""
        if not parts:
            return Ragged.empty(0)
        ptrs, vals, base = [np.zeros(1, dtype=np.int64)], [], 0
        for k, p in enumerate(parts):
            ptrs.append(p.ptr[1:] + base)
            base += len(p.values)
            vals.append(p.values + (offsets[k] if offsets else 0))
        return Ragged(np.concatenate(ptrs), np.concatenate(vals) if vals else np.zeros(0, np.int64))


COMMOP_DTYPE = np.dtype([
    ("op_id", "i8"),
    ("kind", "u1"),        # CollKind
    ("dim", "u1"),         # Dim
    ("phase", "u1"),       # Phase
    ("stage", "i4"),       # pipeline stage issuing the op (-1: spans stages)
    ("layer", "i4"),       # transformer layer (-1: none)
    ("microbatch", "i4"),  # micro-batch (-1: none)
    ("bucket", "i4"),      # DP gradient bucket (-1: none)
    ("iteration", "i4"),
    ("bytes", "i8"),       # buffer size S (AllReduce input; p2p message)
    ("elem_bytes", "u1"),  # element size: chunks are split on element boundaries
    ("gap_ns", "i8"),      # compute after the deps complete, before this op may start
])

TRANSFER_DTYPE = np.dtype([
    ("transfer_id", "i8"),
    ("op_id", "i8"),
    ("algo", "u1"),           # Algo
    ("link", "u1"),           # LinkKind
    ("src_rank", "i4"),
    ("dst_rank", "i4"),
    ("channel", "i2"),
    ("step", "i4"),           # algorithm step (ring: 0 .. 2(n-1)-1)
    ("chunk", "i4"),          # which chunk of the buffer (ring: chunk index; p2p: slice index)
    ("bytes", "i8"),          # payload: user data carried (LL/LL128 flags not included)
    ("max_msg_bytes", "i8"),  # NCCL network message size limit, in wire bytes, for this algorithm/protocol
    ("proto", "u1"),          # Proto
    ("wire_bytes", "i8"),     # what the NIC / NVLink carries: bytes + LL/LL128 flags (== bytes for Simple)
])

FLOW_DTYPE = np.dtype(TRANSFER_DTYPE.descr + [
    ("src_nic", "i4"),        # -1 on NVLink
    ("dst_nic", "i4"),
    ("start_ns", "i8"),
    ("end_ns", "i8"),
])


@dataclass(frozen=True)
class CommOps:
    """workload -> collectives: what must be exchanged in one iteration, in dependency order."""
    rows: np.ndarray   # COMMOP_DTYPE, rows[i].op_id == i
    groups: Ragged     # ranks taking part, in ring order (p2p: [src, dst])
    deps: Ragged       # op ids that must complete before this op starts (plus gap_ns compute)
    # Folded (workload.fold): only DP replica 0's streams were built; an op whose ranks all sit
    # in replica 0 stands for `replicas` copies, the copy of replica d on ranks + d x stride.
    replicas: int = 1
    replica_stride: int = 0

    def __len__(self) -> int:
        return len(self.rows)

    def tiled(self) -> np.ndarray:
        """Per op: does it stand for one copy per DP replica (all its ranks in replica 0)?"""
        if self.replicas <= 1 or not len(self.rows):
            return np.zeros(len(self.rows), bool)
        rep = (self.groups.values // self.replica_stride) % self.replicas
        lens = self.groups.lengths()
        top = np.zeros(len(self.rows), np.int64)
        nz = lens > 0
        top[nz] = np.maximum.reduceat(rep, self.groups.ptr[:-1][nz])
        return nz & (top == 0)

    def copies(self) -> np.ndarray:
        """Per op: how many ops of the unfolded job it stands for (1 unless folded)."""
        return np.where(self.tiled(), self.replicas, 1)


@dataclass(frozen=True)
class Transfers:
    """collectives -> schedule: who sends what to whom, per algorithm step."""
    rows: np.ndarray   # TRANSFER_DTYPE, rows[i].transfer_id == i
    deps: Ragged       # transfer ids whose data this transfer needs

    def __len__(self) -> int:
        return len(self.rows)


@dataclass(frozen=True)
class Flows:
    """schedule -> emit: transfers with NICs and integer-ns start/end. The IR every exporter reads."""
    rows: np.ndarray   # FLOW_DTYPE
    deps: Ragged
    ops: CommOps
    op_start_ns: np.ndarray | None = None   # per CommOp: release time (deps done + compute gap)
    op_end_ns: np.ndarray | None = None     # per CommOp: last transfer's end (markers: release)
    conns: object = None                    # connections.Connections of the NET rows (QPs, routes)
    row_conn: np.ndarray | None = None      # per row: its connection (-1: NVLink)
    finish_ns: np.ndarray | None = None     # per row: last byte sent (end_ns - latency)
    detail: str = "full"                    # full: a row per chunk transfer; conn: per (op, connection)
    fill_ns: np.ndarray | None = None       # conn: per CommOp, its pipeline fill (see schedule_conn)
    row_transfers: np.ndarray | None = None  # conn: chunk transfers each row stands for (full: 1)
    row_messages: np.ndarray | None = None   # conn: NCCL network messages of those transfers
    row_packets: np.ndarray | None = None    # conn: RoCE data packets of those messages
    row_net_wire: np.ndarray | None = None   # per row: bytes it puts on each fabric link (RoCE headers
                                             # included; 0 on NVLink)
    link_load: object = None                # fluid.LinkLoad: every fabric link's load over time
    item_rates: object = None               # fluid.ItemRates (item = row): NET rows' rates over time,
                                            # when pcaps are written (the writer paces by them);
                                            # conn: the fluid items' rates (row_item)
    row_item: np.ndarray | None = None      # conn: per row, its fluid item (its op's channel moves as one)
    row_copies: np.ndarray | None = None    # folded job (CommOps.replicas): per row, the DP replicas
                                            # it stands for (its NVLink rows: all; None: 1 each)
    nic_sharing: str = "fair"               # how a NIC serves its QPs: fair (max-min among QPs with
                                            # pending work, each QP in order) - what ns-3 replays
    op_tc: np.ndarray | None = None         # per CommOp: (dscp, pcp) its RoCE frames carry (a scenario's
                                            # per-job classes); None: output.dscp / output.pcp
    agg_rx_nic_bytes: np.ndarray | None = None  # conn, AllToAlls timed per sender (timing/alltoall_agg.py):
    agg_link_wire: np.ndarray | None = None     # their rows' payload each NIC receives, wire bytes per link dir

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def net(self) -> np.ndarray:
        """Boolean mask of rows that cross the RoCE fabric."""
        return self.rows["link"] == LinkKind.NET
