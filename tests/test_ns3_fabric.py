"""tracegen's ns-3 model as a fabric: NIC arbitration against the schedule, DCQCN per QP, PFC,
explicit routes, captures and the KPIs (issue 15).

The incast: 8 single-GPU nodes, 2 per leaf, 2 spines at 100G against 400G NICs (4:1 at the
leaf uplinks); the six hosts of leaves 1-3 each write 8 MiB to host 0 at once. Each variant is a
~2 s simulation once ns-3 is loaded. ns-3 tests skip only when the pip `ns3` package is absent
(see test_ns3_run.load_ns3_or_skip); simulation dirs have no "test" in their path.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from test_ns3_export import make_flows, make_ops
from test_ns3_run import load_ns3_or_skip, make_trace, read_csv
from tracegen.config import job_from_dict
from tracegen.emit.sims.ns3 import write_ns3
from tracegen.errors import ConfigError
from tracegen.tables import CollKind, Dim, LinkKind
from tracegen.fabric.topology import build_fabric

TSHARK = shutil.which("tshark")
ROOT = Path(__file__).resolve().parents[1]
INCAST_JOB = {"parallelism": {"dp": 8, "tp": 1, "pp": 1, "global_batch": 8},
              "cluster": {"gpus_per_node": 1, "nodes_per_leaf": 2, "spines": 2,
                          "leaf_spine_gbps": 100}}
INCAST_BYTES = 8 << 20
STATIC_XOFF = 300_000


@pytest.fixture(scope="module")
def workdir():
    d = Path(tempfile.mkdtemp(prefix="tg-fabric-"))
    assert "test" not in str(d)       # pip ns3 drops libraries from paths containing "test"
    yield d
    shutil.rmtree(d, ignore_errors=True)


def write_incast(root: Path, xoff: int = 0) -> Path:
    job = job_from_dict(INCAST_JOB, name="incast")
    fabric = build_fabric(job)
    specs = [(0, LinkKind.NET, s, 0, INCAST_BYTES, 0, []) for s in range(2, 8)]
    write_ns3(make_flows(fabric, specs, make_ops([(CollKind.ALLTOALL, Dim.EP)])), fabric, job,
              root / "ns3")
    if xoff:
        path = root / "ns3" / "manifest.json"
        man = json.loads(path.read_text())
        man["sim"]["pfc"]["xoff_bytes"] = xoff
        path.write_text(json.dumps(man))
    return root


def simulate(root: Path, **kw) -> SimpleNamespace:
    from ns3_scenarios import run_scenario
    s = run_scenario(root, **kw)
    sim = root / "ns3" / "sim"
    return SimpleNamespace(s=s, ports=read_csv(sim / "ports.csv"),
                           flows=read_csv(sim / "flows.csv"),
                           fct=[int(ln.split()[6]) for ln in (sim / "fct.txt").read_text().split("\n")
                                if ln])


@pytest.fixture(scope="module")
def incast(workdir):
    load_ns3_or_skip()
    root = write_incast(workdir / "incast")
    runs = {}
    for name, kw in {"dcqcn_pfc": dict(dcqcn=True), "pfc": dict(dcqcn=False),
                     "dcqcn": dict(dcqcn=True, pfc=False),
                     "none": dict(dcqcn=False, pfc=False)}.items():
        runs[name] = simulate(root, **kw)
    return SimpleNamespace(root=root, **runs)


# ---------------------------------------------------------------- DCQCN

def test_dcqcn_reacts_per_qp(incast):
    on, off = incast.dcqcn_pfc.s, incast.pfc.s
    assert on["completed"] == off["completed"] == 6
    assert on["options"]["dcqcn"] and not off["options"]["dcqcn"]
    # CNPs cut the rate of the QP that sent the marked packets, and the cuts shrink the queues
    assert on["cnps_heeded"] > 0 and on["dcqcn_rate_cuts"] > 0 and on["dcqcn_min_rate_gbps"] < 400
    assert off["dcqcn_rate_cuts"] == 0 and off["cnps_ignored"] > 0 and off["cnps_heeded"] == 0
    assert on["ce_packets"] < 0.95 * off["ce_packets"], (on["ce_packets"], off["ce_packets"])
    assert incast.dcqcn_pfc.fct != incast.pfc.fct
    # without PFC to cap them, DCQCN alone keeps the queues far lower
    assert incast.dcqcn.s["max_queue_bytes"] < 0.6 * incast.none.s["max_queue_bytes"]
    # rate state outlives a message: the same QP keeps its (cut) rate; sim/flows.csv names it
    assert {int(f["qp"]) for f in incast.dcqcn_pfc.flows} == set(range(6))


def test_dcqcn_follows_cc_mode_by_default(workdir):
    load_ns3_or_skip()
    from ns3_scenarios.inputs import load_scenario
    root = write_incast(workdir / "cc")
    assert load_scenario(root).config.cc_mode == 1           # network.cc_mode: dcqcn
    s = simulate(root).s
    assert s["options"]["dcqcn"] and s["dcqcn_rate_cuts"] > 0


# ---------------------------------------------------------------- PFC

def test_pfc_pauses_and_bounds_the_buffer(incast):
    pfc, none = incast.pfc.s, incast.none.s
    assert pfc["completed"] == 6 and pfc["drops"] == 0
    assert pfc["pfc"]["pause_frames"] > 0 and pfc["pfc"]["paused_us_total"] > 0
    assert pfc["max_switch_buffer_bytes"] <= 32 << 20
    paused = [p for p in incast.pfc.ports if int(p["paused_ns"]) > 0]
    assert paused and all(int(p["pauses_rx"]) > 0 for p in paused)
    # every PAUSE a switch sent named a port whose peer then stopped
    sent = {(int(p["node"]), int(p["peer"])) for p in incast.pfc.ports if int(p["pause_sent"])}
    stopped = {(int(p["peer"]), int(p["node"])) for p in paused}
    assert sent == stopped
    # PFC off: nothing pauses, the 48 MiB incast overflows the 32 MiB buffer; without
    # retransmission in the model, the flows that lost a packet never complete
    # (whether it overflows depends on how ECMP spreads the six QPs over the spines)
    assert none["pfc"]["pause_frames"] == 0
    assert none["drops"] == 0 or none["completed"] < 6
    assert none["max_switch_buffer_bytes"] > pfc["max_switch_buffer_bytes"]


def test_static_xoff_bounds_every_ingress_port(workdir):
    """With Xoff = 300 KB, what arrived on a port and is still buffered never exceeds Xoff plus
    the port's headroom (3 x the link's bandwidth-delay product) plus one frame in flight."""
    load_ns3_or_skip()
    root = write_incast(workdir / "xoff", xoff=STATIC_XOFF)
    run = simulate(root, dcqcn=False)
    assert run.s["completed"] == 6 and run.s["drops"] == 0 and run.s["pfc"]["pause_frames"] > 0
    for p in run.ports:
        if int(p["node"]) >= 8:
            bdp = float(p["gbps"]) * 1e9 * 1e-6 / 8         # 1 µs links
            assert int(p["max_ingress_bytes"]) <= STATIC_XOFF + 3 * bdp + 2 * 4200, p
    # hosts are paused by their leaf too
    assert any(int(p["node"]) < 8 and int(p["pauses_rx"]) > 0 for p in run.ports)


# ---------------------------------------------------------------- captures

@pytest.mark.skipif(TSHARK is None, reason="tshark is not installed")
def test_pcap_shows_pfc_frames_and_is_never_malformed(workdir):
    load_ns3_or_skip()
    root = write_incast(workdir / "pfc_pcap", xoff=STATIC_XOFF)
    run = simulate(root, dcqcn=False, pcap=True)
    pcap = root / "ns3/sim/pcap/host0002.pcap"
    out = subprocess.run([TSHARK, "-r", str(pcap), "-T", "fields", "-e", "eth.type",
                          "-e", "macc.opcode", "-e", "macc.cbfc.pause_time.c3",
                          "-e", "_ws.malformed"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    rows = [ln.split("\t") for ln in out.stdout.splitlines()]
    assert rows and all(r[3] == "" for r in rows)
    pfc = [r for r in rows if r[1] == "0x0101"]
    assert {r[2] for r in pfc} == {"65535", "0"}              # PAUSE and resume (quanta 0)
    host2 = next(p for p in run.ports if p["node"] == "2")
    assert len([r for r in pfc if r[2] == "65535"]) == int(host2["pauses_rx"])
    assert run.s["pcap_bytes"] == sum(f.stat().st_size for f in (root / "ns3/sim/pcap").iterdir())


def test_pcap_runs_are_byte_identical_and_quiet(workdir):
    """Two `--pcap` runs of the default job: the same bytes in every capture (zero payload,
    no uninitialised memory), and the CLI prints none of cling's JIT noise."""
    load_ns3_or_skip()
    root = workdir / "default_pcap"
    root.mkdir()
    make_trace(root, {})
    from ns3_scenarios import run_scenario
    run_scenario(root, pcap=True)
    first = {p.name: p.read_bytes() for p in sorted((root / "ns3/sim/pcap").iterdir())}
    proc = subprocess.run([sys.executable, "-m", "tracegen.cli", "ns3", "run", str(root),
                           "--pcap"], capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={**_env(), "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    assert "materialize" not in proc.stderr and "materialize" not in proc.stdout
    second = {p.name: p.read_bytes() for p in sorted((root / "ns3/sim/pcap").iterdir())}
    assert first == second and len(first) == 8
    data = first["host0000.pcap"]
    assert data[:4] == bytes.fromhex("4d3cb2a1") and int.from_bytes(data[20:24], "little") == 1
    if TSHARK:
        out = subprocess.run([TSHARK, "-r", str(root / "ns3/sim/pcap/host0000.pcap"), "-T",
                              "fields", "-e", "_ws.malformed", "-e", "infiniband.bth.opcode"],
                             capture_output=True, text=True, timeout=120)
        rows = [ln.split("\t") for ln in out.stdout.splitlines()]
        assert len(rows) > 100 and all(r[0] == "" and r[1] for r in rows)


def _env():
    import os
    return dict(os.environ)


def test_pcap_budget_refused_before_loading_ns3(tmp_path):
    from ns3_scenarios import run_scenario
    from ns3_scenarios.run import pcap_estimate
    from ns3_scenarios.inputs import load_scenario
    make_trace(tmp_path, {})
    sc = load_scenario(tmp_path)
    est = pcap_estimate(sc)
    payload = int(sc.bytes.sum())                          # wire bytes of every flow line
    assert 2 * 0.95 * payload < est < 2 * 1.2 * payload    # sent + received, headers and control
    with pytest.raises(ConfigError, match="budget"):
        run_scenario(tmp_path, pcap=True, max_bytes=est // 2)
    assert not (tmp_path / "ns3/sim").exists()


# ---------------------------------------------------------------- routing seam

def test_explicit_qp_paths_route_the_packets(workdir):
    """A manifest QP with `path` is routed hop by hop that way: all six incast QPs pinned to
    spine 13 leave spine 12 carrying no data, and the standalone FCTs use those hops."""
    load_ns3_or_skip()
    root = write_incast(workdir / "paths")
    path = root / "ns3" / "manifest.json"
    man = json.loads(path.read_text())
    for q in man["qps"]:
        src_leaf = 8 + q["src"] // 2
        q["path"] = [q["src"], src_leaf, 13, 8, q["dst"]]
    path.write_text(json.dumps(man))
    run = simulate(root, dcqcn=False)
    assert run.s["completed"] == 6
    by = {(int(p["node"]), int(p["peer"])): int(p["tx_bytes"]) for p in run.ports}
    assert by[(13, 8)] > 6 * INCAST_BYTES and by[(12, 8)] < 100_000    # ACK/CNP only via 12
    man["qps"][0]["path"] = [2, 9, 12, 13, 0]                           # not a path
    path.write_text(json.dumps(man))
    with pytest.raises(ConfigError, match="not a path"):
        from ns3_scenarios.inputs import load_scenario
        load_scenario(root)


# ---------------------------------------------------------------- the schedule, per flow

def test_default_job_flows_track_the_schedule(workdir):
    """Uncongested default job, NIC arbitration as the schedule shares a NIC (fair: packet round
    robin among QPs with work, each QP in order): median per-flow (end - first packet) / analytic
    duration within 5 %, iteration within 2 %. Flows sharing a NIC take longer than alone on the
    wire, in both."""
    load_ns3_or_skip()
    root = workdir / "default"
    root.mkdir()
    make_trace(root, {})
    s = simulate(root).s
    assert s["options"]["nic"] == "rr" and s["ce_packets"] == 0
    assert 0.95 <= s["flow_vs_schedule_p50"] <= 1.05 and s["slowdown_on_wire_p50"] > 1.05
    assert abs(s["sim_over_analytic"] - 1) <= 0.02, s["sim_over_analytic"]
    assert s["fct_below_standalone"] == 0 and s["psn_errors"] == 0
    k = s["kpis"]
    assert abs(k["all"]["jct_ratio"] - 1) <= 0.02
    assert {"DP AllReduce", "PP SendRecv", "EMB AllReduce"} <= set(k["collectives"])
    dp = k["collectives"]["DP AllReduce"]
    assert 50 < dp["analytic"]["busbw_pct"] <= 100 and abs(dp["simulated"]["busbw_pct"] /
                                                           dp["analytic"]["busbw_pct"] - 1) < 0.05
    assert k["all"]["ecn_marked_share"] == 0.0 and k["pfc"]["pause_frames"] == 0
    # serving one QP's messages after another instead (fifo) is not what the schedule assumes
    fifo = simulate(root, nic="fifo").s
    assert fifo["options"]["nic"] == "fifo" and fifo["flow_vs_schedule_p50"] != s["flow_vs_schedule_p50"]
