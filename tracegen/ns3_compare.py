"""A simulator's fct.txt joined back to tracegen's schedule: analytic vs simulated, per collective.

Reads fct.txt rows `sip dip sport dport size start_ns fct_ns standalone_fct_ns` (hex IPs) as HPCC,
SimAI and `tracegen ns3 run` write them, and finds each row's flow.txt line through
manifest.json: (sip, dip, sport) with sport = hpcc_sport or simai_sport (whichever numbering
matches more rows, unless told). Simulated end = start + fct - t0, on the manifest's clock.
ECN-CE counts come from `tracegen ns3 run`'s flows.csv when it sits beside the fct file (HPCC's
fct.txt has none); iterations from the manifest's ops (or, for an older manifest, the trace
dir's flows.csv). MB are payload (flow.txt sizes are wire bytes: LL/LL128 flags included).
"""
from __future__ import annotations

import csv
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import ConfigError, OutputError
from ns3_scenarios.inputs import Scenario, load_scenario

SPORT_KEYS = ("hpcc", "simai")


@dataclass(frozen=True)
class Joined:
    sc: Scenario
    sport: str                 # which numbering matched
    line: np.ndarray           # flow.txt line (manifest index) per matched fct row
    sim_start_ns: np.ndarray   # relative to t0
    sim_end_ns: np.ndarray
    fct_ns: np.ndarray
    standalone_ns: np.ndarray
    ce_pkts: np.ndarray | None  # per matched row, when known
    unmatched: int             # fct rows with no manifest line
    missing: int               # manifest lines with no fct row

    @property
    def slowdown(self) -> np.ndarray:
        return self.fct_ns / np.maximum(self.standalone_ns, 1)


def read_fct(path: Path) -> np.ndarray:
    """fct.txt -> int64 array [n, 8]; IPs as integers."""
    rows = []
    try:
        with open(path) as f:
            for ln, text in enumerate(f, 1):
                t = text.split()
                if not t:
                    continue
                if len(t) < 8:
                    raise ValueError(f"line {ln} has {len(t)} fields, expected 8")
                rows.append([int(t[0], 16), int(t[1], 16)] + [int(x) for x in t[2:8]])
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such fct file — run `tracegen ns3 run` first "
                          "or give --fct") from None
    except ValueError as e:
        raise ConfigError(f"{path}: not an HPCC-style fct file ({e})") from None
    return np.array(rows, dtype=np.int64).reshape(-1, 8)


def join(path: str | Path, fct_path: str | Path | None = None, sport: str = "auto") -> Joined:
    sc = load_scenario(path)
    fct_file = Path(fct_path) if fct_path else sc.dir / "sim" / "fct.txt"
    rows = read_fct(fct_file)
    if sport not in ("auto",) + SPORT_KEYS:
        raise ConfigError(f"--sport {sport!r}: use auto, hpcc or simai")
    sip = np.array([int(r["sip"], 16) for r in sc.records], dtype=np.int64)
    dip = np.array([int(r["dip"], 16) for r in sc.records], dtype=np.int64)
    best = None
    for key in (SPORT_KEYS if sport == "auto" else (sport,)):
        sp = np.array([r[f"{key}_sport"] for r in sc.records], dtype=np.int64)
        index = {k: i for i, k in enumerate(zip(sip.tolist(), dip.tolist(), sp.tolist()))}
        line = np.array([index.get(k, -1) for k in
                         zip(rows[:, 0].tolist(), rows[:, 1].tolist(), rows[:, 2].tolist())],
                        dtype=np.int64)
        if best is None or np.sum(line >= 0) > np.sum(best[1] >= 0):
            best = (key, line)
    key, line = best
    ok = line >= 0
    if not ok.any() and len(rows):
        raise ConfigError(f"{fct_file}: no row matches a flow of {sc.dir}/manifest.json "
                          "(different scenario?)")
    r, line = rows[ok], line[ok]
    start = r[:, 5] - sc.t0_ns
    ce = _ce_counts(fct_file.parent / "flows.csv", line, len(sc))
    return Joined(sc, key, line, start, start + r[:, 6], r[:, 6], r[:, 7], ce,
                  unmatched=int(np.sum(~ok)), missing=len(sc) - len(np.unique(line)))


def _ce_counts(path: Path, line: np.ndarray, n: int) -> np.ndarray | None:
    """CE-marked packets per line from `tracegen ns3 run`'s flows.csv, if it is this scenario's."""
    if not path.is_file():
        return None
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if len(rows) != n or "ce_pkts" not in (rows[0] if rows else {}):
        return None
    ce = np.array([int(x["ce_pkts"]) for x in rows], dtype=np.int64)
    return ce[line]


# ---------------------------------------------------------------- report

# Completion = the group's last flow end (µs after t0); slowdown = fct / standalone fct.
REPORT_HEADER = ["group", "flows", "MB", "ana µs", "sim µs", "ratio", "p50", "p99", "max", "CE"]


def report_rows(j: Joined) -> list[list[list[str]]]:
    """Table sections: per dim + collective, per iteration (when flows.csv tells), all flows."""
    recs = j.sc.records
    kind = np.array([f"{recs[i]['dim']} {recs[i]['kind']}" for i in j.line.tolist()], dtype=object)
    sections = [[_row(g, j, kind == g) for g in sorted(set(kind.tolist()))]]
    it = None
    if j.sc.ops is not None and j.sc.op_id is not None:
        op_it = [int(o.get("iteration", 0)) for o in j.sc.ops]
        it = np.array([op_it[int(j.sc.op_id[i])] for i in j.line.tolist()], dtype=np.int64)
    elif j.sc.iteration:
        it = np.array([j.sc.iteration.get(int(j.sc.transfer_id[i]), -1) for i in j.line.tolist()])
    if it is not None:
        sections.append([_row(f"iteration {i}", j, it == i) for i in sorted(set(it.tolist()))])
    sections.append([_row("all", j, np.ones(len(j.line), bool))])
    return sections


def _row(name: str, j: Joined, m: np.ndarray) -> list[str]:
    ana = int(j.sc.sched_end_ns[j.line[m]].max()) if m.any() else 0
    sim = int(j.sim_end_ns[m].max()) if m.any() else 0
    s = j.slowdown[m]
    ce = "n/a" if j.ce_pkts is None else f"{int(j.ce_pkts[m].sum()):,}"
    payload = j.sc.payload_bytes if j.sc.payload_bytes is not None else j.sc.bytes
    return [name, f"{int(m.sum()):,}", f"{payload[j.line[m]].sum() / 1e6:,.1f}",
            f"{ana / 1e3:,.1f}", f"{sim / 1e3:,.1f}", f"{sim / ana:.3f}" if ana else "-",
            *(f"{np.percentile(s, q):.2f}" if len(s) else "-" for q in (50, 99)),
            f"{s.max():.2f}" if len(s) else "-", ce]


def plot(j: Joined, png: Path) -> Path:
    """Scatter of analytic vs simulated flow end times, one colour per dim/kind; y = x dashed."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    recs = j.sc.records
    kind = [f"{recs[i]['dim']} {recs[i]['kind']}" for i in j.line.tolist()]
    x = j.sc.sched_end_ns[j.line] / 1e3
    y = j.sim_end_ns / 1e3
    fig, ax = plt.subplots(figsize=(7, 6), dpi=110)
    for g in sorted(set(kind)):
        m = np.array([k == g for k in kind])
        ax.scatter(x[m], y[m], s=6, alpha=0.7, label=f"{g} ({int(m.sum())})")
    hi = float(max(x.max(), y.max())) if len(x) else 1.0
    ax.plot([0, hi], [0, hi], "k--", lw=0.8, label="simulated = analytic")
    ax.set_xlabel("analytic end (µs after t0)")
    ax.set_ylabel("simulated end (µs after t0)")
    ax.set_title(f"flow end times: analytic schedule vs {j.sport}-numbered fct ({len(x)} flows)")
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    png = Path(png)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{png.name}.", suffix=".png", dir=png.parent)
        os.close(fd)
        fig.savefig(tmp)
        os.replace(tmp, png)
    except OSError as e:
        raise OutputError(f"cannot write {png}: {e.strerror}") from None
    finally:
        plt.close(fig)
        if tmp:
            Path(tmp).unlink(missing_ok=True)
    return png
