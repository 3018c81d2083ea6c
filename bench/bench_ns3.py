"""How long does tracegen's ns-3 scenario take for 64 hosts? One generated job, simulated once.

Default job: tiny model, dp=16 tp=2 pp=2 on 32 nodes x 2 GPUs (64 NICs at 400G), 8 nodes per
leaf (8 rail leaves) and 8 spines: a non-blocking two-tier fabric. Prints the wall time split
into the ns-3 import, setup (first-time C++ JIT + wiring) and the event loop, next to the
simulated and analytic iteration times.

Run: python bench/bench_ns3.py [--dp 16] [--tp 2] [--pp 2] [--spines 8] [--nodes-per-leaf 8]
                               [--nic-gbps 400] [--gap zero|analytic] [--nic auto|fifo|rr]
                               [--no-dcqcn] [--dcqcn-state qp|message] [--dir DIR]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tracegen.config import job_from_dict  # noqa: E402
from tracegen.emit.tables.flows import write_flows_csv  # noqa: E402
from tracegen.emit.sims.ns3 import write_ns3  # noqa: E402
from tracegen.pipeline import run_pipeline  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dp", type=int, default=16)
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--pp", type=int, default=2)
    ap.add_argument("--nodes-per-leaf", type=int, default=8)
    ap.add_argument("--spines", type=int, default=8)
    ap.add_argument("--nic-gbps", type=int, default=400)
    ap.add_argument("--gap", choices=["zero", "analytic"], default="zero")
    ap.add_argument("--nic", choices=["auto", "fifo", "rr"], default="auto")
    ap.add_argument("--no-dcqcn", action="store_true")
    ap.add_argument("--dcqcn-state", choices=["qp", "message"], default=None,
                    help="DCQCN rate state per QP (default, ConnectX) or per message (HPCC, SimAI)")
    ap.add_argument("--dir", help="keep the trace here (default: a temp dir, removed)")
    a = ap.parse_args()

    spec = {"parallelism": {"dp": a.dp, "tp": a.tp, "pp": a.pp, "global_batch": 4 * a.dp},
            "cluster": {"nodes_per_leaf": a.nodes_per_leaf, "spines": a.spines,
                        "nic_gbps": a.nic_gbps}}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(a.dir or tmp)
        t = time.perf_counter()
        job = job_from_dict(spec, name="bench-ns3")
        run = run_pipeline(job)
        write_ns3(run.flows, run.fabric, job, root / "ns3")
        write_flows_csv(run.flows, root / "flows.csv")
        gen_s = time.perf_counter() - t

        from ns3_scenarios import run_scenario
        from ns3_scenarios.scenario import load_ns3
        t = time.perf_counter()
        load_ns3()
        import_s = time.perf_counter() - t
        s = run_scenario(root, gap=a.gap, nic=a.nic, dcqcn=False if a.no_dcqcn else None,
                         dcqcn_state=a.dcqcn_state)

    pkts = s["bytes_scheduled"] // 4096
    print(f"job      dp={a.dp} tp={a.tp} pp={a.pp}: {s['hosts']} hosts, {s['switches']} switches, "
          f"{s['flows']:,} flows, {s['bytes_scheduled'] / 1e6:,.1f} MB (~{pkts:,} packets), "
          f"{a.nic_gbps}G NICs (generated in {gen_s:.1f} s)")
    print(f"wall     {import_s + s['wall_s']:.1f} s = ns-3 import {import_s:.1f} s + setup/JIT "
          f"{s['setup_s']:.1f} s + event loop {s['run_s']:.1f} s + files "
          f"{s['wall_s'] - s['setup_s'] - s['run_s']:.1f} s")
    print(f"sim      iteration {s['sim_iteration_ns'] / 1e3:,.1f} µs simulated vs "
          f"{s['analytic_iteration_ns'] / 1e3:,.1f} µs analytic (x{s['sim_over_analytic']}); "
          f"{s['completed']}/{s['flows']} flows; NIC {s['options']['nic']}; DCQCN "
          f"{s['options']['dcqcn_state'] if s['options']['dcqcn'] else 'off'}; per flow "
          f"(end - first packet) / analytic p50 {s['flow_vs_schedule_p50']:.3f} "
          f"p99 {s['flow_vs_schedule_p99']:.3f}; slowdown p50 {s['slowdown_p50']:.2f} "
          f"p99 {s['slowdown_p99']:.2f}; {s['ce_packets']:,} CE-marked packets, "
          f"{s['pfc']['pause_frames']:,} PFC pauses")
    print(f"speed    {pkts / max(s['run_s'], 1e-9):,.0f} packets/s of event loop "
          f"(gap={a.gap})")


if __name__ == "__main__":
    main()
