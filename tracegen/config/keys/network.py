"""The network section's keys: congestion control, ECN, PFC and DCQCN for the simulators and labs."""
from __future__ import annotations

from dataclasses import dataclass

from .declare import G, T, key

_KBPS = (0.001, "HPCC's config takes whole Kb/s")


@dataclass(frozen=True)
class NetworkKeys:
    """Settings for the simulators (ns-3 export, `tracegen ns3 run`) and switch labs."""
    cc_mode: str = key("dcqcn", "congestion control the simulators run",
                       choices=("dcqcn", "hpcc", "timely", "dctcp", "hpcc-pint"))
    kmin_bytes: int = key(150_000, "ECN marking starts", 0, 64 * G)
    kmax_bytes: int = key(1_500_000, "ECN marking at pmax", 1, 64 * G)
    pmax: float = key(0.2, "a probability", 0.0, 1.0)
    pfc: bool = key(True, "PFC on the RoCE priority")
    buffer_bytes: int = key(32 << 20, "switch buffer", 1, T)
    # DCQCN reaction point: NVIDIA ConnectX firmware defaults (DOCA "DCQCN CC Parameters";
    # mlxconfig RPG_* / DCE_TCP_* / RATE_REDUCE_MONITOR_PERIOD / MIN_TIME_BETWEEN_CNPS), see
    # ns3_scenarios/dcqcn.h and the README's ns-3 section
    dcqcn_rate_ai_mbps: float = key(5.0, "DCQCN additive increase (rpg_ai_rate); 0: 5 Mb/s per 25 Gb/s of NIC "
                                    "(HPCC's run.py)", 0.0, 1e6, zero_or=_KBPS)
    dcqcn_rate_hai_mbps: float = key(50.0, "DCQCN hyper increase (rpg_hai_rate); 0: 50 Mb/s per 25 Gb/s of NIC "
                                     "(HPCC's run.py)", 0.0, 1e6, zero_or=_KBPS)
    dcqcn_min_rate_mbps: float = key(1.0, "DCQCN rate floor (rpg_min_rate)", 0.001, 1e7)
    dcqcn_g: float = key(5 / 1024, "DCQCN alpha gain: 1 - dce_tcp_g / 1024, dce_tcp_g = 1019", 0.0, 1.0)
    dcqcn_alpha_resume_us: float = key(1.0, "alpha update period (dce_tcp_rtt)", 0.001, 1e6)
    dcqcn_rate_decrease_us: float = key(4.0, "at most one rate cut per period (rate_reduce_monitor_period)",
                                        0.001, 1e6)
    dcqcn_rp_timer_us: float = key(300.0, "rate increase period (rpg_time_reset)", 0.001, 1e6)
    dcqcn_byte_reset_bytes: int = key(32767, "bytes sent per rate increase (rpg_byte_reset); 0: timer only (HPCC)",
                                      0, G)
    dcqcn_fast_recovery: int = key(1, "fast-recovery periods before AI / HAI (rpg_threshold)", 0, 1000)
    dcqcn_per_message_reset: bool = key(False, "every message starts at line rate (HPCC, SimAI: a QP per flow)")
    cnp_interval_us: float = key(4.0, "<= 1 CNP per QP per interval (min_time_between_cnps)", 0.0, 1e6)
    # PFC on the RoCE priority, per switch ingress port
    pfc_xoff_bytes: int = key(0, "pause above; 0: dynamic (1/8 of the free buffer)", 0, T)
    pfc_resume_offset_bytes: int = key(3072, "resume at Xoff - offset", 0, G)
    pfc_headroom_bytes: int = key(0, "per port; 0: 3 x the link's bandwidth-delay", 0, G)
    pfc_pause_quanta: int = key(65535, "PAUSE time in 512-bit quanta", 1, 65535, count=False)
