"""What NCCL's net_ib transport writes into RETHs and CTS messages: registered receive buffers
(a ring of NCCL_STEPS slots per connection), the sender's CTS FIFO, memory keys, and when the
receiver may post each receive. Read off NVIDIA/nccl 2.30:

  * src/transport/net.cc, recvProxyProgress: a receive for step `posted` is posted at
    `localBuff + ((base + posted) % NCCL_STEPS) * stepSize` (stepSize = buffSizes[proto] /
    NCCL_STEPS) with size `stepSize * sliceSteps` and tag = the sender's rank (tpRemoteRank),
    while `posted < done + NCCL_STEPS`; `posted += sliceSteps` per receive.
  * src/transport/net_ib/p2p.cc, ncclIbIrecv: fills `struct ncclIbSendFifo` (common.h: u64 addr,
    u64 size, u32 rkeys[NCCL_IB_MAX_DEVS_PER_NIC = 8], u32 nreqs, u32 tag, u64 idx = fifoHead + 1;
    64 bytes, little-endian as in host memory) in slot `fifoHead % NET_IB_MAX_REQUESTS`
    (NCCL_NET_MAX_REQUESTS 32 x NCCL_NET_IB_MAX_RECVS 8 = 256); ncclIbPostFifo RDMA-writes
    nreqs x 64 B to `remCtsFifo.addr + slot * NCCL_NET_IB_MAX_RECVS * sizeof(ncclIbSendFifo)` on
    the connection's first QP (p2p.h, ncclIbRecvCommGetQpForCts), rkey = the FIFO's MR key.
  * ncclIbMultiSend: the data goes to `slots[r].addr` with rkey `slots[r].rkeys[dev]`; with
    several QPs each QP writes its part at addr + q x chunk.
  * src/transport/net_ib/connect.cc, ncclIbReceiverQpsCreateToRts: with NCCL_IB_FIFO_TC set,
    the receiver's QPs (CTS, and the ACKs they return for the data) use that traffic class.

Choices where NCCL leaves it to the allocator (deterministic, canonical user-space addresses
below 2^47):
  * receive buffers: per receiving NIC, its connections counted from 0 in plan order; connection
    o has a region at DATA_VA_BASE + o x region with one buffer per protocol (Simple, LL, LL128)
    of NCCL_STEPS slots; MR key per buffer ((1 + 3 o + proto) << 8 | 0x5D);
  * CTS FIFOs: per sending NIC, connection o's FIFO at FIFO_VA_BASE + o x 128 KiB, MR key
    ((0x800000 | o) << 8 | 0xF1);
  * slot size: Simple NCCL_BUFFSIZE / NCCL_STEPS (nccl.simple_step_bytes; P2P connections
    nccl.p2p_chunk_bytes), LL 64 KiB, LL128 614,400 B (wire bytes); a message takes the
    slots of its row's largest message (sliceSteps; NCCL posts the whole slice), a power of two,
    and starts on a multiple of them (NCCL rounds each op's base up to its chunk steps);
  * one step counter and one FIFO counter per connection, in plan (posting) order; only messages
    of the trace count (no other traffic on the connection).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...config import Nccl
from ...errors import ConfigError
from ...tables import Algo, Proto

NCCL_STEPS = 8                     # src/include/device.h
MAX_REQUESTS = 32 * 8              # NET_IB_MAX_REQUESTS (net_ib/common.h)
FIFO_ELEM_BYTES = 64               # sizeof(struct ncclIbSendFifo)
FIFO_SLOT_BYTES = 8 * FIFO_ELEM_BYTES      # NCCL_NET_IB_MAX_RECVS elements per slot
FIFO_BYTES = MAX_REQUESTS * FIFO_SLOT_BYTES
# init.cc DEFAULT_LL_BUFFSIZE / DEFAULT_LL128_BUFFSIZE over NCCL_STEPS (device.h constants)
LL_STEP_BYTES = 8 * 512 * 16       # NCCL_LL_LINES_PER_THREAD x NCCL_LL_MAX_NTHREADS x 16 B line
LL128_STEP_BYTES = 120 * 640 * 8   # NCCL_LL128_ELEMS_PER_THREAD x NCCL_LL128_MAX_NTHREADS x 8 B
DATA_VA_BASE = 0x7A00_0000_0000
FIFO_VA_BASE = 0x7E00_0000_0000
VA_LIMIT = 1 << 47                 # canonical user space on x86-64
PART_MIN_BYTES = 8 << 20           # one protocol's buffer within a connection's region

# struct ncclIbSendFifo as the sender's memory holds it (x86: little-endian)
CTS_DTYPE = np.dtype([("addr", "<u8"), ("size", "<u8"), ("rkeys", "<u4", (8,)), ("nreqs", "<u4"),
                      ("tag", "<u4"), ("idx", "<u8")])
assert CTS_DTYPE.itemsize == FIFO_ELEM_BYTES


@dataclass
class Buffers:
    """Per NCCL message (all QP parts of one share it): where it lands and what its CTS says."""
    addr: np.ndarray        # receive slot address (the CTS's addr, the RETH VA of QP part 0)
    size: np.ndarray        # bytes posted for it: slice steps x slot size
    rkey: np.ndarray        # the receive buffer's MR key
    buf_base: np.ndarray    # start of that buffer
    buf_bytes: np.ndarray   # its length (NCCL_STEPS slots)
    cts_va: np.ndarray      # the FIFO slot its CTS is written to (sender side)
    cts_rkey: np.ndarray    # the FIFO's MR key
    tag: np.ndarray         # the sender's rank
    idx: np.ndarray         # FIFO counter: 1, 2, ... per connection
    wait: np.ndarray        # NCCL message whose arrival frees the slots this one needs (-1: none)


def slot_bytes(algo, proto, nccl: Nccl) -> np.ndarray:
    """stepSize per row (wire bytes)."""
    algo, proto = np.asarray(algo), np.asarray(proto)
    simple = np.where(algo == Algo.P2P, nccl.p2p_chunk_bytes, nccl.simple_step_bytes)
    return np.where(proto == Proto.LL, LL_STEP_BYTES, np.where(proto == Proto.LL128, LL128_STEP_BYTES, simple))


def _dense_ordinal(key: np.ndarray) -> np.ndarray:
    """Per element: how many earlier elements share its key (0, 1, 2, ...)."""
    order = np.argsort(key, kind="stable")
    s = key[order]
    out = np.empty(len(key), np.int64)
    out[order] = np.arange(len(key)) - np.searchsorted(s, s)
    return out


def _aligned_steps(conn: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """Step counter at each message (messages of a connection contiguous, in order): every
    message starts on a multiple of its own step count (powers of two dividing NCCL_STEPS), so
    it never wraps around its buffer's end."""
    n = len(steps)
    new_run = np.r_[True, (conn[1:] != conn[:-1]) | (steps[1:] != steps[:-1])]
    first = np.flatnonzero(new_run)
    run_len, run_s, run_conn = np.diff(np.r_[first, n]), steps[first], conn[first]
    conn_start = np.r_[True, run_conn[1:] != run_conn[:-1]]
    level = np.arange(len(first)) - np.maximum.accumulate(np.where(conn_start, np.arange(len(first)), 0))
    run_start = np.zeros(len(first), np.int64)
    for lv in range(1, int(level.max()) + 1 if len(level) else 0):   # runs after the first, level by level
        k = np.flatnonzero(level == lv)
        end = run_start[k - 1] + run_len[k - 1] * run_s[k - 1]
        run_start[k] = -(-end // run_s[k]) * run_s[k]
    run_id = np.cumsum(new_run) - 1
    return run_start[run_id] + (np.arange(n) - first[run_id]) * steps


def buffers(rows: np.ndarray, row_cap: np.ndarray, msg_row: np.ndarray, msg_conn: np.ndarray,
            conn_src: np.ndarray, conn_dst: np.ndarray, nccl: Nccl) -> Buffers:
    """Per NCCL message (in plan order: connections contiguous, each in posting order): rows,
    row_cap (largest message per row), msg_row, msg_conn (its NCCL connection); conn_src/dst:
    NICs per connection."""
    slot = slot_bytes(rows["algo"], rows["proto"], nccl).astype(np.int64)
    need = np.maximum(1, -(-row_cap // slot))
    big = need > NCCL_STEPS                          # larger than a buffer: 8 bigger slots
    slot = np.where(big, -(-(-(-row_cap // NCCL_STEPS)) // 4096) * 4096, slot)
    steps_row = np.minimum(1 << np.ceil(np.log2(need)).astype(np.int64), NCCL_STEPS)
    proto = rows["proto"].astype(np.int64)
    steps, m_slot, m_proto = steps_row[msg_row], slot[msg_row], proto[msg_row]
    step0 = _aligned_steps(msg_conn, steps)
    first_of_conn = np.r_[True, msg_conn[1:] != msg_conn[:-1]]
    conn_first = np.maximum.accumulate(np.where(first_of_conn, np.arange(len(msg_conn)), 0))
    ordinal = np.arange(len(msg_conn)) - conn_first

    o_recv, o_send = _dense_ordinal(conn_dst), _dense_ordinal(conn_src)
    part = max(PART_MIN_BYTES, 1 << int(np.ceil(np.log2(int((slot * NCCL_STEPS).max())))))
    region = 4 * part
    if DATA_VA_BASE + (int(o_recv.max()) + 1) * region > FIFO_VA_BASE:
        raise ConfigError(f"{int(o_recv.max()) + 1} NCCL connections into one NIC do not fit the receive "
                          "buffer address plan; use fewer channels")
    base = DATA_VA_BASE + o_recv[msg_conn] * region + m_proto * part
    addr = base + (step0 % NCCL_STEPS) * m_slot
    rkey = ((1 + 3 * o_recv[msg_conn] + m_proto) << 8 | 0x5D) & 0xFFFFFFFF
    fifo = FIFO_VA_BASE + o_send[msg_conn] * FIFO_BYTES
    cts_va = fifo + (ordinal % MAX_REQUESTS) * FIFO_SLOT_BYTES
    cts_rkey = ((0x800000 | (o_send[msg_conn] & 0x7FFFFF)) << 8) | 0xF1
    # NCCL posts while posted - done <= NCCL_STEPS (steps, counted from the connection's start):
    # this message's receive waits until the first earlier message ending at or after
    # end - NCCL_STEPS is done (messages complete in order).
    end = step0 + steps
    span = np.zeros(int(msg_conn.max()) + 1, np.int64)
    np.maximum.at(span, msg_conn, end + NCCL_STEPS)
    shift = (np.cumsum(span) - span)[msg_conn]        # connections laid end to end on one axis
    k = np.searchsorted(end + shift, end - NCCL_STEPS + shift, "left")
    wait = np.where(end > NCCL_STEPS, np.minimum(k, np.arange(len(end)) - 1), -1)
    return Buffers(addr=addr, size=steps * m_slot, rkey=rkey, buf_base=base, buf_bytes=NCCL_STEPS * m_slot,
                   cts_va=cts_va, cts_rkey=cts_rkey, tag=rows["src_rank"].astype(np.int64)[msg_row],
                   idx=ordinal + 1, wait=wait)


def cts_payload(addr, size, rkey, tag, idx) -> np.ndarray:
    """(n, 64) bytes: the ncclIbSendFifo element each CTS writes (one receive, one device)."""
    e = np.zeros(len(addr), CTS_DTYPE)
    e["addr"], e["size"], e["nreqs"], e["tag"], e["idx"] = addr, size, 1, tag, idx
    e["rkeys"][:, 0] = rkey
    return e.view(np.uint8).reshape(len(addr), FIFO_ELEM_BYTES)
