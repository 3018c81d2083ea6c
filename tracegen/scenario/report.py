"""A timed scenario as tables, JSON and the text of its files (pure: the CLI writes them).

Per job: where it runs, its time in the scenario beside the same job alone at the same placement
(slowdown = scenario / alone, the JCT ratio), its iterations, busbw (median over its ops that cross
the fabric: op bytes / op time x NCCL's bus factor, % of the NIC port rate - report/kpi.py);
across jobs: Jain's fairness index of the slowdowns.
"""
from __future__ import annotations

import json

import numpy as np

from ..tables import CollKind, Dim
from .link_split import link_time, link_time_csv


def nodes_text(nodes: np.ndarray) -> str:
    nodes = [int(x) for x in nodes]
    runs, k = [], 0
    while k < len(nodes):
        j = k
        while j + 1 < len(nodes) and nodes[j + 1] == nodes[j] + 1:
            j += 1
        runs.append(f"{nodes[k]}" if j == k else f"{nodes[k]}-{nodes[j]}")
        k = j + 1
    return ",".join(runs)


def pct_text(x) -> str:
    return "—" if x is None else f"{x:.1f}"


def scenario_tables(run) -> list[tuple[str, list[str], list[list[str]]]]:
    sc = run.scenario
    rows = []
    for j in run.jobs:
        rows.append([j.name, nodes_text(j.nodes), f"{j.start_ns:,}", str(j.iterations), f"{j.jct_ns / 1e6:,.3f}",
                     f"{j.alone_jct_ns / 1e6:,.3f}", f"{j.slowdown:.3f}", pct_text(j.busbw_pct), pct_text(j.alone_busbw_pct)])
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
