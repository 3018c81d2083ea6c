"""Flow table -> timeline.png: when each rank sends, coloured by parallelism dimension.

One row per rank (the first 64), split in two: the upper half is what the rank sends on the
fabric (full colour), the lower half what it sends over NVLink (the same hue, dark), so both stay
visible when they overlap. The picture is rasterized with numpy (occupancy per pixel column via
difference arrays), so a million transfers draw as fast as a hundred: the pipeline bubble, the TP
bursts and the DP buckets overlapping backward are visible at a glance.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ...tables import Flows, LinkKind
from . import style
from .style import DIM_COLOURS
from ..tables.trace_view import TraceView

COLUMNS = 1600
MAX_LANES = 64
NVLINK_SHADE = 0.55    # NVLink: the dimension's colour darkened to this fraction


def _rgb(hex_colour: str, dark: bool = False) -> np.ndarray:
    rgb = np.array([int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)], dtype=np.float64) / 255
    return rgb * NVLINK_SHADE if dark else rgb


def _occupancy(lane, start_ns, end_ns, lanes: int, ns_per_col: float) -> np.ndarray:
    """Boolean [lanes, COLUMNS]: is the lane sending during (part of) each pixel column?"""
    c0 = np.clip((start_ns / ns_per_col).astype(np.int64), 0, COLUMNS - 1)
    c1 = np.clip(np.ceil(end_ns / ns_per_col).astype(np.int64), c0 + 1, COLUMNS)
    diff = np.zeros((lanes, COLUMNS + 1), dtype=np.int64)
    np.add.at(diff, (lane, c0), 1)
    np.add.at(diff, (lane, c1), -1)
    return np.cumsum(diff[:, :COLUMNS], axis=1) > 0


def draw_timeline(view: TraceView, path: Path, title: str = "") -> Path:
    from matplotlib.patches import Patch
    plt = style.plt()
    t_end_ns = max(1, int(view.end_ns.max())) if len(view.end_ns) else 1
    lanes = min(view.world, MAX_LANES)
    ns_per_col = t_end_ns / COLUMNS
    image = np.ones((2 * lanes, COLUMNS, 3))
    legend = []
    for link, dark, half in ((LinkKind.NET, False, 0), (LinkKind.NVLINK, True, 1)):
        for dim, colour in DIM_COLOURS.items():
            sel = (view.dim == dim) & (view.link == link) & (view.src_rank < lanes)
            if not sel.any():
                continue
            busy = _occupancy(view.src_rank[sel], view.start_ns[sel], view.end_ns[sel], lanes, ns_per_col)
            image[half::2][busy] = _rgb(colour, dark)
            legend.append(Patch(color=_rgb(colour, dark), label=f"{dim.name} {'NVLink' if dark else 'network'}"))
    fig, ax = plt.subplots(figsize=(12, 1.9 + 0.25 * lanes), dpi=110)
    unit, div = style.time_unit(t_end_ns)
    ax.imshow(image, aspect="auto", interpolation="nearest", extent=(0, t_end_ns / div, lanes - 0.5, -0.5))
    for k in range(1, lanes):
        ax.axhline(k - 0.5, color="#d0d0d0", linewidth=0.4)
    ax.set_yticks(range(lanes))
    ax.set_yticklabels([str(r) for r in range(lanes)], fontsize=8 if lanes <= 32 else 6)
    ax.set_xlabel(f"time ({unit})")
    ax.set_ylabel("sending rank\n(upper: network, lower: NVLink)")
    more = f" (first {lanes} of {view.world} ranks)" if view.world > lanes else ""
    ax.set_title((title or f"{view.title}: transfers per rank, one iteration") + more)
    if legend:
        return style.save(style.legend_below(fig, legend, ncol=min(len(legend), 6)), path)
    fig.tight_layout()
    return style.save(fig, path)


def write_timeline(flows: Flows, world: int, path: Path, title: str = "") -> Path:
    """timeline.png of a flow table (without a run: NIC facts are not needed here)."""
    r, ops = flows.rows, flows.ops.rows
    empty = np.zeros(0, np.int64)
    from ...tables import Ragged
    view = TraceView(title="", world=world, nic_names=[], nic_node=empty, nic_rail=empty,
                     src_rank=r["src_rank"], dst_rank=r["dst_rank"], src_nic=r["src_nic"], dst_nic=r["dst_nic"],
                     link=r["link"], dim=ops["dim"][r["op_id"]] if len(r) else np.zeros(0, np.uint8),
                     nbytes=r["bytes"], start_ns=r["start_ns"], end_ns=r["end_ns"], op_kind=ops["kind"],
                     op_dim=ops["dim"], op_iteration=ops["iteration"], op_gap_ns=ops["gap_ns"],
                     op_start_ns=empty, op_end_ns=empty, op_group=Ragged.empty(0))
    return draw_timeline(view, path, title)
