"""Every capture a real port could take: in every file of every view, the frames of one direction
of one link never overlap at that link's rate (frame + FCS + preamble + IFG).

The fabric issue's case: `tracegen generate --switch leaf0 --collective pp,dp --set
cluster.nodes_per_leaf=2` wrote frames stamped at the same ns on one leaf-spine link (800 Gb/s on a
400 Gb/s port). Here the same command on 2:1 and 4:1 oversubscribed leaf-spines, for a leaf and a
spine, and the host view: the direction of a frame is told by its source MAC (the NIC's, the leaf's
or the spine's), the rate by the link the file is a port of."""
from __future__ import annotations

from collections import defaultdict

import pytest
from click.testing import CliRunner

from tracegen.cli import main
from tg_helpers import read_pcap

NIC_GBPS = 400          # the default job's NICs


def _gaps_ok(frames, gbps: int) -> tuple[int, int]:
    """(pairs checked, overlapping pairs) of one file: per source MAC, consecutive frames."""
    by_src = defaultdict(list)
    for t, orig, fr in frames:
        by_src[fr[6:12]].append((t, orig))
    pairs = bad = 0
    for seq in by_src.values():
        for (t0, n0), (t1, _) in zip(seq, seq[1:]):
            pairs += 1
            bad += (t1 - t0) * gbps < (n0 + 24) * 8          # + FCS 4, preamble/SFD 8, IFG 12
    return pairs, bad


@pytest.mark.parametrize("fabric,switch", [("leaf-spine-2to1", "leaf0"), ("leaf-spine-2to1", "spine0"),
                                           ("leaf-spine-4to1", "leaf0")])
def test_no_port_file_exceeds_its_link_rate(tmp_path, fabric, switch):
    res = CliRunner().invoke(main, ["generate", "-q", "--switch", switch, "--collective", "pp,dp",
                                    "--set", "parallelism.dp=8", "--set", "parallelism.global_batch=32",
                                    "--set", f"fabric={fabric}", "--set", "fabric.nodes_per_leaf=2",
                                    "--no-ns3", "-o", str(tmp_path / "v")])
    assert res.exit_code == 0, res.output
    files = sorted((tmp_path / "v" / "pcap").glob("*.pcap"))
    uplinks = [f for f in files if "spine" in f.name]
    assert uplinks, [f.name for f in files]
    from tracegen.config import load_job
    from tracegen.fabric.topology import build_fabric
    fab = build_fabric(load_job(sets=[f"fabric={fabric}", "fabric.nodes_per_leaf=2", "parallelism.dp=8",
                                      "parallelism.global_batch=32"]))
    total = 0
    for f in files:
        gbps = fab.leaf_spine_gbps if "spine" in f.name else NIC_GBPS
        pairs, bad = _gaps_ok(read_pcap(f), gbps)
        assert bad == 0, f"{f.name}: {bad} of {pairs} frame pairs closer than one wire time at {gbps} Gb/s"
        total += pairs
    assert total > 1000


JOB = ["--collective", "pp,dp", "--set", "parallelism.dp=8", "--set", "parallelism.global_batch=32",
       "--set", "fabric=leaf-spine-2to1", "--no-ns3"]


@pytest.mark.parametrize("view", ["host", "host-ipv6-qp4", "merged", "lab"])
def test_every_file_of_the_host_merged_and_lab_views_keeps_line_rate(tmp_path, view):
    extra = {"host": [], "host-ipv6-qp4": ["--set", "output.ip_version=6", "--set", "nccl.qps_per_connection=4"],
             "merged": ["--merge"], "lab": ["--lab", str(tmp_path / "lab.yaml")]}[view]
    (tmp_path / "lab.yaml").write_text("hosts: leaf0\narp: false\n")
    res = CliRunner().invoke(main, ["generate", "-q", *JOB, *extra, "-o", str(tmp_path / "h")])
    assert res.exit_code == 0, res.output
    files = sorted((tmp_path / "h" / "pcap").glob("*.pcap"))
    assert files
    for f in files:
        pairs, bad = _gaps_ok(read_pcap(f), NIC_GBPS)
        assert pairs and bad == 0, f"{f.name}: {bad} of {pairs} overlapping"


def test_fifo_per_path(tmp_path):
    """A packet never overtakes one sent earlier on the same path: per path (sender, receiver and
    UDP source port, which fixes the ECMP route), the receiver's capture has the frames in the
    order the sender's capture sent them (matched by destination QP, PSN and opcode)."""
    res = CliRunner().invoke(main, ["generate", "-q", *JOB, "--set", "nccl.qps_per_connection=4",
                                    "-o", str(tmp_path / "h")])
    assert res.exit_code == 0, res.output
    sent, got = {}, defaultdict(list)
    for f in sorted((tmp_path / "h" / "pcap").glob("*.pcap")):
        for t, _, fr in read_pcap(f):
            off = 18 if fr[12:14] == b"\x81\x00" else 14
            ttl, src, dst = fr[off + 8], fr[off + 12:off + 16], fr[off + 16:off + 20]
            sport, bth = fr[off + 20:off + 22], fr[off + 28:off + 40]
            key = (src, dst, sport, bth[5:8], bth[8:12], bth[0])     # dest QP, PSN, opcode
            if ttl in (255, 64):                                     # as sent (NCCL's 255, CNPs 64)
                sent[key] = t
            else:                                                    # received: routers crossed
                got[(src, dst, sport)].append((t, key))
    pairs = 0
    for path, recs in got.items():
        order = [sent[k] for _, k in sorted(recs, key=lambda r: r[0])]
        assert order == sorted(order), f"path {path}: a frame overtook one sent before it"
        pairs += 1
    assert pairs > 10
