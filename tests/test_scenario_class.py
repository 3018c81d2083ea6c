"""Per-job traffic class in a scenario (jobs[i].dscp / .pcp): each job's RoCE frames carry its
class in the pcaps, CNPs keep mlx5's (DSCP 48, priority 6), bad values are refused.

Judge: a pcap parser of its own (struct: Ethernet, 802.1Q, IPv4 ToS, UDP 4791, BTH opcode),
sharing no code with the writer; which job a frame is from comes from scenario.json's nodes.
"""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
JOB = """model: tiny
parallelism: {dp: 4, tp: 1, pp: 1, micro_batch: 1, global_batch: 4}
cluster: {gpus_per_node: 1, nics_per_node: 1}
fabric: {kind: leaf-spine, nodes_per_leaf: 2, spines: 2}
nccl: {algorithm: ring}
output: {vlan: %s, ecn_mark_fraction: 0.05}
"""
ROCE_PORT, CNP_OPCODE = 4791, 0x81


def frames(path: Path):
    """(pcp or None, dscp, BTH opcode) of every RoCEv2-over-IPv4 frame of a classic pcap."""
    data = path.read_bytes()
    magic = struct.unpack_from("<I", data)[0]
    end = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    at = 24
    while at + 16 <= len(data):
        incl = struct.unpack_from(end + "I", data, at + 8)[0]
        f = data[at + 16:at + 16 + incl]
        at += 16 + incl
        etype, off, pcp = struct.unpack_from("!H", f, 12)[0], 14, None
        if etype == 0x8100:
            pcp = struct.unpack_from("!H", f, 14)[0] >> 13
            etype, off = struct.unpack_from("!H", f, 16)[0], 18
        if etype != 0x0800 or f[off + 9] != 17:
            continue
        ihl = (f[off] & 15) * 4
        if struct.unpack_from("!H", f, off + ihl + 2)[0] != ROCE_PORT:
            continue
        yield pcp, f[off + 1] >> 2, f[off + ihl + 8]


def generate(tmp: Path, body: str, vlan: str = "true"):
    (tmp / "dp.yaml").write_text(JOB % vlan)
    (tmp / "s.yaml").write_text(body)
    return subprocess.run([sys.executable, "-m", "tracegen.cli", "generate", "--scenario", "s.yaml", "-o", "out",
                           "-q", "--no-ns3"], capture_output=True, text=True, env=ENV, cwd=tmp)


def test_each_jobs_frames_carry_its_class_and_cnps_keep_mlx5s(tmp_path):
    out = generate(tmp_path, "placement: interleaved\njobs:\n"
                             "  - {job: dp.yaml, name: a, dscp: 34, pcp: 4}\n"
                             "  - {job: dp.yaml, name: b, dscp: 10, pcp: 1}\n")
    assert out.returncode == 0, out.stderr
    d = tmp_path / "out"
    jobs = {j["name"]: j for j in json.loads((d / "scenario.json").read_text())["jobs"]}
    assert (jobs["a"]["dscp"], jobs["a"]["pcp"], jobs["b"]["dscp"], jobs["b"]["pcp"]) == (34, 4, 10, 1)
    want = {n: (j["pcp"], j["dscp"]) for n, j in jobs.items()}
    node_job = {n: name for name, j in jobs.items() for n in j["nodes"]}
    seen = {"a": set(), "b": set()}
    cnps = 0
    for p in sorted((d / "pcap").glob("*.pcap")):
        job = node_job[int(p.stem[4:8])]                    # node0003-rail0: a job's NIC sees only its job
        for pcp, dscp, opcode in frames(p):
            if opcode == CNP_OPCODE:
                cnps += 1
                assert (pcp, dscp) == (6, 48)                 # mlx5 cnp_802p_prio / cnp_dscp defaults
            else:
                seen[job].add((pcp, dscp))
    assert seen == {"a": {want["a"]}, "b": {want["b"]}}       # data, CTS and ACKs: the job's class
    assert cnps > 0


def test_a_job_without_a_class_keeps_output_dscp_and_pcp(tmp_path):
    out = generate(tmp_path, "jobs:\n  - {job: dp.yaml, name: a, dscp: 40}\n  - {job: dp.yaml, name: b}\n")
    assert out.returncode == 0, out.stderr
    d = tmp_path / "out"
    jobs = {j["name"]: j for j in json.loads((d / "scenario.json").read_text())["jobs"]}
    node_job = {n: name for name, j in jobs.items() for n in j["nodes"]}
    seen = {"a": set(), "b": set()}
    for p in sorted((d / "pcap").glob("*.pcap")):
        seen[node_job[int(p.stem[4:8])]] |= {(pcp, dscp) for pcp, dscp, op in frames(p) if op != CNP_OPCODE}
    assert seen == {"a": {(3, 40)}, "b": {(3, 26)}}           # output.pcp 3, output.dscp 26 (defaults)


def test_bad_classes_are_one_line_exit_2(tmp_path):
    cases = [("{job: dp.yaml, dscp: 64}", "true", "jobs[0].dscp"),
             ("{job: dp.yaml, pcp: 8}", "true", "jobs[0].pcp"),
             ("{job: dp.yaml, dscp: true}", "true", "jobs[0].dscp"),
             ("{job: dp.yaml, pcp: 2}", "false", "output.vlan")]
    for job, vlan, key in cases:
        out = generate(tmp_path, f"jobs:\n  - {job}\n", vlan)
        assert out.returncode == 2, (job, out.stderr)
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and key in lines[0] and "Traceback" not in out.stderr, (job, out.stderr)
        assert not (tmp_path / "out").exists()
    assert "jobs[0].pcp" in lines[0]                          # the PCP/VLAN refusal names both keys


def test_queue_marking_keeps_each_jobs_class(tmp_path):
    """output.ecn_marking: queue (the switch egress queues, by priority): the classes still hold."""
    (tmp_path / "q.yaml").write_text((JOB % "true").replace("ecn_mark_fraction: 0.05", "ecn_marking: queue")
                                     .replace("spines: 2}", "spines: 2, oversubscription: 2.0}"))
    (tmp_path / "s.yaml").write_text("placement: interleaved\njobs:\n  - {job: q.yaml, name: a, pcp: 5, dscp: 20}\n"
                                     "  - {job: q.yaml, name: b}\n")
    out = subprocess.run([sys.executable, "-m", "tracegen.cli", "generate", "--scenario", "s.yaml", "-o", "out",
                          "-q", "--no-ns3"], capture_output=True, text=True, env=ENV, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    d = tmp_path / "out"
    jobs = {j["name"]: j for j in json.loads((d / "scenario.json").read_text())["jobs"]}
    node_job = {n: name for name, j in jobs.items() for n in j["nodes"]}
    seen = {"a": set(), "b": set()}
    for p in sorted((d / "pcap").glob("*.pcap")):
        seen[node_job[int(p.stem[4:8])]] |= {(pcp, dscp) for pcp, dscp, op in frames(p) if op != CNP_OPCODE}
    assert seen == {"a": {(5, 20)}, "b": {(3, 26)}}
    (tmp_path / "s.yaml").write_text("placement: interleaved\njobs:\n  - {job: q.yaml, name: a}\n"
                                     "  - {job: q.yaml, name: b}\n")     # no class: output.dscp/pcp's path
    out = subprocess.run([sys.executable, "-m", "tracegen.cli", "generate", "--scenario", "s.yaml", "-o", "out",
                          "-q", "--no-ns3", "--force"], capture_output=True, text=True, env=ENV, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert {(pcp, dscp) for p in (d / "pcap").glob("*.pcap") for pcp, dscp, op in frames(p)
            if op != CNP_OPCODE} == {(3, 26)}
