"""Topology files (`fabric.kind: file`): read as strictly as a job file, every field's type and
range checked, links and NICs on known switches, one connected fabric; every mistake one line
naming the file, the key and the fix (exit 2, nothing written). Valid files - leaves linked
directly, NICs by name - run end to end."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from tracegen.cli import main
from tracegen.config import job_from_dict
from tracegen.errors import ConfigError
from tracegen.fabric.topology import build_fabric

TINY = {"layers": 2, "hidden": 256, "heads": 8, "vocab": 512, "seq_len": 64}
NICS8 = "nics: [leafA, leafA, leafA, leafA, leafB, leafB, leafB, leafB]\n"      # 4 nodes x 2 NICs
GOOD_SW = "switches: {leafA: 1, leafB: 1, s0: 2}\n"
GOOD_LINKS = "links: [[leafA, s0, 400], [leafB, s0, 400, 500]]\n"


def file_job(path, **kw):
    return job_from_dict({"model": TINY, "parallelism": {"dp": 8, "tp": 1, "pp": 1, "global_batch": 8},
                          "cluster": {"gpus_per_node": 2}, "fabric": {"kind": "file", "file": str(path)}, **kw})


# (file text, what the one line must say besides the file's name)
BAD = {
    "gbps-bool": (GOOD_SW + "links: [[leafA, s0, true], [leafB, s0]]\n" + NICS8, "links[0]: gbps is True"),
    "gbps-float": (GOOD_SW + "links: [[leafA, s0, 400.5], [leafB, s0]]\n" + NICS8, "links[0]: gbps is 400.5"),
    "gbps-zero": (GOOD_SW + "links: [[leafA, s0], [leafB, s0, 0]]\n" + NICS8, "links[1]: gbps is 0"),
    "gbps-huge": (GOOD_SW + "links: [[leafA, s0, 10000001], [leafB, s0]]\n" + NICS8, "gbps is 10000001"),
    "latency-text": (GOOD_SW + "links: [[leafA, s0, 400, '5'], [leafB, s0]]\n" + NICS8, "latency_ns is '5'"),
    "latency-bool": (GOOD_SW + "links: [[leafA, s0, 400, false], [leafB, s0]]\n" + NICS8, "latency_ns is False"),
    "latency-negative": (GOOD_SW + "links: [[leafA, s0, 400, -1], [leafB, s0]]\n" + NICS8, "latency_ns is -1"),
    "tier-bool": ("switches: {leafA: true, leafB: 1, s0: 2}\n" + GOOD_LINKS + NICS8, "leafA has tier True"),
    "tier-float": ("switches: {leafA: 1.0, leafB: 1, s0: 2}\n" + GOOD_LINKS + NICS8, "leafA has tier 1.0"),
    "tier-4": ("switches: {leafA: 1, leafB: 1, s0: 4}\n" + GOOD_LINKS + NICS8, "s0 has tier 4"),
    "no-leaf": ("switches: {s0: 2}\nlinks: []\n" + NICS8, "no tier-1 switch"),
    "name-int": ("switches: {1: 1, leafB: 1, s0: 2}\n" + GOOD_LINKS + NICS8, "switch name 1"),
    "name-bool": ("switches: {yes: 1, leafB: 1, s0: 2}\n" + GOOD_LINKS + NICS8, "switch name True"),
    "name-nic": ("switches: {node7: 1, leafB: 1, s0: 2}\n" + GOOD_LINKS + NICS8, "switch name 'node7'"),
    "name-path": ("switches: {'../up': 1, leafB: 1, s0: 2}\n" + GOOD_LINKS + NICS8, "switch name '../up'"),
    "duplicate-switch": ("switches: {leafA: 1, leafA: 2, s0: 2}\n" + GOOD_LINKS + NICS8, "duplicate key 'leafA'"),
    "duplicate-key": (GOOD_SW + GOOD_LINKS + GOOD_LINKS + NICS8, "duplicate key 'links'"),
    "link-unknown": (GOOD_SW + "links: [[leafA, s0], [leafB, s1]]\n" + NICS8, "links[1]: 's1' is not a switch"),
    "link-number": (GOOD_SW + "links: [[leafA, s0], [leafB, 7]]\n" + NICS8, "links[1]: 7 is not a switch"),
    "link-self": (GOOD_SW + "links: [[leafA, s0], [s0, s0]]\n" + NICS8, "links[1]: links s0 to itself"),
    "link-short": (GOOD_SW + "links: [[leafA, s0], [leafB]]\n" + NICS8, "links[1] is a list of 1"),
    "link-mapping": (GOOD_SW + "links: [[leafA, s0], {a: leafB}]\n" + NICS8, "links[1] is a mapping"),
    "links-mapping": (GOOD_SW + "links: {a: b}\n" + NICS8, "links is a mapping"),
    "island": ("switches: {leafA: 1, leafB: 1, s0: 2, s9: 2}\n" + GOOD_LINKS + NICS8,
               "links: s9 has no chain of links to leafA"),
    "split": ("switches: {leafA: 1, leafB: 1, s0: 2, s1: 2}\nlinks: [[leafA, s0], [leafB, s1]]\n" + NICS8,
              "leafB (and 1 more) has no chain of links to leafA"),
    "nics-short": (GOOD_SW + GOOD_LINKS + "nics: [leafA, leafA, leafB]\n",
                   "nics lists 3 leaves; this job has 8 NICs (4 nodes x 2)"),
    "nics-spine": (GOOD_SW + GOOD_LINKS + "nics: [leafA, leafA, leafA, leafA, leafB, leafB, leafB, s0]\n",
                   "NIC 7 (node0003-rail1) on 's0', which is not a tier-1 switch"),
    "nics-number": (GOOD_SW + GOOD_LINKS + "nics: [leafA, leafA, leafA, leafA, leafB, leafB, leafB, 1]\n",
                    "NIC 7 (node0003-rail1) on 1"),
    "nics-map-partial": (GOOD_SW + GOOD_LINKS + "nics: {node0000-rail0: leafA}\n",
                         "nics places 1 of the NICs, not node0000-rail1"),
    "nics-map-stranger": (GOOD_SW + GOOD_LINKS + "nics: {node0009-rail0: leafA}\n",
                          "nics: 'node0009-rail0' is not a NIC of this job"),
    "nics-text": (GOOD_SW + GOOD_LINKS + "nics: leafA\n", "nics is text"),
    "unknown-key": (GOOD_SW + GOOD_LINKS + NICS8 + "switchs: {}\n", "unknown key 'switchs'"),
    "missing-links": (GOOD_SW + NICS8, "no 'links'"),
    "description-number": (GOOD_SW + GOOD_LINKS + NICS8 + "description: 5\n", "description is an integer"),
    "deep": ("switches: " + "[" * 200 + "]" * 200 + "\n", "nested"),
    "not-utf8": (None, "not UTF-8"),
    "chain": (None, "a switch is 41 links from a NIC's leaf; at most 30"),
}


def _write(tmp_path: Path, name: str, text) -> Path:
    p = tmp_path / f"{name}.yaml"
    if name == "not-utf8":
        p.write_bytes(GOOD_SW.encode() + b"# \xff\xfe\n" + GOOD_LINKS.encode() + NICS8.encode())
    elif name == "chain":                   # leafA - x0 - x1 - ... - x39 - leafB
        xs = [f"x{i}" for i in range(40)]
        chain = ["leafA", *xs, "leafB"]
        p.write_text("switches: {leafA: 1, leafB: 1, " + ", ".join(f"{x}: 2" for x in xs) + "}\n"
                     + "links: [" + ", ".join(f"[{a}, {b}]" for a, b in zip(chain, chain[1:])) + "]\n" + NICS8)
    else:
        p.write_text(text)
    return p


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_topology_file_is_one_line_naming_the_file(tmp_path, name):
    path = _write(tmp_path, name, BAD[name][0])
    with pytest.raises(ConfigError) as e:
        build_fabric(file_job(path))
    msg = str(e.value)
    assert "\n" not in msg and BAD[name][1] in msg, msg
    assert msg.startswith("fabric.file") and str(path) in msg, msg


def test_special_files_are_refused_before_they_are_read(tmp_path):
    """/dev/zero would fill memory with a plain read; a folder is not a file."""
    for path, want in (("/dev/zero", "larger than 256 KiB"), (str(tmp_path), "is a folder"),
                       (str(tmp_path / "none.yaml"), "no such topology file")):
        with pytest.raises(ConfigError, match=want) as e:
            build_fabric(file_job(path))
        assert str(e.value).startswith("fabric.file") and "\n" not in str(e.value)


@pytest.mark.parametrize("name", ["gbps-bool", "island", "deep"])
def test_cli_exit_2_one_line_nothing_written(tmp_path, name):
    path = _write(tmp_path, name, BAD[name][0])
    out = tmp_path / "out"
    res = CliRunner().invoke(main, ["generate", "-q", "--no-pcap", "--no-ns3", "--set", "fabric.kind=file",
                                    "--set", f"fabric.file={path}", "-o", str(out)])
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: fabric.file") and "Traceback" not in res.output
    assert not out.exists()


def _oracle_hops(links, a, b):
    """Hops between two switches by BFS over a plain adjacency (the test's own)."""
    adj = {}
    for x, y in links:
        adj.setdefault(x, set()).add(y)
        adj.setdefault(y, set()).add(x)
    seen, frontier, d = {a}, {a}, 0
    while frontier and b not in seen:
        frontier = {v for u in frontier for v in adj.get(u, ())} - seen
        seen |= frontier
        d += 1
    return d if b in seen else -1


def test_leaves_linked_directly_and_nics_by_name(tmp_path):
    """No tier 2 at all: three leaves in a line, NICs placed by name. Routes cross the direct
    leaf links (hops by an independent BFS), the leaf-leaf links count as switch links in the
    report (not NIC links), and generate writes every output but ns-3's (helper ns3: no spines)."""
    p = tmp_path / "line.yaml"
    names = [f"node{n:04d}-rail{r}" for n in range(4) for r in range(2)]
    leaf = ["L0", "L0", "L1", "L1", "L1", "L2", "L2", "L2"]
    p.write_text("description: three leaves in a line\nswitches: {L0: 1, L1: 1, L2: 1}\n"
                 "links: [[L0, L1, 800, 300], [L1, L2, 800]]\n"
                 "nics: {" + ", ".join(f"{n}: {lf}" for n, lf in zip(names, leaf)) + "}\n")
    f = build_fabric(file_job(p))
    assert f.n_spines == 0 and f.switch_ids_text() == "leaves 8..10, no spines"
    with pytest.raises(IndexError, match="no spines"):
        f.spine_node_id(0)
    sw_links = [("L0", "L1"), ("L1", "L2")]
    src, dst = np.meshgrid(np.arange(8), np.arange(8))
    src, dst = src.ravel(), dst.ravel()
    want = [_oracle_hops(sw_links, leaf[s], leaf[d]) + 2 for s, d in zip(src, dst)]
    assert f.hops(src, dst).tolist() == want
    tiers = f.link_tier()
    sw = (f.links["a"] >= f.n_nics) & (f.links["b"] >= f.n_nics)
    assert sw.sum() == 2 and (tiers[sw] == 1).all() and (tiers[~sw] == 0).all()
    out = tmp_path / "out"
    res = CliRunner().invoke(main, ["generate", "-q", "--no-ns3", "--set", "fabric.kind=file", "--set",
                                    f"fabric.file={p}", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert {"flows.csv", "ops.csv", "perfetto.json", "summary.json", "pcap"} <= set(os.listdir(out))
    assert len(os.listdir(out / "pcap")) == 8
