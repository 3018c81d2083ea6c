"""config.txt and config_simai.txt: their file names, the congestion-control settings as HPCC's
run.py sets them for the job's NIC rate, the ECN/PFC maps per port rate, and the warnings a
scenario carries (switch ports, INT rates, PFC off)."""
from __future__ import annotations

import numpy as np

from ...config import Job
from ...errors import ConfigError
from ...tables import Flows
from ...fabric.topology import Fabric
from .ns3_lines import T0_NS, seconds

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


def config_values(flows: Flows, fabric: Fabric, job: Job, enable_trace: bool) -> dict:
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
        stop_s=seconds(stop_ns),
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


def scenario_warnings(fabric: Fabric, job: Job) -> list[str]:
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
