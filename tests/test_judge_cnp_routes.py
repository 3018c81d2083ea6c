"""CNPs take their own ECMP path. A ConnectX NIC sends a CNP with UDP source port 0 (WIRE.md: the
ConnectX-4 Lx capture), so a switch hashes it as the 5-tuple (receiver IP, sender IP, 17, 0,
4791), not as the QP's data or ACKs (their port is the QP's). Judged from a leaf's own port
files with test_fabric's zlib model of the hash (not routing.py): every CNP going up from the
leaf leaves by the spine the model picks for sport 0 - and on this job that is, for many CNPs, not
the spine the QP's own port would pick, so a CNP routed by its QP's port cannot pass."""
from __future__ import annotations

import struct

from click.testing import CliRunner

from test_fabric import _choice
from tracegen.cli import main
from tracegen.config import load_job
from tracegen.fabric.topology import build_fabric
from tg_helpers import read_pcap

LEAF = "leaf1"
SETS = ["parallelism.dp=8", "parallelism.global_batch=32", "model.layers=2", "fabric=leaf-spine-4to1",
        "fabric.nodes_per_leaf=2", "output.ecn_mark_fraction=0.05", "fabric.ecmp_seed=3"]
OP_CNP = 0x81


def roce_fields(fr: bytes):
    """(src IP, dst IP, UDP sport, BTH opcode, DestQP) of an IPv4 RoCEv2 frame, else None."""
    off = 18 if fr[12:14] == b"\x81\x00" else 14
    if fr[off - 2:off] != b"\x08\x00" or len(fr) < off + 40:
        return None
    ip = fr[off:off + 20]
    sport, dport = struct.unpack_from(">HH", fr, off + 20)
    if dport != 4791:
        return None
    bth = fr[off + 28:off + 40]
    return (int.from_bytes(ip[12:16], "big"), int.from_bytes(ip[16:20], "big"), sport, bth[0],
            int.from_bytes(bth[5:8], "big"))


def test_cnps_leave_the_leaf_by_the_spine_their_port_0_hashes_to(tmp_path):
    job = load_job(sets=SETS)
    fab = build_fabric(job)
    seed = job.fabric.ecmp_seed
    spines = sorted(n for n in (fab.node_name(fab.n_nics + s) for s in range(len(fab.sw_mac)))
                    if n.startswith("spine"))
    leaf_mac = bytes(fab.sw_mac[fab.switch_id(LEAF)])
    args = ["generate", "-q", "--collective", "pp,dp", "--no-ns3", "-o", str(tmp_path), "--switch", LEAF]
    for s in SETS:
        args += ["--set", s]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output

    data_sport = {}                         # (src IP, dst IP, DestQP) -> UDP port, of other frames
    cnps = []                               # (spine index of the port file, fields)
    for f in sorted((tmp_path / "pcap").glob(f"{LEAF}-spine*.pcap")):
        spine = spines.index(f.stem[len(LEAF) + 1:])
        for _, _, fr in read_pcap(f):
            x = roce_fields(fr)
            if x is None:
                continue
            if x[3] == OP_CNP:
                if fr[6:12] == leaf_mac:    # going up: the leaf chose this spine
                    cnps.append((spine, x))
            else:
                data_sport[(x[0], x[1], x[4])] = x[2]
    assert len(spines) >= 2 and len(cnps) >= 20, (spines, len(cnps))
    src_leaf = fab.switch_id(LEAF)
    assert {x[2] for _, x in cnps} == {0}, "a CNP's UDP source port is 0"
    wrong = [(s, x) for s, x in cnps if s != _choice(x[0], x[1], 0, src_leaf, seed, len(spines))]
    assert not wrong, f"{len(wrong)} of {len(cnps)} CNPs left by another spine than port 0 hashes to"
    # the judge can tell: the QP's own port (its ACKs carry it: same addresses, same DestQP - the
    # data sender's QP) hashes many of these CNPs to another spine
    qp_port = [data_sport.get((x[0], x[1], x[4])) for _, x in cnps]
    differ = sum(1 for (s, x), sp in zip(cnps, qp_port)
                 if sp is not None and _choice(x[0], x[1], sp, src_leaf, seed, len(spines)) != s)
    assert differ >= len(cnps) // 4, (differ, len(cnps))
