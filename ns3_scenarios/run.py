"""`tracegen ns3 run`: simulate a scenario dir and write DIR/ns3/sim/ (or -o) in one rename,
guarded as every output folder of tracegen (tracegen/output/folder.py).

sim/fct.txt       HPCC's format: `sip dip sport dport size start_ns fct_ns standalone_fct_ns`,
                  hex IPs, sport = the manifest's hpcc_sport (HPCC's and SimAI's per-pair flow
                  numbering, so rows join one-to-one with theirs; on the wire a packet carries
                  its QP's UDP port), start_ns absolute (t0 = 2 s) = when the message was posted
                  to its QP. fct = posting to the last byte delivered at the destination — one
                  way, like tracegen's schedule end_ns (HPCC waits for the last ACK).
                  standalone_fct = the same message alone on its path, exactly.
sim/flows.csv     per flow.txt line: the same plus the first packet's departure (tx_start_ns),
                  analytic start/end, ECN-CE packets, CNPs, the QP.
sim/ops.csv       per CommOp: simulated release/completion beside the analytic ones.
sim/ports.csv     per device port: bytes sent, CE marks, deepest data queue, drops, PFC PAUSE
                  frames sent out of it and the time it was paused.
sim/summary.json  simulated vs analytic iteration, per-flow ratios, the benchmark KPIs
                  (tracegen.report.kpi) per iteration and per collective, PFC, wall times.
sim/pcap/         with pcap=True: one ns-resolution Ethernet pcap per host NIC (capture.h),
                  within `max_bytes`.
"""
from __future__ import annotations

import csv
import json
import time
from pathlib import Path

import numpy as np

from tracegen.report import kpi
from tracegen.errors import ConfigError
from .inputs import Scenario, load_scenario, replay_plan

DEFAULT_MAX_PCAP_BYTES = 2 << 30   # as `tracegen generate --max-bytes`
DCQCN_STATES = ("qp", "message")
SIM_NAMES = ("fct.txt", "flows.csv", "ops.csv", "ports.csv", "summary.json", "pcap")
PCAP_RECORD_BYTES = 16
ETH_VLAN_BYTES = 18


def run_scenario(path: str | Path, *, gap: str = "zero", dcqcn: bool | None = None,
                 nic: str = "auto", pfc: bool | None = None, pcap: bool = False,
                 max_bytes: int = DEFAULT_MAX_PCAP_BYTES, progress=None,
                 dcqcn_state: str | None = None, out: str | Path | None = None,
                 force: bool = False) -> dict:
    """Simulate the scenario under `path` (a trace dir or its ns3/); returns the summary.
    dcqcn None: on when config.txt's CC_MODE is DCQCN (1); pfc None: as the manifest's network
    section; nic: auto (as the schedule shares a NIC), fifo or rr; max_bytes: pcap budget;
    dcqcn_state: qp (rate state lives as long as the QP) or message (every message starts at
    line rate, as HPCC and SimAI run it); None: the manifest's sim.dcqcn.per_message_reset.
    out: the folder to write (default ns3/sim/), written as every tracegen output is
    (tracegen/output/folder.py): refused before any work unless new or tracegen's own (force: beside a
    user's files, never over one), filled in a temp folder and swapped in by one rename, so an
    error or a signal leaves the earlier folder as it was."""
    from tracegen.output import folder as outdir, place
    t_wall = time.perf_counter()
    sc = load_scenario(path)
    if len(sc) == 0:
        raise ConfigError(f"{sc.dir}/flow.txt has no flows: nothing for ns-3 to simulate")
    plan = replay_plan(sc, gap)   # before the 15 s import: an old manifest fails fast
    from .scenario import arbitration_of
    arb = arbitration_of(sc, nic)
    if dcqcn is None:
        dcqcn = sc.config.cc_mode == 1
    if dcqcn_state not in (None, *DCQCN_STATES):
        raise ConfigError(f"--dcqcn-state {dcqcn_state!r}: use {' or '.join(DCQCN_STATES)}")
    from .scenario import dcqcn_extras
    byte_reset, per_message = dcqcn_extras(
        sc, None if dcqcn_state is None else dcqcn_state == "message")
    if pcap:
        _check_pcap_budget(sc, max_bytes)
    target, shown = (place.choose(str(out), "", "sim") if out is not None else
                     (sc.dir / "sim", str(sc.dir / "sim")))
    say = progress or (lambda msg: None)
    said: dict = {}

    def load():                     # under the output's lock, after its checks
        say("loading ns-3 (about 15 s)")
        t0 = time.perf_counter()
        from .scenario import load_ns3
        try:
            load_ns3()
        except ImportError as e:
            raise ConfigError(f"ns-3 is not importable ({e}); "
                              "install it: pip install 'ns3>=3.44'") from None
        said["load_s"] = time.perf_counter() - t0

    def fill(tmp: Path):            # the temp folder that becomes the output
        from .scenario import simulate
        state = "message" if per_message else "qp"
        say(f"simulating {len(sc)} flows on {sc.topology.n_hosts} hosts (NIC {arb}, DCQCN "
            f"{f'on, state per {state}' if dcqcn else 'off'})")
        res = simulate(sc, gap=gap, dcqcn=dcqcn, nic=arb, pfc=pfc,
                       pcap_dir=tmp / "pcap" if pcap else None, pcap_budget=max_bytes,
                       plan=plan, per_message=per_message, progress=progress is not None)
        summary = _summary(sc, res, gap=gap, dcqcn=bool(dcqcn), nic=arb, pfc=res.pfc, pcap=pcap,
                           dcqcn_state=state, dcqcn_byte_reset_bytes=byte_reset,
                           load_s=said["load_s"], wall_s=time.perf_counter() - t_wall)
        _write_fct(tmp / "fct.txt", sc, res)
        _write_flows_csv(tmp / "flows.csv", sc, res)
        _write_ops_csv(tmp / "ops.csv", sc, res)
        _write_ports_csv(tmp / "ports.csv", res)
        (tmp / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
        said["summary"] = summary

    w = outdir.write_folder(target, shown, fill, force=force, names=SIM_NAMES,
                            what="simulation", work=load)
    summary = said["summary"]
    summary["dir"] = str(target)
    summary["warnings"] = list(w.warnings)
    return summary


def pcap_estimate(sc: Scenario) -> int:
    """Bytes the host captures will hold: every data packet twice (sender's and receiver's
    file) and one ACK per message, with Ethernet + VLAN framing and pcap record headers. CNPs
    and PAUSE frames come on top (small)."""
    pmtu = sc.config.pmtu
    n = np.maximum(1, -(-sc.bytes // pmtu))
    pad = (-(sc.bytes - (n - 1) * pmtu)) % 4
    per_pkt = PCAP_RECORD_BYTES + ETH_VLAN_BYTES + 20 + 8 + 12 + 4
    data = n * per_pkt + sc.bytes + pad + 16 + 4          # + RETH, ImmDt per message
    ack = PCAP_RECORD_BYTES + ETH_VLAN_BYTES + 20 + 8 + 12 + 4 + 4
    return int(2 * (data.sum() + ack * len(sc)) + 24 * sc.topology.n_hosts)


def _check_pcap_budget(sc: Scenario, max_bytes: int) -> None:
    est = pcap_estimate(sc)
    if max_bytes and est > max_bytes:
        raise ConfigError(f"ns3 run --pcap: the host captures would hold about {_human(est)}, "
                          f"over the budget of {_human(max_bytes)}; raise --max-bytes "
                          "(0: no limit) or simulate without --pcap")


def _human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024


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
    on_wire = _ns(res.end_ps - res.tx_start_ps)
    slow_wire = on_wire[done] / np.maximum(sa[done], 1)
    ana_dur = np.maximum(sc.sched_end_ns - sc.sched_start_ns, 1)
    vs_sched = on_wire[done] / ana_dur[done]
    # Payload delivered: a line's payload in proportion to the wire bytes that arrived.
    payload = sc.payload_bytes if sc.payload_bytes is not None else sc.bytes
    got = np.where(res.rx_bytes >= sc.bytes, payload,
                   res.rx_bytes * payload // np.maximum(sc.bytes, 1))
    plan = res.plan
    op_end = np.where(res.op_end_ps >= 0, _ns(res.op_end_ps) - sc.t0_ns, -1)
    sim_ops = int(op_end.max()) if len(op_end) else 0
    ana_ops = int(plan.op_end_ns.max()) if len(op_end) else 0
    ports = res.ports
    sw_ports = [p for p in ports if p["node"] >= sc.topology.n_hosts]
    return {
        "flows": len(sc),
        "completed": int(res.completed),
        "hosts": int(sc.topology.n_hosts),
        "switches": int(len(sc.topology.switches)),
        "qps": int(len(sc.qp_src)),
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
        "flow_vs_schedule_p50": _q(vs_sched, 50), "flow_vs_schedule_p99": _q(vs_sched, 99),
        "slowdown_p50": _q(slow, 50), "slowdown_p99": _q(slow, 99),
        "slowdown_max": float(slow.max()) if len(slow) else None,
        "slowdown_on_wire_p50": _q(slow_wire, 50), "slowdown_on_wire_p99": _q(slow_wire, 99),
        "fct_below_standalone": int(np.sum(fct[done] < sa[done])),
        "ce_packets": int(res.ce_pkts.sum()),
        "flows_with_ce": int(np.sum(res.ce_pkts > 0)),
        "cnps_sent": int(res.cnps.sum()),
        "cnps_heeded": int(res.cnps_heeded.sum()),
        "cnps_ignored": int(res.cnps_ignored),
        "dcqcn_rate_cuts": int(res.rate_cuts),
        "dcqcn_min_rate_gbps": round(res.min_rate_bps / 1e9, 3) if res.min_rate_bps else None,
        "psn_errors": int(res.psn_errors.sum()),
        "pfc": kpi.pfc_totals(ports),
        "drops": int(sum(p["drops"] for p in ports)),
        "max_queue_bytes": int(max((p["max_queue_bytes"] for p in sw_ports), default=0)),
        "max_ingress_bytes": int(max((p["max_ingress_bytes"] for p in sw_ports), default=0)),
        "max_switch_buffer_bytes": int(max(res.switch_max_buffer_bytes, default=0)),
        "kpis": _kpis(sc, res),
        "pcap_bytes": int(res.pcap_bytes),
        "pcap_records_dropped": int(res.pcap_records_dropped),
        "wall_s": round(opts.pop("wall_s"), 3),
        "ns3_import_s": round(opts.pop("load_s"), 3),
        "setup_s": round(res.setup_s, 3),
        "run_s": round(res.run_s, 3),
        "options": opts,
        "note": "iteration = last flow.txt flow's end minus t0 (NET flows only; the analytic "
                "value is the schedule's latest NET end_ns); ops_end = last CommOp's completion "
                "(markers, NVLink-only ops included; -1 if an op never completed). "
                "flow_vs_schedule: per flow (end - first packet sent) / (analytic end - start); "
                "slowdown: HPCC's fct / standalone fct, fct from posting the message (NIC "
                "queueing included); slowdown_on_wire: from its first packet",
    }


def _kpis(sc: Scenario, res) -> dict:
    """tracegen.report.kpi per collective, per iteration and overall; ECMP imbalance; PFC."""
    done = res.end_ps >= 0
    # a flow's simulated start: its first packet on the wire (as the schedule's start_ns is
    # when it gets the NIC), not when it was posted (NIC queueing is not part of a flow's time)
    sim = kpi.FlowSide(np.where(done, _ns(res.tx_start_ps) - sc.t0_ns, 0),
                       np.where(done, _ns(res.end_ps) - sc.t0_ns, 0))
    ana = kpi.FlowSide(sc.sched_start_ns, sc.sched_end_ns)
    from tracegen.emit.sims.ns3_compare import kpis_for   # (tracegen.emit.sims.ns3_compare imports this package)
    return kpis_for(sc, ana, sim, sc.op_id, res.ce_pkts, res.rx_pkts, done,
                    link_bytes=_link_bytes_sim(res), link_bytes_ana=_link_bytes_ana(sc, res),
                    ports=res.ports)


def _link_bytes_sim(res) -> dict:
    return {(p["node"], p["peer"]): p["tx_bytes"] for p in res.ports}


def _link_bytes_ana(sc: Scenario, res) -> dict:
    """Wire bytes each link direction carries when every QP takes its path (analytic)."""
    per_qp = np.bincount(sc.qp, weights=sc.bytes, minlength=len(sc.qp_src))
    out: dict = {}
    for q, path in enumerate(res.qp_hops):
        for u, v in zip(path, path[1:]):
            out[(u, v)] = out.get((u, v), 0) + int(per_qp[q])
    return out


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
                "payload_bytes", "tx_start_ns", "qp"]


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
            (sc.payload_bytes if sc.payload_bytes is not None else sc.bytes).tolist(),
            np.where(res.tx_start_ps >= 0, _ns(res.tx_start_ps) - sc.t0_ns, -1).tolist(),
            sc.qp.tolist()]
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


PORT_COLUMNS = ["node", "iface", "peer", "gbps", "tx_bytes", "tx_pkts", "ce_marked",
                "max_queue_bytes", "max_ingress_bytes", "drops", "pause_sent", "resume_sent", "pauses_rx", "paused_ns"]


def _write_ports_csv(path: Path, res) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(PORT_COLUMNS)
        w.writerows([p[k] for k in PORT_COLUMNS] for p in res.ports)
