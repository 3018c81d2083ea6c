"""Flow table -> scenario dir for the HPCC-derived ns-3 RDMA simulators.

One directory serves two readers:
  HPCC  (alibaba-edu/High-Precision-Congestion-Control, simulation/scratch/third.cc):
        config.txt, topology.txt, flow.txt, trace.txt
  SimAI (aliyun/ns-3-alibabacloud, branch dev/qp, scratch/NormalNetwork):
        config_simai.txt, topology_simai.txt, and the same flow.txt / trace.txt
plus manifest.json (flow.txt line -> flow row, and the (sip, dip, sport) each line gets in the
simulators' fct files; the CommOps with their dependencies and the NCCL connections (QPs) each
line rides, for tracegen's dependency-aware replay) and README.md (how to run both).

flow.txt sizes are the transfers' `wire_bytes`: what the NIC carries, LL/LL128 flags included
(the schedule times the same bytes); the manifest keeps the payload as `bytes` beside
`wire_bytes`.

Reader facts this module relies on (checked against the C++ sources):
- third.cc reads config.txt as a stream of whitespace tokens `KEY value...` with no comments; a
  token it does not know is skipped and its value is then read as the next key, so only keys from
  its list may appear. Maps are `n rate_bps value ...`; every switch port rate must be in
  KMAX_MAP/KMIN_MAP/PMAX_MAP (NS_ASSERT). Kmin/Kmax are KB (x1000), BUFFER_SIZE is MB (x2^20).
- flow.txt: `src dst pg dport size start_s`, size read into a uint32 (HPCC), flows injected in
  file order and scheduled relative to the previous one, so the file must be sorted by start.
- Host i gets IP 11.(i/256).(i%256).1 (so at most 65536 hosts). Source ports: both simulators
  count from 10000 per (source, destination) pair, as uint16: HPCC's third.cc since commit
  ffd4ff2 (2020-07-01, `portNumder[src][dst]++`, third.cc:137 on master) and SimAI's
  NormalNetwork (`portNumber[src][dst]++`). HPCC before that counted per source host
  (`host_sport`, kept for fct files of old builds).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from string import Template

import numpy as np

from ... import __version__
from ...config import Job
from ...errors import ConfigError, OutputError
from ...shipped import template_text
from ...tables import CollKind, Dim, Flows, LinkKind
from ...fabric.topology import Fabric
from ..packets.roce import udp_sport

T0_NS = 2_000_000_000          # simulators' convention: traffic starts at 2.0 s
MAX_FLOW_BYTES = 2**32 - 1     # HPCC reads the size into a uint32
PG = 3                         # RoCE data priority group (lossless queue 3)
DPORT = 100
SPORT_BASE = 10000
MAX_HOSTS = 65536              # 11.(i/256).(i%256).1 has 16 bits of host id
HPCC_MAX_SWITCH_PORTS = 256    # SwitchMmu::pCnt = 257, port 0 unused
HPCC_INT_GBPS = (25, 50, 100, 200, 400)   # IntHop::lineRateValues: rates HPCC's INT can encode

CC_MODES = {"dcqcn": 1, "hpcc": 3, "timely": 7, "dctcp": 8, "hpcc-pint": 10}

# File names, all relative to the scenario dir (the simulators run with it as cwd).
HPCC_FILES = dict(topology_file="topology.txt", flow_file="flow.txt", trace_file="trace.txt",
                  trace_output_file="mix.tr", fct_output_file="fct.txt",
                  pfc_output_file="pfc.txt", qlen_mon_file="qlen.txt")
# SimAI renames outputs by the config's id ("config_simai.txt" -> fct_simai.txt), so the base
# names can match HPCC's without clobbering them.
SIMAI_FILES = dict(topology_file="topology_simai.txt", flow_file="flow.txt",
                   trace_file="trace.txt", trace_output_file="mix.tr",
                   fct_output_file="fct.txt", pfc_output_file="pfc.txt",
                   send_output_file="send_simai.txt", qlen_mon_file="qlen.txt",
                   tx_bw_mon_file="txbw.txt", rx_bw_mon_file="rxbw.txt", bw_mon_file="bw.txt",
                   rate_mon_file="rate.txt", cnp_mon_file="cnp.txt")
SIMAI_FCT_FILE = "fct_simai.txt"

LINE_DTYPE = np.dtype([
    ("row", "i8"),          # index into flows.rows
    ("part", "i4"),         # which piece of a split transfer
    ("parts", "i4"),
    ("src", "i4"),          # host id = NIC index
    ("dst", "i4"),
    ("bytes", "i8"),        # payload carried by this line (a split transfer's payload is split too)
    ("wire_bytes", "i8"),   # flow.txt size: bytes on the wire, LL/LL128 flags included
    ("start_ns", "i8"),     # relative to t0
    ("hpcc_sport", "i4"),   # fct sport in HPCC (>= 2020-07) and SimAI: per (src, dst) pair
    ("host_sport", "i4"),   # fct sport in HPCC before 2020-07: per source host
    ("qp", "i8"),           # index into qp_table(): the NCCL connection (RC QP) carrying it
])
FIRST_QPN = 0x100           # as the pcap writer numbers QPs (QP 0/1 are SMI/GSI)
NIC_SHARING = ("serial", "fair")


def flow_lines(flows: Flows, fabric: Fabric) -> np.ndarray:
    """The flow.txt lines in file order (LINE_DTYPE): NET rows with wire bytes > 0, stably sorted
    by start, transfers over 2^32-1 wire bytes split into equal parts that start together (the
    payload split into as many equal parts)."""
    rows = flows.rows
    net = np.flatnonzero(flows.net & (rows["wire_bytes"] > 0))
    if (np.any(rows["bytes"][flows.net] < 0) or np.any(rows["wire_bytes"][flows.net] < 0)
            or np.any(rows["start_ns"][net] < 0)):
        raise OutputError("ns3: flow table has negative bytes or start_ns on NET rows")
    src, dst = rows["src_nic"][net], rows["dst_nic"][net]
    bad = (src < 0) | (src >= fabric.n_nics) | (dst < 0) | (dst >= fabric.n_nics) | (src == dst)
    if np.any(bad):
        i = int(net[np.argmax(bad)])
        raise OutputError(f"ns3: flow row {i} has NICs {int(rows['src_nic'][i])} -> "
                          f"{int(rows['dst_nic'][i])}, not two distinct NICs of the fabric")

    order = net[np.argsort(rows["start_ns"][net], kind="stable")]
    total = rows["wire_bytes"][order].astype(np.int64)
    parts = -(-total // MAX_FLOW_BYTES)
    out = np.zeros(int(parts.sum()), dtype=LINE_DTYPE)
    out["row"] = np.repeat(order, parts)
    out["parts"] = np.repeat(parts, parts)
    first = np.repeat(np.cumsum(parts) - parts, parts)
    out["part"] = np.arange(len(out)) - first
    # Equal pieces; the first (total % parts) get one byte more, so they sum to the total.
    for key, tot in (("wire_bytes", total), ("bytes", rows["bytes"][order].astype(np.int64))):
        b = np.repeat(tot, parts)
        out[key] = b // out["parts"] + (out["part"] < b % out["parts"])
    out["src"] = rows["src_nic"][out["row"]]
    out["dst"] = rows["dst_nic"][out["row"]]
    out["start_ns"] = rows["start_ns"][out["row"]]
    n = np.int64(fabric.n_nics)
    out["hpcc_sport"] = (SPORT_BASE + _occurrence(out["src"] * n + out["dst"])) % 65536
    out["host_sport"] = (SPORT_BASE + _occurrence(out["src"].astype(np.int64))) % 65536
    row_qp, _ = qp_table(flows, fabric)
    out["qp"] = row_qp[out["row"]]
    return out


QP_DTYPE = np.dtype([("src", "i4"), ("dst", "i4"), ("sqpn", "i8"), ("dqpn", "i8"),
                     ("sport", "i4")])


def qp_table(flows: Flows, fabric: Fabric) -> tuple[np.ndarray, np.ndarray]:
    """NCCL's connections over the fabric as the pcap writer numbers them: one per (src NIC, dst
    NIC, src rank, dst rank, communicator, channel), QPNs from 0x100 per NIC in that sorted order
    (the first QP of a connection when nccl.qps_per_connection > 1 is ignored here: one QP per
    connection), UDP source port from the QPN pair (mlx5). Returns (row -> qp index, -1 off the
    fabric; QP_DTYPE table).

    Routing seam: when the Fabric offers `qp_paths(src, dst, sport, sqpn, dqpn, reverse)` ->
    per QP simulator node ids (src host, switches..., dst host), e.g. the schedule's own ECMP
    choice, the manifest's qps records carry it as `path` (and the way back as `rpath`) and
    `tracegen ns3 run` routes each QP and its ACKs exactly that way; without it the scenario
    hashes the QP's 5-tuple itself."""
    rows = flows.rows
    net = np.flatnonzero(flows.net)
    row_qp = np.full(len(rows), -1, dtype=np.int64)
    if len(net) == 0:
        return row_qp, np.zeros(0, dtype=QP_DTYPE)
    ops = flows.ops.rows
    op = rows["op_id"][net].astype(np.int64)
    known = (op >= 0) & (op < len(ops))
    comm = np.zeros(len(net), np.int64)
    dim = ops["dim"][op[known]].astype(np.int64)
    comm[known] = np.where(dim == Dim.SP, Dim.TP, dim) + 1   # SP rides TP's communicator
    key = [rows[k][net].astype(np.int64) for k in ("src_nic", "dst_nic", "src_rank", "dst_rank")]
    key += [comm, rows["channel"][net].astype(np.int64)]
    order = np.lexsort(key[::-1])
    sk = [k[order] for k in key]
    new = np.ones(len(net), dtype=bool)
    new[1:] = np.any([k[1:] != k[:-1] for k in sk], axis=0)
    conn = np.cumsum(new) - 1
    row_qp[net[order]] = conn
    c_src, c_dst = sk[0][new], sk[1][new]
    ends = np.column_stack([c_src, c_dst]).ravel()
    qpn = FIRST_QPN + _occurrence(ends)
    table = np.zeros(len(c_src), dtype=QP_DTYPE)
    table["src"], table["dst"] = c_src, c_dst
    table["sqpn"], table["dqpn"] = qpn[0::2], qpn[1::2]
    table["sport"] = udp_sport(table["sqpn"], table["dqpn"])
    return row_qp, table


NO_FLOWS_NOTE = ("no transfer crosses a NIC (they all stay on NVLink): no ns-3 scenario is written "
                 "(ns-3 has nothing to simulate without flows)")


def write_ns3(flows: Flows, fabric: Fabric, job: Job, dest_dir: Path, *,
              trace_nodes=None, enable_trace: bool = True) -> list[Path]:
    """Write the scenario files into dest_dir (created if missing); returns the paths written.
    A job without NIC traffic (one node: NVLink only) has no scenario: nothing is written and
    the list is empty (the caller says NO_FLOWS_NOTE).

    trace_nodes: node ids listed in trace.txt (default: every NIC host)."""
    if fabric.n_nics > MAX_HOSTS:
        raise OutputError(f"ns3: {fabric.n_nics} NICs, but the simulators' 11.x.y.1 host "
                          f"addressing holds at most {MAX_HOSTS}")
    lines = flow_lines(flows, fabric)
    if len(lines) == 0:
        _config_values(flows, fabric, job, enable_trace)   # a bad cc_mode is still refused
        return []
    trace_nodes = range(fabric.n_nics) if trace_nodes is None else [int(x) for x in trace_nodes]
    values = _config_values(flows, fabric, job, enable_trace)   # checks cc_mode before any write
    warnings = _warnings(fabric, job)
    dest_dir = Path(dest_dir)
    dest_dir.mkdir(parents=True, exist_ok=True)

    files = {
        "topology.txt": _topology(fabric, simai_header=None),
        "flow.txt": _flow_txt(lines),
        "trace.txt": f"{len(trace_nodes)}\n" + "".join(f"{x}\n" for x in trace_nodes),
        "config.txt": _template("hpcc_config.txt").substitute(values, **HPCC_FILES),
        "topology_simai.txt": _topology(fabric, simai_header=_simai_header(fabric, job)),
        "config_simai.txt": _template("simai_config.txt").substitute(
            values, **SIMAI_FILES, fct_simai_file=SIMAI_FCT_FILE,
            pfc_enabled="true" if job.network.pfc else "false"),
        "manifest.json": _manifest(flows, fabric, job, lines, warnings),
        "README.md": _readme(fabric, job, lines, warnings),
    }
    return [_write_atomic(dest_dir / name, body) for name, body in files.items()]


# ---------------------------------------------------------------- file bodies

def _topology(fabric: Fabric, simai_header: str | None) -> str:
    n_nodes = fabric.n_nics + fabric.n_switches
    switches = " ".join(str(fabric.n_nics + i) for i in range(fabric.n_switches))
    header = simai_header or f"{n_nodes} {fabric.n_switches} {len(fabric.links)}"
    body = "".join(f"{a} {b} {g}Gbps {lat}ns 0.000000\n" for a, b, g, lat in
                   zip(*(fabric.links[k].tolist() for k in ("a", "b", "gbps", "latency_ns"))))
    return f"{header}\n{switches}\n{body}"


def _simai_header(fabric: Fabric, job: Job) -> str:
    # dev/qp: node_num gpus_per_server nvswitch_num switch_num link_num gpu_type ngpus_per_node.
    # No NVSwitch nodes: NVLink traffic is not in flow.txt, every host is a NIC on the fabric.
    gpu = "".join(job.cluster.gpu.split()).upper() or "GPU"
    gpn = fabric.gpus_per_node
    return (f"{fabric.n_nics + fabric.n_switches} {gpn} 0 {fabric.n_switches} "
            f"{len(fabric.links)} {gpu} {gpn}")


def _flow_txt(lines: np.ndarray):
    yield f"{len(lines)}\n"
    for part in _batches(lines):
        rows = zip(part["src"].tolist(), part["dst"].tolist(), part["wire_bytes"].tolist(),
                   part["start_ns"].tolist())
        yield "".join(f"{s} {d} {PG} {DPORT} {b} {_seconds(T0_NS + t)}\n" for s, d, b, t in rows)


def _config_values(flows: Flows, fabric: Fabric, job: Job, enable_trace: bool) -> dict:
    net = job.network
    mode = net.cc_mode.lower()
    if mode not in CC_MODES:
        raise ConfigError(f"network.cc_mode={net.cc_mode!r} is not one of {', '.join(CC_MODES)}")
    bw = fabric.nic_gbps
    rates = sorted(set(fabric.links["gbps"].tolist()))
    # Kmin/Kmax are given for a NIC-rate port and scale with port rate (HPCC's run.py does
    # the same); the simulators take them in KB.
    def kb(k_bytes: int, gbps: int) -> int:
        return (2 * k_bytes * gbps + bw * 1000) // (2 * bw * 1000)

    def rate_map(fn) -> str:
        return f"{len(rates)} " + " ".join(f"{g * 10**9} {fn(g)}" for g in rates)

    end_ns = int(flows.rows["end_ns"][flows.net].max()) if np.any(flows.net) else 0
    # Generous stop: the schedule is an estimate and the run ends early once events run out.
    stop_ns = T0_NS + -(-max(10**9, 10 * end_ns) // 10**6) * 10**6
    buffer_mb = min(4095, max(1, (net.buffer_bytes + (1 << 19)) >> 20))  # x2^20 must fit uint32
    return dict(
        _cc_values(mode, bw, net),
        cc_mode=CC_MODES[mode],
        payload_bytes=job.output.pmtu,
        stop_s=_seconds(stop_ns),
        enable_trace=int(bool(enable_trace)),
        kmax_map=rate_map(lambda g: kb(net.kmax_bytes, g)),
        kmin_map=rate_map(lambda g: kb(net.kmin_bytes, g)),
        pmax_map=rate_map(lambda g: f"{float(net.pmax):g}"),
        buffer_mb=buffer_mb,
        # HPCC samples queues every 100 ns: watch the scheduled span, at most 100 ms of it.
        qlen_mon_start_ns=T0_NS,
        qlen_mon_end_ns=T0_NS + min(end_ns, 100_000_000),
        mon_start_us=T0_NS // 1000,
        mon_end_us=stop_ns // 1000,
    )


def _rate(mbps: float) -> str:
    """A rate as HPCC's DataRate parser takes it, exact to the Kb/s."""
    kbps = round(mbps * 1000)
    return f"{kbps // 1000}Mb/s" if kbps % 1000 == 0 else f"{kbps}Kb/s"


def _num(x: float) -> str:
    return f"{x:.12g}"


def _cc_values(mode: str, bw_gbps: int, net) -> dict:
    """Per-algorithm NIC settings, as HPCC's simulation/run.py sets them for a `bw` Gb/s NIC;
    the DCQCN ones from the job's network section."""
    def mbps(num: int, den: int) -> str:           # num*bw/den Mb/s, exact
        kbps = num * bw_gbps * 1000 // den
        return f"{kbps // 1000}Mb/s" if kbps % 1000 == 0 else f"{kbps}Kb/s"

    v = dict(alpha_resume_interval=_num(net.dcqcn_alpha_resume_us),
             rate_decrease_interval=_num(net.dcqcn_rate_decrease_us),
             rp_timer=_num(net.dcqcn_rp_timer_us), ewma_gain=_num(net.dcqcn_g),
             fast_recovery_times=net.dcqcn_fast_recovery, min_rate=_rate(net.dcqcn_min_rate_mbps),
             dctcp_rate_ai="1000Mb/s", int_multi=1)
    if mode == "dcqcn":
        v.update(rate_ai=_rate(net.dcqcn_rate_ai_mbps) if net.dcqcn_rate_ai_mbps else mbps(5, 25),
                 rate_hai=(_rate(net.dcqcn_rate_hai_mbps) if net.dcqcn_rate_hai_mbps
                           else mbps(50, 25)),
                 has_win=0, var_win=0, fast_react=0, ack_high_prio=1)
    elif mode in ("hpcc", "hpcc-pint"):
        v.update(rate_ai=mbps(10, 25), rate_hai=mbps(10, 25), has_win=1, var_win=1,
                 fast_react=1, ack_high_prio=0, int_multi=max(1, bw_gbps // 25))
    elif mode == "dctcp":
        # 615 Mb/s: one MTU per 13 us RTT (run.py's note).
        v.update(rate_ai="10Mb/s", rate_hai="10Mb/s", dctcp_rate_ai="615Mb/s",
                 ewma_gain="0.0625", has_win=1, var_win=1, fast_react=0, ack_high_prio=0)
    else:  # timely
        v.update(rate_ai=mbps(10, 10), rate_hai=mbps(50, 10), has_win=0, var_win=0,
                 fast_react=0, ack_high_prio=1)
    return v


def _sim_settings(flows: Flows, fabric: Fabric, job: Job) -> dict:
    """What `tracegen ns3 run` needs beyond config.txt: how the schedule shares a NIC, and the
    PFC and CNP settings of the job's network section."""
    net = job.network
    sharing = getattr(flows, "nic_sharing", "serial")
    if sharing not in NIC_SHARING:
        raise OutputError(f"ns3: flow table's nic_sharing {sharing!r} is not one of {NIC_SHARING}")
    return {
        "nic_sharing": sharing,
        "nic_sharing_note": "how the schedule shares a NIC among its transfers: serial (one "
                            "after the other, in order of readiness) or fair (max-min fair "
                            "share of every link); the ns-3 NIC arbitrates the same way",
        "cnp_interval_ns": round(net.cnp_interval_us * 1000),
        "dcqcn": {"byte_reset_bytes": int(net.dcqcn_byte_reset_bytes),
                  "per_message_reset": bool(net.dcqcn_per_message_reset),
                  "note": "the reaction point's keys config.txt cannot carry: the byte counter "
                          "(rpg_byte_reset; 0: timer only, HPCC's model) and whether every "
                          "message starts at line rate (HPCC and SimAI: a QP per flow) instead "
                          "of keeping its QP's rate state"},
        "pfc": {"enabled": bool(net.pfc), "buffer_bytes": net.buffer_bytes,
                "xoff_bytes": net.pfc_xoff_bytes, "resume_offset_bytes": net.pfc_resume_offset_bytes,
                "headroom_bytes": net.pfc_headroom_bytes, "pause_quanta": net.pfc_pause_quanta},
    }


def _warnings(fabric: Fabric, job: Job) -> list[str]:
    out = []
    ends = np.concatenate([fabric.links["a"], fabric.links["b"]])
    ports = np.bincount(ends, minlength=fabric.n_nics + fabric.n_switches)[fabric.n_nics:]
    over = np.flatnonzero(ports > HPCC_MAX_SWITCH_PORTS)
    if len(over):
        out.append(f"{len(over)} switches have more than {HPCC_MAX_SWITCH_PORTS} ports (max "
                   f"{int(ports.max())}, e.g. node {fabric.n_nics + int(over[0])}); HPCC's "
                   "SwitchMmu holds 256 ports: rebuild with a larger pCnt")
    odd = sorted(set(fabric.links["gbps"].tolist()) - set(HPCC_INT_GBPS))
    if job.network.cc_mode.lower() in ("hpcc", "hpcc-pint") and odd:
        out.append(f"port rates {odd} Gb/s are not in HPCC's INT line-rate table "
                   f"{list(HPCC_INT_GBPS)} (IntHop::lineRateValues): HPCC's rate estimate on "
                   "those hops will be wrong")
    if not job.network.pfc:
        out.append("PFC is off: config.txt has no PFC key, run HPCC with "
                   "NS_ATTRIBUTE_DEFAULT='ns3::QbbNetDevice::QbbEnabled=false' (devices ignore "
                   "PAUSE; switches still send it); config_simai.txt sets "
                   "ns3::SwitchNode::PfcEnabled false")
    return out


def _manifest(flows: Flows, fabric: Fabric, job: Job, lines: np.ndarray, warnings: list[str]):
    """manifest.json in chunks: header, hosts, one flow record per flow.txt line, one op record
    per CommOp, then the transfers of NET ops that are not flow.txt lines (see _op_records)."""
    rows = flows.rows
    nic_rank = np.full(fabric.n_nics, -1, dtype=np.int64)
    nic_rank[fabric.rank_nic] = np.arange(fabric.world)
    hosts = [{"host": i, "rank": int(nic_rank[i]), "name": fabric.nic_name(i),
              "node": int(fabric.nic_node[i]), "rail": int(fabric.nic_rail[i]),
              "sim_ip": _sim_ip_hex(i), "nic_ip": fabric.nic_ip_str(i)}
             for i in range(fabric.n_nics)]
    zero = np.flatnonzero(flows.net & (rows["wire_bytes"] == 0))
    header = {
        "format": "tracegen-ns3/3",
        "job": job.name,
        "t0_ns": T0_NS,
        "flow_file": "flow.txt",
        "first_flow_line": 2,
        "note": "flows[k] is flow.txt line k+2; start in flow.txt = (t0_ns + start_ns) s*1e-9; "
                "flow.txt size = wire_bytes (payload + LL/LL128 flags), bytes = payload",
        "ops_note": "ops[i] is CommOp i: released gap_ns after its deps (op ids) complete; "
                    "op_start_ns/op_end_ns are the analytic release and completion; net: it has "
                    "flow.txt lines. local_transfers: the transfers of net ops that are not "
                    "flow.txt lines (NVLink, zero-byte NET), with analytic times and deps, so a "
                    "replay can follow flow deps through them",
        "cc_mode": job.network.cc_mode,
        "hpcc": {"config": "config.txt", "topology": "topology.txt", "fct": "fct.txt",
                 "sport": "hpcc_sport: 10000 + k-th flow of the (src, dst) pair, mod 65536 "
                          "(third.cc since 2020-07; before: host_sport, k-th flow of the "
                          "source host)"},
        "simai": {"config": "config_simai.txt", "topology": "topology_simai.txt",
                  "fct": SIMAI_FCT_FILE,
                  "sport": "hpcc_sport (SimAI numbers per (src, dst) pair, as HPCC)"},
        "sim": _sim_settings(flows, fabric, job),
        "qps_note": "qps[q]: one RC QP per NCCL connection (src/dst host, QPNs, UDP source "
                    "port on the wire); flows[k].qp names it. A qps record may carry `path`: "
                    "the node ids its packets cross (src host .. dst host), and `rpath`: the "
                    "node ids what its receiver returns (ACKs) crosses (dst host .. src host); "
                    "tracegen ns3 run routes them that way instead of by its own ECMP hash",
        "net_bytes": int(lines["bytes"].sum()),
        "net_wire_bytes": int(lines["wire_bytes"].sum()),
        "skipped_zero_byte_transfers": rows["transfer_id"][zero].tolist(),
        "warnings": warnings,
    }
    # Header indented; arrays one compact element per line (readable, diffable).
    yield json.dumps(header, indent=1)[:-2]
    yield ',\n "hosts": [\n' + ",\n".join("  " + json.dumps(h, separators=(",", ":"))
                                            for h in hosts) + "\n ]"
    yield ',\n "flows": ['
    ip = [_sim_ip_hex(i) for i in range(fabric.n_nics)]
    for lo, part in zip(range(0, len(lines), _BATCH), _batches(lines)):
        yield ("\n" if lo == 0 else ",\n") + ",\n".join(_flow_records(flows, part, lo, ip))
    yield "\n ]" if len(lines) else "]"
    op_recs, local_recs = _op_records(flows, lines)
    _, qps = qp_table(flows, fabric)
    qp_recs = [_QP_RECORD % r for r in zip(range(len(qps)), *(qps[k].tolist() for k in
                                                               QP_DTYPE.names))]
    paths_of = getattr(fabric, "qp_paths", None)   # the routing seam (see qp_table)
    if paths_of is not None and len(qps):
        for key, reverse in (("path", False), ("rpath", True)):
            paths = paths_of(qps["src"], qps["dst"], qps["sport"], qps["sqpn"], qps["dqpn"], reverse=reverse)
            qp_recs = [rec[:-1] + ',"%s":[%s]}' % (key, ",".join(map(str, p))) for rec, p in zip(qp_recs, paths)]
    for name, recs in (("ops", op_recs), ("local_transfers", local_recs), ("qps", qp_recs)):
        yield f',\n "{name}": [' + ("\n" + ",\n".join(recs) + "\n ]" if recs else "]")
    yield "\n}\n"


def _flow_records(flows: Flows, part: np.ndarray, first_index: int, ip: list[str]) -> list[str]:
    rows, ops, deps = flows.rows, flows.ops.rows, flows.deps
    sel = part["row"]
    op = rows["op_id"][sel]
    kind_label = {int(k): k.label for k in CollKind}
    dim_name = {int(d): d.name for d in Dim}
    cols = zip(range(first_index, first_index + len(part)), rows["transfer_id"][sel].tolist(),
               part["part"].tolist(), part["parts"].tolist(), op.tolist(),
               [kind_label[x] for x in ops["kind"][op].tolist()],
               [dim_name[x] for x in ops["dim"][op].tolist()],
               *(rows[k][sel].tolist() for k in ("step", "chunk", "channel", "src_rank",
                                                  "dst_rank")),
               part["src"].tolist(), part["dst"].tolist(), part["bytes"].tolist(),
               part["wire_bytes"].tolist(),
               rows["start_ns"][sel].tolist(), rows["end_ns"][sel].tolist(),
               part["hpcc_sport"].tolist(), part["host_sport"].tolist(), part["qp"].tolist(),
               deps.ptr[sel].tolist(), deps.ptr[sel + 1].tolist())
    dval = deps.values
    # A format string, not json.dumps per record: 5x faster at a million lines.
    return [_FLOW_RECORD % (k, tid, pt, pts, o, kind, dim, step, chunk, chan, sr, dr, src, dst,
                            nbytes, wbytes, start, end, ip[src], ip[dst], DPORT, hsp, hsp, osp,
                            qp, ",".join(map(str, dval[d0:d1].tolist())))
            for (k, tid, pt, pts, o, kind, dim, step, chunk, chan, sr, dr, src, dst, nbytes,
                 wbytes, start, end, hsp, osp, qp, d0, d1) in cols]


_FLOW_RECORD = (
    '{"index":%d,"transfer_id":%d,"part":%d,"parts":%d,"op_id":%d,"kind":"%s","dim":"%s",'
    '"step":%d,"chunk":%d,"channel":%d,"src_rank":%d,"dst_rank":%d,"src_nic":%d,"dst_nic":%d,'
    '"bytes":%d,"wire_bytes":%d,"start_ns":%d,"end_ns":%d,"sip":"%s","dip":"%s","dport":%d,'
    '"hpcc_sport":%d,"simai_sport":%d,"host_sport":%d,"qp":%d,"deps":[%s]}')
_QP_RECORD = '  {"qp":%d,"src":%d,"dst":%d,"sqpn":%d,"dqpn":%d,"sport":%d}'


def _op_times(flows: Flows) -> tuple[np.ndarray, np.ndarray]:
    """Analytic op release / completion: the schedule's, or (a hand-built table without them)
    the first transfer's start / the last transfer's end (0 for an op without transfers)."""
    n = len(flows.ops)
    if flows.op_start_ns is not None and flows.op_end_ns is not None:
        return (np.asarray(flows.op_start_ns, dtype=np.int64),
                np.asarray(flows.op_end_ns, dtype=np.int64))
    rows = flows.rows
    start = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    end = np.zeros(n, dtype=np.int64)
    np.minimum.at(start, rows["op_id"], rows["start_ns"])
    np.maximum.at(end, rows["op_id"], rows["end_ns"])
    start[start == np.iinfo(np.int64).max] = 0
    return start, np.maximum(start, end)


def _op_records(flows: Flows, lines: np.ndarray) -> tuple[list[str], list[str]]:
    """One record per CommOp (all of them: NVLink-only ops and markers keep the chain), and one
    per transfer of a net op that is not a flow.txt line."""
    ops, rows = flows.ops.rows, flows.rows
    n = len(ops)
    start, end = _op_times(flows)
    net = np.zeros(n, dtype=bool)
    net[rows["op_id"][lines["row"]]] = True
    kind_label = {int(k): k.label for k in CollKind}
    dim_name = {int(d): d.name for d in Dim}
    dptr, dval = flows.ops.deps.ptr.tolist(), flows.ops.deps.values.tolist()
    op_recs = [_OP_RECORD % (o, kind_label[k], dim_name[d], it,
                             ",".join(map(str, dval[dptr[o]:dptr[o + 1]])), gap, s, e,
                             "true" if nt else "false", nb, nr)
               for o, k, d, it, gap, s, e, nt, nb, nr in zip(
                   ops["op_id"].tolist(), ops["kind"].tolist(), ops["dim"].tolist(),
                   ops["iteration"].tolist(), ops["gap_ns"].tolist(), start.tolist(), end.tolist(),
                   net.tolist(), ops["bytes"].tolist(), flows.ops.groups.lengths().tolist())]
    in_file = np.zeros(len(rows), dtype=bool)
    in_file[lines["row"]] = True
    local = np.flatnonzero(net[rows["op_id"]] & ~in_file)
    link_name = {int(x): x.name for x in LinkKind}
    tptr, tval = flows.deps.ptr, flows.deps.values
    local_recs = [_LOCAL_RECORD % (t, o, link_name[lk], s, e,
                                   ",".join(map(str, tval[tptr[t]:tptr[t + 1]].tolist())))
                  for t, o, lk, s, e in zip(
                      local.tolist(), rows["op_id"][local].tolist(), rows["link"][local].tolist(),
                      rows["start_ns"][local].tolist(), rows["end_ns"][local].tolist())]
    return op_recs, local_recs


_OP_RECORD = ('  {"op_id":%d,"kind":"%s","dim":"%s","iteration":%d,"deps":[%s],"gap_ns":%d,'
              '"op_start_ns":%d,"op_end_ns":%d,"net":%s,"bytes":%d,"ranks":%d}')
_LOCAL_RECORD = ('  {"transfer_id":%d,"op_id":%d,"link":"%s","start_ns":%d,"end_ns":%d,'
                 '"deps":[%s]}')


def _readme(fabric: Fabric, job: Job, lines: np.ndarray, warnings: list[str]) -> str:
    pfc_off = not job.network.pfc
    return _template("ns3_readme.md").substitute(
        job_name=job.name, version=__version__, n_flows=len(lines),
        n_bytes=int(lines["wire_bytes"].sum()), n_hosts=fabric.n_nics,
        n_switches=fabric.n_switches, n_links=len(fabric.links),
        switch_ids=fabric.switch_ids_text(),   # per tier; says "no spines"
        hpcc_env="NS_ATTRIBUTE_DEFAULT='ns3::QbbNetDevice::QbbEnabled=false' " if pfc_off else "",
        hpcc_pfc_note=("\nPFC is off in this job. HPCC's config has no PFC key, so the command "
                       "sets the\nQbbNetDevice attribute QbbEnabled=false through ns-3's "
                       "NS_ATTRIBUTE_DEFAULT: devices\nignore PAUSE frames (switches still "
                       "send them).\n" if pfc_off else ""),
        warnings="".join(["\n## Warnings\n\n"] + [f"- {w}\n" for w in warnings])
        if warnings else "",
    )


# ---------------------------------------------------------------- helpers

def _occurrence(keys: np.ndarray) -> np.ndarray:
    """k for the k-th (0-based) appearance of each key, scanning in array order."""
    n = len(keys)
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    new = np.ones(n, dtype=bool)
    new[1:] = sk[1:] != sk[:-1]
    pos = np.arange(n)
    group_start = np.maximum.accumulate(np.where(new, pos, 0)) if n else pos
    occ = np.empty(n, dtype=np.int64)
    occ[order] = pos - group_start
    return occ


def _seconds(ns: int) -> str:
    """Exact "%.9f" of ns * 1e-9 (no float rounding)."""
    return f"{ns // 10**9}.{ns % 10**9:09d}"


def _sim_ip_hex(host: int) -> str:
    """Host IP as the simulators print it in fct.txt ("%08x")."""
    return f"{0x0B000001 + (host // 256) * 0x10000 + (host % 256) * 0x100:08x}"


def _template(name: str) -> Template:
    return Template(template_text(name))


_BATCH = 1 << 16


def _batches(lines: np.ndarray):
    for lo in range(0, len(lines), _BATCH):
        yield lines[lo:lo + _BATCH]


def _write_atomic(path: Path, body) -> Path:
    """Write a str or an iterable of str chunks to a temp name, then rename into place."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8", newline="\n") as f:
            for chunk in ([body] if isinstance(body, str) else body):
                f.write(chunk)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path
