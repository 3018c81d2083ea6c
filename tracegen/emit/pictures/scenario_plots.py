"""A scenario's pictures (tracegen generate --scenario): the jobs' ops over time, the busiest
switch links' load by job, and each job's slowdown against its run alone."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .style import DIM_COLOURS, legend_below, plt, save, time_unit
from ...tables import CollKind, Dim

JOB_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
               "#bcbd22", "#17becf"]
BUSIEST_LINKS = 6


def job_gantt(run, path: Path) -> Path:
    """One lane per job: each op a bar from its release to its end, coloured by dimension."""
    p = plt()
    ops, f = run.ops, run.flows
    end = int(f.op_end_ns.max()) if len(ops) else 1
    unit, per = time_unit(end)
    fig, ax = p.subplots(figsize=(10, 1.0 + 0.6 * len(run.jobs)))
    data = ops.rows["kind"] != CollKind.MARKER
    for k, j in enumerate(run.jobs):
        sel = np.flatnonzero(data[j.op_lo:j.op_hi]) + j.op_lo
        for d in np.unique(ops.rows["dim"][sel]).tolist():
            s = sel[ops.rows["dim"][sel] == d]
            spans = [(a / per, max(b - a, 1) / per) for a, b in zip(f.op_start_ns[s], f.op_end_ns[s])]
            ax.broken_barh(spans, (k - 0.35, 0.7), color=DIM_COLOURS.get(Dim(d), "#7f7f7f"), alpha=0.6)
    ax.set_yticks(range(len(run.jobs)), [j.name for j in run.jobs])
    ax.set_xlabel(f"time ({unit})")
    ax.invert_yaxis()
    handles = [p.Rectangle((0, 0), 1, 1, color=DIM_COLOURS[d], alpha=0.6, label=d.name)
               for d in sorted({Dim(int(x)) for x in ops.rows["dim"][data]} & set(DIM_COLOURS))]
    return save(legend_below(fig, handles, max(1, len(handles))), path)


def link_load_by_job(run, got, path: Path) -> Path:
    """The busiest switch-to-switch link directions: each job's Gb/s over time, stacked."""
    p = plt()
    edges, links, jobs, gbps = got
    fab = run.fabric
    names = [fab.link_dir_name(int(x)) for x in links]
    switch = np.array(["node" not in n for n in names], bool)
    pick = links[switch]
    if not len(pick):                    # one leaf: no switch link carries anything, the NICs then
        switch = np.ones(len(links), bool)
        pick = links
    total = {int(ln): 0.0 for ln in pick}
    for ln, row in zip(links[switch], gbps[switch]):
        total[int(ln)] += float(row.sum())
    top = sorted(total, key=lambda ln: (-total[ln], ln))[:BUSIEST_LINKS]
    unit, per = time_unit(int(edges[-1]))
    mid = (edges[:-1] + edges[1:]) / 2 / per
    fig, axes = p.subplots(len(top), 1, figsize=(10, 1.2 + 1.4 * len(top)), sharex=True, squeeze=False)
    for ax, ln in zip(axes[:, 0], top):
        rows = np.flatnonzero(links == ln)
        ys = [gbps[r] for r in rows]
        ax.stackplot(mid, *ys, colors=[JOB_COLOURS[int(jobs[r]) % len(JOB_COLOURS)] for r in rows], alpha=0.8)
        rate = int(fab.links["gbps"][ln >> 1])
        ax.axhline(rate, color="black", lw=0.8, ls="--")
        ax.set_ylim(0, rate * 1.1)
        ax.set_ylabel("Gb/s", fontsize=8)
        ax.set_title(fab.link_dir_name(ln), fontsize=9, loc="left")
    axes[-1, 0].set_xlabel(f"time ({unit})")
    handles = [p.Rectangle((0, 0), 1, 1, color=JOB_COLOURS[k % len(JOB_COLOURS)], label=j.name)
               for k, j in enumerate(run.jobs)]
    return save(legend_below(fig, handles, min(len(handles), 6)), path)


def slowdowns(run, path: Path) -> Path:
    """Each job's time in the scenario over its time alone (1 = no interference)."""
    p = plt()
    fig, ax = p.subplots(figsize=(2 + 0.8 * len(run.jobs), 3.2))
    x = np.arange(len(run.jobs))
    ax.bar(x, [j.slowdown for j in run.jobs], color=[JOB_COLOURS[k % len(JOB_COLOURS)] for k in x])
    ax.axhline(1.0, color="black", lw=0.8, ls="--")
    ax.set_xticks(x, [j.name for j in run.jobs])
    ax.set_ylabel("slowdown (scenario / alone)")
    ax.set_title(f"Jain fairness {run.fairness:.3f}", fontsize=9)
    fig.tight_layout()
    return save(fig, path)


def draw_scenario(run, got, dest: Path) -> list[Path]:
    """Every picture into dest; `got` is scenario.report.link_time(run) (None: too big, no link picture)."""
    out = [job_gantt(run, dest / "jobs_gantt.png"), slowdowns(run, dest / "slowdowns.png")]
    if got is not None and len(got[1]):
        out.append(link_load_by_job(run, got, dest / "link_load_by_job.png"))
    return out
