"""IPv4 identification and header checksums of a capture, judged by reading the pcap bytes here
(RFC 791 / RFC 1071, no tracegen code): WIRE.md - per sending NIC a 16-bit counter from 0, +1
for every frame the NIC sends, in send order; every header's ones'-complement sum is 0xFFFF.
One QP sends 70 messages of 1,024 packets (PMTU 256): the counter wraps past 2^15 and 2^16."""
from __future__ import annotations

import struct

import numpy as np
import pytest

from tg_helpers import read_pcap
from tracegen.config import Job, Output
from tracegen.emit.views.pcap import write_pcaps
from tracegen.tables import COMMOP_DTYPE, FLOW_DTYPE, CommOps, Flows, LinkKind, Ragged
from tracegen.fabric.topology import build_fabric

PMTU, MSG, N_MSGS = 256, 256 << 10, 70


def one_flow() -> Flows:
    rows = np.zeros(1, FLOW_DTYPE)
    rows["src_nic"], rows["dst_nic"], rows["src_rank"], rows["dst_rank"] = 0, 2, 0, 2
    rows["link"] = LinkKind.NET
    rows["bytes"] = rows["wire_bytes"] = N_MSGS * MSG
    rows["max_msg_bytes"] = MSG
    rows["start_ns"], rows["end_ns"] = 1_000, 1_001
    return Flows(rows, Ragged.empty(1), CommOps(np.zeros(0, COMMOP_DTYPE), Ragged.empty(0), Ragged.empty(0)))


def ipv4_headers(frame: bytes):
    off = 12
    etype = struct.unpack_from(">H", frame, off)[0]
    if etype == 0x8100:
        off += 4
        etype = struct.unpack_from(">H", frame, off)[0]
    if etype != 0x0800:
        return None
    ip = off + 2
    return frame[ip:ip + (frame[ip] & 0x0F) * 4]


def ones_sum(header: bytes) -> int:
    s = sum(struct.unpack(f">{len(header) // 2}H", header))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """(records of the sender's file, of the receiver's file, the sender's IPv4 address)."""
    fabric = build_fabric(Job())
    d = tmp_path_factory.mktemp("ipid")
    paths = sorted(write_pcaps(one_flow(), fabric, Output(pmtu=PMTU, payload="none", nics="0,2"), d))
    assert len(paths) == 2
    return read_pcap(paths[0]), read_pcap(paths[1]), bytes(int(fabric.nic_ip[0]).to_bytes(4, "big"))


@pytest.mark.parametrize("side", [0, 1], ids=["as-sent", "as-received"])
def test_ip_ids_count_every_sent_frame_from_0_modulo_2_16(files, side):
    """In the sender's file as it sends them, in the receiver's as they arrive (the same frames)."""
    records, src = files[side], files[2]
    ids = []
    for _, _, frame in records:
        h = ipv4_headers(frame)
        if h is not None and h[12:16] == src:
            ids.append(struct.unpack_from(">H", h, 4)[0])
    assert len(ids) > N_MSGS * (MSG // PMTU) > 1 << 16
    assert ids == [k & 0xFFFF for k in range(len(ids))]


def test_every_ipv4_header_checksum_verifies(files):
    bad = [k for k, (_, _, frame) in enumerate(files[0] + files[1])
           if (h := ipv4_headers(frame)) is not None and ones_sum(h) != 0xFFFF]
    assert not bad, f"{len(bad)} frames with a wrong IPv4 header checksum, first record {bad[0]}"
