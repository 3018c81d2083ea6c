"""Congestion artefacts for switch labs: ECN-CE marks on data packets and the CNPs they trigger.

  * Marks: a deterministic set of data packets, numbered globally in plan order (message by
    message, packet by packet), carries CE (ECN 0b11) in its *receiver's* copy - the switch marked
    it on the way; the sender's copy keeps ECT. `random`: packet g is marked when a seeded
    splitmix64 hash of g falls below fraction * 2^64; `periodic`: every 1/fraction-th packet.
  * CNPs (DCQCN notification point): the receiver NIC answers a CE-marked packet with a CNP to the
    sender's QP once it has fully arrived, at most one per QP per CNP_MIN_GAP_NS
    (mlx5 `min_time_between_cnps`, 4 us by default); marks inside that gap are absorbed.
    CNP frame: BTH opcode 0x81, BECN, P_Key, DestQP = sender's QP, PSN 0, 16 reserved zero bytes,
    ICRC; IP DSCP 48, PCP 6, TTL 64, UDP source port 0 (WIRE.md, ConnectX-4 Lx capture).
  * Reaction (output.dcqcn, off by default): open loop - the CNPs of the trace, as they reach the
    sender, drive DCQCN's rate decrease and recovery for the QP they name; each later message of
    that QP is paced at the rate DCQCN gives at its start (pacing.py), nothing closes the loop
    back to the marks.
Memory stays proportional to the marks, never to the packets.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from ...errors import ConfigError

CNP_DSCP = 48
CNP_PCP = 6
CNP_TTL = 64                 # made by the NIC, not by NCCL's QP: the ConnectX-4 Lx CNP of WIRE.md
CNP_MIN_GAP_NS = 4000
ECN_CE = 3
_CHUNK = 1 << 22     # packets hashed at a time (bounded memory)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def ce_marks(n_packets: int, fraction: float, pattern: str, seed: int) -> np.ndarray:
    """Sorted global indices (int64) of the CE-marked data packets among n_packets."""
    if fraction <= 0 or n_packets == 0:
        return np.zeros(0, np.int64)
    if pattern == "periodic":
        k = np.arange(1, int(n_packets * fraction) + 1, dtype=np.float64)
        g = np.ceil(k / fraction).astype(np.int64) - 1
        return np.unique(g[(g >= 0) & (g < n_packets)])
    threshold = np.uint64(min(int(fraction * 2.0**64), 2**64 - 1))
    salt = np.uint64((seed * 0xD1B54A32D192ED03) & (2**64 - 1))
    out = []
    with np.errstate(over="ignore"):
        for a in range(0, n_packets, _CHUNK):
            g = np.arange(a, min(a + _CHUNK, n_packets), dtype=np.uint64)
            out.append(g[_splitmix64(g ^ salt) < threshold].astype(np.int64))
    return np.concatenate(out)


def rate_limit(qp: np.ndarray, t_ns: np.ndarray, gap_ns: int = CNP_MIN_GAP_NS) -> np.ndarray:
    """Bool per candidate: kept when it comes gap_ns or more after the last kept one of its QP
    (greedy in time order, as the NIC's per-QP timer works)."""
    keep = np.zeros(len(qp), bool)
    order = np.lexsort((np.arange(len(qp)), t_ns, qp))
    last_qp, last_t = None, 0
    for i, q, t in zip(order.tolist(), qp[order].tolist(), t_ns[order].tolist()):
        if q != last_qp or t - last_t >= gap_ns:
            keep[i], last_qp, last_t = True, q, t
    return keep


def rate_limit_fast(qp: np.ndarray, t_ns: np.ndarray, gap_ns: int = CNP_MIN_GAP_NS) -> np.ndarray:
    """rate_limit's choice without a Python loop: per QP in time order, the kept candidates are
    the first and then, from each kept one, the first at least gap_ns later - a chain of next
    pointers, followed for all QPs at once by pointer doubling (log2(n) vector steps)."""
    n = len(qp)
    keep = np.zeros(n, bool)
    if not n:
        return keep
    order = np.lexsort((np.arange(n), t_ns, qp))
    q, t = np.asarray(qp)[order], np.asarray(t_ns, np.int64)[order]
    group_end = np.searchsorted(q, q, "right")
    # next[i]: the first of i's QP at or after t[i] + gap (n: none); searched per QP by offsetting
    # each QP's times above the previous QP's
    span = int(t.max() - t.min()) + gap_ns + 1
    key = (np.unique(q, return_inverse=True)[1].astype(np.int64)) * span + (t - t.min())
    nxt = np.searchsorted(key, key + gap_ns, "left")
    nxt = np.where(nxt < group_end, nxt, n)
    first = np.r_[True, q[1:] != q[:-1]]
    on = first.copy()                      # kept: reachable from a QP's first candidate
    jump = np.r_[nxt, n]
    reach = np.r_[on, False]
    while True:                            # mark every node on the chains from the firsts
        new = np.zeros(n + 1, bool)
        new[jump[np.flatnonzero(reach)]] = True
        new[n] = False
        grown = reach | new
        if (grown == reach).all():
            break
        reach = grown
        jump = jump[jump]
    keep[order] = reach[:n]
    return keep


# --- DCQCN reaction point, open loop ---------------------------------------------------------------

@dataclass(frozen=True)
class Dcqcn:
    """DCQCN reaction point parameters (Zhu et al., SIGCOMM 2015): those the ns-3 export writes
    into config.txt for network.cc_mode=dcqcn (the job's network.dcqcn_* keys; without a job
    HPCC's run.py: AI 5 x, HAI 50 x line/25 Mb/s, MIN_RATE 1 Gb/s, FAST_RECOVERY_TIMES 1) and
    `tracegen ns3 run`'s NIC applies (ns3_scenarios/dcqcn.h; its byte counter is not modelled here)."""
    line_bps: float
    g: float = 1 / 256                      # EWMA_GAIN
    alpha_interval_ns: int = 1_000          # ALPHA_RESUME_INTERVAL
    decrease_interval_ns: int = 4_000       # RATE_DECREASE_INTERVAL: at most one cut per interval
    increase_interval_ns: int = 300_000     # RP_TIMER
    ai_bps: float = 0.0                     # RATE_AI
    hai_bps: float = 0.0                    # RATE_HAI
    min_bps: float = 1e9                    # MIN_RATE
    fast_recovery: int = 1                  # FAST_RECOVERY_TIMES

    @staticmethod
    def for_job(network, nic_gbps: int) -> "Dcqcn":
        """From the job's network section (cc_mode must be dcqcn) and the NIC rate; a network
        key named like a field (dcqcn_g, dcqcn_ai_bps, ...) overrides its default."""
        if network is not None and getattr(network, "cc_mode", "dcqcn") != "dcqcn":
            raise ConfigError(f"output.dcqcn follows DCQCN's rate control; network.cc_mode is "
                              f"{network.cc_mode!r} - set network.cc_mode=dcqcn or output.dcqcn=false")
        values = dict(line_bps=nic_gbps * 1e9, ai_bps=5 * nic_gbps / 25 * 1e6, hai_bps=50 * nic_gbps / 25 * 1e6)
        for f in fields(Dcqcn):
            if network is not None and hasattr(network, "dcqcn_" + f.name):
                values[f.name] = getattr(network, "dcqcn_" + f.name)
        if network is not None:    # the keys the ns-3 export writes into config.txt (0: scaled)
            for name, key in (("ai_bps", "dcqcn_rate_ai_mbps"), ("hai_bps", "dcqcn_rate_hai_mbps"),
                              ("min_bps", "dcqcn_min_rate_mbps")):
                if getattr(network, key, 0):
                    values[name] = getattr(network, key) * 1e6
        return Dcqcn(**values)


def dcqcn_rates(cnp_ns, query_ns, d: Dcqcn) -> np.ndarray:
    """A QP's sending rate (bit/s) at each query time, given the times its CNPs arrived (both
    sorted): on a CNP alpha = (1 - g) alpha + g and, at most once per decrease interval, the
    target becomes the rate and the rate drops to rate (1 - alpha / 2) (not below min); alpha
    decays by (1 - g) per alpha interval; every RP_TIMER without a cut the rate moves halfway to
    the target, the target growing by AI after fast_recovery such steps (HAI after twice as many).
    Starts at line rate, alpha 1 - as roce_nic.h evaluates it lazily."""
    rate = target = d.line_bps
    alpha, last_alpha, last_inc, last_cut, steps = 1.0, 0, 0, None, 0
    if len(cnp_ns):
        last_alpha = last_inc = int(cnp_ns[0])

    def decay(now):
        nonlocal alpha, last_alpha
        periods = (now - last_alpha) // d.alpha_interval_ns
        if periods > 0:
            alpha *= (1 - d.g) ** periods
            last_alpha += periods * d.alpha_interval_ns

    def increase(now):
        nonlocal rate, target, last_inc, steps
        decay(now)
        while rate < d.line_bps and now - last_inc >= d.increase_interval_ns:
            last_inc += d.increase_interval_ns
            steps += 1
            if steps > d.fast_recovery:
                target = min(d.line_bps, target + (d.hai_bps if steps > 2 * d.fast_recovery else d.ai_bps))
            rate = min(d.line_bps, (rate + target) / 2)

    out = np.empty(len(query_ns))
    c, cnp = 0, [int(x) for x in cnp_ns]
    for i, q in enumerate(int(x) for x in query_ns):
        while c < len(cnp) and cnp[c] <= q:
            now = cnp[c]
            increase(now)
            alpha = (1 - d.g) * alpha + d.g
            if last_cut is None or now - last_cut >= d.decrease_interval_ns:
                last_cut, target = now, rate
                rate, steps, last_inc = max(d.min_bps, rate * (1 - alpha / 2)), 0, now
            c += 1
        increase(q)
        out[i] = rate
    return out
