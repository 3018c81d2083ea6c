"""tracegen's own ns-3 scenario end to end: a generated trace dir simulated packet by packet.

One non-blocking and one oversubscribed simulation are shared by the tests (module fixtures),
plus a PP+DP+TP job on 4 nodes run on a non-blocking and an oversubscribed fabric for the op
chain. ns-3 tests skip only when the pip `ns3` package is not installed; when it is, a failure
to load it or to compile our C++ model fails them. The replay-plan tests at the bottom need no
ns-3. Simulations write under tmp dirs whose path has no "test" in it (pip ns3 drops libraries
from such paths; see ns3_workdir).
"""
from __future__ import annotations

import csv
import importlib.util
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner

from tracegen.cli import main
from tracegen.config import job_from_dict
from tracegen.emit.tables.flows import write_flows_csv
from tracegen.emit.sims.ns3 import write_ns3
from tracegen.errors import ConfigError
from tracegen.emit.sims.ns3_compare import join, plot, report_rows
from ns3_scenarios.inputs import load_scenario, replay_plan
from tracegen.pipeline import run_pipeline
from tracegen.tables import LinkKind

NET_LINK = LinkKind.NET

# 32 GPUs on 16 nodes x 2, one leaf per rail holding all 16 nodes: every NIC pair meets in one
# switch, a crossbar, so nothing but the NICs can be a bottleneck (non-blocking for real).
NONBLOCKING = {"parallelism": {"dp": 4, "tp": 2, "pp": 4, "global_batch": 16},
               "cluster": {"nodes_per_leaf": 16}}
# 16 GPUs on 8 nodes, 2 nodes per leaf, 2 spines at 100G against 400G NICs: 4:1 at the uplinks.
OVERSUBSCRIBED = {"parallelism": {"dp": 4, "tp": 2, "pp": 2, "global_batch": 16},
                  "cluster": {"nodes_per_leaf": 2, "spines": 2, "leaf_spine_gbps": 100}}
# PP+DP+TP where the op chain matters: 8 GPUs on 4 nodes x 2, TP inside a node (NVLink-only ops),
# DP between nodes 0-1 and 2-3, PP between nodes 0-2 and 1-3. One leaf per rail: non-blocking.
CHAIN = {"parallelism": {"dp": 2, "tp": 2, "pp": 2, "global_batch": 8},
         "cluster": {"nodes_per_leaf": 4}}
# The same job with nodes {0,1} and {2,3} under different leaves joined by one 100G spine: DP
# stays under its leaf, PP crosses the 8:1 uplink, and every op after a PP transfer waits.
CHAIN_OVERSUBSCRIBED = {"parallelism": {"dp": 2, "tp": 2, "pp": 2, "global_batch": 8},
                        "cluster": {"nodes_per_leaf": 2, "spines": 1, "leaf_spine_gbps": 100}}
TSHARK = shutil.which("tshark")


def make_trace(root: Path, spec: dict):
    """What `tracegen generate --no-pcap` leaves for ns-3: ns3/ plus the transfer table."""
    job = job_from_dict(spec, name=root.name)
    run = run_pipeline(job)
    write_ns3(run.flows, run.fabric, job, root / "ns3")
    write_flows_csv(run.flows, root / "flows.csv")
    return run


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def load_ns3_or_skip() -> float:
    """Skip only when the ns3 package is absent; a load or compile failure of our model (a C++
    error in ns3_scenarios/*.h, broken bindings) fails the test. Returns the load time."""
    if importlib.util.find_spec("ns") is None:
        pytest.skip("pip package ns3 (ns-3 Python bindings) is not installed: "
                    "pip install 'ns3>=3.44'")
    from ns3_scenarios.scenario import load_ns3
    t = time.perf_counter()
    try:
        load_ns3()
    except Exception as e:
        pytest.fail(f"ns-3 is installed but tracegen's model does not load: "
                    f"{type(e).__name__}: {e}", pytrace=False)
    return time.perf_counter() - t


@pytest.fixture(scope="module")
def ns3_import_s():
    return load_ns3_or_skip()


@pytest.fixture(scope="session")
def ns3_workdir():
    """A fresh dir whose path has no "test" in it; its subdirs via .mk(name)."""
    root = Path(tempfile.mkdtemp(prefix="tg-ns3-"))
    assert "test" not in str(root)

    class Dirs:
        @staticmethod
        def mk(name: str) -> Path:
            d = root / name
            d.mkdir()
            return d
    yield Dirs
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def sim(ns3_workdir, ns3_import_s):
    from ns3_scenarios import run_scenario
    root = ns3_workdir.mk("nonblocking")
    run = make_trace(root, NONBLOCKING)
    t = time.perf_counter()
    summary = run_scenario(root, pcap=True)
    return SimpleNamespace(root=root, run=run, summary=summary,
                           wall_s=time.perf_counter() - t + ns3_import_s,
                           sc=load_scenario(root), flows=read_csv(root / "ns3/sim/flows.csv"))


@pytest.fixture(scope="module")
def oversub(ns3_workdir, ns3_import_s):
    from ns3_scenarios import run_scenario
    root = ns3_workdir.mk("oversub")
    make_trace(root, OVERSUBSCRIBED)
    # The other replay mode and DCQCN, so both paths run somewhere.
    return SimpleNamespace(root=root, summary=run_scenario(root, gap="analytic", dcqcn=True))


# ---------------------------------------------------------------- the non-blocking run

def test_runs_to_completion_within_three_minutes(sim):
    s = sim.summary
    assert s["flows"] >= 200 and 16 <= s["hosts"] <= 32
    assert s["completed"] == s["flows"]
    assert sim.wall_s < 180, f"ns-3 import + run took {sim.wall_s:.0f} s"
    assert json.loads((sim.root / "ns3/sim/summary.json").read_text())["completed"] == s["flows"]


def test_bytes_received_equal_bytes_scheduled(sim):
    net = sim.run.flows.net
    scheduled = int(sim.run.flows.rows["bytes"][net].sum())
    assert sim.summary["bytes_scheduled"] == scheduled
    assert sim.summary["bytes_received"] == scheduled
    for r in sim.flows:
        assert int(r["rx_bytes"]) == int(r["bytes"]), r
        assert int(r["rx_pkts"]) == -(-int(r["bytes"]) // 4096)
    assert sim.summary["psn_errors"] == 0


def test_fct_txt_is_hpcc_format_with_manifest_sports_and_never_beats_standalone(sim):
    rows = [ln.split() for ln in (sim.root / "ns3/sim/fct.txt").read_text().splitlines()]
    sc = sim.sc
    assert len(rows) == len(sc)
    by_key = {(r["sip"], r["dip"], r["hpcc_sport"]): r for r in sc.records}
    for sip, dip, sport, dport, size, start, fct, standalone in rows:
        rec = by_key[(sip, dip, int(sport))]          # the sport the manifest predicts for HPCC
        assert len(sip) == 8 and int(dport) == 100 and int(size) == rec["bytes"]
        # only flows chained to something (transfer deps, or an op with dep ops) may move
        assert int(start) >= sc.t0_ns + rec["start_ns"] - 1 or rec["deps"] or \
            sc.ops[rec["op_id"]]["deps"]
        assert int(fct) >= int(standalone) > 0


def test_flows_start_when_their_dependencies_complete(sim):
    """Dependency-aware replay: a flow with deps starts at its last dep's simulated end (+ gap),
    not at its flow.txt time; a flow without starts at its op's simulated release, or at its
    flow.txt time when its op has no dep ops either."""
    sc, rows = sim.sc, sim.flows
    plan = replay_plan(sc, "zero")
    release = {int(r["op_id"]): int(r["release_ns"])
               for r in read_csv(sim.root / "ns3/sim/ops.csv")}
    start = np.array([int(r["start_ns"]) for r in rows])
    end = np.array([int(r["end_ns"]) for r in rows])
    preds = [[] for _ in range(len(sc))]
    for i in range(len(sc)):
        for j in plan.dependents[plan.dep_ptr[i]:plan.dep_ptr[i + 1]]:
            preds[j].append(i)
    chained = [k for k in range(len(sc)) if preds[k]]
    assert len(chained) > len(sc) // 3
    for k in range(len(sc)):
        if preds[k]:
            assert abs(start[k] - (max(end[j] for j in preds[k]) + plan.gap_ns[k])) <= 1, k
        elif plan.fixed_start_ns[k] >= 0:
            assert start[k] == sc.start_ns[k]
        else:
            assert start[k] == release[int(plan.op[k])] + plan.rel_off_ns[k], k
    # the chain really reacts to the simulation: starts drift from the analytic ones
    assert np.any(start[chained] != sc.sched_start_ns[chained])


def test_nonblocking_iteration_within_ten_percent_of_the_schedule(sim):
    s = sim.summary
    assert s["analytic_iteration_ns"] == int(sim.run.flows.rows["end_ns"][sim.run.flows.net].max())
    assert abs(s["sim_iteration_ns"] / s["analytic_iteration_ns"] - 1) <= 0.10, s


@pytest.mark.skipif(TSHARK is None, reason="tshark is not installed")
def test_ns3_pcap_decodes_as_rroce(sim):
    pcap = sim.root / "ns3/sim/pcap/host0000.pcap"
    fields = ["ip.src", "ip.dst", "ip.dsfield.ecn", "udp.dstport", "infiniband.bth.opcode",
              "infiniband.bth.destqp", "infiniband.bth.psn", "infiniband.bth.a", "vlan.priority",
              "_ws.malformed"]
    out = subprocess.run([TSHARK, "-r", str(pcap), "-T", "fields", "-E", "separator=,"]
                         + [x for f in fields for x in ("-e", f)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    pkts = [dict(zip(fields, ln.split(","))) for ln in out.stdout.splitlines()]
    assert len(pkts) > 100
    assert all(p["_ws.malformed"] == "" for p in pkts)
    assert all(p["udp.dstport"] == "4791" and p["infiniband.bth.opcode"] for p in pkts)
    sent = [p for p in pkts if p["ip.src"] == "11.0.0.1" and int(p["infiniband.bth.opcode"]) < 0x10]
    assert {int(p["infiniband.bth.opcode"]) for p in sent} <= {0x06, 0x07, 0x09, 0x0B}
    assert all(p["ip.dsfield.ecn"] == "2" for p in sent)          # ECT(0)
    assert all(p["vlan.priority"] == "3" for p in sent)               # RoCE data on PCP 3
    psns: dict[tuple, list[int]] = {}
    for p in sent:   # PSNs run per QP (destination host + its QPN), on across messages
        psns.setdefault((p["ip.dst"], p["infiniband.bth.destqp"]), []).append(
            int(p["infiniband.bth.psn"]))
        last = int(p["infiniband.bth.opcode"]) in (0x09, 0x0B)   # Last-Imm, Only-Imm
        assert (p["infiniband.bth.a"] in ("1", "True")) == last
    for (ip, qp), seq in psns.items():
        assert int(qp, 16) >= 0x100 and seq == list(range(len(seq))), (ip, qp)


# ---------------------------------------------------------------- the oversubscribed run

def test_oversubscribed_fabric_marks_ecn_ce(oversub):
    s = oversub.summary
    assert s["completed"] == s["flows"] and s["bytes_received"] == s["bytes_scheduled"]
    assert s["ce_packets"] > 0 and s["flows_with_ce"] > 0
    assert s["cnps_sent"] > 0
    # DCQCN cuts the senders' rates on every CNP: slower than the schedule's ideal max-min sharing
    assert s["sim_iteration_ns"] > 1.05 * s["analytic_iteration_ns"]
    assert s["fct_below_standalone"] == 0
    ce = [int(r["ce_pkts"]) for r in read_csv(oversub.root / "ns3/sim/flows.csv")]
    assert sum(ce) == s["ce_packets"]


def test_same_scenario_same_bytes(oversub):
    """RED's marking draws from fixed random streams: a rerun in the same process (automatic
    streams would have moved on) writes identical fct.txt and flows.csv."""
    from ns3_scenarios import run_scenario
    sim_dir = oversub.root / "ns3/sim"
    before = {f: (sim_dir / f).read_bytes() for f in ("fct.txt", "flows.csv")}
    run_scenario(oversub.root, gap="analytic", dcqcn=True)
    assert {f: (sim_dir / f).read_bytes() for f in before} == before


# ---------------------------------------------------------------- the op chain (PP+DP+TP)

@pytest.fixture(scope="module")
def chain(ns3_workdir, ns3_import_s):
    return run_chain(ns3_workdir.mk("chain"), CHAIN)


@pytest.fixture(scope="module")
def chain_oversub(ns3_workdir, ns3_import_s):
    return run_chain(ns3_workdir.mk("chain_oversub"), CHAIN_OVERSUBSCRIBED)


def run_chain(root: Path, spec: dict) -> SimpleNamespace:
    from ns3_scenarios import run_scenario
    run = make_trace(root, spec)
    summary = run_scenario(root, dcqcn=False)        # no rate control: what the schedule models
    return SimpleNamespace(root=root, run=run, summary=summary, sc=load_scenario(root),
                           flows=read_csv(root / "ns3/sim/flows.csv"),
                           ops=read_csv(root / "ns3/sim/ops.csv"))


def check_op_chain(c) -> None:
    """Every flow and op completes; each op is released exactly when its dep ops have completed
    in the simulation plus its gap; no flow starts before its op's release; an op ends after
    its flows (with flows) or its analytic duration after its release (without)."""
    s, ops, flows = c.summary, c.ops, c.flows
    assert s["completed"] == s["flows"] and s["bytes_received"] == s["bytes_scheduled"]
    assert s["ops_completed"] == s["ops"] == len(c.run.flows.ops) == len(ops)
    rel = np.array([int(o["release_ns"]) for o in ops])
    end = np.array([int(o["end_ns"]) for o in ops])
    assert np.all(rel >= 0) and np.all(end >= rel)
    for o in ops:
        i = int(o["op_id"])
        deps = [int(x) for x in o["deps"].split(";") if x]
        assert deps == c.run.flows.ops.deps[i].tolist()
        assert rel[i] == max((end[d] for d in deps), default=0) + int(o["gap_ns"]), o
        if int(o["lines"]) == 0:
            assert end[i] == rel[i] + int(o["sched_end_ns"]) - int(o["sched_start_ns"]), o
    by_op: dict[int, list[int]] = {}
    for f in flows:
        o, start = int(f["op_id"]), int(f["start_ns"])
        deps = c.run.flows.ops.deps[o].tolist()
        # the brief's invariant, from the simulation's own times
        assert start >= max((end[d] for d in deps), default=0) + int(ops[o]["gap_ns"]), f
        assert start >= rel[o]
        by_op.setdefault(o, []).append(int(f["end_ns"]))
    for o, ends in by_op.items():
        assert end[o] >= max(ends) and int(ops[o]["net"]) == 1
    # the chain runs through NVLink-only ops and markers, not just NET ones
    no_net = {int(o["op_id"]) for o in ops if o["net"] == "0"}
    assert {"TP", "NONE"} <= {ops[i]["dim"] for i in no_net}
    assert any(set(c.run.flows.ops.deps[int(f["op_id"])].tolist()) & no_net for f in flows)


def test_op_chain_nonblocking_tracks_the_schedule(chain):
    s = chain.summary
    check_op_chain(chain)
    assert {"DP", "PP", "TP"} <= {o["dim"] for o in chain.ops}
    assert s["analytic_ops_end_ns"] == int(chain.run.flows.op_end_ns.max())
    assert abs(s["sim_ops_end_ns"] / s["analytic_ops_end_ns"] - 1) <= 0.10, s
    assert abs(s["sim_iteration_ns"] / s["analytic_iteration_ns"] - 1) <= 0.10, s
    assert s["fct_below_standalone"] == 0
    # most flows hang off the op chain, not off a fixed flow.txt time
    plan = replay_plan(chain.sc)
    assert np.sum(plan.fixed_start_ns < 0) > 0.8 * len(chain.sc)


def test_op_chain_oversubscribed_carries_contention_forward(chain, chain_oversub):
    s = chain_oversub.summary
    check_op_chain(chain_oversub)
    assert s["ce_packets"] > 0 and s["flows_with_ce"] > 0
    assert abs(s["sim_ops_end_ns"] / s["analytic_ops_end_ns"] - 1) < 0.05, s
    assert s["fct_below_standalone"] == 0
    # PP crosses the 100G spine; the delay reaches ops that never touch it: TP ops (NVLink
    # only) and the DP AllReduce (under one leaf) are released later than in the non-blocking
    # run of the same job (both against the non-blocking schedule).
    nb_sched = {int(o["op_id"]): int(o["sched_start_ns"]) for o in chain.ops}
    late = {}
    for run in (chain, chain_oversub):
        for o in run.ops:
            late.setdefault((o["dim"], o["op_id"]), []).append(
                int(o["release_ns"]) - nb_sched[int(o["op_id"])])
    for dim in ("TP", "DP"):
        worst = max(v[1] for (d, _), v in late.items() if d == dim)
        assert worst > 10_000 and worst > 10 * max(abs(v[0]) for (d, _), v in late.items()
                                                   if d == dim), dim
    nb_flow = {int(f["line"]) if "line" in f else k: int(f["sched_start_ns"]) for k, f in enumerate(chain.flows)}
    dp_flows = [(k, f) for k, f in enumerate(chain_oversub.flows)
                if chain_oversub.ops[int(f["op_id"])]["dim"] == "DP"]
    assert dp_flows and all(int(f["start_ns"]) > nb_flow[int(f["line"]) if "line" in f else k]
                            for k, f in dp_flows)


# ---------------------------------------------------------------- compare

def test_compare_joins_every_flow_and_writes_the_plot(sim, tmp_path):
    j = join(sim.root)
    assert j.sport == "pair" and j.unmatched == 0 and j.missing == 0
    assert sorted(j.line.tolist()) == list(range(len(sim.sc)))    # one-to-one
    assert np.all(j.slowdown >= 1.0)
    sections = report_rows(j)
    assert sections[-1][0][0] == "all" and int(sections[-1][0][1].replace(",", "")) == len(sim.sc)
    kinds = {r[0] for r in sections[0]}
    assert {"DP AllReduce", "PP SendRecv"} <= kinds
    assert sections[1][0][0] == "iteration 0"            # iterations from the manifest's ops
    png = plot(j, tmp_path / "c.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def rewrite_fct(sim, tmp_path, key: str) -> Path:
    """sim/fct.txt with its ports renumbered as the manifest's `key` says (another build)."""
    to = {(r["sip"], r["dip"], r["hpcc_sport"]): r[key] for r in sim.sc.records}
    lines = []
    for ln in (sim.root / "ns3/sim/fct.txt").read_text().splitlines():
        t = ln.split()
        t[2] = str(to[(t[0], t[1], int(t[2]))])
        lines.append(" ".join(t))
    fct = tmp_path / f"fct_{key}.txt"
    fct.write_text("\n".join(lines) + "\n")
    return fct


def test_compare_joins_old_hpcc_per_host_numbering(sim, tmp_path):
    """HPCC before 2020-07 numbered per source host: the same rows join under `host`, refused
    under `auto` only if the per-pair numbering also fits every row."""
    fct = rewrite_fct(sim, tmp_path, "host_sport")
    j = join(sim.root, fct, "host")
    assert j.sport == "host" and j.unmatched == 0 and len(j.line) == len(sim.sc)
    assert j.ce_pkts is None                                # no flows.csv beside it
    ref = join(sim.root)
    assert np.array_equal(np.sort(j.line), np.sort(ref.line))
    try:
        auto = join(sim.root, fct)
    except ConfigError as e:
        assert "ambiguous" in str(e)
    else:
        assert auto.sport == "host"


def test_compare_refuses_an_ambiguous_join(tmp_path):
    """Host 0 sends to host 4, then twice to host 2 (equal sizes). A partial fct file (the run
    stopped early) with only the last flow, numbered per pair (0->2, 10001): per source host,
    10001 is the first flow to host 2 — both numberings fit every row, so auto refuses."""
    from test_ns3_export import make_flows
    from tracegen.config import Job
    from tracegen.fabric.topology import build_fabric
    job = Job()
    fabric = build_fabric(job)
    specs = [(0, NET_LINK, 0, dst, 1 << 16, 100 * k, []) for k, dst in enumerate((4, 2, 2))]
    write_ns3(make_flows(fabric, specs), fabric, job, tmp_path / "ns3")
    sc = load_scenario(tmp_path)
    assert [(r["dst_nic"], r["hpcc_sport"], r["host_sport"]) for r in sc.records] == [
        (4, 10000, 10000), (2, 10000, 10001), (2, 10001, 10002)]

    def fct_of(recs, key="hpcc_sport", size=None):
        path = tmp_path / f"fct{len(list(tmp_path.iterdir()))}.txt"
        path.write_text("".join(
            f"{r['sip']} {r['dip']} {r[key]} 100 {size or r['wire_bytes']} "
            f"{sc.t0_ns + r['start_ns']} 5000 4000\n" for r in recs))
        return path

    partial = fct_of(sc.records[2:])
    with pytest.raises(ConfigError, match="ambiguous"):
        join(tmp_path, partial)
    assert join(tmp_path, partial, "pair").line.tolist() == [2]
    assert join(tmp_path, partial, "host").line.tolist() == [1]   # as told: the other flow
    full = join(tmp_path, fct_of(sc.records))                     # unambiguous: one-to-one
    assert full.sport == "pair" and sorted(full.line.tolist()) == [0, 1, 2]
    assert join(tmp_path, fct_of(sc.records, "host_sport")).sport == "host"
    with pytest.raises(ConfigError, match="no source-port numbering"):
        join(tmp_path, fct_of(sc.records[:1], size=7))           # no flow of that size
    with pytest.raises(ConfigError, match="another size"):
        join(tmp_path, fct_of(sc.records[:1], size=7), "pair")


def test_cli_compare_prints_the_table(sim):
    res = CliRunner().invoke(main, ["ns3", "compare", str(sim.root)])
    assert res.exit_code == 0, res.output
    assert "DP AllReduce" in res.output and "compare.png" in res.output
    assert (sim.root / "ns3/sim/compare.png").is_file()
    # sim/ is a tracegen output folder (tracegen/output/folder.py): its manifest lists every file with
    # its size - the run's and the picture compare put into it - and nothing else is there
    d = sim.root / "ns3/sim"
    man = json.loads((d / ".tracegen-manifest.json").read_text())
    on_disk = {str(p.relative_to(d)): p.stat().st_size for p in d.rglob("*")
               if p.is_file() and p.name != ".tracegen-manifest.json"}
    assert man["files"] == on_disk
    assert {"fct.txt", "flows.csv", "ops.csv", "ports.csv", "summary.json", "compare.png"} <= set(on_disk)
    assert not [n for n in os.listdir(sim.root / "ns3") if n.startswith(".sim")]


# ---------------------------------------------------------------- no ns-3 needed

def test_cli_errors_are_one_line_and_exit_2(tmp_path):
    for args in (["ns3", "run", str(tmp_path)], ["ns3", "compare", str(tmp_path)]):
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 2
        assert res.output.count("\n") == 1 and res.output.startswith("error:")
    assert not (tmp_path / "sim").exists()


def test_replay_follows_ring_steps_through_nvlink(tmp_path):
    """tp=1: a DP ring alternates NVLink and NET hops, so a NET step's manifest deps are NVLink
    transfers; the manifest's local_transfers link it to the previous NET step, with the NVLink
    time as its gap."""
    make_trace(tmp_path, {"parallelism": {"dp": 4, "tp": 1, "pp": 1, "global_batch": 8}})
    sc = load_scenario(tmp_path)
    assert any(r["link"] == "NVLINK" for r in sc.local.values())
    plan = replay_plan(sc, "zero")
    chained = plan.n_deps > 0
    assert chained.sum() > len(sc) // 2
    assert np.all(plan.gap_ns[chained] > 0)                 # NVLink time between the NET steps
    assert np.all(plan.fixed_start_ns[chained] == -1)
    # the trace's flows.csv is not read: a bare ns3/ dir gives the same plan
    (tmp_path / "flows.csv").unlink()
    bare = replay_plan(load_scenario(tmp_path / "ns3"), "zero")
    for key in ("n_deps", "gap_ns", "fixed_start_ns", "dependents", "edge_gap_ns", "rel_off_ns",
                "post_ns", "op_tail_ns"):
        assert np.array_equal(getattr(bare, key), getattr(plan, key)), key


def test_config_maps_must_cover_every_link_rate(tmp_path):
    make_trace(tmp_path, OVERSUBSCRIBED)
    cfg = tmp_path / "ns3" / "config.txt"
    text = cfg.read_text()
    assert "100000000000" in text and "400000000000" in text
    cfg.write_text(re.sub(r"KMIN_MAP 2 100000000000 \d+ ", "KMIN_MAP 1 ", text))
    with pytest.raises(ConfigError, match="KMIN_MAP"):
        load_scenario(tmp_path)


def test_replay_plan_chains_every_op(tmp_path):
    """The plan holds every CommOp; ops without flow lines keep their analytic duration; only
    flows of dep-free ops without transfer deps keep a fixed start; gap="analytic" adds back
    exactly the schedule's wait between a flow being ready and starting."""
    run = make_trace(tmp_path, CHAIN)
    sc = load_scenario(tmp_path)
    plan = replay_plan(sc)
    ops = run.flows.ops
    assert len(sc.ops) == len(plan.op_gap_ns) == len(ops)
    assert np.array_equal(plan.op_gap_ns, ops.rows["gap_ns"])
    assert np.array_equal(plan.op_n_deps, ops.deps.lengths())
    assert np.array_equal(plan.op_start_ns, run.flows.op_start_ns)
    net = np.array([o["net"] for o in sc.ops])
    assert net.any() and (~net).any()
    span = run.flows.op_end_ns - run.flows.op_start_ns
    assert np.array_equal(plan.op_tail_ns[~net], span[~net])
    assert sorted(plan.op_lines.tolist()) == list(range(len(sc)))
    root = plan.op_n_deps[plan.op] == 0
    no_tdeps = np.array([not d for d in sc.deps])
    assert np.array_equal(plan.fixed_start_ns >= 0, root & no_tdeps)
    assert np.all(plan.extra_gap_ns == 0)
    ana = replay_plan(sc, "analytic")
    # the fluid schedule starts a transfer the moment its op is released and its data is there
    assert np.all(ana.extra_gap_ns == 0)
    pred_end: dict[int, int] = {}
    for j in range(len(sc)):
        for e in range(ana.dep_ptr[j], ana.dep_ptr[j + 1]):
            k = int(ana.dependents[e])
            pred_end[k] = max(pred_end.get(k, 0), int(sc.sched_end_ns[j] + ana.edge_gap_ns[e]))
    for k in np.flatnonzero(ana.extra_gap_ns > 0):
        ready = max(int(plan.op_start_ns[plan.op[k]] + plan.rel_off_ns[k]), pred_end.get(k, 0))
        assert ready + ana.extra_gap_ns[k] == sc.sched_start_ns[k]
    with pytest.raises(ConfigError, match="gap mode"):
        replay_plan(sc, "bogus")


def test_manifest_without_ops_fails_before_importing_ns3(tmp_path):
    """A tracegen-ns3/1 manifest has no op chain: say so at once (no 15 s ns-3 import)."""
    from ns3_scenarios import run_scenario
    make_trace(tmp_path, CHAIN)
    path = tmp_path / "ns3" / "manifest.json"
    man = json.loads(path.read_text())
    del man["ops"], man["local_transfers"]
    path.write_text(json.dumps(man))
    t = time.perf_counter()
    with pytest.raises(ConfigError, match="no ops"):
        run_scenario(tmp_path)
    assert time.perf_counter() - t < 5
    assert not (tmp_path / "ns3" / "sim").exists()


# The fabric issue's acceptance: the schedule against ns-3 on the same topology, with the same
# ECMP choices (the manifest pins every QP to the schedule's route) and the same NIC sharing
# (QPs round robin), without rate control (the schedule models none): iteration within 10 %.
# Measured: 2:1 0.994, 4:1 1.001, fat-tree 1.010, fat-tree with the qp hash 0.981 (sim / analytic).
FABRICS = {
    "leaf-spine 2:1": {"parallelism": {"dp": 8, "tp": 2, "pp": 2, "global_batch": 32}, "fabric": "leaf-spine-2to1"},
    "leaf-spine 4:1": {"parallelism": {"dp": 8, "tp": 2, "pp": 1, "global_batch": 32}, "fabric": "leaf-spine-4to1"},
    "fat-tree k=8": {"parallelism": {"dp": 16, "tp": 2, "pp": 2, "global_batch": 32}, "fabric": "fat-tree-k8"},
    "fat-tree k=8, qp hash": {"parallelism": {"dp": 16, "tp": 2, "pp": 2, "global_batch": 32},
                              "fabric": {"preset": "fat-tree-k8", "ecmp_hash": "qp"}},
}


@pytest.mark.parametrize("name", list(FABRICS))
def test_schedule_matches_ns3_on_oversubscribed_fabrics(name, ns3_workdir, ns3_import_s):
    from ns3_scenarios import run_scenario
    root = ns3_workdir.mk("fab-" + name.replace(" ", "-").replace(":", "to").replace("=", "").replace(",", ""))
    make_trace(root, FABRICS[name])
    s = run_scenario(root, dcqcn=False)
    assert s["completed"] == s["flows"]
    assert s["ce_packets"] > 0                           # the uplinks do congest
    ratio = s["sim_iteration_ns"] / s["analytic_iteration_ns"]
    print(f"{name}: sim / analytic {ratio:.3f}")
    assert abs(ratio - 1) <= 0.10, s["sim_iteration_ns"]


def test_acks_take_the_manifest_return_path(ns3_workdir, ns3_import_s):
    """A QP's ACKs follow its manifest `rpath` (tracegen's route of the reverse 5-tuple), its data
    its `path`: with every path moved to spine 0 and every rpath to spine 1, spine 1 sends down
    exactly one ACK per message and spine 0 exactly the data packets."""
    from ns3_scenarios import run_scenario
    root = ns3_workdir.mk("rpath")
    make_trace(root, {"parallelism": {"dp": 2, "tp": 1, "pp": 1, "global_batch": 2},
                      "cluster": {"gpus_per_node": 1, "nodes_per_leaf": 1, "spines": 2}})
    path = root / "ns3" / "manifest.json"
    man = json.loads(path.read_text())
    qps = man["qps"]
    assert qps and all(len(q["path"]) == 5 and q["rpath"] == [q["dst"], *q["rpath"][1:-1], q["src"]] for q in qps)
    spines = [4, 5]                                 # node ids: 2 hosts, 2 leaves, 2 spines
    assert {q["path"][2] for q in qps} | {q["rpath"][2] for q in qps} <= set(spines)
    for q in qps:
        q["path"][2], q["rpath"][2] = spines
    path.write_text(json.dumps(man))
    s = run_scenario(root, dcqcn=False)
    assert s["completed"] == s["flows"]
    sent = {sp: 0 for sp in spines}
    for p in read_csv(root / "ns3" / "sim" / "ports.csv"):
        if int(p["node"]) in spines:
            sent[int(p["node"])] += int(p["tx_pkts"])
    messages = len(man["flows"])                    # one ACK each (on its last packet)
    assert sent[spines[1]] == messages > 0, sent
    packets = sum(-(-int(f["bytes"]) // 4096) for f in man["flows"])   # PMTU 4096
    assert sent[spines[0]] == packets, sent
