"""A simulator's fct.txt joined back to tracegen's schedule: the benchmark KPIs, analytic beside
simulated, per collective and per iteration.

Reads fct.txt rows `sip dip sport dport size start_ns fct_ns standalone_fct_ns` (hex IPs) as HPCC,
SimAI and `tracegen ns3 run` write them, and finds each row's flow.txt line through
manifest.json by (sip, dip, sport) under a source-port numbering:
  pair  10000 + k-th flow of the (src, dst) host pair: HPCC's third.cc since 2020-07 (master),
        SimAI's NormalNetwork, and tracegen's own sim/fct.txt (manifest `hpcc_sport`)
  host  10000 + k-th flow of the source host: HPCC's third.cc before 2020-07 (`host_sport`)
`auto` accepts a numbering only when every row matches a distinct line of the same size; when
both do and they join rows to different lines, the join is ambiguous and refused (give --sport).
A (sip, dip, sport) key that repeats (more than 55,536 flows of one pair: 16-bit wrap) is
matched in start order. Simulated end = start + fct - t0, on the manifest's clock. ECN-CE
counts come from `tracegen ns3 run`'s flows.csv and PFC/ECMP from its ports.csv and summary.json
when they sit beside the fct file (HPCC's fct.txt has none; its pfc.txt gives PAUSE counts);
iterations from the manifest's ops. MB are payload (flow.txt sizes are wire bytes).
"""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ns3_scenarios.checks import load_json, read_text
from ns3_scenarios.inputs import Scenario, load_scenario

from ...report import kpi
from ...errors import ConfigError
from ...output.ownership import PNG_SOFTWARE

NUMBERINGS = {"pair": "hpcc_sport", "host": "host_sport"}
SPORT_CHOICES = ("auto", "pair", "host", "hpcc", "simai")   # hpcc, simai: pair (current builds)


@dataclass(frozen=True)
class Joined:
    sc: Scenario
    sport: str                 # which numbering joined: pair | host
    line: np.ndarray           # flow.txt line (manifest index) per matched fct row
    sim_start_ns: np.ndarray   # relative to t0
    sim_end_ns: np.ndarray
    fct_ns: np.ndarray
    standalone_ns: np.ndarray
    ce_pkts: np.ndarray | None  # per matched row, when known
    tx_start_ns: np.ndarray | None  # first packet on the wire (tracegen's own runs)
    unmatched: int             # fct rows with no manifest line
    missing: int               # manifest lines with no fct row
    fct_path: Path

    @property
    def slowdown(self) -> np.ndarray:
        return self.fct_ns / np.maximum(self.standalone_ns, 1)


def read_fct(path: Path) -> np.ndarray:
    """fct.txt -> int64 array [n, 8]; IPs as integers. Refuses an empty or damaged file."""
    if not path.exists():
        raise ConfigError(f"{path}: no such fct file — run `tracegen ns3 run` first "
                          "or give --fct")
    rows = []
    try:
        for ln, text in enumerate(read_text(path, "fct file").splitlines(), 1):
            t = text.split()
            if not t:
                continue
            if len(t) < 8:
                raise ValueError(f"line {ln} has {len(t)} fields, expected 8")
            row = [int(t[0], 16), int(t[1], 16)] + [int(x) for x in t[2:8]]
            if min(row) < 0 or max(row) >= 1 << 62:
                raise ValueError(f"line {ln} has a negative or huge number")
            rows.append(row)
    except ValueError as e:
        raise ConfigError(f"{path}: not an HPCC-style fct file ({e})") from None
    if not rows:
        raise ConfigError(f"{path}: empty — no flow completed in that run (did the simulator "
                          "run to the end?)")
    return np.array(rows, dtype=np.int64).reshape(-1, 8)


def match(sc: Scenario, rows: np.ndarray, numbering: str) -> np.ndarray:
    """Line per fct row under a numbering (-1: none). Repeated keys pair up in start order."""
    key = NUMBERINGS[numbering]
    lines_of: dict[tuple, list[int]] = {}
    for i, r in enumerate(sc.records):
        lines_of.setdefault((int(r["sip"], 16), int(r["dip"], 16), int(r[key])), []).append(i)
    out = np.full(len(rows), -1, dtype=np.int64)
    order = np.lexsort((np.arange(len(rows)), rows[:, 5]))     # by start
    taken: dict[tuple, int] = {}
    for i in order.tolist():
        k = (int(rows[i, 0]), int(rows[i, 1]), int(rows[i, 2]))
        cand = lines_of.get(k)
        if cand:
            n = taken.get(k, 0)
            if n < len(cand):
                out[i] = cand[n]
                taken[k] = n + 1
    return out


def _consistent(sc: Scenario, rows: np.ndarray, line: np.ndarray) -> bool:
    """Every row joined, each to a different line, of the same size."""
    ok = line >= 0
    return bool(ok.all() and len(np.unique(line)) == len(line)
                and np.all(sc.bytes[line] == rows[:, 4]))


def join(path: str | Path, fct_path: str | Path | None = None, sport: str = "auto") -> Joined:
    sc = load_scenario(path)
    fct_file = Path(fct_path) if fct_path else sc.dir / "sim" / "fct.txt"
    rows = read_fct(fct_file)
    if sport not in SPORT_CHOICES:
        raise ConfigError(f"--sport {sport!r}: use {', '.join(SPORT_CHOICES)}")
    if any("host_sport" not in r for r in sc.records[:1]):
        raise ConfigError(f"{sc.dir}/manifest.json predates the per-pair HPCC numbering "
                          "(tracegen-ns3/3): regenerate the scenario")
    if sport in ("hpcc", "simai"):
        sport = "pair"
    if sport != "auto":
        key, line = sport, match(sc, rows, sport)
        ok = line >= 0
        wrong = int(np.sum(sc.bytes[line[ok]] != rows[ok, 4]))
        if wrong:
            raise ConfigError(f"{fct_file}: under --sport {sport}, {wrong} rows join flows of "
                              "another size: wrong numbering or not this scenario's fct file")
    else:
        joins = {k: match(sc, rows, k) for k in NUMBERINGS}
        good = {k: v for k, v in joins.items() if _consistent(sc, rows, v)}
        if len(good) == 2 and not np.array_equal(good["pair"], good["host"]):
            differ = int(np.sum(good["pair"] != good["host"]))
            raise ConfigError(f"{fct_file}: ambiguous join — both source-port numberings (per "
                              f"host pair, per source host) match all {len(rows)} rows but "
                              f"join {differ} of them to different flows; say which simulator "
                              "build wrote it: --sport pair (HPCC since 2020-07, SimAI, "
                              "tracegen) or --sport host (HPCC before 2020-07)")
        if not good:
            best = max(joins, key=lambda k: int(np.sum(joins[k] >= 0)))
            n_ok = int(np.sum(joins[best] >= 0))
            if n_ok == 0 and len(rows):
                raise ConfigError(f"{fct_file}: no row matches a flow of {sc.dir}/manifest.json "
                                  "(different scenario?)")
            raise ConfigError(f"{fct_file}: no source-port numbering joins every row to its own "
                              f"flow of the same size (best: {best}, {n_ok} of {len(rows)} rows); "
                              "not this scenario's fct file? Force one with --sport pair|host")
        key = "pair" if "pair" in good else "host"
        line = good[key]
    ok = line >= 0
    if not ok.any() and len(rows):
        raise ConfigError(f"{fct_file}: no row matches a flow of {sc.dir}/manifest.json "
                          "(different scenario?)")
    r, line = rows[ok], line[ok]
    start = r[:, 5] - sc.t0_ns
    extra = _sim_columns(fct_file.parent / "flows.csv", line, len(sc))
    return Joined(sc, key, line, start, start + r[:, 6], r[:, 6], r[:, 7], *extra,
                  unmatched=int(np.sum(~ok)), missing=len(sc) - len(np.unique(line)),
                  fct_path=fct_file)


def _sim_columns(path: Path, line: np.ndarray, n: int):
    """CE-marked packets and first-packet times per line from `tracegen ns3 run`'s flows.csv,
    if it is this scenario's."""
    if not path.is_file():
        return None, None
    try:
        rows = list(csv.DictReader(io.StringIO(read_text(path, "flow table"), newline="")))
        if len(rows) != n or "ce_pkts" not in (rows[0] if rows else {}):
            return None, None           # not this scenario's run
        ce = np.array([int(x["ce_pkts"]) for x in rows], dtype=np.int64)[line]
        tx = None
        if "tx_start_ns" in rows[0]:
            tx = np.array([int(x["tx_start_ns"]) for x in rows], dtype=np.int64)[line]
    except (ValueError, TypeError, csv.Error) as e:
        raise ConfigError(f"{path}: damaged (a row cut short or not a number: "
                          f"{' '.join(str(e).split())[:80]}); run `tracegen ns3 run` again") from None
    return ce, tx


# ---------------------------------------------------------------- KPIs

def kpis_for(sc: Scenario, ana: kpi.FlowSide, sim: kpi.FlowSide, op, ce, packets, mask, *,
             link_bytes=None, link_bytes_ana=None, ports=None) -> dict:
    """tracegen.report.kpi per collective ("DP AllReduce"), per iteration and overall; ECMP imbalance
    when per-link bytes are known; PFC when per-port records are."""
    payload = sc.payload_bytes if sc.payload_bytes is not None else sc.bytes
    ops = sc.ops or []
    op_bytes = np.array([int(o.get("bytes", 0)) for o in ops], dtype=np.int64)
    op_ranks = np.array([int(o.get("ranks", 2)) for o in ops], dtype=np.int64)
    op_kind = [o["kind"] for o in ops]
    host_links = (sc.topology.a < sc.topology.n_hosts) | (sc.topology.b < sc.topology.n_hosts)
    gbps = float(np.median(sc.topology.bps[host_links])) / 1e9
    op = np.asarray(op)
    ana_ops = kpi.op_kpis(op[mask], payload[mask], kpi.FlowSide(ana.start_ns[mask],
                                                                ana.end_ns[mask]),
                          op_bytes, op_ranks, op_kind, gbps)
    sim_ops = kpi.op_kpis(op[mask], payload[mask], kpi.FlowSide(sim.start_ns[mask],
                                                                sim.end_ns[mask]),
                          op_bytes, op_ranks, op_kind, gbps)
    group = np.array([f"{r['dim']} {r['kind']}" for r in sc.records], dtype=object)
    it = np.array([int(ops[int(o)].get("iteration", 0)) if ops else 0 for o in op.tolist()],
                  dtype=np.int64)

    def g(m):
        return kpi.group_kpis(m & mask, op, ana, sim, ana_ops, sim_ops, ce, packets)

    out = {"line_gbps": gbps, "all": g(np.ones(len(op), bool)),
           "iterations": {str(i): g(it == i) for i in sorted(set(it[mask].tolist()))},
           "collectives": {k: g(group == k) for k in sorted(set(group[mask].tolist()))}}
    n_hosts = sc.topology.n_hosts
    switches = set(sc.topology.switches.tolist())
    leaves = {int(b) if a < n_hosts else int(a)
              for a, b in zip(sc.topology.a.tolist(), sc.topology.b.tolist())
              if (a < n_hosts) != (b < n_hosts)}
    out["ecmp_imbalance"] = {
        "analytic": kpi.ecmp_imbalance(link_bytes_ana, leaves, switches) if link_bytes_ana else None,
        "simulated": kpi.ecmp_imbalance(link_bytes, leaves, switches) if link_bytes else None}
    if ports is not None:
        out["pfc"] = kpi.pfc_totals(ports)
    return out


def joined_kpis(j: Joined) -> dict:
    """The KPIs of a joined fct file; PFC / ECMP from the run's files beside it when present."""
    sc, n = j.sc, len(j.sc)
    mask = np.zeros(n, dtype=bool)
    mask[j.line] = True
    start = np.zeros(n, dtype=np.int64)
    end = np.zeros(n, dtype=np.int64)
    start[j.line] = j.tx_start_ns if j.tx_start_ns is not None else j.sim_start_ns
    end[j.line] = j.sim_end_ns
    ce = None
    if j.ce_pkts is not None:
        ce = np.zeros(n, dtype=np.int64)
        ce[j.line] = j.ce_pkts
    packets = np.maximum(1, -(-sc.bytes // sc.config.pmtu))
    out = kpis_for(sc, kpi.FlowSide(sc.sched_start_ns, sc.sched_end_ns),
                   kpi.FlowSide(start, end), sc.op_id, ce, packets, mask)
    here = j.fct_path.parent
    summary = here / "summary.json"
    if summary.is_file():   # tracegen's own run: its per-port KPIs
        prev = load_json(summary, "ns3 run summary").get("kpis", {})
        if not isinstance(prev, dict):
            raise ConfigError(f"{summary}: kpis is not an object; run `tracegen ns3 run` again")
        for k in ("ecmp_imbalance", "pfc"):
            if k in prev:
                out[k] = _checked(summary, k, prev[k])
    elif (here / "pfc.txt").is_file():   # HPCC: `time node type iface 1|0` per PAUSE / RESUME
        ev = [ln.split() for ln in read_text(here / "pfc.txt", "HPCC pfc file").splitlines()
              if ln.strip()]
        out["pfc"] = {"pause_frames": sum(1 for e in ev if e[-1] == "1"),
                      "resume_frames": sum(1 for e in ev if e[-1] == "0"),
                      "paused_us_total": None}
    return out


def _checked(path: Path, key: str, rec):
    """A summary.json KPI record as report_notes prints it (numbers or null)."""
    fields = {"pfc": ("pause_frames", "resume_frames", "paused_us_total"),
              "ecmp_imbalance": ("analytic", "simulated")}[key]
    num = lambda v: v is None or (type(v) in (int, float) and v >= 0)
    if not isinstance(rec, dict) or not all(num(rec.get(f)) for f in fields):
        raise ConfigError(f"{path}: kpis.{key} is not what `tracegen ns3 run` writes; run it again")
    return rec


# ---------------------------------------------------------------- report

REPORT_HEADER = ["group", "flows", "MB", "JCT µs\nana", "JCT µs\nsim", "JCT\nsim/ana",
                 "busbw %\nana", "busbw %\nsim", "p99 FCT\nµs ana", "p99 FCT\nµs sim",
                 "Jain\nana", "Jain\nsim", "ECN\n%"]


def report_rows(j: Joined, k: dict | None = None) -> list[list[list[str]]]:
    """Table sections: per dim + collective, per iteration, all flows."""
    k = k or joined_kpis(j)
    payload = j.sc.payload_bytes if j.sc.payload_bytes is not None else j.sc.bytes
    group = np.array([f"{r['dim']} {r['kind']}" for r in j.sc.records], dtype=object)
    ops = j.sc.ops or []
    it = np.array([int(ops[int(o)].get("iteration", 0)) if ops else 0 for o in
                   j.sc.op_id.tolist()], dtype=np.int64)
    in_fct = np.zeros(len(j.sc), dtype=bool)
    in_fct[j.line] = True

    def row(name, rec, m):
        a, s = rec["analytic"], rec["simulated"]
        f = lambda x, d=1: "-" if x is None else f"{x:,.{d}f}"
        ecn = rec.get("ecn_marked_share")
        return [name, f"{rec['flows']:,}", f"{payload[m & in_fct].sum() / 1e6:,.1f}",
                f(a["jct_ns"] / 1e3), f(s["jct_ns"] / 1e3), f(rec["jct_ratio"], 3),
                f(a["busbw_pct"]), f(s["busbw_pct"]), f(_us(a["p99_fct_ns"])),
                f(_us(s["p99_fct_ns"])), f(a["jain"], 3), f(s["jain"], 3),
                "n/a" if ecn is None else f"{ecn * 100:.2f}"]

    return [[row(g, rec, group == g) for g, rec in k["collectives"].items()],
            [row(f"iteration {i}", rec, it == int(i)) for i, rec in k["iterations"].items()],
            [row("all", k["all"], np.ones(len(j.sc), bool))]]


def report_notes(j: Joined, k: dict) -> list[str]:
    s = j.slowdown
    notes = [f"per flow: slowdown (fct / standalone fct) p50 {np.percentile(s, 50):.3f} "
             f"p99 {np.percentile(s, 99):.3f}" if len(s) else "no flows"]
    if j.tx_start_ns is not None and len(s):
        ana = (j.sc.sched_end_ns - j.sc.sched_start_ns)[j.line]
        r = (j.sim_end_ns - j.tx_start_ns) / np.maximum(ana, 1)
        notes.append(f"per flow: (end - first packet) / analytic duration p50 "
                     f"{np.percentile(r, 50):.3f} p99 {np.percentile(r, 99):.3f}")
    e = k.get("ecmp_imbalance") or {}
    notes.append("ECMP imbalance (worst leaf uplink, max/mean - 1): analytic "
                 f"{_fmt(e.get('analytic'))}, simulated {_fmt(e.get('simulated'))}")
    p = k.get("pfc")
    notes.append("PFC: n/a (no per-port record beside the fct file)" if p is None else
                 f"PFC: {p['pause_frames']:,} PAUSE frames, {p.get('resume_frames', 0):,} "
                 f"resumes, paused {_fmt(p.get('paused_us_total'))} µs in total "
                 "(analytic: none)")
    return notes


def _us(ns):
    return None if ns is None else ns / 1e3


def _fmt(x):
    return "n/a" if x is None else f"{x:.3f}"


def plot(j: Joined, png: Path) -> Path:
    """Draw into `png` (the caller writes it through output/put.py write_file: a temp file renamed into
    place, never over a user's file). Two panels: flow end times and flow completion times, analytic (x) vs simulated (y), one
    colour per dim/collective, y = x dashed; log axes where the points span two decades or more."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    recs = j.sc.records
    kind = np.array([f"{recs[i]['dim']} {recs[i]['kind']}" for i in j.line.tolist()])
    start = j.tx_start_ns if j.tx_start_ns is not None else j.sim_start_ns
    panels = [("end after t0", j.sc.sched_end_ns[j.line] / 1e3, j.sim_end_ns / 1e3),
              ("flow completion time",
               (j.sc.sched_end_ns - j.sc.sched_start_ns)[j.line] / 1e3,
               (j.sim_end_ns - start) / 1e3)]
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.5), dpi=110)
    for ax, (what, x, y) in zip(axes, panels):
        for g in sorted(set(kind.tolist())):
            m = kind == g
            ax.scatter(x[m], y[m], s=6, alpha=0.7, label=f"{g} ({int(m.sum())})")
        pos = np.concatenate([x, y])
        pos = pos[pos > 0]
        lo, hi = (float(pos.min()), float(pos.max())) if len(pos) else (1.0, 1.0)
        log = hi / max(lo, 1e-9) >= 100
        if log:
            ax.set_xscale("log")
            ax.set_yscale("log")
        ax.plot([lo if log else 0, hi], [lo if log else 0, hi], "k--", lw=0.8,
                label="simulated = analytic")
        ax.set_xlabel(f"analytic {what} (µs)")
        ax.set_ylabel(f"simulated {what} (µs)")
        ax.grid(alpha=0.3, which="both")
        ax.set_title(what)
    axes[0].legend(fontsize=7, loc="upper left")
    fig.suptitle(f"analytic schedule vs {j.sport}-numbered fct ({len(j.line)} flows)")
    fig.tight_layout()
    try:
        fig.savefig(png, format="png", metadata={"Software": PNG_SOFTWARE})   # tracegen's (outdir)
    finally:
        plt.close(fig)
    return Path(png)
