"""NCCL's LL protocol on the wire: its receive slots are stepSize = DEFAULT_LL_BUFFSIZE /
NCCL_STEPS = NCCL_LL_LINES_PER_THREAD (8) x NCCL_LL_MAX_NTHREADS (512) x sizeof(union
ncclLLFifoLine) (16 B) = 64 KiB (NVIDIA/nccl src/include/device.h, init.cc). Judged from the
frames alone, with an own parser: every CTS posts a whole number of 64 KiB slots (its
ncclIbSendFifo `size`), and every RDMA WRITE's RETH address sits on a slot boundary of its
buffer (per R_Key, counted from the lowest address written)."""
from __future__ import annotations

import struct
from collections import defaultdict

from click.testing import CliRunner

from tg_helpers import ROCE_PORT, read_pcap
from tracegen.cli import main

LL_SLOT_BYTES = 8 * 512 * 16
RETH_OPS = {0x06, 0x0A, 0x0B}          # RC RDMA WRITE First / Only / Only with Immediate


def _reth(frame: bytes):
    """(opcode, va, rkey, dma_len, payload after the RETH) of a RoCEv2 RDMA WRITE, else None."""
    off = 12
    etype = struct.unpack_from(">H", frame, off)[0]
    if etype == 0x8100:
        off += 4
        etype = struct.unpack_from(">H", frame, off)[0]
    off += 2
    if etype != 0x0800:
        return None
    udp = off + (frame[off] & 0x0F) * 4
    if struct.unpack_from(">H", frame, udp + 2)[0] != ROCE_PORT:
        return None
    bth = udp + 8
    op = frame[bth]
    if op not in RETH_OPS:
        return None
    va, rkey, dma_len = struct.unpack_from(">QII", frame, bth + 12)
    return op, va, rkey, dma_len, frame[bth + 28:]


def test_ll_slots_are_64_kib(tmp_path):
    out = tmp_path / "ll"
    r = CliRunner().invoke(main, ["generate", "-q", "--no-ns3", "--set", "nccl.protocol=ll", "--collective", "dp",
                                  "--nics", "0", "--iteration", "0", "--set", "output.pictures=false",
                                  "-o", str(out)])
    assert r.exit_code == 0, r.output
    posted, data_va, writes = [], defaultdict(set), defaultdict(int)
    for path in sorted((out / "pcap").glob("*.pcap")):
        for _, _, fr in read_pcap(path):
            f = _reth(fr)
            if f is None:
                continue
            op, va, rkey, dma_len, rest = f
            if op == 0x0A and dma_len == 64:             # a CTS: the ncclIbSendFifo element
                addr, size, buf_rkey = struct.unpack_from("<QQI", rest, 0)
                posted.append(size)
                data_va[buf_rkey].add(addr)                # the receive buffer's key (rkeys[0])
            else:
                data_va[rkey].add(va)
                writes[rkey] += 1                          # one RETH a message (its First or Only)
    assert len(posted) > 50 and len(data_va) >= 2
    assert all(s % LL_SLOT_BYTES == 0 and s // LL_SLOT_BYTES in (1, 2, 4, 8) for s in posted), sorted(set(posted))
    for rkey, vas in data_va.items():
        base = min(vas)
        assert all((v - base) % LL_SLOT_BYTES == 0 for v in vas), (hex(rkey), sorted(v - base for v in vas)[:8])
        assert max(vas) - base < 8 * LL_SLOT_BYTES          # NCCL_STEPS slots per buffer
    # LL posts one slot a message (sliceSteps 1): a buffer written 8+ times has used all 8 slots
    full = [rkey for rkey, n in writes.items() if n >= 2 * 8]
    assert full
    for rkey in full:
        base = min(data_va[rkey])
        assert sorted(v - base for v in data_va[rkey]) == [k * LL_SLOT_BYTES for k in range(8)], hex(rkey)
