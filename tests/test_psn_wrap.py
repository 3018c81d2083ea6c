"""PSNs are 24 bits and wrap at 2^24 (WIRE.md: per QP per direction, from 0, +1 per packet).

One QP carries 2^24 + 4k packets (4.3 GB at PMTU 256 in 256 KiB messages); only header records in
40 us windows are written - around packet 2^23 (no wrap may happen there) and around 2^24
(the wrap) - so the capture stays under a megabyte. A first window at an estimated time tells the
QP's pace (PSN against time, unambiguous that close to the target); a second one is centred on
the target packet from it. Every First packet then starts a message: its PSN is a multiple of
the message's packets, modulo 2^24.
"""
from __future__ import annotations

import numpy as np

from tg_helpers import read_pcap
from tracegen.config import Job, Output
from tracegen.emit.views.pcap import write_pcaps
from tracegen.tables import COMMOP_DTYPE, FLOW_DTYPE, CommOps, Flows, LinkKind, Ragged
from tracegen.fabric.topology import build_fabric

PMTU, MSG = 256, 256 << 10
PKTS_PER_MSG = MSG // PMTU
N_MSGS = (1 << 24) // PKTS_PER_MSG + 4
START = 10_000
DATA_VA_BASE = 0x7F00_0000_0000
BTH_AT = 14 + 4 + 20 + 8                 # Ethernet + 802.1Q + IPv4 + UDP
FIRST, MIDDLE, LAST_IMM = 0x06, 0x07, 0x09


def one_big_flow() -> Flows:
    rows = np.zeros(1, FLOW_DTYPE)
    rows["src_nic"], rows["dst_nic"], rows["src_rank"], rows["dst_rank"] = 0, 2, 0, 2
    rows["link"] = LinkKind.NET
    rows["bytes"] = rows["wire_bytes"] = N_MSGS * MSG
    rows["max_msg_bytes"] = MSG
    rows["start_ns"], rows["end_ns"] = START, START + 1
    return Flows(rows, Ragged.empty(1), CommOps(np.zeros(0, COMMOP_DTYPE), Ragged.empty(0), Ragged.empty(0)))


def packet_time(k: int) -> int:
    """About when packet k leaves: per message a First (RETH, 8 ns at 400 Gb/s) and 7 ns frames."""
    return START + (k // PKTS_PER_MSG) * (8 + 7 * (PKTS_PER_MSG - 1)) + 7 * (k % PKTS_PER_MSG)


def window(tmp_path, t: int):
    """(time, psn, opcode) of NIC 0's data packets that start in [t - 20 us, t + 20 us)."""
    fabric = build_fabric(Job())
    out = Output(pmtu=PMTU, payload="none", nics="0", time_window=f"{t - 20_000}:{t + 20_000}")
    tmp_path.mkdir()
    (path,) = write_pcaps(one_big_flow(), fabric, out, tmp_path)
    assert path.stat().st_size < 1 << 20
    src = bytes(int(fabric.nic_ip[0]).to_bytes(4, "big"))
    got = []
    for ts, _, frame in read_pcap(path):
        opcode = frame[BTH_AT]
        if frame[14 + 4 + 12:14 + 4 + 16] != src or opcode not in (FIRST, MIDDLE, LAST_IMM):
            continue
        got.append((ts, int.from_bytes(frame[BTH_AT + 9:BTH_AT + 12], "big"), opcode))
    return got


def sent_data(tmp_path, around: int):
    """(psn, opcode) of NIC 0's data packets around packet index `around`."""
    first = window(tmp_path / "estimate", packet_time(around))
    assert len(first) > 2 * PKTS_PER_MSG, "the estimate window holds no data"
    # packet index of the window's packets: their PSN, unwrapped towards `around`
    idx = np.array([p for _, p, _ in first], np.int64)
    idx += ((around - idx + (1 << 23)) >> 24) << 24
    ts = np.array([t for t, _, _ in first], np.int64)
    pace = (ts[-1] - ts[0]) / max(int(idx[-1] - idx[0]), 1)          # ns per packet
    got = window(tmp_path / "centred", int(ts[0] + (around - idx[0]) * pace))
    assert len(got) > 4 * PKTS_PER_MSG
    return [g[1:] for g in got]


def check(got):
    psn = np.array([g[0] for g in got], np.int64)
    assert ((psn[1:] - psn[:-1]) % (1 << 24) == 1).all(), "PSNs of one QP must step by 1 modulo 2^24"
    firsts = [p for p, op in got if op == FIRST]
    assert len(firsts) >= 3
    assert all(p % PKTS_PER_MSG == 0 for p in firsts)    # 2^24 is a multiple of the message's packets
    return psn


def test_psn_wraps_at_2_pow_24(tmp_path):
    psn = check(sent_data(tmp_path, 1 << 24))
    k = np.flatnonzero(psn == 0xFFFFFF)
    assert len(k) == 1 and psn[k[0] + 1] == 0


def test_psn_does_not_wrap_at_2_pow_23(tmp_path):
    psn = check(sent_data(tmp_path, 1 << 23))
    k = np.flatnonzero(psn == 0x7FFFFF)
    assert len(k) == 1 and psn[k[0] + 1] == 0x800000
    assert not (psn == 0).any()

