"""Read a scenario dir written by tracegen.emit.ns3 into flat arrays for the ns-3 program.

The program reads the same files the HPCC simulators read (topology.txt, flow.txt, config.txt)
plus manifest.json for what they cannot express: each flow line's dependencies and the UDP
source port HPCC will print for it. Pure Python: no ns-3 import here, so it is testable alone.

Dependency-aware replay (what `replay_plan` derives):
  - a flow's predecessors are the flow.txt lines of the transfers in its manifest `deps`. A dep
    that is an NVLink transfer (not in flow.txt) is looked up in the trace dir's flows.csv, when
    there is one, and replaced by its own deps, recursively: NET step k of a ring that crosses a
    node waits for NET step k-2 plus the NVLink step between them.
  - a flow with predecessors starts when the last of them has completed in the simulation, plus a
    gap. gap="zero" (the default): only the NVLink time on the chain. The manifest's deps are
    steps of one collective (ring step k needs step k-1) and NCCL computes nothing between them.
    gap="analytic": the analytic start minus the analytic end of the latest predecessor, floored
    at 0. That gap is time the analytic schedule spent waiting for a busy NIC (it sends one
    transfer at a time per NIC), so it keeps the schedule's per-NIC order, but where the
    simulation runs late the NIC sharing is counted twice: once as the kept gap, once as
    contention among the flows that now overlap.
  - a flow with no predecessors (the first step of a collective, a p2p chunk, or a chain of
    NVLink deps without flows.csv) starts at its flow.txt time: the manifest carries no op-level
    dependencies (op -> op plus compute gap) to chain it to the previous collective.
"""
from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ConfigError

_RATE = re.compile(r"^(\d+(?:\.\d+)?)(G|M|K)?bps$", re.I)
_DELAY = re.compile(r"^(\d+(?:\.\d+)?)(ns|us|ms|s)$")
_RATE_SCALE = {"G": 10**9, "M": 10**6, "K": 10**3, None: 1}
_DELAY_PS = {"ns": 10**3, "us": 10**6, "ms": 10**9, "s": 10**12}


@dataclass(frozen=True)
class Topology:
    n_nodes: int
    switches: np.ndarray   # node ids
    a: np.ndarray          # per link: end node ids
    b: np.ndarray
    bps: np.ndarray        # int64 bit/s
    delay_ps: np.ndarray   # int64

    @property
    def n_hosts(self) -> int:
        return self.n_nodes - len(self.switches)


@dataclass(frozen=True)
class Config:
    """The config.txt keys the mainline-ns-3 program uses."""
    pmtu: int
    kmin_bytes: dict[int, int]   # per link rate (bit/s)
    kmax_bytes: dict[int, int]
    pmax: dict[int, float]
    cc_mode: int
    ewma_gain: float
    rate_ai_bps: float
    rate_hai_bps: float
    min_rate_bps: float
    rp_timer_us: float
    alpha_resume_interval_us: float
    rate_decrease_interval_us: float
    fast_recovery_times: int


@dataclass(frozen=True)
class Scenario:
    dir: Path
    topology: Topology
    config: Config
    t0_ns: int
    # per flow.txt line
    src: np.ndarray
    dst: np.ndarray
    bytes: np.ndarray
    start_ns: np.ndarray        # flow.txt start - t0 (integer ns)
    hpcc_sport: np.ndarray
    transfer_id: np.ndarray
    sched_start_ns: np.ndarray  # analytic schedule (manifest)
    sched_end_ns: np.ndarray
    deps: list[list[int]]       # transfer ids
    records: list[dict]         # manifest flow records, for reports
    nvlink: dict | None         # from flows.csv: NVLink transfer id -> (start_ns, end_ns, deps)
    iteration: dict | None      # from flows.csv: transfer id -> iteration

    def __len__(self) -> int:
        return len(self.src)


def scenario_dir(path: str | Path) -> Path:
    """DIR or DIR/ns3: the folder holding manifest.json."""
    p = Path(path)
    for d in (p, p / "ns3"):
        if (d / "manifest.json").is_file():
            return d
    raise ConfigError(f"{path}: no manifest.json here or in ns3/ — give a folder written by "
                      "`tracegen generate`")


def load_scenario(path: str | Path) -> Scenario:
    d = scenario_dir(path)
    for name in ("topology.txt", "flow.txt", "config.txt"):
        if not (d / name).is_file():
            raise ConfigError(f"{d}: {name} is missing; regenerate the scenario")
    try:
        man = json.loads((d / "manifest.json").read_text("utf-8"))
    except (OSError, ValueError) as e:
        raise ConfigError(f"{d / 'manifest.json'}: not readable JSON ({e})") from None
    topo = read_topology(d / "topology.txt")
    cfg = read_config(d / "config.txt", set(topo.bps.tolist()))
    t0 = int(man.get("t0_ns", 0))
    src, dst, nbytes, start = read_flows(d / "flow.txt", t0)
    recs = man.get("flows", [])
    if len(recs) != len(src):
        raise ConfigError(f"{d}: flow.txt has {len(src)} flows but manifest.json {len(recs)}; "
                          "they were not written together — regenerate")

    def col(key):
        return np.array([r[key] for r in recs], dtype=np.int64)

    if len(recs) and (np.any(col("src_nic") != src) or np.any(col("dst_nic") != dst)
                      or np.any(col("bytes") != nbytes)):
        raise ConfigError(f"{d}: flow.txt and manifest.json disagree on src/dst/bytes — "
                          "regenerate")
    if len(src) and (src.max() >= topo.n_hosts or dst.max() >= topo.n_hosts):
        raise ConfigError(f"{d}: flow.txt names a host id >= {topo.n_hosts} hosts in topology.txt")
    return Scenario(d, topo, cfg, t0, src, dst, nbytes, start,
                    col("hpcc_sport") if recs else np.zeros(0, np.int64),
                    col("transfer_id") if recs else np.zeros(0, np.int64),
                    col("start_ns") if recs else np.zeros(0, np.int64),
                    col("end_ns") if recs else np.zeros(0, np.int64),
                    [list(r.get("deps", [])) for r in recs], recs,
                    *read_trace_flows(d.parent / "flows.csv"))


def read_trace_flows(path: Path):
    """NVLink transfers and every transfer's iteration from `tracegen generate`'s flows.csv."""
    if not path.is_file():
        return None, None
    nvlink, iteration = {}, {}
    try:
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                t = int(row["transfer_id"])
                iteration[t] = int(row["iteration"])
                if row["link"] == "NVLINK":
                    deps = [int(x) for x in row["deps"].split(";") if x]
                    nvlink[t] = (int(row["start_ns"]), int(row["end_ns"]), deps)
    except (OSError, KeyError, ValueError) as e:
        raise ConfigError(f"{path}: cannot read the transfer table ({e})") from None
    return nvlink, iteration


def read_topology(path: Path) -> Topology:
    tok = path.read_text().split()
    try:
        n_nodes, n_sw, n_links = int(tok[0]), int(tok[1]), int(tok[2])
        sw = np.array([int(x) for x in tok[3:3 + n_sw]], dtype=np.int64)
        body = tok[3 + n_sw:]
        if len(body) < 5 * n_links:
            raise ValueError("fewer link lines than the header says")
        a, b, bps, dly = [], [], [], []
        for i in range(n_links):
            x, y, rate, delay = body[5 * i:5 * i + 4]
            a.append(int(x))
            b.append(int(y))
            bps.append(_parse_rate(rate))
            dly.append(_parse_delay(delay))
    except (ValueError, IndexError) as e:
        raise ConfigError(f"{path}: not an HPCC topology file ({e})") from None
    n_hosts = n_nodes - n_sw
    if len(sw) and sw.min() < n_hosts:
        raise ConfigError(f"{path}: switch ids must follow the {n_hosts} host ids")
    return Topology(n_nodes, sw, np.array(a), np.array(b), np.array(bps, dtype=np.int64),
                    np.array(dly, dtype=np.int64))


def read_flows(path: Path, t0_ns: int):
    lines = path.read_text().split("\n")
    try:
        n = int(lines[0])
        rows = [ln.split() for ln in lines[1:1 + n]]
        src = np.array([int(r[0]) for r in rows], dtype=np.int64)
        dst = np.array([int(r[1]) for r in rows], dtype=np.int64)
        nbytes = np.array([int(r[4]) for r in rows], dtype=np.int64)
        start = np.array([_seconds_to_ns(r[5]) for r in rows], dtype=np.int64) - t0_ns
    except (ValueError, IndexError) as e:
        raise ConfigError(f"{path}: not an HPCC flow file ({e})") from None
    if len(rows) != n:
        raise ConfigError(f"{path}: header says {n} flows, found {len(rows)}")
    return src, dst, nbytes, start


def read_config(path: Path, rates: set[int]) -> Config:
    tok = path.read_text().split()
    kv: dict[str, list[str]] = {}
    maps = {"KMAX_MAP", "KMIN_MAP", "PMAX_MAP"}
    i = 0
    while i < len(tok):
        key = tok[i]
        if key in maps:
            n = int(tok[i + 1])
            kv[key] = tok[i + 2:i + 2 + 2 * n]
            i += 2 + 2 * n
        elif key == "LINK_DOWN":
            kv[key] = tok[i + 1:i + 4]
            i += 4
        else:
            kv[key] = tok[i + 1:i + 2]
            i += 2

    def rate_map(key, conv):
        vals = kv.get(key, [])
        m = {int(vals[j]): conv(vals[j + 1]) for j in range(0, len(vals), 2)}
        missing = rates - set(m)
        if missing:
            raise ConfigError(f"{path}: {key} has no entry for link rate(s) "
                              f"{sorted(missing)} bit/s")
        return m

    def one(key, conv, default):
        return conv(kv[key][0]) if key in kv else default

    try:
        return Config(
            pmtu=one("PACKET_PAYLOAD_SIZE", int, 1000),
            kmin_bytes=rate_map("KMIN_MAP", lambda v: int(v) * 1000),   # config.txt: KB
            kmax_bytes=rate_map("KMAX_MAP", lambda v: int(v) * 1000),
            pmax=rate_map("PMAX_MAP", float),
            cc_mode=one("CC_MODE", int, 1),
            ewma_gain=one("EWMA_GAIN", float, 1 / 256),
            rate_ai_bps=one("RATE_AI", _parse_rate, 5e6),
            rate_hai_bps=one("RATE_HAI", _parse_rate, 50e6),
            min_rate_bps=one("MIN_RATE", _parse_rate, 100e6),
            rp_timer_us=one("RP_TIMER", float, 300.0),
            alpha_resume_interval_us=one("ALPHA_RESUME_INTERVAL", float, 1.0),
            rate_decrease_interval_us=one("RATE_DECREASE_INTERVAL", float, 4.0),
            fast_recovery_times=one("FAST_RECOVERY_TIMES", int, 5),
        )
    except (ValueError, IndexError) as e:
        raise ConfigError(f"{path}: cannot read ({e})") from None


@dataclass(frozen=True)
class ReplayPlan:
    fixed_start_ns: np.ndarray   # >= 0 for flows with no deps in flow.txt, else -1
    gap_ns: np.ndarray
    dep_ptr: np.ndarray          # CSR: flows depending on flow i are dependents[ptr[i]:ptr[i+1]]
    dependents: np.ndarray
    n_deps: np.ndarray


GAP_MODES = ("analytic", "zero")


def replay_plan(sc: Scenario, gap: str = "zero") -> ReplayPlan:
    """Dependency edges between flow lines (see the module docstring)."""
    if gap not in GAP_MODES:
        raise ConfigError(f"gap mode {gap!r}: use one of {', '.join(GAP_MODES)}")
    n = len(sc)
    lines_of: dict[int, list[int]] = {}
    for k, t in enumerate(sc.transfer_id.tolist()):
        lines_of.setdefault(t, []).append(k)   # a split transfer has several lines
    nvlink = sc.nvlink or {}
    memo: dict[int, dict[int, int]] = {}

    def through(t: int) -> dict[int, int]:
        """flow line -> NVLink ns between it and transfer t, for the NET transfers behind t."""
        if t in lines_of:
            return {k: 0 for k in lines_of[t]}
        if t not in nvlink:
            return {}
        if t not in memo:
            memo[t] = {}   # a cycle would end here instead of recursing forever
            start, end, deps = nvlink[t]
            out: dict[int, int] = {}
            for d in deps:
                for k, ns in through(d).items():
                    out[k] = max(out.get(k, 0), ns + end - start)
            memo[t] = out
        return memo[t]

    preds, nvl_ns = [], np.zeros(n, dtype=np.int64)
    for k, deps in enumerate(sc.deps):
        merged: dict[int, int] = {}
        for t in deps:
            for j, ns in through(t).items():
                merged[j] = max(merged.get(j, 0), ns)
        preds.append(sorted(merged))
        nvl_ns[k] = max(merged.values(), default=0)
    n_deps = np.array([len(p) for p in preds], dtype=np.int64)
    fixed = np.where(n_deps == 0, sc.start_ns, -1)
    gap_ns = nvl_ns.copy()
    if gap == "analytic":
        for k, p in enumerate(preds):
            if p:
                gap_ns[k] = max(0, int(sc.sched_start_ns[k]) - int(sc.sched_end_ns[p].max()))
    succ: list[list[int]] = [[] for _ in range(n)]
    for k, p in enumerate(preds):
        for j in p:
            succ[j].append(k)
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum([len(s) for s in succ], out=ptr[1:])
    flat = np.array([x for s in succ for x in s], dtype=np.int64)
    return ReplayPlan(fixed, gap_ns, ptr, flat, n_deps)


def _parse_rate(s: str) -> int:
    m = _RATE.match(s.replace("b/s", "bps"))
    if not m:
        raise ValueError(f"rate {s!r}")
    return int(round(float(m.group(1)) * _RATE_SCALE[m.group(2).upper() if m.group(2) else None]))


def _parse_delay(s: str) -> int:
    m = _DELAY.match(s)
    if not m:
        raise ValueError(f"delay {s!r}")
    return int(round(float(m.group(1)) * _DELAY_PS[m.group(2)]))


def _seconds_to_ns(s: str) -> int:
    whole, _, frac = s.partition(".")
    return int(whole) * 10**9 + int((frac + "000000000")[:9])
