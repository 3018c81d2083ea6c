"""A scenario's pictures (tracegen generate --scenario, tracegen report DIR): the jobs' ops over
time, the busiest switch links' load by job, and each job's slowdown against its run alone - all
drawn from the scenario's files read back (scenario.json, ops.csv, link_time.csv), never from the
timed run, so `report` redraws every one without timing the scenario again."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .style import DIM_COLOURS, legend_below, plt, save, time_unit
from ...tables import Dim

JOB_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
               "#bcbd22", "#17becf"]
BUSIEST_LINKS = 6


def job_gantt(saved, path: Path) -> Path:
    """One lane per job: each op a bar from its release to its end, coloured by dimension.
    saved: scenario.saved.SavedScenario with its ops (ops.csv read back)."""
    p = plt()
    ops = saved.ops
    end = max([j.end_ns for j in saved.jobs] + [1])
    unit, per = time_unit(end)
    fig, ax = p.subplots(figsize=(10, 1.0 + 0.6 * len(saved.jobs)))
    for k in range(len(saved.jobs)):
        sel = np.flatnonzero(ops.job == k)
        for d in np.unique(ops.dim[sel]).tolist():
            s = sel[ops.dim[sel] == d]
            spans = [(a / per, max(b - a, 1) / per) for a, b in zip(ops.start_ns[s], ops.end_ns[s])]
            ax.broken_barh(spans, (k - 0.35, 0.7), color=DIM_COLOURS.get(Dim(d), "#7f7f7f"), alpha=0.6)
    ax.set_yticks(range(len(saved.jobs)), [j.name for j in saved.jobs])
    ax.set_xlabel(f"time ({unit})")
    ax.invert_yaxis()
    handles = [p.Rectangle((0, 0), 1, 1, color=DIM_COLOURS[d], alpha=0.6, label=d.name)
               for d in sorted({Dim(int(x)) for x in ops.dim} & set(DIM_COLOURS))]
    return save(legend_below(fig, handles, max(1, len(handles))), path)


def link_load_by_job(saved, path: Path) -> Path:
    """The busiest switch-to-switch link directions: each job's Gb/s over time, stacked.
    saved: a SavedScenario with its link series (link_time.csv read back)."""
    p = plt()
    lt = saved.link_time
    names = lt.link_names
    switch = np.array(["node" not in n for n in names], bool)
    if not switch.any():                 # one leaf: no switch link carries anything, the NICs then
        switch = np.ones(len(names), bool)
    total: dict[str, float] = {}
    first: dict[str, int] = {}
    for k in np.flatnonzero(switch).tolist():
        total[names[k]] = total.get(names[k], 0.0) + float(lt.gbps[k].sum())
        first.setdefault(names[k], k)
    top = sorted(total, key=lambda n: (-total[n], first[n]))[:BUSIEST_LINKS]
    edges = lt.edges
    unit, per = time_unit(int(edges[-1]))
    mid = (edges[:-1] + edges[1:]) / 2 / per
    fig, axes = p.subplots(len(top), 1, figsize=(10, 1.2 + 1.4 * len(top)), sharex=True, squeeze=False)
    for ax, name in zip(axes[:, 0], top):
        rows = [k for k in range(len(names)) if names[k] == name]
        ax.stackplot(mid, *[lt.gbps[r] for r in rows],
                     colors=[JOB_COLOURS[int(lt.jobs[r]) % len(JOB_COLOURS)] for r in rows], alpha=0.8)
        rate = lt.link_gbps[rows[0]]
        ax.axhline(rate, color="black", lw=0.8, ls="--")
        ax.set_ylim(0, rate * 1.1)
        ax.set_ylabel("Gb/s", fontsize=8)
        ax.set_title(name, fontsize=9, loc="left")
    axes[-1, 0].set_xlabel(f"time ({unit})")
    handles = [p.Rectangle((0, 0), 1, 1, color=JOB_COLOURS[k % len(JOB_COLOURS)], label=j.name)
               for k, j in enumerate(saved.jobs)]
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


PICTURES = ("jobs_gantt.png", "slowdowns.png", "link_load_by_job.png")


def scenario_pictures(saved) -> dict:
    """Picture name -> draw(path), of what the saved files hold: `generate --scenario` and
    `report DIR` both draw from the files read back (scenario.saved.read_scenario_texts), so the
    two draw the same bytes. No link series (link_time.csv too big, or nothing on a link): no
    link picture; no ops table: no Gantt."""
    out = {}
    if saved.ops is not None:
        out["jobs_gantt.png"] = lambda path: job_gantt(saved, path)
    out["slowdowns.png"] = lambda path: slowdowns(saved, path)
    if saved.link_time is not None and len(saved.link_time.link_names):
        out["link_load_by_job.png"] = lambda path: link_load_by_job(saved, path)
    return out
