"""`tracegen ns3 run`: simulate a scenario dir and write DIR/ns3/sim/ in one rename.

sim/fct.txt       HPCC's format: `sip dip sport dport size start_ns fct_ns standalone_fct_ns`,
                  hex IPs, sport = the manifest's hpcc_sport, start_ns absolute (t0 = 2 s).
                  fct = flow start (the NIC gets the work request) to the last byte delivered at
                  the destination — one way, like tracegen's schedule end_ns (HPCC waits for the
                  last ACK). standalone_fct = the same flow alone on its path, exactly.
sim/flows.csv     per flow.txt line: the same plus analytic start/end, ECN-CE packets, CNPs.
sim/ops.csv       per CommOp: simulated release/completion beside the analytic ones.
sim/summary.json  simulated vs analytic iteration time, wall times, totals.
sim/pcap/         with pcap=True: one ns-resolution pcap per host NIC (PPP link type).
"""
from __future__ import annotations

import csv
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from tracegen.errors import ConfigError, OutputError
from .inputs import Scenario, load_scenario, replay_plan


def run_scenario(path: str | Path, *, gap: str = "zero", dcqcn: bool = False,
                 pcap: bool = False, progress=None) -> dict:
    """Simulate the scenario under `path` (a trace dir or its ns3/); returns the summary."""
    t_wall = time.perf_counter()
    sc = load_scenario(path)
    plan = replay_plan(sc, gap)   # before the 15 s import: an old manifest fails fast
    say = progress or (lambda msg: None)
    say("loading ns-3 (about 15 s)")
    t0 = time.perf_counter()
    from .scenario import load_ns3, simulate
    try:
        load_ns3()
    except ImportError as e:
        raise ConfigError(f"ns-3 is not importable ({e}); "
                          "install it: pip install 'ns3>=3.44'") from None
    load_s = time.perf_counter() - t0
    target = sc.dir / "sim"
    tmp = _tmp_dir(sc.dir)
    try:
        say(f"simulating {len(sc)} flows on {sc.topology.n_hosts} hosts")
        res = simulate(sc, gap=gap, dcqcn=dcqcn, pcap_dir=tmp / "pcap" if pcap else None,
                       plan=plan)
        summary = _summary(sc, res, gap=gap, dcqcn=dcqcn, pcap=pcap, load_s=load_s,
                           wall_s=time.perf_counter() - t_wall)
        _write_fct(tmp / "fct.txt", sc, res)
        _write_flows_csv(tmp / "flows.csv", sc, res)
        _write_ops_csv(tmp / "ops.csv", sc, res)
        (tmp / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
        _swap_in(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    summary["dir"] = str(target)
    return summary


def _tmp_dir(parent: Path) -> Path:
    try:
        return Path(tempfile.mkdtemp(prefix=".sim.", dir=parent))
    except OSError as e:
        raise OutputError(f"cannot write into {parent}: {e.strerror}") from None


def _swap_in(tmp: Path, target: Path) -> None:
    os.chmod(tmp, 0o755)
    if target.exists():
        old = Path(tempfile.mkdtemp(prefix=".sim.old.", dir=target.parent))
        os.rename(target, old / "x")
        os.rename(tmp, target)
        shutil.rmtree(old)
    else:
        os.rename(tmp, target)


def _ns(ps: np.ndarray) -> np.ndarray:
    return ps // 1000


def _summary(sc: Scenario, res, **opts) -> dict:
    done = res.end_ps >= 0
    end_rel = np.where(done, _ns(res.end_ps) - sc.t0_ns, -1)
    fct = np.where(done, _ns(res.end_ps - res.start_ps), -1)
    sa = _ns(res.standalone_ps)
    sim_iter = int(end_rel.max()) if len(sc) else 0
    ana_iter = int(sc.sched_end_ns.max()) if len(sc) else 0
    slow = fct[done] / np.maximum(sa[done], 1)
    # Payload delivered: a line's payload in proportion to the wire bytes that arrived.
    payload = sc.payload_bytes if sc.payload_bytes is not None else sc.bytes
    got = np.where(res.rx_bytes >= sc.bytes, payload,
                   res.rx_bytes * payload // np.maximum(sc.bytes, 1))
    plan = res.plan
    op_end = np.where(res.op_end_ps >= 0, _ns(res.op_end_ps) - sc.t0_ns, -1)
    sim_ops = int(op_end.max()) if len(op_end) else 0
    ana_ops = int(plan.op_end_ns.max()) if len(op_end) else 0
    return {
        "flows": len(sc),
        "completed": int(res.completed),
        "hosts": int(sc.topology.n_hosts),
        "switches": int(len(sc.topology.switches)),
        "bytes_scheduled": int(payload.sum()),
        "bytes_received": int(got.sum()),
        "wire_bytes_scheduled": int(sc.bytes.sum()),
        "wire_bytes_received": int(res.rx_bytes.sum()),
        "ops": len(op_end),
        "ops_completed": int(res.ops_completed),
        "sim_iteration_ns": sim_iter,
        "analytic_iteration_ns": ana_iter,
        "sim_over_analytic": round(sim_iter / ana_iter, 6) if ana_iter else None,
        "sim_ops_end_ns": sim_ops,
        "analytic_ops_end_ns": ana_ops,
        "ops_sim_over_analytic": round(sim_ops / ana_ops, 6) if ana_ops else None,
        "slowdown_p50": _q(slow, 50), "slowdown_p99": _q(slow, 99),
        "slowdown_max": float(slow.max()) if len(slow) else None,
        "fct_below_standalone": int(np.sum(fct[done] < sa[done])),
        "ce_packets": int(res.ce_pkts.sum()),
        "flows_with_ce": int(np.sum(res.ce_pkts > 0)),
        "cnps_sent": int(res.cnps.sum()),
        "cnps_heeded": int(res.cnps_heeded.sum()),
        "psn_errors": int(res.psn_errors.sum()),
        "wall_s": round(opts.pop("wall_s"), 3),
        "ns3_import_s": round(opts.pop("load_s"), 3),
        "setup_s": round(res.setup_s, 3),
        "run_s": round(res.run_s, 3),
        "options": opts,
        "note": "iteration = last flow.txt flow's end minus t0 (NET flows only; the analytic "
                "value is the schedule's latest NET end_ns); ops_end = last CommOp's completion "
                "(markers, NVLink-only ops included; -1 if an op never completed)",
    }


def _q(x: np.ndarray, p: float):
    return float(np.percentile(x, p)) if len(x) else None


def _sim_ip(host: np.ndarray) -> list[str]:
    return [f"{0x0B000001 + (h // 256) * 0x10000 + (h % 256) * 0x100:08x}" for h in host.tolist()]


def _write_fct(path: Path, sc: Scenario, res) -> None:
    done = np.flatnonzero(res.end_ps >= 0)
    sip, dip = _sim_ip(sc.src[done]), _sim_ip(sc.dst[done])
    start = _ns(res.start_ps[done])
    fct = _ns(res.end_ps[done] - res.start_ps[done])
    sa = _ns(res.standalone_ps[done])
    with open(path, "w") as f:
        for row in zip(sip, dip, sc.hpcc_sport[done].tolist(), sc.bytes[done].tolist(),
                       start.tolist(), fct.tolist(), sa.tolist()):
            f.write("%s %s %d 100 %d %d %d %d\n" % row)


FLOW_COLUMNS = ["line", "sip", "dip", "sport", "bytes", "start_ns", "end_ns", "fct_ns",
                "standalone_fct_ns", "sched_start_ns", "sched_end_ns", "rx_bytes", "rx_pkts",
                "ce_pkts", "cnps_sent", "cnps_heeded", "deps", "gap_ns", "op_id",
                "payload_bytes"]


def _write_flows_csv(path: Path, sc: Scenario, res) -> None:
    """Times relative to t0 (like the manifest); -1 for a flow that never completed."""
    done = res.end_ps >= 0
    start = np.where(res.start_ps >= 0, _ns(res.start_ps) - sc.t0_ns, -1)
    end = np.where(done, _ns(res.end_ps) - sc.t0_ns, -1)
    fct = np.where(done, _ns(res.end_ps - res.start_ps), -1)
    cols = [np.arange(len(sc)).tolist(), _sim_ip(sc.src), _sim_ip(sc.dst), sc.hpcc_sport.tolist(),
            sc.bytes.tolist(), start.tolist(), end.tolist(), fct.tolist(),
            _ns(res.standalone_ps).tolist(), sc.sched_start_ns.tolist(), sc.sched_end_ns.tolist(),
            res.rx_bytes.tolist(), res.rx_pkts.tolist(), res.ce_pkts.tolist(), res.cnps.tolist(),
            res.cnps_heeded.tolist(), res.plan.n_deps.tolist(), res.plan.gap_ns.tolist(),
            res.plan.op.tolist(),
            (sc.payload_bytes if sc.payload_bytes is not None else sc.bytes).tolist()]
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(FLOW_COLUMNS)
        w.writerows(zip(*cols))


OP_COLUMNS = ["op_id", "kind", "dim", "iteration", "net", "deps", "gap_ns", "lines",
              "release_ns", "end_ns", "sched_start_ns", "sched_end_ns"]


def _write_ops_csv(path: Path, sc: Scenario, res) -> None:
    """Times relative to t0; -1 for an op never released / completed. deps: `;`-joined op ids."""
    plan = res.plan
    rel = np.where(res.op_release_ps >= 0, _ns(res.op_release_ps) - sc.t0_ns, -1)
    end = np.where(res.op_end_ps >= 0, _ns(res.op_end_ps) - sc.t0_ns, -1)
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(OP_COLUMNS)
        w.writerows(
            (o["op_id"], o["kind"], o["dim"], o.get("iteration", 0), int(bool(o["net"])),
             ";".join(map(str, d)), g, nl, r, e, s, t)
            for o, d, g, nl, r, e, s, t in zip(
                sc.ops, plan.op_deps, plan.op_gap_ns.tolist(), np.diff(plan.op_line_ptr).tolist(),
                rel.tolist(), end.tolist(), plan.op_start_ns.tolist(), plan.op_end_ns.tolist()))
