"""Flow table -> timeline.png: when each rank sends, coloured by parallelism dimension.

One lane per rank (the first 64); network transfers in full colour, NVLink in a pale shade. The
picture is rasterized with numpy (occupancy per pixel column via difference arrays), so a
million transfers draw as fast as a hundred: the pipeline bubble, the TP bursts and the DP
buckets overlapping backward are visible at a glance.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..tables import Dim, Flows, LinkKind

DIM_COLOURS = {Dim.DP: "#1f77b4", Dim.TP: "#ff7f0e", Dim.PP: "#2ca02c", Dim.SP: "#d62728",
               Dim.CP: "#9467bd", Dim.EP: "#8c564b", Dim.EDP: "#17becf", Dim.EMB: "#e377c2"}
COLUMNS = 1600
MAX_LANES = 64


def _rgb(hex_colour: str, pale: bool) -> np.ndarray:
    rgb = np.array([int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)], dtype=np.float64) / 255
    return 1 - (1 - rgb) * 0.35 if pale else rgb


def _occupancy(lane, start_ns, end_ns, lanes: int, ns_per_col: float) -> np.ndarray:
    """Boolean [lanes, COLUMNS]: is the lane sending during (part of) each pixel column?"""
    c0 = np.clip((start_ns / ns_per_col).astype(np.int64), 0, COLUMNS - 1)
    c1 = np.clip(np.ceil(end_ns / ns_per_col).astype(np.int64), c0 + 1, COLUMNS)
    diff = np.zeros((lanes, COLUMNS + 1), dtype=np.int64)
    np.add.at(diff, (lane, c0), 1)
    np.add.at(diff, (lane, c1), -1)
    return np.cumsum(diff[:, :COLUMNS], axis=1) > 0


def write_timeline(flows: Flows, world: int, path: Path, title: str = "") -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    r = flows.rows
    dims = flows.ops.rows["dim"][r["op_id"]] if len(r) else np.zeros(0, np.uint8)
    t_end_ns = max(1, int(r["end_ns"].max())) if len(r) else 1
    lanes = min(world, MAX_LANES)
    ns_per_col = t_end_ns / COLUMNS
    image = np.ones((lanes, COLUMNS, 3))
    legend = []
    # NVLink first, network on top: a lane sending on the fabric shows the fabric colour
    for link, pale in ((LinkKind.NVLINK, True), (LinkKind.NET, False)):
        for dim, colour in DIM_COLOURS.items():
            sel = (dims == dim) & (r["link"] == link) & (r["src_rank"] < lanes)
            if not sel.any():
                continue
            busy = _occupancy(r["src_rank"][sel], r["start_ns"][sel], r["end_ns"][sel], lanes, ns_per_col)
            image[busy] = _rgb(colour, pale)
            legend.append(Patch(color=_rgb(colour, pale),
                                label=f"{dim.name} {'NVLink' if pale else 'network'}"))
    fig, ax = plt.subplots(figsize=(12, 1.9 + 0.22 * lanes), dpi=110)
    unit, div = ("ms", 1e6) if t_end_ns >= 10_000_000 else ("µs", 1e3)
    ax.imshow(image, aspect="auto", interpolation="nearest",
              extent=(0, t_end_ns / div, lanes - 0.5, -0.5))
    ax.set_xlabel(f"time ({unit})")
    ax.set_ylabel("sending rank")
    ax.set_title(title or "transfers per rank")
    if legend:
        ax.legend(handles=legend, loc="upper center", bbox_to_anchor=(0.5, -0.25 if lanes <= 8 else -0.08),
                  ncol=6, fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)
    return path
