"""pcaps of a job timed per connection (emit/views/placed.py): only the selected NICs' chunks are made,
placed inside the connection-level schedule.

Oracle: the chunk-level run of the same job writes the same NICs' files; frame for frame they
must carry the same RoCE content - opcode, destination QP, PSN, length, RETH - as multisets (the
times differ: the two schedules agree within 1-2 %, so frames interleave differently and IPv4
identifications, which count frames in send order, follow). Every frame's ICRC is recomputed with
zlib over the RoCEv2 pseudo-header; tshark reads the files with nothing malformed."""
from __future__ import annotations

import dataclasses
import shutil
import subprocess
import zlib
from collections import Counter

import numpy as np
import pytest

from tg_helpers import read_pcap
from tracegen.config import job_from_dict
from tracegen.emit.bundle import pcap_flows
from tracegen.emit.views.pcap import write_pcaps
from tracegen.pipeline import run_pipeline

M = {"layers": 4, "hidden": 512, "heads": 8, "vocab": 4096, "seq_len": 512}
JOBS = {
    "dense dp4 tp2 pp2 2:1": (dict(model=M, parallelism=dict(dp=4, tp=2, pp=2, global_batch=16),
                                   fabric="leaf-spine-2to1"), "0,5"),
    "dp8 tp8 dgx (folded, PXN)": (dict(model=M, parallelism=dict(dp=8, tp=8, pp=1, global_batch=16),
                                       cluster="dgx-h100"), "3,12,61"),
    "qps 4 ipv6": (dict(model=M, parallelism=dict(dp=4, tp=2, pp=2, global_batch=16),
                        nccl={"qps_per_connection": 4}, output={"ip_version": 6}), "1,6"),
}


def _roce_key(fr: bytes, ip_len: int):
    l3 = 18                                                   # VLAN-tagged (the default)
    bth = l3 + ip_len + 8
    op = fr[bth]
    reth = fr[bth + 12:bth + 28] if op in (6, 10, 7, 11) else b""
    return op, fr[bth + 5:bth + 8], fr[bth + 9:bth + 12], len(fr), reth


def _icrc_ok(fr: bytes, v6: bool) -> bool:
    l3 = 18
    b = bytearray(fr[l3:-4])
    if v6:
        b[0] |= 0x0F
        b[1] = 0xFF                                           # traffic class, flow label
        b[2] = b[3] = 0xFF
        b[7] = 0xFF                                           # hop limit
        udp = 40
    else:
        b[1] = b[8] = b[10] = b[11] = 0xFF                    # ToS, TTL, header checksum
        udp = 20
    b[udp + 6] = b[udp + 7] = 0xFF                            # UDP checksum
    b[udp + 8 + 4] = 0xFF                                     # BTH FECN/BECN/resv
    return zlib.crc32(b"\xff" * 8 + bytes(b)) == int.from_bytes(fr[-4:], "little")


@pytest.mark.parametrize("name", list(JOBS))
def test_placed_pcaps_carry_the_chunk_levels_frames(tmp_path, name):
    spec, nics = JOBS[name]
    j = job_from_dict(spec, name="placed")
    j = dataclasses.replace(j, output=dataclasses.replace(j.output, nics=nics, ns3=False))
    v6 = j.output.ip_version == 6
    full = run_pipeline(dataclasses.replace(j, detail="full"), emit=True)
    conn = run_pipeline(dataclasses.replace(j, detail="conn"), emit=True)
    assert conn.flows.detail == "conn"
    placed = pcap_flows(conn)
    assert placed.detail == "placed" and 0 < len(placed) < len(full.flows)
    if "folded" in name:
        assert conn.ops.replicas == 8
    files = {}
    for label, flows in (("full", full.flows), ("placed", placed)):
        d = tmp_path / label
        d.mkdir()
        files[label] = {p.name: read_pcap(p) for p in write_pcaps(flows, full.fabric, j.output, d, nccl=j.nccl,
                                                                    network=j.network)}
    assert files["full"].keys() == files["placed"].keys() and len(files["full"]) == len(nics.split(","))
    ip_len = 40 if v6 else 20
    for f in files["full"]:
        a, b = files["full"][f], files["placed"][f]
        assert Counter(_roce_key(fr, ip_len) for _, _, fr in a) == Counter(_roce_key(fr, ip_len) for _, _, fr in b), f
        assert all(_icrc_ok(fr, v6) for _, _, fr in b)
        t = np.array([r[0] for r in b])
        assert (np.diff(t) >= 0).all()
        # the two schedules end the NIC's traffic within 2 %
        assert abs(b[-1][0] - a[-1][0]) <= 0.02 * a[-1][0]
    if shutil.which("tshark"):
        for p in (tmp_path / "placed").iterdir():
            bad = subprocess.run(["tshark", "-r", str(p), "-Y", "_ws.malformed"], capture_output=True, text=True)
            assert bad.returncode == 0 and bad.stdout.strip() == "", bad.stdout[:500]


def test_a_connection_level_job_without_a_nic_selection_writes_no_pcap(tmp_path):
    from click.testing import CliRunner
    from tracegen.cli import main
    res = CliRunner().invoke(main, ["generate", "-q", "--detail", "conn", "--no-ns3", "-o", str(tmp_path / "x")])
    assert res.exit_code == 2 and "select some (--nics" in res.output and not (tmp_path / "x").exists()
    res = CliRunner().invoke(main, ["generate", "-q", "--detail", "conn", "-o", str(tmp_path / "y")])
    assert res.exit_code == 2 and "ns-3" in res.output and not (tmp_path / "y").exists()
    res = CliRunner().invoke(main, ["generate", "-q", "--detail", "conn", "--no-ns3", "--nics", "0",
                                    "-o", str(tmp_path / "z")])
    assert res.exit_code == 0, res.output
    assert [p.name for p in (tmp_path / "z" / "pcap").iterdir()] == ["node0000-rail0.pcap"]


def test_leaf_and_lab_views_expand_only_their_nics(tmp_path):
    """A leaf's switch view and a lab plan of a connection-level job: the chunks of the leaf's (the
    lab hosts') NICs only, and the files those views write from them; a spine view is refused."""
    from tracegen.emit.views.placed import shown_nics
    from tracegen.errors import ConfigError
    spec, _ = JOBS["dense dp4 tp2 pp2 2:1"]
    j = job_from_dict(spec, name="placed")
    conn = run_pipeline(dataclasses.replace(j, detail="conn"))
    leaf0 = conn.fabric.nic_leaf == 0
    for out in (dataclasses.replace(j.output, switch="leaf0", ns3=False),):
        run = dataclasses.replace(conn, job=dataclasses.replace(conn.job, output=out))
        assert np.array_equal(shown_nics(out, conn.fabric), leaf0)
        placed = pcap_flows(run)
        assert (leaf0[placed.rows["src_nic"]] | leaf0[placed.rows["dst_nic"]]).all()
        paths = write_pcaps(placed, conn.fabric, out, tmp_path, nccl=j.nccl, network=j.network)
        assert any("spine" in p.name for p in paths) and any("node" in p.name for p in paths)
    lab = tmp_path / "lab.yaml"
    lab.write_text("hosts: [0, 3]\narp: false\n")
    out = dataclasses.replace(j.output, lab=str(lab), ns3=False)
    assert shown_nics(out, conn.fabric).nonzero()[0].tolist() == [0, 3]
    with pytest.raises(ConfigError, match="spine"):
        shown_nics(dataclasses.replace(j.output, switch="spine0"), conn.fabric)


def test_chunks_expanded_block_by_block_are_those_of_one_expansion(monkeypatch):
    """placed._chunks expands the selected NICs' ops a block of whole ops at a time (a 131k-GPU
    job's would list ~38 M chunk rows at once): one op per block and all ops in one block give the
    same placed table, row for row, and every (op, replica) pair with a selected NIC gets its chunks."""
    from tracegen.emit.views import placed as placed_mod
    spec, nics = JOBS["dp8 tp8 dgx (folded, PXN)"]
    j = job_from_dict(spec, name="placed")
    j = dataclasses.replace(j, output=dataclasses.replace(j.output, nics=nics, ns3=False), detail="conn")
    conn = run_pipeline(j, emit=True)
    tables = {}
    for rows in (1, 1 << 40):
        monkeypatch.setattr(placed_mod, "EXPAND_BLOCK_ROWS", rows)
        tables[rows] = placed_mod.placed_flows(conn)
    a, b = tables[1], tables[1 << 40]
    assert len(a) > 0 and a.rows.tobytes() == b.rows.tobytes()
    assert np.array_equal(a.finish_ns, b.finish_ns) and np.array_equal(a.row_conn, b.row_conn)
    # each op with a connection row on a selected NIC has chunks there (none dropped between blocks)
    r = conn.flows.rows
    mask = placed_mod.shown_nics(j.output, conn.fabric)
    touch = (r["link"] == 1) & (mask[np.maximum(r["src_nic"], 0)] | mask[np.maximum(r["dst_nic"], 0)])
    assert set(np.unique(r["op_id"][touch]).tolist()) == set(np.unique(a.rows["op_id"]).tolist())
