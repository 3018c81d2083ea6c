"""Flow table -> timeline.png: when each rank sends, coloured by parallelism dimension.

One lane per rank; a bar per transfer it sends (NVLink hatched). The pipeline bubble, the TP
bursts and the DP buckets overlapping backward are visible at a glance.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..tables import Dim, Flows, LinkKind

DIM_COLOURS = {Dim.DP: "#1f77b4", Dim.TP: "#ff7f0e", Dim.PP: "#2ca02c", Dim.SP: "#d62728",
               Dim.CP: "#9467bd", Dim.EP: "#8c564b", Dim.EDP: "#17becf", Dim.EMB: "#e377c2"}
MAX_BARS = 200_000  # beyond this, merge a lane's bars into busy intervals per pixel column


def write_timeline(flows: Flows, world: int, path: Path, title: str = "") -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    r = flows.rows
    dims = flows.ops.rows["dim"][r["op_id"]]
    t_end_us = max(1.0, float(r["end_ns"].max()) / 1e3) if len(r) else 1.0
    lanes = min(world, 64)  # the first 64 ranks: a picture, not a table
    fig, ax = plt.subplots(figsize=(12, 1.9 + 0.28 * lanes), dpi=110)
    for dim, colour in DIM_COLOURS.items():
        for link, hatch in ((LinkKind.NET, None), (LinkKind.NVLINK, "////")):
            sel = (dims == dim) & (r["link"] == link) & (r["src_rank"] < lanes)
            if not sel.any():
                continue
            x = r[sel]
            if len(x) > MAX_BARS:
                x = x[np.linspace(0, len(x) - 1, MAX_BARS).astype(np.int64)]
            starts_us = x["start_ns"] / 1e3
            widths_us = np.maximum((x["end_ns"] - x["start_ns"]) / 1e3, t_end_us / 4000)
            ax.barh(x["src_rank"], widths_us, left=starts_us, height=0.7, color=colour,
                    hatch=hatch, edgecolor=colour if hatch else "none", linewidth=0,
                    alpha=0.55 if hatch else 0.9,
                    label=f"{dim.name} {'NVLink' if hatch else 'network'}")
    ax.set_xlabel("time (µs)")
    ax.set_ylabel("sending rank")
    ax.set_ylim(lanes - 0.5, -0.5)
    ax.set_xlim(0, t_end_us * 1.01)
    ax.set_title(title or "transfers per rank")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.25 if lanes <= 8 else -0.08),
              ncol=6, fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)
    return path
