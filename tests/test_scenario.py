"""Scenarios (tracegen/scenario/): several jobs on one fabric, timed by the ordinary engine.

Judges: a job alone in a scenario is `tracegen plan`'s run of it (run_pipeline, and the CLI's
JSON); jobs that share no link cannot slow each other (exact equality with their time alone);
jobs that share oversubscribed uplinks do, and placing each under its own leaves removes it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tracegen.config import load_job
from tracegen.pipeline import run_pipeline
from tracegen.scenario.place import place, rank_map
from tracegen.scenario.run import run_scenario
from tracegen.scenario.spec import load_scenario

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}

DP_JOB = """model: tiny
parallelism: {dp: %(dp)d, tp: 1, pp: 1, micro_batch: 1, global_batch: %(dp)d}
cluster: {gpus_per_node: 1, nics_per_node: 1}
fabric: %(fabric)s
nccl: {algorithm: ring%(nccl)s}
"""
NONBLOCKING = "{kind: leaf-spine, nodes_per_leaf: 2, spines: 2}"


def write(tmp: Path, name: str, text: str) -> Path:
    p = tmp / name
    p.write_text(text)
    return p


def scenario(tmp: Path, body: str, dp: int = 4, fabric: str = NONBLOCKING, nccl: str = "") -> Path:
    write(tmp, "dp.yaml", DP_JOB % {"dp": dp, "fabric": fabric, "nccl": nccl})
    return write(tmp, "s.yaml", body)


def test_one_job_is_the_jobs_plan(tmp_path):
    s = scenario(tmp_path, "jobs: [{job: dp.yaml}]\n")
    run = run_scenario(load_scenario(s))
    alone = run_pipeline(load_job(tmp_path / "dp.yaml"), emit=False)
    assert run.jobs[0].jct_ns == alone.report.iteration_ns > 0
    assert np.array_equal(run.flows.op_end_ns, alone.flows.op_end_ns)
    out = subprocess.run([sys.executable, "-m", "tracegen.cli", "plan", "--scenario", str(s), "--json"],
                         capture_output=True, text=True, env=ENV, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    plan = subprocess.run([sys.executable, "-m", "tracegen.cli", "plan", str(tmp_path / "dp.yaml"), "--json"],
                          capture_output=True, text=True, env=ENV, cwd=tmp_path)
    assert json.loads(out.stdout)["jobs"][0]["jct_ns"] == json.loads(plan.stdout)["iteration_ns"]


def test_disjoint_halves_of_a_nonblocking_fabric_do_not_interfere(tmp_path):
    # each job on its own two leaves: no link carries both (spine->leaf ports lead to one job's leaves)
    s = scenario(tmp_path, "placement: contiguous\njobs: [{job: dp.yaml, name: a}, {job: dp.yaml, name: b}]\n")
    run = run_scenario(load_scenario(s))
    a, b = run.jobs
    assert list(a.nodes) == [0, 1, 2, 3] and list(b.nodes) == [4, 5, 6, 7]
    for j in run.jobs:
        assert j.iteration_ns == j.alone_iteration_ns and j.slowdown == 1.0
    # job a sits where the job alone would (same addresses, QPNs, routes): exactly its plan
    assert a.jct_ns == run_pipeline(load_job(tmp_path / "dp.yaml"), emit=False).report.iteration_ns
    assert run.fairness == pytest.approx(1.0)


def test_interleaved_on_2to1_slows_and_contiguous_lowers_it(tmp_path):
    # 2 nodes per leaf, uplinks 2:1; 8 QPs per connection spread each ring hop over both spines.
    # Interleaved by node, every hop of both rings crosses leaves: per leaf the two jobs' hops
    # (800 Gb/s) share 400 Gb/s of uplinks, alone a hop has them to itself.
    fabric = "{kind: leaf-spine, nodes_per_leaf: 2, spines: 2, oversubscription: 2.0}"
    slow = {}
    for placement in ("interleaved", "contiguous"):
        s = scenario(tmp_path, f"placement: {placement}\njobs: [{{job: dp.yaml, name: a}}, {{job: dp.yaml, name: b}}]\n",
                     dp=8, fabric=fabric, nccl=", qps_per_connection: 8")
        run = run_scenario(load_scenario(s))
        slow[placement] = [j.slowdown for j in run.jobs]
        # busbw falls with the time (same bytes)
        for j in run.jobs:
            assert (j.busbw_pct <= j.alone_busbw_pct + 1e-9) == (j.slowdown >= 1.0)
    assert min(slow["interleaved"]) > 1.05, slow
    assert max(slow["contiguous"]) < min(slow["interleaved"]), slow
    assert slow["contiguous"] == [1.0, 1.0]      # under their own leaves: nothing shared


def test_placements(tmp_path):
    body = "placement: %s\n%sjobs: [{job: a.yaml%s}, {job: b.yaml%s}]\nnodes: 8\n"
    write(tmp_path, "a.yaml", DP_JOB % {"dp": 2, "fabric": NONBLOCKING, "nccl": ""})
    write(tmp_path, "b.yaml", DP_JOB % {"dp": 4, "fabric": NONBLOCKING, "nccl": ""})
    got = {}
    for p, extra, na, nb in (("contiguous", "", "", ""), ("interleaved", "", "", ""),
                             ("random", "seed: 7\n", "", ""),
                             ("explicit", "", ", nodes: [7, 0]", ", nodes: [1, 3, 5, 6]")):
        write(tmp_path, "s.yaml", body % (p, extra, na, nb))
        got[p] = [list(x) for x in place(load_scenario(tmp_path / "s.yaml"))]
    assert got["contiguous"] == [[0, 1], [2, 3, 4, 5]]
    assert got["interleaved"] == [[0, 2], [1, 3, 4, 5]]
    assert got["explicit"] == [[7, 0], [1, 3, 5, 6]]
    r = got["random"]
    assert len(set(r[0]) | set(r[1])) == 6 and set(r[0]).isdisjoint(r[1])
    write(tmp_path, "s.yaml", body % ("random", "seed: 7\n", "", ""))
    assert [list(x) for x in place(load_scenario(tmp_path / "s.yaml"))] == r      # same seed, same nodes
    assert list(rank_map(np.array([3, 1]), 2)) == [6, 7, 2, 3]


def test_start_offset_and_iterations(tmp_path):
    s = scenario(tmp_path, "placement: contiguous\njobs: [{job: dp.yaml, name: a}, "
                           "{job: dp.yaml, name: b, start_ns: 5000000, iterations: 2}]\n")
    run = run_scenario(load_scenario(s))
    a, b = run.jobs
    assert b.iterations == 2 and len(b.iteration_ns) == 2
    ops_b = run.ops.rows[b.op_lo:b.op_hi]
    assert int(run.flows.op_start_ns[b.op_lo:b.op_hi][ops_b["kind"] != 7].min()) >= 5_000_000
    assert b.end_ns - b.start_ns == b.jct_ns == sum(b.iteration_ns)
    assert b.slowdown == 1.0 and a.slowdown == 1.0


def test_generate_writes_the_tables(tmp_path):
    s = scenario(tmp_path, "placement: interleaved\njobs: [{job: dp.yaml, name: a}, {job: dp.yaml, name: b}]\n")
    out = subprocess.run([sys.executable, "-m", "tracegen.cli", "generate", "--scenario", str(s), "--no-pcap", "-o", "out", "-q"],
                         capture_output=True, text=True, env=ENV, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    d = tmp_path / "out"
    data = json.loads((d / "scenario.json").read_text())
    assert [j["name"] for j in data["jobs"]] == ["a", "b"]
    links = (d / "link_bytes.csv").read_text().splitlines()[1:]
    # every NIC port carries one job's bytes only (a node runs one job)
    nic_links = {}
    for line in links:
        link, job, _ = line.split(",")
        if "node" in link:
            nic_links.setdefault(link, set()).add(job)
    assert nic_links and all(len(v) == 1 for v in nic_links.values())
    # link_time.csv: per link and bin the jobs' Gb/s sum to the engine's load, never above the rate
    # (every link of this fabric runs at 400 Gb/s); a NIC link's bins add up to its bytes
    import csv
    table = list(csv.reader((d / "link_time.csv").open()))
    head, body = table[0], table[1:]
    bins = [tuple(int(x) for x in h.split("_")[1:]) for h in head[3:]]
    per_link: dict[str, np.ndarray] = {}
    for row in body:
        per_link[row[0]] = per_link.get(row[0], 0) + np.array([float(x) for x in row[3:]])
    assert max(v.max() for v in per_link.values()) <= 400.0 + 1e-6
    total = {(ln, job): int(b) for ln, job, b in (line.split(",") for line in links)}
    for row in body:
        if row[0].startswith("node"):
            moved = sum(float(x) * (b - a) / 8 for x, (a, b) in zip(row[3:], bins))
            assert moved == pytest.approx(total[(row[0], row[1])], rel=1e-3)
    # flows.csv (the schedule's rows) agrees with ops.csv: an op ends with its last row
    flow_end: dict[int, int] = {}
    for row in csv.DictReader((d / "flows.csv").open()):
        o = int(row["op_id"])
        flow_end[o] = max(flow_end.get(o, 0), int(row["end_ns"]))
    ops_rows = list(csv.DictReader((d / "ops.csv").open()))
    assert ops_rows and all(flow_end[int(r["op_id"])] == int(r["end_ns"]) for r in ops_rows)
    names = ("scenario.json", "ops.csv", "flows.csv", "link_bytes.csv", "link_time.csv", "summary.md")
    first = {n: (d / n).read_bytes() for n in names}
    again = subprocess.run([sys.executable, "-m", "tracegen.cli", "generate", "--scenario", str(s), "--no-pcap", "-o", "out", "-q"],
                           capture_output=True, text=True, env=ENV, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert {n: (d / n).read_bytes() for n in names} == first          # same input, same bytes


# --- events ---------------------------------------------------------------------------------------

SPINE_JOB = """model: tiny
parallelism: {dp: 8, tp: 1, pp: 1, micro_batch: 1, global_batch: 8}
cluster: {gpus_per_node: 1, nics_per_node: 1}
fabric: {kind: leaf-spine, nodes_per_leaf: 4, spines: 4, ecmp_hash: qp}
nccl: {algorithm: ring, qps_per_connection: 32}
"""
# ring order 0..7 on nodes alternating between the two leaves: every hop crosses leaves, so each
# leaf sends 4 hops x 400 Gb/s up through its 4 x 400 Gb/s of uplinks (1:1, uplink-bound)
ALTERNATE = "placement: explicit\njobs: [{job: j.yaml, nodes: [0, 4, 1, 5, 2, 6, 3, 7]}]\n"


def _spine_runs(tmp: Path, events: str, ecmp: str = "rehash", qps: int = 32):
    write(tmp, "j.yaml", SPINE_JOB.replace("qps_per_connection: 32", f"qps_per_connection: {qps}"))
    base = run_scenario(load_scenario(write(tmp, "s0.yaml", ALTERNATE)))
    down = run_scenario(load_scenario(write(tmp, "s1.yaml", ALTERNATE + f"ecmp_on_failure: {ecmp}\n" + events)))
    return base, down


def _route_nodes(run) -> list[list[int]]:
    c, r = run.flows.conns, run.fabric.router
    return [r.path_nodes(c.route[q]) for q in range(len(c.qpn_src))]


def _big_op_ns(run) -> int:
    o = int(np.argmax(run.ops.rows["bytes"]))
    return int(run.flows.op_end_ns[o] - run.flows.op_start_ns[o])


def test_one_spine_of_four_down_slows_an_uplink_bound_ring_by_4_3(tmp_path):
    from schedule_validator import assert_valid
    base, down = _spine_runs(tmp_path, "events: [{type: down, switch: spine1}]\n")
    spine1 = base.fabric.node_id(base.fabric.switch_id("spine1"))
    assert any(spine1 in p for p in _route_nodes(base))              # it carried traffic before
    assert down.fabric.node_id(down.fabric.switch_id("spine1")) == spine1
    assert not any(spine1 in p for p in _route_nodes(down))          # no flow crosses it now
    # closed form: a leaf's ring hops need 4 x 400 Gb/s; its uplinks give 4 x 400, then 3 x 400
    leaf_need, up_before, up_after = 4 * 400, 4 * 400, 3 * 400
    expect = min(1, up_before / leaf_need) / min(1, up_after / leaf_need)
    assert expect == pytest.approx(4 / 3)
    ratio = _big_op_ns(down) / _big_op_ns(base)
    assert ratio == pytest.approx(expect, rel=0.05), ratio
    # (fabric_routes judges QP 0's route only: with 32 QPs per connection, the NIC ports)
    assert_valid(down.flows, down.fabric, down.scenario.hardware.output, exact=False)


def test_resilient_hashing_keeps_the_flows_that_avoided_the_failure(tmp_path):
    base, rehash = _spine_runs(tmp_path, "events: [{type: down, switch: spine1}]\n")
    _, resilient = _spine_runs(tmp_path, "events: [{type: down, switch: spine1}]\n", "resilient")
    spine1 = base.fabric.node_id(base.fabric.switch_id("spine1"))
    before, after_rh, after_res = _route_nodes(base), _route_nodes(rehash), _route_nodes(resilient)
    kept = [k for k, p in enumerate(before) if spine1 not in p]
    assert kept and all(after_res[k] == before[k] for k in kept)
    assert any(after_rh[k] != before[k] for k in kept)                 # a full rehash moves them too
    assert not any(spine1 in p for p in after_res)


def test_a_degraded_link_runs_at_its_rate(tmp_path):
    from schedule_validator import assert_valid, fabric_routes
    # one QP per connection: the validator judges each flow on its QP's route, at the degraded rate
    base, slow = _spine_runs(tmp_path, "events: [{type: degrade, link: leaf0-spine0, gbps: 100}]\n", qps=1)
    f = slow.fabric
    ln = f.links[(f.links["a"] == f.node_id(f.switch_id("leaf0"))) & (f.links["b"] == f.node_id(f.switch_id("spine0")))]
    assert list(ln["gbps"]) == [100]
    assert _big_op_ns(slow) > _big_op_ns(base)
    assert_valid(slow.flows, slow.fabric, slow.scenario.hardware.output, fabric_routes, exact=False)


def test_a_straggler_grows_the_iteration_by_its_extra_compute(tmp_path):
    from schedule_validator import assert_valid, fabric_routes
    s = scenario(tmp_path, "jobs: [{job: dp.yaml, name: a}]\n")
    base = run_scenario(load_scenario(s))
    slow = run_scenario(load_scenario(write(tmp_path, "s2.yaml", "jobs: [{job: dp.yaml, name: a}]\n"
                                            "events: [{type: straggler, job: a, rank: 2, factor: 1.5}]\n")))
    # closed form: a DP-only job computes, then all-reduces its gradients (one bucket), so the
    # critical path is rank 2's compute before the gradient AllReduce, then the collectives: the
    # iteration grows by 0.5 x that compute. The compute is the workload's (job alone, no schedule).
    from tracegen.workload import build_commops
    ops = build_commops(load_job(tmp_path / "dp.yaml"))
    first_ar = int(np.flatnonzero(ops.rows["kind"] == 0)[0])
    compute = int(ops.rows["gap_ns"][first_ar])
    assert compute > 0
    assert slow.jobs[0].jct_ns - base.jobs[0].jct_ns == pytest.approx(0.5 * compute, abs=1)
    assert_valid(slow.flows, slow.fabric, slow.scenario.hardware.output, fabric_routes, exact=False)


def test_the_committed_example_is_what_generate_writes(tmp_path):
    """traces/examples/two-tenants/ = `generate --scenario traces/examples/scenarios/two-tenants.yaml`."""
    src = ROOT / "traces" / "examples" / "scenarios" / "two-tenants.yaml"
    out = subprocess.run([sys.executable, "-m", "tracegen.cli", "generate", "--scenario", str(src), "--no-pcap", "--no-ns3", "-o",
                          str(tmp_path / "x"), "-q"], capture_output=True, text=True, env=ENV, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    committed = ROOT / "traces" / "examples" / "two-tenants"
    how = f"regenerate it: tracegen generate --scenario {src.relative_to(ROOT)} --no-pcap --no-ns3 -o traces/examples/two-tenants"
    for name in ("scenario.json", "ops.csv", "flows.csv", "link_bytes.csv", "link_time.csv", "summary.md"):
        assert (tmp_path / "x" / name).read_bytes() == (committed / name).read_bytes(), f"{name} is stale; {how}"
    # pictures: by their pixel size (PNG bytes depend on the matplotlib version)
    import struct
    size = lambda p: struct.unpack(">II", p.read_bytes()[16:24])
    for name in ("jobs_gantt.png", "slowdowns.png", "link_load_by_job.png"):
        assert (committed / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert size(tmp_path / "x" / name) == size(committed / name), f"{name} differs; {how}"
    data = json.loads((committed / "scenario.json").read_text())
    assert data["jobs"][0]["slowdown"] > 1.0 and data["jobs"][1]["start_ns"] == 200_000


# --- lab patterns (BMWG draft) ---------------------------------------------------------------------

def test_incast_and_alltoall_patterns_take_their_closed_form_time(tmp_path):
    s = scenario(tmp_path, "cluster: {gpus_per_node: 1, nics_per_node: 1}\n"      # patterns only: the
                           "fabric: {kind: leaf-spine, nodes_per_leaf: 4, spines: 2}\njobs:\n"   # scenario's hardware
                           "  - {pattern: incast, ranks: 8, bytes: 4194304, iterations: 2, name: incast}\n"
                           "  - {pattern: alltoall, ranks: 4, bytes: 8388608, name: a2a}\n")
    run = run_scenario(load_scenario(s))
    incast, a2a = run.jobs
    assert list(incast.nodes) == list(range(8)) and list(a2a.nodes) == [8, 9, 10, 11]
    ops = run.ops.rows[incast.op_lo:incast.op_hi]
    assert (ops["kind"] == 6).sum() == 2 * 7                          # 7 senders, twice
    assert {int(g[1]) for g in (run.ops.groups[o] for o in range(incast.op_lo, incast.op_hi))} == {0}
    # N:1: the 7 senders' bytes all cross rank 0's NIC port: at least that long, headers and
    # hop latency on top (a few %)
    port_ns = 7 * 4194304 * 8 / 400
    for t in incast.iteration_ns:
        assert port_ns <= t <= 1.06 * port_ns, (t, port_ns)
    # AllToAll under one leaf (nodes 8-11): each rank sends (n-1)/n of its buffer through its own port
    a2a_ns = 3 / 4 * 8388608 * 8 / 400
    assert a2a_ns <= a2a.jct_ns <= 1.06 * a2a_ns, (a2a.jct_ns, a2a_ns)


def test_a_steady_noisy_neighbour_slows_a_tenant_sharing_uplinks(tmp_path):
    fabric = "{kind: leaf-spine, nodes_per_leaf: 2, spines: 2, oversubscription: 2.0}"
    body = ("placement: %s\njobs:\n  - {job: dp.yaml, name: tenant}\n"
            "  - {pattern: allreduce, ranks: 8, bytes: 67108864, gap_ns: 1000, iterations: 3, name: noisy}\n")
    got = {}
    for placement in ("interleaved", "contiguous"):
        s = scenario(tmp_path, body % placement, dp=8, fabric=fabric, nccl=", qps_per_connection: 8")
        got[placement] = run_scenario(load_scenario(s)).jobs[0].slowdown
    assert got["interleaved"] > 1.05 and got["contiguous"] == 1.0, got


# --- pcaps -----------------------------------------------------------------------------------------

def test_pcaps_of_a_two_job_scenario_pass_the_wire_checks_with_one_address_and_qpn_plan(tmp_path):
    from tg_helpers import read_pcap, roce_fields
    from wire_check import check_wire
    write(tmp_path, "s.yaml", "cluster: {gpus_per_node: 1, nics_per_node: 1}\n"
                              "fabric: {kind: leaf-spine, nodes_per_leaf: 2, spines: 2, oversubscription: 2.0}\n"
                              "placement: interleaved\njobs:\n"
                              "  - {pattern: allreduce, ranks: 4, bytes: 1048576, iterations: 2, name: ar}\n"
                              "  - {pattern: alltoall, ranks: 4, bytes: 1048576, name: a2a}\n")
    out = subprocess.run([sys.executable, "-m", "tracegen.cli", "generate", "--scenario", "s.yaml", "-o", "out", "-q"],
                         capture_output=True, text=True, env=ENV, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    d = tmp_path / "out"
    pcaps = sorted((d / "pcap").glob("*.pcap"))
    assert len(pcaps) == 8                                   # every NIC of both jobs
    assert check_wire(d / "pcap", port_rate_gbps=400) == []
    jobs = {j["name"]: set(j["nodes"]) for j in json.loads((d / "scenario.json").read_text())["jobs"]}
    assert jobs == {"ar": {0, 2, 4, 6}, "a2a": {1, 3, 5, 7}}
    ips: dict[str, set] = {"ar": set(), "a2a": set()}
    peer_of: dict[tuple, set] = {}                           # (dst IP, DestQP) -> the IPs sending to it
    for p in pcaps:
        node = int(p.stem[4:8])                              # node0003-rail0
        job = "ar" if node in jobs["ar"] else "a2a"
        for _, _, frame in read_pcap(p):
            f = roce_fields(frame)
            if f is None:
                continue
            src, dst, opcode, qp, _ = f
            ips[job].update((src, dst))
            peer_of.setdefault((dst, qp), set()).add(src)
    assert ips["ar"] and ips["a2a"] and ips["ar"].isdisjoint(ips["a2a"])   # addresses never shared
    # a QPN on a NIC is one QP: it hears from one peer only, whichever job
    assert all(len(v) == 1 for v in peer_of.values())


# --- ns-3 -------------------------------------------------------------------------------------------

@pytest.mark.timeout(900)
def test_two_jobs_interleaved_on_2to1_ns3_agrees_within_10_percent():
    """The acceptance case in packets: two identical jobs interleaved by node on a 2:1 leaf-spine
    slow each other, and `tracegen ns3 run` of the mix's ns-3 scenario ends within 10 % of the
    schedule. (pip ns3 drops libraries from paths holding "test": a tempfile folder, not tmp_path.)"""
    import importlib.util
    import shutil
    import tempfile
    if importlib.util.find_spec("ns") is None:
        pytest.skip("the pip ns3 package is not installed")
    root = Path(tempfile.mkdtemp(prefix="tg-ns3-scn-"))
    try:
        write(root, "s.yaml", "cluster: {gpus_per_node: 1, nics_per_node: 1}\n"
                              "fabric: {kind: leaf-spine, nodes_per_leaf: 2, spines: 2, oversubscription: 2.0}\n"
                              "placement: interleaved\njobs:\n"
                              "  - {pattern: allreduce, ranks: 4, bytes: 4194304, iterations: 2, name: a}\n"
                              "  - {pattern: allreduce, ranks: 4, bytes: 4194304, iterations: 2, name: b}\n")
        gen = subprocess.run([sys.executable, "-m", "tracegen.cli", "generate", "--scenario", "s.yaml", "--no-pcap",
                              "-o", "out", "-q"], capture_output=True, text=True, env=ENV, cwd=root)
        assert gen.returncode == 0, gen.stderr
        data = json.loads((root / "out" / "scenario.json").read_text())
        assert min(j["slowdown"] for j in data["jobs"]) > 1.05
        sim = subprocess.run([sys.executable, "-m", "tracegen.cli", "ns3", "run", "out/ns3", "--no-dcqcn", "-q"],
                             capture_output=True, text=True, env=ENV, cwd=root, timeout=850)
        assert sim.returncode == 0, sim.stderr[-2000:]
        s = json.loads((root / "out" / "ns3" / "sim" / "summary.json").read_text())
        assert s["completed"] == s["flows"] > 0
        ratio = s["sim_iteration_ns"] / s["analytic_iteration_ns"]
        assert abs(ratio - 1) < 0.10, ratio
        assert s["analytic_iteration_ns"] == max(j["end_ns"] for j in data["jobs"])
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_straggler_slows_its_tp_group_only(tmp_path):
    from tracegen.scenario.events import apply_stragglers, tp_group
    from tracegen.scenario.spec_events import Event
    from tracegen.workload import build_commops
    write(tmp_path, "tp.yaml", "model: tiny\nparallelism: {dp: 2, tp: 2, pp: 1, micro_batch: 1, global_batch: 2}\n"
                               "cluster: {gpus_per_node: 2}\n")
    ops = build_commops(load_job(tmp_path / "tp.yaml"))
    assert list(tp_group(ops, 1)) == [0, 1]
    slow = apply_stragglers(ops, [Event("straggler", "events[0]", job=0, rank=1, factor=2.0)], 0)
    touches = np.array([bool(set(ops.groups[o].tolist()) & {0, 1}) for o in range(len(ops))])
    gap, new = ops.rows["gap_ns"], slow.rows["gap_ns"]
    assert (gap[touches] > 0).any()
    assert np.array_equal(new[touches], 2 * gap[touches])      # its TP group's compute, doubled
    assert np.array_equal(new[~touches], gap[~touches])        # the other TP group's, as it was
    assert np.array_equal(apply_stragglers(ops, [], 0).rows, ops.rows)


@pytest.mark.parametrize("seed", range(6))
def test_random_placements_hold_the_validator_and_jobs_on_other_leaves_never_interfere(tmp_path, seed):
    from schedule_validator import assert_valid, fabric_routes
    s = scenario(tmp_path, f"placement: random\nseed: {seed}\nnodes: 8\n"
                           "jobs: [{job: dp.yaml, name: a}, {job: dp.yaml, name: b, start_ns: 20000}]\n",
                 dp=2, fabric="{kind: leaf-spine, nodes_per_leaf: 2, spines: 2, oversubscription: 2.0}")
    run = run_scenario(load_scenario(s))
    assert_valid(run.flows, run.fabric, run.scenario.hardware.output, fabric_routes, exact=False)
    leaves = [set((j.nodes // 2).tolist()) for j in run.jobs]            # 2 nodes per leaf
    if leaves[0].isdisjoint(leaves[1]):                                 # no link carries both
        assert [j.slowdown for j in run.jobs] == [1.0, 1.0]


def test_a_preset_job_brings_its_presets_hardware(tmp_path):
    """`preset: default` (mini-h100: 2 GPUs per node) runs on its own cluster, and alone it is
    exactly `tracegen plan --preset default`."""
    s = write(tmp_path, "s.yaml", "jobs: [{preset: default}]\n")
    sc = load_scenario(s)
    job = load_job(preset="default")
    assert sc.hardware.cluster == job.cluster and sc.hardware.fabric == job.fabric
    run = run_scenario(sc)
    assert run.jobs[0].jct_ns == run_pipeline(job, emit=False).report.iteration_ns
    # a job file starting from the preset, overriding one cluster key: the preset's cluster beneath
    write(tmp_path, "j.yaml", "preset: default\ncluster: {nic_gbps: 200}\n")
    sc = load_scenario(write(tmp_path, "s2.yaml", "jobs: [{job: j.yaml}, {preset: default, name: d}]\n"))
    assert [e.job.cluster.nic_gbps for e in sc.jobs] == [200, 200]
    assert sc.jobs[1].job.cluster.gpus_per_node == job.cluster.gpus_per_node
    # a preset whose cluster and fabric are not the built-in defaults keeps them
    # ... and gives them to every other job (a job's own node count follows from its parallelism)
    import dataclasses
    big = load_job(preset="gpt2-small")
    sc = load_scenario(write(tmp_path, "s3.yaml", "jobs: [{preset: gpt2-small}, {preset: default, name: d}]\n"))
    for e in sc.jobs:
        assert dataclasses.replace(e.job.cluster, nodes=0) == dataclasses.replace(big.cluster, nodes=0)
        assert e.job.fabric == big.fabric
    assert big.cluster.gpus_per_node != job.cluster.gpus_per_node


def test_the_wrote_line_counts_the_files_written(tmp_path):
    """`wrote DIR/ (N files, ...)`: N is what DIR holds at its top (tables, summary, pictures)."""
    import re
    src = ROOT / "traces" / "examples" / "scenarios"
    res = subprocess.run([sys.executable, "-m", "tracegen.cli", "generate", "--scenario", "two-tenants.yaml",
                          "--no-pcap", "--no-ns3", "-o", str(tmp_path / "out")],
                         capture_output=True, text=True, env=ENV, cwd=src, timeout=300)
    assert res.returncode == 0, res.stderr
    n = int(re.search(r"\((\d+) files, ", res.stdout).group(1))
    on_disk = [f for f in (tmp_path / "out").iterdir() if f.is_file() and not f.name.startswith(".")]
    assert n == len(on_disk) >= 6, (n, sorted(f.name for f in on_disk))
