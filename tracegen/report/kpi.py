"""The KPIs AI-fabric benchmarks report (IETF BMWG draft-calabria-bmwg-ai-fabric-training-bench),
computed the same way for the analytic schedule and for a simulation of it, side by side.

Pure functions over per-flow and per-port arrays: `tracegen ns3 run` (summary.json) and
`tracegen ns3 compare` (table, PNG) both call them. Definitions used here:
  JCT          last flow end after t0 (per iteration: its last end minus its first start);
               JCT ratio = simulated / analytic (the analytic schedule is the ideal fabric)
  busbw        per CommOp: op bytes / op time (first flow start to last flow end) x NCCL's bus
               factor (AllReduce 2(n-1)/n; ReduceScatter, AllGather, AllToAll (n-1)/n; others 1),
               as % of the NIC line rate; a group reports the median over its ops
  ECN share    CE-marked data packets / data packets
  PFC          PAUSE frames sent by switches and the time ports spent paused (sum over ports)
  ECMP imbalance  per leaf (a switch with hosts), over its ports to other switches:
               max / mean of the bytes they carried - 1; the worst leaf is reported
  Jain         per CommOp, (sum x)^2 / (n sum x^2) over its flows' throughputs (bytes / FCT);
               a group reports the mean over its ops with 2+ flows
  p99 FCT      99th percentile flow completion time
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BUS_FACTOR_N1 = {"AllReduce": lambda n: 2 * (n - 1) / n, "ReduceScatter": lambda n: (n - 1) / n,
                 "AllGather": lambda n: (n - 1) / n, "AllToAll": lambda n: (n - 1) / n}


def bus_factor(kind: str, n: int) -> float:
    f = BUS_FACTOR_N1.get(kind)
    return f(n) if f and n > 1 else 1.0


@dataclass(frozen=True)
class FlowSide:
    """One side (analytic or simulated) of every flow line; ns relative to t0."""
    start_ns: np.ndarray
    end_ns: np.ndarray


def jain(x: np.ndarray) -> float:
    x = np.asarray(x, dtype=float)
    s2 = float(np.sum(x * x))
    return float(np.sum(x) ** 2 / (len(x) * s2)) if len(x) and s2 > 0 else float("nan")


def op_kpis(op: np.ndarray, payload: np.ndarray, side: FlowSide, op_bytes: np.ndarray,
            op_ranks: np.ndarray, op_kind: list[str], line_gbps: float) -> dict[int, dict]:
    """Per CommOp with flow lines: time (first start to last end), busbw % of line rate, Jain."""
    out = {}
    order = np.argsort(op, kind="stable")
    bounds = np.flatnonzero(np.r_[True, op[order][1:] != op[order][:-1], True])
    for a, b in zip(bounds[:-1], bounds[1:]):
        idx = order[a:b]
        o = int(op[idx[0]])
        t = int(side.end_ns[idx].max() - side.start_ns[idx].min())
        busbw = (op_bytes[o] * 8 / t * bus_factor(op_kind[o], int(op_ranks[o])) / line_gbps * 100
                 if t > 0 else float("nan"))
        fct = (side.end_ns[idx] - side.start_ns[idx]).astype(float)
        thr = payload[idx] / np.maximum(fct, 1)
        out[o] = {"time_ns": t, "busbw_pct": busbw, "jain": jain(thr) if len(idx) > 1 else None}
    return out


def group_kpis(mask: np.ndarray, op: np.ndarray, ana: FlowSide, sim: FlowSide,
               ana_ops: dict, sim_ops: dict, ce: np.ndarray | None,
               packets: np.ndarray) -> dict:
    """The KPIs of the flows in `mask` (a collective, an iteration, or all), both sides."""
    ops = sorted(set(op[mask].tolist()))

    def side(s: FlowSide, per_op: dict) -> dict:
        jct = int(s.end_ns[mask].max() - s.start_ns[mask].min()) if mask.any() else 0
        fct = (s.end_ns[mask] - s.start_ns[mask]).astype(float)
        bus = [per_op[o]["busbw_pct"] for o in ops if o in per_op]
        jn = [per_op[o]["jain"] for o in ops if o in per_op and per_op[o]["jain"] is not None]
        return {"jct_ns": jct, "end_ns": int(s.end_ns[mask].max()) if mask.any() else 0,
                "busbw_pct": _r(np.nanmedian(bus)) if bus else None,
                "jain": _r(float(np.mean(jn))) if jn else None,
                "p99_fct_ns": _r(float(np.percentile(fct, 99))) if len(fct) else None}

    a, s = side(ana, ana_ops), side(sim, sim_ops)
    out = {"flows": int(mask.sum()), "ops": len(ops), "analytic": a, "simulated": s,
           "jct_ratio": _r(s["jct_ns"] / a["jct_ns"]) if a["jct_ns"] else None,
           "end_ratio": _r(s["end_ns"] / a["end_ns"]) if a["end_ns"] else None}
    if ce is not None:
        n = int(packets[mask].sum())
        out["ecn_marked_share"] = _r(int(ce[mask].sum()) / n) if n else 0.0
    return out


def ecmp_imbalance(link_bytes: dict[tuple[int, int], int], leaves: set[int],
                   switches: set[int]) -> float | None:
    """Worst leaf's max/mean - 1 over the bytes on its links to other switches."""
    worst = None
    for leaf in sorted(leaves):
        up = [v for (u, w), v in link_bytes.items() if u == leaf and w in switches]
        if len(up) < 2 or not sum(up):
            continue
        imb = max(up) / (sum(up) / len(up)) - 1
        worst = imb if worst is None else max(worst, imb)
    return _r(worst) if worst is not None else None


def pfc_totals(ports: list[dict]) -> dict:
    return {"pause_frames": int(sum(p["pause_sent"] for p in ports)),
            "resume_frames": int(sum(p["resume_sent"] for p in ports)),
            "paused_ports": int(sum(1 for p in ports if p["paused_ns"] > 0)),
            "paused_us_total": _r(sum(p["paused_ns"] for p in ports) / 1e3),
            "paused_us_max_port": _r(max((p["paused_ns"] for p in ports), default=0) / 1e3)}


def _r(x, nd: int = 6):
    if x is None:
        return None
    x = float(x)
    return None if np.isnan(x) else round(x, nd)
