"""Small helpers shared by the issue-18 tests: hand-made op tables run through the real stages, and
a nanosecond-pcap reader that needs nothing beyond the standard library (header-only captures
stay cheap to read, no scapy)."""
from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from tracegen.collectives import expand
from tracegen.config import job_from_dict
from tracegen.timing.schedule import schedule
from tracegen.tables import COMMOP_DTYPE, CollKind, CommOps, Dim, Flows, Phase, Ragged
from tracegen.fabric.topology import build_fabric

TINY = {"layers": 2, "hidden": 256, "heads": 8, "vocab": 512, "seq_len": 64}


def cluster_job(world: int, gpn: int = 1, nccl: dict | None = None, cluster: dict | None = None,
                output: dict | None = None):
    """A job whose fabric has `world` ranks, `gpn` per node (its model does not matter here)."""
    return job_from_dict({"model": TINY, "parallelism": {"dp": world, "tp": 1, "pp": 1, "global_batch": world},
                          "cluster": dict({"gpus_per_node": gpn}, **(cluster or {})),
                          "nccl": dict({"channels": 1}, **(nccl or {})), "output": output or {}})


def op_table(specs) -> CommOps:
    """specs: (kind, group, bytes, gap_ns, deps[, dim]) per op, in id order."""
    rows = np.zeros(len(specs), COMMOP_DTYPE)
    groups, deps = [], []
    for i, spec in enumerate(specs):
        kind, group, nbytes, gap, dep = spec[:5]
        dim = spec[5] if len(spec) > 5 else Dim.DP
        rows[i]["op_id"], rows[i]["kind"], rows[i]["dim"], rows[i]["phase"] = i, kind, dim, Phase.FWD
        rows[i]["stage"] = rows[i]["layer"] = rows[i]["microbatch"] = rows[i]["bucket"] = -1
        rows[i]["bytes"], rows[i]["elem_bytes"], rows[i]["gap_ns"] = nbytes, 2, gap
        groups.append(list(group))
        deps.append(list(dep))
    return CommOps(rows, Ragged.from_lists(groups), Ragged.from_lists(deps))


def run_ops(job, specs) -> tuple[Flows, object]:
    """The real collectives + schedule stages over a hand-made op table: (flows, fabric)."""
    fabric = build_fabric(job)
    ops = op_table(specs)
    tr = expand(ops, fabric, job.nccl)
    return schedule(ops, tr, fabric, job), fabric


P2P = CollKind.SENDRECV

# --- pcap (nanosecond, Ethernet) ------------------------------------------------------------------
ROCE_PORT = 4791


def read_pcap(path: Path):
    """Records of a nanosecond pcap: list of (ts_ns, orig_len, bytes)."""
    data = Path(path).read_bytes()
    magic = struct.unpack_from("<I", data, 0)[0]
    assert magic == 0xA1B23C4D, f"not a little-endian nanosecond pcap: {magic:#x}"
    out, off = [], 24
    while off < len(data):
        sec, nsec, incl, orig = struct.unpack_from("<IIII", data, off)
        off += 16
        out.append((sec * 10**9 + nsec, orig, data[off:off + incl]))
        off += incl
    return out


def roce_fields(frame: bytes):
    """(ip_src, ip_dst, opcode, dest_qp, psn) of an IPv4 RoCEv2 frame (VLAN or not), else None."""
    off = 12
    etype = struct.unpack_from(">H", frame, off)[0]
    if etype == 0x8100:
        off += 4
        etype = struct.unpack_from(">H", frame, off)[0]
    off += 2
    if etype != 0x0800 or len(frame) < off + 20 + 8 + 12:
        return None
    ihl = (frame[off] & 0x0F) * 4
    src, dst = struct.unpack_from(">II", frame, off + 12)
    udp = off + ihl
    if struct.unpack_from(">H", frame, udp + 2)[0] != ROCE_PORT:
        return None
    bth = udp + 8
    opcode = frame[bth]
    dqp = int.from_bytes(frame[bth + 5:bth + 8], "big")
    psn = int.from_bytes(frame[bth + 9:bth + 12], "big")
    return src, dst, opcode, dqp, psn


DATA_OPCODES = {0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B}
