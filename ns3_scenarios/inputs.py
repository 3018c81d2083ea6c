"""Read a scenario dir written by tracegen.emit.sims.ns3 into flat arrays for the ns-3 program.

The program reads the same files the HPCC simulators read (topology.txt, flow.txt, config.txt)
plus manifest.json for what they cannot express: each flow line's op and transfer
dependencies, the op chain, the NCCL connection (RC QP) each line rides (QPNs, UDP source port,
optionally the path its packets take), the UDP source port HPCC/SimAI print for it, and the
PFC/CNP/NIC-sharing settings (`sim`). Pure Python: no ns-3 import here, so it is testable alone.

Dependency-aware replay (what `replay_plan` derives from manifest.json's `ops`,
`local_transfers` and the flow records' transfer `deps`; roce_nic.h runs it event by event):
  - ops: every CommOp, NVLink-only ops and markers included, so the chain never breaks. Op o is
    released at max(simulated completion of its dep ops) + gap_ns(o); an op without dep ops at
    its analytic release (= its gap_ns after t0).
  - an op with flow.txt lines ("net") completes when all its lines have completed in the
    simulation and its local transfers (NVLink, zero-byte NET: not simulated) are done; an op
    without lines completes at release + (analytic op_end - op_start).
  - a local transfer v of op o completes at
        max(release(o) + (analytic end(v) - analytic op_start(o)),
            max over its deps d of completion(d) + (analytic end(v) - analytic start(v)))
    i.e. it keeps its analytic offset from the op's release, and, when the NET transfers it
    waits for run late in the simulation, its analytic duration after them (a ring's NET step k
    -> NVLink step -> NET step k+2 stays a chain; the first term alone would cut it). While the
    simulation keeps the analytic pace the second term is never the larger one.
  - a flow line starts when its op is released AND its transfer deps have completed: at
        max(release(o) + relOff, max over predecessor lines j of end(j) + edgeGap(j))
    where a dep that is a flow line gives edgeGap 0, a local dep v gives, through its own deps,
    edges with the local durations on the chain as gap, and relOff >= its offset above when no
    flow line is on its chain (it runs from the op's release alone).
    A line whose op has no dep ops and which has no transfer deps starts at its flow.txt time.
  - gap="zero" (default) adds nothing more. gap="analytic" adds the analytic schedule's wait
    between the line being ready and starting (time it queued for a busy NIC there, which the
    simulation's round-robin NIC also models: counted twice where the simulation runs late).
A split transfer's parts are separate lines; each depends on every part of its predecessors.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tracegen.errors import ConfigError
from .checks import check_manifest, load_json, read_text

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
    clamp_target_rate: bool = False


@dataclass(frozen=True)
class Scenario:
    dir: Path
    topology: Topology
    config: Config
    t0_ns: int
    # per flow.txt line
    src: np.ndarray
    dst: np.ndarray
    bytes: np.ndarray           # flow.txt size: wire bytes (LL/LL128 flags included)
    start_ns: np.ndarray        # flow.txt start - t0 (integer ns)
    hpcc_sport: np.ndarray
    transfer_id: np.ndarray
    sched_start_ns: np.ndarray  # analytic schedule (manifest)
    sched_end_ns: np.ndarray
    deps: list[list[int]]       # transfer ids
    records: list[dict]         # manifest flow records, for reports
    payload_bytes: np.ndarray | None = None   # manifest `bytes` (payload) per line
    op_id: np.ndarray | None = None           # per line
    ops: list[dict] | None = None             # manifest ops (None: a tracegen-ns3/1 manifest)
    local: dict | None = None                 # transfer id -> manifest local_transfers record
    qp: np.ndarray | None = None              # per line: index into the qp_* arrays
    qp_src: np.ndarray | None = None          # per QP: hosts, QPNs, UDP source port on the wire
    qp_dst: np.ndarray | None = None
    qp_sqpn: np.ndarray | None = None
    qp_dqpn: np.ndarray | None = None
    qp_sport: np.ndarray | None = None
    qp_path: list | None = None               # per QP: node ids src..dst, or None (ECMP hash)
    qp_rpath: list | None = None              # per QP: its ACKs' node ids dst..src, or None
    sim: dict | None = None                   # manifest `sim`: nic_sharing, cnp interval, pfc
    link_events: list = field(default_factory=list)   # manifest link_events, checked (_read_link_events)

    def __len__(self) -> int:
        return len(self.src)


def scenario_dir(path: str | Path) -> Path:
    """DIR or DIR/ns3: the folder holding manifest.json."""
    p = Path(path)
    for d in (p, p / "ns3"):
        if (d / "manifest.json").is_file():
            return d
    if not (p / "ns3").exists() and any((p / f).is_file() for f in ("summary.json", "flows.csv")):
        raise ConfigError(f"{path}: this trace has no ns3/ scenario — `tracegen generate` writes "
                          "none when no transfer crosses a NIC (or with --no-ns3)")
    raise ConfigError(f"{path}: no manifest.json here or in ns3/ — give a folder written by "
                      "`tracegen generate`")


def load_scenario(path: str | Path) -> Scenario:
    d = scenario_dir(path)
    for name in ("topology.txt", "flow.txt", "config.txt"):
        if not (d / name).is_file():
            raise ConfigError(f"{d}: {name} is missing; regenerate the scenario")
    man = load_json(d / "manifest.json", "tracegen ns-3 manifest")
    check_manifest(d / "manifest.json", man)
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

    wire = (np.array([r.get("wire_bytes", r["bytes"]) for r in recs], dtype=np.int64)
            if recs else np.zeros(0, np.int64))
    if len(recs) and (np.any(col("src_nic") != src) or np.any(col("dst_nic") != dst)
                      or np.any(wire != nbytes)):
        raise ConfigError(f"{d}: flow.txt and manifest.json disagree on src/dst/bytes — "
                          "regenerate")
    if len(src) and (src.max() >= topo.n_hosts or dst.max() >= topo.n_hosts):
        raise ConfigError(f"{d}: flow.txt names a host id >= {topo.n_hosts} hosts in topology.txt")
    qps = _read_qps(d, man, recs, src, dst, topo)
    return Scenario(d, topo, cfg, t0, src, dst, nbytes, start,
                    col("hpcc_sport") if recs else np.zeros(0, np.int64),
                    col("transfer_id") if recs else np.zeros(0, np.int64),
                    col("start_ns") if recs else np.zeros(0, np.int64),
                    col("end_ns") if recs else np.zeros(0, np.int64),
                    [list(r.get("deps", [])) for r in recs], recs,
                    payload_bytes=col("bytes") if recs else np.zeros(0, np.int64),
                    op_id=col("op_id") if recs else np.zeros(0, np.int64),
                    ops=_check_ops(d, man.get("ops"), recs, man.get("local_transfers") or []),
                    local={int(r["transfer_id"]): r for r in man.get("local_transfers", [])},
                    **qps, sim=man.get("sim") or {},
                    link_events=_read_link_events(d, man.get("link_events"), topo, qps))


def _read_link_events(d: Path, events, topo: Topology, qps: dict) -> list:
    """manifest link_events (a scenario's timed link events, tracegen/emit/sims/ns3_events.py):
    [(at_ns, [(a, b, gbps)], [(qp, path, rpath)])] in time order; a damaged entry is one line."""
    if events is None:
        return []
    bad = lambda what: ConfigError(f"{d}/manifest.json: link_events{what} — regenerate")  # noqa: E731
    if not isinstance(events, list):
        raise bad(" is not a list")
    links = {(int(a), int(b)) for a, b in zip(topo.a, topo.b)}
    links |= {(b, a) for a, b in links}
    n_qps = len(qps["qp_src"])
    out, last = [], -1
    for i, e in enumerate(events):
        try:
            at = int(e["at_ns"])
            changes = [(int(a), int(b), int(g)) for a, b, g in e["links"]]
            repin = [(int(q), [int(x) for x in p], [int(x) for x in rp]) for q, p, rp in e["repin"]]
        except (KeyError, TypeError, ValueError):
            raise bad(f"[{i}]: needs at_ns, links [[a, b, gbps]] and repin [[qp, path, rpath]]") from None
        if at <= last:
            raise bad(f"[{i}].at_ns: {at} is not after the event before it")
        last = at
        for a, b, g in changes:
            if (a, b) not in links or g < 0:
                raise bad(f"[{i}].links: {a}-{b} at {g} Gb/s is no link of topology.txt at a rate >= 0")
        for q, p, rp in repin:
            if not 0 <= q < n_qps:
                raise bad(f"[{i}].repin: QP {q} is not in qps")
            _check_path(d, q, p, int(qps["qp_src"][q]), int(qps["qp_dst"][q]), topo)
            _check_path(d, q, rp, int(qps["qp_dst"][q]), int(qps["qp_src"][q]), topo)
        out.append((at, changes, repin))
    return out


def _read_qps(d: Path, man: dict, recs: list[dict], src, dst, topo: Topology) -> dict:
    """The QP of every line and the QP table; a manifest without `qps` (tracegen-ns3/2) gets one
    QP per line, numbered per host from 0x100, with the line's HPCC port as its UDP port."""
    n = len(recs)
    if "qps" not in man:
        ends = np.empty(2 * n, dtype=np.int64)
        ends[0::2], ends[1::2] = src, dst
        qpn = QPN_BASE + _occurrence(ends)
        sport = np.array([r["hpcc_sport"] for r in recs], dtype=np.int64)
        return dict(qp=np.arange(n), qp_src=src.copy(), qp_dst=dst.copy(), qp_sqpn=qpn[0::2],
                    qp_dqpn=qpn[1::2], qp_sport=sport, qp_path=[None] * n, qp_rpath=[None] * n)
    table = man["qps"]
    try:
        cols = {k: np.array([int(q[k]) for q in table], dtype=np.int64)
                for k in ("qp", "src", "dst", "sqpn", "dqpn", "sport")}
        line_qp = np.array([int(r["qp"]) for r in recs], dtype=np.int64)
    except (KeyError, ValueError, TypeError) as e:
        raise ConfigError(f"{d}/manifest.json: a qps or flow record lacks a QP field ({e}) — "
                          "regenerate") from None
    if np.any(cols["qp"] != np.arange(len(table))):
        raise ConfigError(f"{d}/manifest.json: qps are not numbered 0..n-1 in order — regenerate")
    if n and (line_qp.min() < 0 or line_qp.max() >= len(table)
              or np.any(cols["src"][line_qp] != src) or np.any(cols["dst"][line_qp] != dst)):
        raise ConfigError(f"{d}/manifest.json: a flow's qp is not a QP between its hosts — "
                          "regenerate")
    paths = [q.get("path") for q in table]
    rpaths = [q.get("rpath") for q in table]
    for q, (p, rp) in enumerate(zip(paths, rpaths)):
        if p is not None:
            _check_path(d, q, [int(x) for x in p], int(cols["src"][q]), int(cols["dst"][q]), topo)
        if rp is not None:
            _check_path(d, q, [int(x) for x in rp], int(cols["dst"][q]), int(cols["src"][q]), topo)
    nodes = lambda ps: [None if p is None else [int(x) for x in p] for p in ps]
    return dict(qp=line_qp, qp_src=cols["src"], qp_dst=cols["dst"], qp_sqpn=cols["sqpn"],
                qp_dqpn=cols["dqpn"], qp_sport=cols["sport"], qp_path=nodes(paths), qp_rpath=nodes(rpaths))


def _check_path(d: Path, q: int, path: list[int], src: int, dst: int, topo: Topology) -> None:
    """An explicit path must run src host -> switches -> dst host over topology.txt's links."""
    links = {(int(a), int(b)) for a, b in zip(topo.a, topo.b)}
    links |= {(b, a) for a, b in links}
    ok = (len(path) >= 3 and path[0] == src and path[-1] == dst
          and all(x >= topo.n_hosts for x in path[1:-1])
          and all((u, v) in links for u, v in zip(path, path[1:])))
    if not ok:
        raise ConfigError(f"{d}/manifest.json: qps[{q}].path {path} is not a path from host "
                          f"{src} over switches to host {dst} in topology.txt")


QPN_BASE = 0x100   # QP 1 would decode as GSI in tshark


def _occurrence(keys: np.ndarray) -> np.ndarray:
    """k for the k-th (0-based) appearance of each key, in array order."""
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    new = np.ones(len(keys), dtype=bool)
    new[1:] = sk[1:] != sk[:-1]
    pos = np.arange(len(keys))
    start = np.maximum.accumulate(np.where(new, pos, 0)) if len(keys) else pos
    occ = np.empty(len(keys), dtype=np.int64)
    occ[order] = pos - start
    return occ


def _check_ops(d: Path, ops, recs, local) -> list[dict] | None:
    if ops is None:
        return None
    if any(int(o["op_id"]) != i for i, o in enumerate(ops)):
        raise ConfigError(f"{d}/manifest.json: ops are not numbered 0..n-1 in order — regenerate")
    n = len(ops)
    if any(not 0 <= int(r["op_id"]) < n for r in (*recs, *local)) or any(
            not 0 <= int(x) < n for o in ops for x in o["deps"]):
        raise ConfigError(f"{d}/manifest.json: an op id out of range — regenerate")
    return ops


def read_topology(path: Path) -> Topology:
    tok = read_text(path, "HPCC topology file").split()
    try:
        n_nodes, n_sw, n_links = int(tok[0]), int(tok[1]), int(tok[2])
        if not (0 < n_sw < n_nodes and n_links > 0):
            raise ValueError(f"header {n_nodes} nodes, {n_sw} switches, {n_links} links")
        sw = np.array([int(x) for x in tok[3:3 + n_sw]], dtype=np.int64)
        body = tok[3 + n_sw:]
        if len(sw) < n_sw or len(body) < 5 * n_links:
            raise ValueError("fewer switch ids or link lines than the header says")
        a, b, bps, dly = [], [], [], []
        for i in range(n_links):
            x, y, rate, delay = body[5 * i:5 * i + 4]
            a.append(int(x))
            b.append(int(y))
            bps.append(_parse_rate(rate))
            dly.append(_parse_delay(delay))
    except (ValueError, IndexError) as e:
        raise ConfigError(f"{path}: not an HPCC topology file ({e})") from None
    a, b = np.array(a, dtype=np.int64), np.array(b, dtype=np.int64)
    bps, dly = np.array(bps, dtype=np.int64), np.array(dly, dtype=np.int64)
    n_hosts = n_nodes - n_sw
    if sw.min() < n_hosts or sw.max() >= n_nodes or len(np.unique(sw)) != n_sw:
        raise ConfigError(f"{path}: switch ids must be the {n_sw} distinct ids after the "
                          f"{n_hosts} hosts (< {n_nodes} nodes)")
    bad = (a < 0) | (a >= n_nodes) | (b < 0) | (b >= n_nodes) | (a == b) | (bps <= 0) | (dly < 0)
    if bad.any():
        k = int(np.argmax(bad))
        raise ConfigError(f"{path}: link {k} ({a[k]} -> {b[k]}, {bps[k]} bit/s, {dly[k]} ps) "
                          f"does not join two of the {n_nodes} nodes at a rate > 0")
    return Topology(n_nodes, sw, a, b, bps, dly)


def read_flows(path: Path, t0_ns: int):
    lines = read_text(path, "HPCC flow file").split("\n")
    try:
        n = int(lines[0])
        rows = [ln.split() for ln in lines[1:1 + n]]
        rows = [r for r in rows if r]
        if len(rows) != n:
            raise ValueError(f"the header says {n} flows, the file holds {len(rows)}")
        if any(len(r) != 6 for r in rows):
            k = next(i for i, r in enumerate(rows) if len(r) != 6)
            raise ValueError(f"line {k + 2} has {len(rows[k])} fields, expected 6")
        src = np.array([int(r[0]) for r in rows], dtype=np.int64)
        dst = np.array([int(r[1]) for r in rows], dtype=np.int64)
        nbytes = np.array([int(r[4]) for r in rows], dtype=np.int64)
        start = np.array([_seconds_to_ns(r[5]) for r in rows], dtype=np.int64) - t0_ns
    except (ValueError, IndexError, OverflowError) as e:
        raise ConfigError(f"{path}: not an HPCC flow file ({e})") from None
    bad = (src < 0) | (dst < 0) | (src == dst) | (nbytes < 0) | (nbytes > 2**32 - 1) | (start < 0)
    if bad.any():
        k = int(np.argmax(bad))
        raise ConfigError(f"{path}: line {k + 2} is not a flow between two hosts of 0..2^32-1 "
                          "bytes starting at or after t0; regenerate the scenario")
    return src, dst, nbytes, start


def read_config(path: Path, rates: set[int]) -> Config:
    tok = read_text(path, "HPCC config file").split()
    try:
        cfg = _parse_config(tok, rates)
    except (ValueError, IndexError, OverflowError) as e:
        raise ConfigError(f"{path}: cannot read ({e})") from None
    bad = [k for k, ok in (
        ("PACKET_PAYLOAD_SIZE", 256 <= cfg.pmtu <= 8192),   # the devices' MTU is 9000
        ("EWMA_GAIN", 0 < cfg.ewma_gain <= 1), ("RATE_AI", cfg.rate_ai_bps >= 0),
        ("RATE_HAI", cfg.rate_hai_bps >= 0), ("MIN_RATE", cfg.min_rate_bps > 0),
        ("RP_TIMER", cfg.rp_timer_us > 0), ("ALPHA_RESUME_INTERVAL", cfg.alpha_resume_interval_us > 0),
        ("RATE_DECREASE_INTERVAL", cfg.rate_decrease_interval_us > 0),
        ("FAST_RECOVERY_TIMES", cfg.fast_recovery_times >= 0),
        ("KMIN_MAP", all(v >= 0 for v in cfg.kmin_bytes.values())),
        ("KMAX_MAP", all(cfg.kmax_bytes[r] >= cfg.kmin_bytes[r] for r in cfg.kmax_bytes)),
        ("PMAX_MAP", all(0 <= v <= 1 for v in cfg.pmax.values()))) if not ok]
    if bad:
        raise ConfigError(f"{path}: {bad[0]} is out of range (see the scenario's README); "
                          "regenerate the scenario")
    return cfg


def _parse_config(tok: list[str], rates: set[int]) -> Config:
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
        if len(vals) % 2:
            raise ValueError(f"{key} is cut short")
        m = {int(vals[j]): conv(vals[j + 1]) for j in range(0, len(vals), 2)}
        missing = rates - set(m)
        if missing:
            raise ValueError(f"{key} has no entry for link rate(s) {sorted(missing)} bit/s")
        return m

    def one(key, conv, default):
        if key in kv and not kv[key]:
            raise ValueError(f"{key} has no value")
        return conv(kv[key][0]) if key in kv else default

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
        clamp_target_rate=bool(one("CLAMP_TARGET_RATE", int, 0)),
    )


@dataclass(frozen=True)
class ReplayPlan:
    """The replay's tables (see the module docstring); ns are relative to t0."""
    # per flow line
    fixed_start_ns: np.ndarray   # >= 0: starts at its flow.txt time; -1: when ready
    gap_ns: np.ndarray           # for reports: largest edge gap + extra gap
    extra_gap_ns: np.ndarray     # gap="analytic": the analytic wait once ready; else 0
    rel_off_ns: np.ndarray       # earliest start after the op's release
    post_ns: np.ndarray          # local transfers of the op that follow this line
    op: np.ndarray               # op index
    dep_ptr: np.ndarray          # CSR: flows depending on flow i are dependents[ptr[i]:ptr[i+1]]
    dependents: np.ndarray
    edge_gap_ns: np.ndarray      # per dependents entry: wait after flow i ends
    n_deps: np.ndarray           # predecessor lines
    # per op
    op_gap_ns: np.ndarray
    op_tail_ns: np.ndarray       # completes no earlier than release + tail
    op_n_deps: np.ndarray
    op_dep_ptr: np.ndarray       # CSR: ops waiting for op o
    op_dependents: np.ndarray
    op_line_ptr: np.ndarray      # CSR: lines of op o
    op_lines: np.ndarray
    op_start_ns: np.ndarray      # analytic release / completion (manifest)
    op_end_ns: np.ndarray
    op_deps: list[list[int]]


GAP_MODES = ("analytic", "zero")


def _csr(lists: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    ptr = np.zeros(len(lists) + 1, dtype=np.int64)
    np.cumsum([len(x) for x in lists], out=ptr[1:])
    flat = np.array([v for x in lists for v in x], dtype=np.int64)
    return ptr, flat


def replay_plan(sc: Scenario, gap: str = "zero") -> ReplayPlan:
    """Ops and flow lines with their dependency edges (see the module docstring)."""
    if gap not in GAP_MODES:
        raise ConfigError(f"gap mode {gap!r}: use one of {', '.join(GAP_MODES)}")
    if sc.ops is None:
        raise ConfigError(f"{sc.dir}/manifest.json has no ops (an older tracegen wrote it): "
                          "regenerate the scenario for the dependency-aware replay")
    n, ops, local = len(sc), sc.ops, sc.local or {}
    n_ops = len(ops)
    op_start = np.array([o["op_start_ns"] for o in ops], dtype=np.int64)
    op_end = np.array([o["op_end_ns"] for o in ops], dtype=np.int64)
    op_deps = [[int(x) for x in o["deps"]] for o in ops]
    lines_of: dict[int, list[int]] = {}
    for k, t in enumerate(sc.transfer_id.tolist()):
        lines_of.setdefault(t, []).append(k)   # a split transfer has several lines

    def offset(t: int) -> int:
        """A local transfer's analytic end after its op's analytic release."""
        r = local[t]
        return int(r["end_ns"]) - int(op_start[int(r["op_id"])])

    memo: dict[int, dict[int, int]] = {}

    def chain(t: int) -> dict[int, int]:
        """flow line -> local-transfer ns between that line's end and local transfer t's end."""
        if t not in memo:
            memo[t] = {}   # a cycle would end here instead of recursing forever
            r = local[t]
            dur = int(r["end_ns"]) - int(r["start_ns"])
            out: dict[int, int] = {}
            for d in r["deps"]:
                if d in lines_of:
                    for k in lines_of[d]:
                        out[k] = max(out.get(k, 0), dur)
                elif d in local:
                    for k, ns in chain(d).items():
                        out[k] = max(out.get(k, 0), ns + dur)
            memo[t] = out
        return memo[t]

    line_op = sc.op_id.astype(np.int64)
    rel_off = np.zeros(n, dtype=np.int64)
    preds: list[dict[int, int]] = []
    for k, deps in enumerate(sc.deps):
        merged: dict[int, int] = {}
        for t in deps:
            if t in lines_of:
                for j in lines_of[t]:
                    merged[j] = max(merged.get(j, 0), 0)
            elif t in local:
                up = chain(t)
                if not up:           # a local chain from the op's release: its analytic offset;
                    rel_off[k] = max(rel_off[k], offset(t))   # one that waits for lines: theirs
                for j, ns in up.items():
                    merged[j] = max(merged.get(j, 0), ns)
        preds.append(merged)
    fixed = np.array([sc.start_ns[k] if not sc.deps[k] and not op_deps[line_op[k]] else -1
                      for k in range(n)], dtype=np.int64)

    # Local transfers after a line, up to the op's end; and each op's own tail.
    post = np.zeros(n, dtype=np.int64)
    op_tail = op_end - op_start
    net_tail = np.zeros(n_ops, dtype=np.int64)
    for t, r in local.items():
        o = int(r["op_id"])
        net_tail[o] = max(net_tail[o], offset(t))
        for k, ns in chain(t).items():
            post[k] = max(post[k], ns)
    is_net = np.array([bool(o["net"]) for o in ops], dtype=bool)
    op_tail = np.where(is_net, net_tail, op_tail)

    extra = np.zeros(n, dtype=np.int64)
    edge_max = np.array([max(p.values(), default=0) for p in preds], dtype=np.int64)
    if gap == "analytic":
        for k, p in enumerate(preds):
            ready = int(op_start[line_op[k]]) + int(rel_off[k])
            for j, g in p.items():
                ready = max(ready, int(sc.sched_end_ns[j]) + g)
            extra[k] = max(0, int(sc.sched_start_ns[k]) - ready)
    succ: list[list[int]] = [[] for _ in range(n)]
    succ_gap: list[list[int]] = [[] for _ in range(n)]
    for k, p in enumerate(preds):
        for j, g in sorted(p.items()):
            succ[j].append(k)
            succ_gap[j].append(g)
    dep_ptr, dependents = _csr(succ)
    _, edge_gap = _csr(succ_gap)
    op_succ: list[list[int]] = [[] for _ in range(n_ops)]
    for o, ds in enumerate(op_deps):
        for x in ds:
            op_succ[x].append(o)
    op_dep_ptr, op_dependents = _csr(op_succ)
    op_lines: list[list[int]] = [[] for _ in range(n_ops)]
    for k, o in enumerate(line_op.tolist()):
        op_lines[o].append(k)
    op_line_ptr, op_line_vals = _csr(op_lines)
    return ReplayPlan(
        fixed_start_ns=fixed, gap_ns=edge_max + extra, extra_gap_ns=extra, rel_off_ns=rel_off,
        post_ns=post, op=line_op, dep_ptr=dep_ptr, dependents=dependents, edge_gap_ns=edge_gap,
        n_deps=np.array([len(p) for p in preds], dtype=np.int64),
        op_gap_ns=np.array([o["gap_ns"] for o in ops], dtype=np.int64), op_tail_ns=op_tail,
        op_n_deps=np.array([len(x) for x in op_deps], dtype=np.int64), op_dep_ptr=op_dep_ptr,
        op_dependents=op_dependents, op_line_ptr=op_line_ptr, op_lines=op_line_vals,
        op_start_ns=op_start, op_end_ns=op_end, op_deps=op_deps)


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
