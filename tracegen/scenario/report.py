"""A timed scenario as tables, JSON and the text of its files (pure: the CLI writes them).

Per job: where it runs, its time in the scenario beside the same job alone at the same placement
(slowdown = scenario / alone, the JCT ratio), its iterations, busbw (median over its ops that cross
the fabric: op bytes / op time x NCCL's bus factor, % of the NIC port rate - report/kpi.py);
across jobs: Jain's fairness index of the slowdowns.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..config import show, show_path
from ..errors import ConfigError
from ..report.kpi import jain
from ..tables import CollKind, Dim


def _nodes_text(nodes: np.ndarray) -> str:
    nodes = [int(x) for x in nodes]
    runs, k = [], 0
    while k < len(nodes):
        j = k
        while j + 1 < len(nodes) and nodes[j + 1] == nodes[j] + 1:
            j += 1
        runs.append(f"{nodes[k]}" if j == k else f"{nodes[k]}-{nodes[j]}")
        k = j + 1
    return ",".join(runs)


def _pct(x) -> str:
    return "—" if x is None else f"{x:.1f}"


def scenario_tables(run) -> list[tuple[str, list[str], list[list[str]]]]:
    sc = run.scenario
    rows = []
    for j in run.jobs:
        rows.append([j.name, _nodes_text(j.nodes), f"{j.start_ns:,}", str(j.iterations), f"{j.jct_ns / 1e6:,.3f}",
                     f"{j.alone_jct_ns / 1e6:,.3f}", f"{j.slowdown:.3f}", _pct(j.busbw_pct), _pct(j.alone_busbw_pct)])
    fab = run.fabric
    ev = [_event_text(e, sc) for e in sc.events] or ["none"]
    head = [["jobs", str(len(run.jobs))], ["nodes", f"{sc.nodes} x {sc.hardware.cluster.gpus_per_node} GPUs"],
            ["fabric", f"{fab.kind}: {fab.switch_ids_text()}"], ["placement", sc.placement +
                                                                  (f" (seed {sc.seed})" if sc.placement == "random" else "")],
            *[["events" if k == 0 else "", text] for k, text in enumerate(ev)],     # one a row, in time
            ["ecmp on failure", sc.ecmp_on_failure], ["detail", run.detail],
            ["Jain fairness of slowdowns", f"{run.fairness:.4f}"]]
    return [(f"Scenario {sc.name}", ["what", "value"], head),
            ("Jobs: time in the scenario vs alone (same nodes, same fabric)",
             ["job", "nodes", "start ns", "iters", "JCT ms", "alone ms", "slowdown", "busbw %", "alone busbw %"], rows)]


def _when(e) -> str:
    if not e.at_ns and e.until_ns is None:
        return ""
    return f" from {e.at_ns:,} ns" + ("" if e.until_ns is None else f" until {e.until_ns:,} ns")


def _event_text(e, sc) -> str:
    if e.type == "down":
        return f"{e.switch or e.link} down{_when(e)}"
    if e.type == "degrade":
        return f"{e.link} at {e.gbps} Gb/s{_when(e)}"
    return f"{sc.jobs[e.job].name} rank {e.rank} x{e.factor:g} compute"


def _event_json(e, sc) -> dict:
    """One event of scenario.json: a flap of the file is listed as its down intervals."""
    when = {"at_ns": e.at_ns, "until_ns": e.until_ns}
    if e.type == "down":
        return {"type": "down", **({"switch": e.switch} if e.switch else {"link": e.link}), **when}
    if e.type == "degrade":
        return {"type": "degrade", "link": e.link, "gbps": e.gbps, **when}
    return {"type": "straggler", "job": sc.jobs[e.job].name, "rank": e.rank, "factor": e.factor}


def scenario_json(run) -> dict:
    sc = run.scenario
    return {
        "scenario": sc.name, "nodes": sc.nodes, "gpus_per_node": sc.hardware.cluster.gpus_per_node,
        "placement": sc.placement, "seed": sc.seed, "ecmp_on_failure": sc.ecmp_on_failure, "detail": run.detail,
        "events": [_event_json(e, sc) for e in sc.events],
        "fairness_jain": run.fairness,
        "jobs": [{"name": j.name, "source": e.source, "nodes": [int(x) for x in j.nodes], "start_ns": j.start_ns,
                  "iterations": j.iterations, "end_ns": j.end_ns, "jct_ns": j.jct_ns, "alone_jct_ns": j.alone_jct_ns,
                  "slowdown": j.slowdown, "iteration_ns": j.iteration_ns, "alone_iteration_ns": j.alone_iteration_ns,
                  "busbw_pct": j.busbw_pct, "alone_busbw_pct": j.alone_busbw_pct,
                  "dscp": e.job.output.dscp if e.dscp is None else e.dscp,
                  "pcp": (e.job.output.pcp if e.pcp is None else e.pcp) if e.job.output.vlan else None}
                 for j, e in zip(run.jobs, sc.jobs)],
    }


def ops_csv(run) -> str:
    """Every op of every job: job, its op id in the job, kind, dimension, iteration, scenario GPUs
    (first..last), bytes, start and end ns."""
    ops, f = run.ops, run.flows
    lines = ["job,op_id,job_op_id,kind,dim,iteration,ranks,bytes,start_ns,end_ns"]
    lens = ops.groups.lengths()
    names = [j.name for j in run.jobs]
    los = [j.op_lo for j in run.jobs]
    for o in range(len(ops)):
        r = ops.rows[o]
        if r["kind"] == CollKind.MARKER:
            continue
        j = int(run.op_job[o])
        g = ops.groups[o]
        lines.append(f"{names[j]},{o},{o - los[j]},{CollKind(int(r['kind'])).label},{Dim(int(r['dim'])).name},"
                     f"{int(r['iteration'])},{int(lens[o])}:{int(g[0]) if len(g) else -1}..{int(g[-1]) if len(g) else -1},"
                     f"{int(r['bytes'])},{int(f.op_start_ns[o])},{int(f.op_end_ns[o])}")
    return "\n".join(lines) + "\n"


def link_bytes_csv(run) -> str:
    """Per fabric link direction between switches or NIC->leaf: bytes each job put on it (from
    the flows' routes; with events during the run, flows move between routes: the engine's
    per-link bytes over time, split between the jobs as link_time.csv splits them)."""
    f, fab = run.flows, run.fabric
    got = link_time(run) if fab.epochs else None
    if got is not None:
        edges, links, jobs, gbps = got
        width = int(edges[1] - edges[0])
        names = [j.name for j in run.jobs]
        tot = gbps.sum(axis=1) * width / 8
        lines = ["link,job,bytes"]
        for ln, j, v in zip(links.tolist(), jobs.tolist(), tot.tolist()):
            if v > 0:
                lines.append(f"{fab.link_dir_name(ln)},{names[j]},{int(round(v))}")
        return "\n".join(lines) + "\n"
    r = f.rows
    net = r["link"] == 1
    if f.conns is None or not net.any():
        return "link,job,bytes\n"
    job_of_row = run.op_job[r["op_id"]]
    conn = f.row_conn[net]
    q = f.conns.qps
    out: dict[tuple[int, int], float] = {}
    wire = (f.row_net_wire[net] if f.row_net_wire is not None else r["wire_bytes"][net]).astype(float)
    for k in range(q):
        route = f.conns.route[conn * q + k]
        for col in range(route.shape[1]):
            d = route[:, col]
            ok = d >= 0
            key = d[ok] * 1024 + job_of_row[net][ok]
            u, inv = np.unique(key, return_inverse=True)
            s = np.bincount(inv, weights=wire[ok] / q)
            for kk, v in zip(u.tolist(), s.tolist()):
                out[(kk // 1024, kk % 1024)] = out.get((kk // 1024, kk % 1024), 0.0) + v
    names = [j.name for j in run.jobs]
    lines = ["link,job,bytes"]
    for (d, j), v in sorted(out.items()):
        lines.append(f"{fab.link_dir_name(d)},{names[j]},{int(round(v))}")
    return "\n".join(lines) + "\n"


TIME_BINS = 50                 # link_time.csv: the scenario's span in this many equal bins
MAX_TIME_CELLS = 20_000_000    # (route entries x bins) beyond which link_time.csv is left out


def _route_entries(run):
    """Per (NET row, QP, hop): the row, its link direction and its share of the row's bytes."""
    f = run.flows
    r = f.rows
    net = np.flatnonzero(r["link"] == 1)
    if f.conns is None or not len(net):
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    q = f.conns.qps
    qp = (f.row_conn[net][:, None] * q + np.arange(q)[None, :]).reshape(-1)
    route = f.conns.route[qp]                                 # [rows x q, hops]
    rows = np.repeat(np.repeat(net, q), route.shape[1])
    links = route.reshape(-1)
    ok = links >= 0
    rows, links = rows[ok], links[ok]
    if run.fabric.epochs:
        # events during the run: a row's QP also crosses its routes of the later epochs (the
        # engine moved it there); each route's entries count for the row's share between jobs
        # (link_time splits the engine's exact per-link bytes by them)
        from ..fabric.timeline import epoch_routes
        c = f.conns
        tables = epoch_routes(run.fabric, np.repeat(c.src_nic, q), np.repeat(c.dst_nic, q), c.sport, c.plane,
                              run.fabric.ip_version, dest_qpn=c.qpn_dst)
        next(tables)
        seen = set()
        for alt in tables:
            alt = alt[qp]
            w = max(alt.shape[1], route.shape[1])
            a = np.pad(alt, ((0, 0), (0, w - alt.shape[1])), constant_values=-1)
            b = np.pad(route, ((0, 0), (0, w - route.shape[1])), constant_values=-1)
            moved = np.flatnonzero((a != b).any(axis=1))
            key = a[moved].tobytes() + moved.tobytes()
            if key in seen:
                continue
            seen.add(key)
            r2 = np.repeat(np.repeat(net, q)[moved], w)
            l2 = a[moved].reshape(-1)
            rows, links = np.r_[rows, r2[l2 >= 0]], np.r_[links, l2[l2 >= 0]]
    return rows, links, np.full(len(rows), 1.0 / q)


def link_time_csv(run) -> str | None:
    """link_time.csv (see link_time), or None when too big to tabulate."""
    got = link_time(run)
    if got is None:
        return None
    edges, links, jobs, gbps = got
    names = [j.name for j in run.jobs]
    lines = ["link,job," + ",".join(f"gbps_{int(a)}_{int(b)}" for a, b in zip(edges[:-1], edges[1:]))]
    for ln, j, row in zip(links.tolist(), jobs.tolist(), gbps):
        lines.append(f"{run.fabric.link_dir_name(ln)},{names[j]}," + ",".join(f"{x:.3f}" for x in row))
    return "\n".join(lines) + "\n"


def link_time(run):
    """Per link direction, job and time bin: the Gb/s the job's bytes on it average over the bin.
    A link's bytes per bin are the engine's own (Flows.link_load: its exact load over time), split
    between the jobs in proportion to their flows' bytes spread evenly over each flow's start..end
    (the engine keeps no per-job load). (bin edges ns, link of each row, job of each row, Gb/s
[rows, bins]), or None when too big to tabulate."""
    f = run.flows
    r = f.rows
    rows, links, share = _route_entries(run)
    if len(rows) * TIME_BINS > MAX_TIME_CELLS:
        return None
    end = int(r["end_ns"].max()) if len(r) else 0
    width = max(1, -(-end // TIME_BINS))
    edges = np.arange(TIME_BINS + 1, dtype=np.int64) * width
    s, e = r["start_ns"][rows].astype(np.int64), r["end_ns"][rows].astype(np.int64)
    wire = (f.row_net_wire if f.row_net_wire is not None else r["wire_bytes"])[rows] * share
    over = np.clip(np.minimum(e[:, None], edges[None, 1:]) - np.maximum(s[:, None], edges[None, :-1]), 0, None)
    span = np.maximum(e - s, 1)
    frac = np.where((e == s)[:, None], (s[:, None] >= edges[None, :-1]) & (s[:, None] < edges[None, 1:]),
                    over / span[:, None])
    job = run.op_job[r["op_id"][rows]]
    n_jobs = len(run.jobs)
    key, inv = np.unique(links * n_jobs + job, return_inverse=True)
    acc = np.zeros((len(key), TIME_BINS))
    np.add.at(acc, inv, frac * wire[:, None])
    load = f.link_load
    if load is not None and len(key):
        used, exact = load.binned_used(width, TIME_BINS)
        total = np.zeros((int(key.max()) // n_jobs + 1, TIME_BINS))
        ok = used < len(total)
        total[used[ok]] = exact[ok][:, :TIME_BINS]
        lk = key // n_jobs
        est = np.zeros_like(total)
        np.add.at(est, lk, acc)
        whole = acc.sum(axis=1)
        # jobs' shares of each bin; a bin the spread misses (a flow's tail) goes by whole-run shares
        per_link = np.zeros(len(total))
        np.add.at(per_link, lk, whole)
        fallback = whole / np.maximum(per_link[lk], 1e-300)
        shares = np.where(est[lk] > 0, acc / np.maximum(est[lk], 1e-300), fallback[:, None])
        acc = shares * total[lk]
    return edges, key // n_jobs, key % n_jobs, acc * 8 / width


def summary_md(run) -> str:
    out = []
    for title, header, rows in scenario_tables(run):
        out.append(f"## {title}\n")
        if any(header):
            out.append("| " + " | ".join(header) + " |")
            out.append("|" + "---|" * len(header))
        else:
            out.append("| | |\n|---|---|")
        out += ["| " + " | ".join(r) + " |" for r in rows]
        out.append("")
    return "\n".join(out)


SCENARIO_FILES = ("scenario.json", "ops.csv", "link_bytes.csv", "link_time.csv", "summary.md", "jobs_gantt.png",
                  "slowdowns.png", "link_load_by_job.png")


def scenario_files(run) -> dict[str, str]:
    """The files `generate --scenario` writes, by name (link_time.csv unless too big)."""
    out = {"scenario.json": json.dumps(scenario_json(run), indent=1) + "\n", "ops.csv": ops_csv(run),
           "link_bytes.csv": link_bytes_csv(run), "summary.md": summary_md(run)}
    timeline = link_time_csv(run)
    if timeline is not None:
        out["link_time.csv"] = timeline
    return out


# --- `tracegen report DIR` on a scenario's folder: scenario.json read back --------------------------

SCENARIO_JSON_MAX_BYTES = 64 << 20
_FIX = "the file is damaged: write the scenario again (tracegen generate --scenario FILE)"


@dataclass(frozen=True)
class SavedJob:
    name: str
    nodes: list
    start_ns: int
    iterations: int
    jct_ns: int
    alone_jct_ns: int
    busbw_pct: float | None
    alone_busbw_pct: float | None

    @property
    def slowdown(self) -> float:
        return self.jct_ns / self.alone_jct_ns if self.alone_jct_ns else float("nan")


@dataclass(frozen=True)
class SavedScenario:
    """What `report` reads of a scenario folder (scenario.json): enough for the jobs' table and
    the slowdown picture (scenario_plots.slowdowns takes it as it takes a run)."""
    name: str
    jobs: list

    @property
    def fairness(self) -> float:
        return jain(np.array([j.slowdown for j in self.jobs])) if len(self.jobs) > 1 else 1.0


def _bad(path, where: str, what: str) -> ConfigError:
    return ConfigError(f"{path}{': ' + where if where else ''}: {what}; {_FIX}")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _get(path, doc: dict, key: str, kind: str, where: str = ""):
    if key not in doc:
        raise _bad(path, where.rstrip("."), f"no key {key!r}")
    v = doc[key]
    ok = {"int": lambda x: _is_int(x) and 0 <= x < 2**63, "str": lambda x: isinstance(x, str),
          "list": lambda x: isinstance(x, list),
          "pct": lambda x: x is None or (isinstance(x, (int, float)) and not isinstance(x, bool) and np.isfinite(x))}[kind](v)
    if not ok:
        what = {"int": "a non-negative integer", "str": "a string", "list": "a list", "pct": "a number or null"}[kind]
        raise _bad(path, f"{where}{key}", f"{show(v)} is not {what}")
    return v


def read_scenario_folder(folder: Path) -> SavedScenario:
    """scenario.json of a folder `generate --scenario` wrote, type-checked: ConfigError (one line
    naming the file and the key) when damaged."""
    path = Path(folder) / "scenario.json"
    shown = show_path(path)
    if path.stat().st_size > SCENARIO_JSON_MAX_BYTES:
        raise _bad(shown, "", f"larger than {SCENARIO_JSON_MAX_BYTES >> 20} MiB")
    try:
        doc = json.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as e:
        raise _bad(shown, f"byte {e.start}", "not UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise _bad(shown, f"line {e.lineno} column {e.colno}", f"not JSON ({e.msg})") from None
    except RecursionError:
        raise _bad(shown, "", "nested too deeply") from None
    if not isinstance(doc, dict):
        raise _bad(shown, "", f"a JSON object is expected, not {type(doc).__name__}")
    name = _get(shown, doc, "scenario", "str")
    jobs_doc = _get(shown, doc, "jobs", "list")
    if not jobs_doc:
        raise _bad(shown, "jobs", "no jobs")
    jobs = []
    for i, j in enumerate(jobs_doc):
        where = f"jobs[{i}]."
        if not isinstance(j, dict):
            raise _bad(shown, f"jobs[{i}]", f"{show(j)} is not an object")
        nodes = _get(shown, j, "nodes", "list", where)
        if not all(_is_int(n) and n >= 0 for n in nodes):
            raise _bad(shown, f"{where}nodes", "a list of node numbers is expected")
        jobs.append(SavedJob(_get(shown, j, "name", "str", where), nodes, _get(shown, j, "start_ns", "int", where),
                             _get(shown, j, "iterations", "int", where), _get(shown, j, "jct_ns", "int", where),
                             _get(shown, j, "alone_jct_ns", "int", where), _get(shown, j, "busbw_pct", "pct", where),
                             _get(shown, j, "alone_busbw_pct", "pct", where)))
        if jobs[-1].alone_jct_ns == 0:
            raise _bad(shown, f"{where}alone_jct_ns", "0: no time alone to compare with")
    return SavedScenario(name, jobs)


def saved_tables(saved: SavedScenario) -> list[tuple[str, list[str], list[list[str]]]]:
    """The jobs' table of scenario_tables (slowdown = JCT / alone, recomputed) and Jain's index."""
    rows = [[j.name, _nodes_text(np.array(j.nodes)), f"{j.start_ns:,}", str(j.iterations), f"{j.jct_ns / 1e6:,.3f}",
             f"{j.alone_jct_ns / 1e6:,.3f}", f"{j.slowdown:.3f}", _pct(j.busbw_pct), _pct(j.alone_busbw_pct)]
            for j in saved.jobs]
    return [(f"Scenario {saved.name}", ["what", "value"],
             [["jobs", str(len(saved.jobs))], ["Jain fairness of slowdowns", f"{saved.fairness:.4f}"]]),
            ("Jobs: time in the scenario vs alone (same nodes, same fabric)",
             ["job", "nodes", "start ns", "iters", "JCT ms", "alone ms", "slowdown", "busbw %", "alone busbw %"], rows)]
