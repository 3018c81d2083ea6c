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


# RFC 1624's incremental update (a header's checksum derived from another's by the changed ID)
# sums three 16-bit words, up to 0x2FFFD: one fold can leave a carry, and only a second fold
# removes it. That carry comes only where the ID plus the sum of the header's other words (H)
# reaches exactly 0x10000 - rare, so the job is shaped to hit it: the receiver's address is moved
# until a data frame's H is FOLD_H, making ID 0x10000 - FOLD_H one of the last IDs before the
# counter's wrap at 2^16, in a message whose frames run on past the wrap.
FOLD_H = 0x40


def header_sum_without_id(header: bytes) -> int:
    h = bytearray(header)
    h[4:6] = h[10:12] = b"\0\0"                 # identification and checksum
    return ones_sum(bytes(h))


def mine_data_frames(records, src: bytes):
    """(ID, header) of the frames `src` sent whose IPv4 total length is the most common one (the
    full data packets)."""
    hs = [h for _, _, f in records if (h := ipv4_headers(f)) is not None and h[12:16] == src]
    lens = [struct.unpack_from(">H", h, 2)[0] for h in hs]
    full = max(set(lens), key=lens.count)
    return [(struct.unpack_from(">H", h, 4)[0], h) for h, n in zip(hs, lens) if n == full]


def test_ipv4_checksum_needing_a_second_fold(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    fabric = build_fabric(Job())
    src = bytes(int(fabric.nic_ip[0]).to_bytes(4, "big"))
    out = Output(pmtu=PMTU, payload="none", nics="0,2")
    # a first, small capture gives the data frames' H with the fabric's own addresses
    small = one_flow()
    small.rows["bytes"] = small.rows["wire_bytes"] = MSG
    first = sorted(write_pcaps(small, fabric, out, tmp_path / "a"))
    h0 = header_sum_without_id(mine_data_frames(read_pcap(first[0]), src)[0][1])
    # the destination's low 16 bits move H by the same amount (ones' complement arithmetic)
    ip = int(fabric.nic_ip[2])
    low = ((ip & 0xFFFF) + (FOLD_H - h0)) % 0xFFFF
    fabric.nic_ip[2] = (ip & 0xFFFF0000) | low
    paths = sorted(write_pcaps(one_flow(), fabric, out, tmp_path / "b"))
    sent = read_pcap(paths[0])
    frames = mine_data_frames(sent, src)
    assert {header_sum_without_id(h) for _, h in frames} == {FOLD_H}
    hits = [h for i, h in frames if i == 0x10000 - FOLD_H]
    assert hits, "no data frame carries the ID that needs the second fold"
    assert ones_sum(hits[0]) == 0xFFFF and hits[0][10:12] == b"\xff\xfe"
    bad = [k for k, (_, _, f) in enumerate(sent + read_pcap(paths[1]))
           if (h := ipv4_headers(f)) is not None and ones_sum(h) != 0xFFFF]
    assert not bad, f"{len(bad)} frames with a wrong IPv4 header checksum, first record {bad[0]}"
