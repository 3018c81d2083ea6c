"""Every view of a matrix of jobs passes the independent wire validator (tests/wire_check.py: its
own pcap/pcapng reader, RC rules, port rates) with 0 violations, and tshark finds nothing
malformed: 2 and 4 nodes per leaf, 2:1 and 4:1 leaf-spines, both ECMP hashes, 2 planes, a fabric
file with a 100G link among 400G ones, a fat-tree, CE marks with and without DCQCN, pacing (the
oversubscribed fabrics pace their flows), a job timed per connection, the lab plan at a slower
tester rate, switch, merged and host views, pcap and pcapng, several QPs and IPv6.

The first LONG case is issue 25's: with pacing, 5 of 416 QPs sent a message's packets before the
previous message's last (PSN 81-88, then 80). Switch views hold the times the schedule gave each
frame at each link (emit/packets/hops.py), so a spine's port, the leaf's and the receiving NIC's agree."""
from __future__ import annotations

import os
import shutil
import subprocess
import pytest
from click.testing import CliRunner

from tracegen.cli import main
from wire_check import Stats, check_wire, tags

DP8 = ["parallelism.dp=8", "parallelism.global_batch=32"]
SMALL = DP8 + ["model.layers=2"]                     # the same fabric traffic, half the DP bytes
FAB = ("switches: {tor-a: 1, tor-b: 1, s0: 2, s.slow: 2}\n"      # uneven: one spine at 100G
       "links: [[tor-a, s0, 400], [tor-b, s0, 400], [tor-a, s.slow, 100, 500], [tor-b, s.slow, 100]]\n"
       "nics: [tor-a, tor-a, tor-a, tor-a, tor-b, tor-b, tor-b, tor-b]\n")

# name -> (--set values, other generate arguments). CI runs MATRIX (~1 min on one idle core):
# every view kind (host, merged, switch leaf and spine, lab, placed), 2 and 4 nodes per leaf, 2:1
# and 4:1, both ECMP hashes, 2 planes, pacing, DCQCN. TRACEGEN_LONG=1 adds LONG: the full-size
# jobs' host views (issue 25's own case first) and more switch and fabric combinations.
MATRIX = {
    "ls21-npl2-host-nics": (SMALL + ["fabric=leaf-spine-2to1", "fabric.nodes_per_leaf=2"], ["--nics", "0,1,4,5"]),
    "ls21-npl4-spine0": (SMALL + ["fabric=leaf-spine-2to1"], ["--switch", "spine0"]),
    "ls41-npl4-leaf0-qphash": (SMALL + ["fabric=leaf-spine-4to1", "fabric.ecmp_hash=qp"], ["--switch", "leaf0"]),
    "ls21-npl2-leaf1-dcqcn": (SMALL + ["fabric=leaf-spine-2to1", "fabric.nodes_per_leaf=2",
                                       "output.ecn_mark_fraction=0.01", "output.dcqcn=true"], ["--switch", "leaf1"]),
    "planes2-p1-leaf0": (["fabric.planes=2"], ["--switch", "p1-leaf0"]),
    "ls41-queue-pfc-leaf0": (SMALL + ["fabric=leaf-spine-4to1", "output.ecn_marking=queue", "network.kmin_bytes=20000",
                                      "network.kmax_bytes=100000", "network.pfc_xoff_bytes=150000"],
                             ["--switch", "leaf0"]),
    # CTS/ACKs on another class (NCCL_IB_FIFO_TC 160: priority 5) leave during the data's pauses
    "ls41-queue-pfc-fifotc-leaf0": (SMALL + ["fabric=leaf-spine-4to1", "output.ecn_marking=queue",
                                             "network.kmin_bytes=20000", "network.kmax_bytes=100000",
                                             "network.pfc_xoff_bytes=150000", "nccl.fifo_tc=160"], ["--switch", "leaf0"]),
    "ls21-queue-host-pcapng": (SMALL + ["fabric=leaf-spine-2to1", "output.ecn_marking=queue", "network.kmin_bytes=20000",
                                        "network.pfc_xoff_bytes=100000"], ["--format", "pcapng"]),
    "ls41-npl2-spine1-ecn": (SMALL + ["fabric=leaf-spine-4to1", "fabric.nodes_per_leaf=2",
                                      "output.ecn_mark_fraction=0.02"], ["--switch", "spine1", "--format", "pcapng"]),
    "file-uneven-s.slow": (["fabric.kind=file", "fabric.file={fab}"], ["--switch", "s.slow"]),
    "dcqcn-merged-pcapng": (["output.ecn_mark_fraction=0.05", "output.dcqcn=true"],
                            ["--merge", "--format", "pcapng", "--comments"]),
    "conn-placed-leaf0": (SMALL + ["fabric=leaf-spine-2to1", "fabric.nodes_per_leaf=2"],
                          ["--detail", "conn", "--switch", "leaf0"]),
    "lab-planes2-l2": (["fabric.planes=2"], ["--lab", "{lab2}"]),
}
LONG = {
    "ls21-npl2-host": (DP8 + ["fabric=leaf-spine-2to1", "fabric.nodes_per_leaf=2"], []),
    "ls41-npl2-host-pcapng": (SMALL + ["fabric=leaf-spine-4to1", "fabric.nodes_per_leaf=2"], ["--format", "pcapng"]),
    "planes2-host": (["fabric.planes=2"], []),
    "mp2-npl4-p1-spine0": (SMALL + ["fabric=multi-plane-2", "fabric.nodes_per_leaf=4"], ["--switch", "p1-spine0"]),
    "fattree-spine1-qphash": (SMALL + ["fabric=fat-tree-k8", "fabric.ecmp_hash=qp"], ["--switch", "spine1"]),
    "file-uneven-host-qp4-ipv6": (["fabric.kind=file", "fabric.file={fab}", "nccl.qps_per_connection=4",
                                   "output.ip_version=6"], []),
    "qpsplit-merged-pcap": (["nccl.qps_per_connection=4", "output.qp_split=true"], ["--merge"]),
    "conn-placed-nics": (SMALL + ["fabric=leaf-spine-4to1"], ["--detail", "conn", "--nics", "0,1,5"]),
    "lab-100g": (SMALL + ["fabric=leaf-spine-2to1", "fabric.nodes_per_leaf=2"], ["--lab", "{lab}", "--lab-rate", "100G"]),
}
if os.environ.get("TRACEGEN_LONG"):
    MATRIX.update(LONG)

TOTAL = Stats()


def _malformed(path) -> int:
    res = subprocess.run(["tshark", "-n", "-r", str(path), "-Y", "_ws.malformed", "-T", "fields", "-e", "frame.number"],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    return len(res.stdout.split())


@pytest.mark.parametrize("case", list(MATRIX))
def test_every_view_is_clean_on_the_wire(tmp_path, case):
    (tmp_path / "fab.yaml").write_text(FAB)
    (tmp_path / "lab.yaml").write_text("hosts: leaf0\nmerged: true\n")
    (tmp_path / "lab2.yaml").write_text("hosts: [0, 1, 2, 3]\nl2: true\n")
    paths = {"fab": tmp_path / "fab.yaml", "lab": tmp_path / "lab.yaml", "lab2": tmp_path / "lab2.yaml"}
    sets, extra = MATRIX[case]
    args = ["generate", "-q", "--no-ns3", "-o", str(tmp_path / "out"), "--set", "output.pictures=false",
            "--set", "output.perfetto=false"]
    for s in sets:
        args += ["--set", s.format(**paths)]
    res = CliRunner().invoke(main, args + [a.format(**paths) for a in extra])
    assert res.exit_code == 0, res.output
    files = sorted((tmp_path / "out" / "pcap").glob("*.pcap*"))
    assert files
    st = Stats()
    bad = check_wire(tmp_path / "out", stats=st)
    assert not bad, f"{len(bad)} violations {dict(tags(bad))}: " + "\n".join(bad[:10])
    assert st["roce"] > 1000 and st["qp_streams"] > 10, dict(st)
    TOTAL.update(st)
    TOTAL["views"] += 1
    if not shutil.which("tshark"):
        pytest.skip("tshark not installed (apt-get install tshark)")
    assert {f.name: _malformed(f) for f in files} == {f.name: 0 for f in files}


def test_zz_matrix_totals():
    """Runs after the matrix (name order within the module): what it checked, for the record."""
    if TOTAL["views"]:
        print(f"\nwire matrix: {TOTAL['views']} views, {TOTAL['files']} files, {TOTAL['frames']:,} frames, "
              f"{TOTAL['transmitters']} transmitters, {TOTAL['qp_streams']} QP streams, 0 violations")
    assert not TOTAL["views"] or TOTAL["frames"] > 100_000
