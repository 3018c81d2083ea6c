"""A transfer's wire bytes (the flow table's wire_bytes, which every timing rests on) equal what its
RDMA WRITE frames occupy on the wire in its sender's own capture, read here from pcap bytes: each
frame's captured length plus FCS 4, preamble 8 and inter-frame gap 12 (WIRE.md: no FCS in pcap).
The frames carry RETH on a message's first packet, ImmDt on its last, the last packet's pad to 4
bytes - so a wire-bytes count that forgets one of them no longer adds up."""
from __future__ import annotations

import dataclasses
import struct

import numpy as np
import pytest

from tg_helpers import read_pcap
from tracegen.collectives.edges import net_wire_bytes
from tracegen.config import job_from_dict
from tracegen.emit.views.pcap import write_pcaps
from tracegen.fabric.topology import build_fabric
from tracegen.tables import COMMOP_DTYPE, FLOW_DTYPE, CommOps, Flows, LinkKind, Ragged

ON_WIRE_EXTRA = 4 + 8 + 12              # FCS, preamble + SFD, inter-frame gap
WRITES = range(0x06, 0x0C)              # RC RDMA WRITE First .. Only-with-Immediate


def one_flow(nbytes: int, max_msg: int) -> Flows:
    rows = np.zeros(1, FLOW_DTYPE)
    rows["src_nic"], rows["dst_nic"], rows["src_rank"], rows["dst_rank"] = 0, 2, 0, 2
    rows["link"] = LinkKind.NET
    rows["bytes"] = rows["wire_bytes"] = nbytes
    rows["max_msg_bytes"] = max_msg
    rows["start_ns"], rows["end_ns"] = 1_000, 1_001
    return Flows(rows, Ragged.empty(1), CommOps(np.zeros(0, COMMOP_DTYPE), Ragged.empty(0), Ragged.empty(0)))


def sent_write_bytes(records, src_ip: int) -> tuple[int, int]:
    """(on-wire bytes, frames) of the RDMA WRITEs sent from src_ip (IPv4, or fd00::<IPv4>)."""
    total = n = 0
    for _, orig, fr in records:
        off = 18 if fr[12:14] == b"\x81\x00" else 14
        etype = fr[off - 2:off]
        if etype == b"\x08\x00":
            src, udp = fr[off + 12:off + 16], off + 20
        elif etype == b"\x86\xdd":
            src, udp = fr[off + 20:off + 24], off + 40
        else:
            continue
        if int.from_bytes(src, "big") != src_ip or struct.unpack_from(">H", fr, udp + 2)[0] != 4791:
            continue
        if fr[udp + 8] in WRITES:
            total += orig + ON_WIRE_EXTRA
            n += 1
    return total, n


@pytest.mark.parametrize("nbytes,max_msg,pmtu,vlan,ip_version", [
    (3 * 8192 + 1001, 8192, 1024, True, 4),        # three full messages, a last one padded by 3
    (2 * 8198 + 4097, 8198, 4096, False, 6),       # full messages padded too (8198 = 2 x 4096 + 6)
    (4096, 4096, 4096, True, 4),                   # one message, no pad
])
def test_wire_bytes_are_the_frames_on_the_wire(tmp_path, nbytes, max_msg, pmtu, vlan, ip_version):
    job = job_from_dict({"output": {"vlan": vlan, "ip_version": ip_version}})
    fabric = build_fabric(job)
    out = dataclasses.replace(job.output, pmtu=pmtu, payload="none", nics="0,2")
    paths = sorted(write_pcaps(one_flow(nbytes, max_msg), fabric, out, tmp_path))
    got, frames = sent_write_bytes(read_pcap(paths[0]), int(fabric.nic_ip[0]))
    messages = -(-nbytes // max_msg)
    assert frames >= (messages - 1) * (max_msg // pmtu) + 1
    assert int(net_wire_bytes(nbytes, max_msg, pmtu, vlan, ip_version)) == got
