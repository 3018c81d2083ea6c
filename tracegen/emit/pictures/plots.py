"""Pictures of a trace (matplotlib PNG): what a network engineer looks at first.

Every picture is drawn from a `TraceView`: the columns of the flow and op tables plus the few facts
about the fabric a picture needs (ranks, NIC names, rails). A view is built from a pipeline run
(`TraceView.from_run`, while generating) or from a written trace folder (`TraceView.from_dir`:
flows.parquet or flows.csv, ops.*, summary.json), so `tracegen report DIR` redraws the same PNGs.

PICTURES maps a file name to its drawing function `draw(view, path) -> path`. To add one (the
fabric work's `link_utilisation.png`: utilisation over time of the busiest links, from the flows'
`route` column and the link rates in summary.json), add the columns it needs to TraceView
(`extra` holds any further flow column read from disk) and one entry here.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from ... import progress
from ...tables import CollKind, Dim, LinkKind
from .style import COMPUTE_COLOUR, DIM_COLOURS  # noqa: F401  (DIM_COLOURS: for users of this module)
from .style import legend_below as _legend_below, plt as _plt, save as _save, time_unit as _time_unit
from .timeline import draw_timeline
from ..tables.trace_view import TOP_LINKS, TraceView, top_link_utilisation  # noqa: F401  (users of this module)

MAX_RANKS = 64          # lanes in the per-rank pictures (the first ranks)
MAX_MATRIX = 128        # NIC-to-NIC matrix: up to this many rows (more NICs are binned)


# --- helpers -----------------------------------------------------------------------------------

def _human_bytes(n: float) -> str:
    for unit, k in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            return f"{n / k:.3g} {unit}"
    return f"{n:.0f} B"


def _merge(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if not len(start):
        return start, end
    o = np.argsort(start, kind="stable")
    s, e = start[o], np.maximum.accumulate(end[o])
    new = np.ones(len(s), bool)
    new[1:] = s[1:] > e[:-1]
    idx = np.flatnonzero(new)
    return s[idx], np.append(e[idx[1:] - 1], e[-1])


# --- Gantt: per rank, compute and collectives of one iteration ------------------------------------

def gantt(view: TraceView, path: Path, iteration: int = 0) -> Path:
    """Per-rank Gantt of one iteration: compute (grey, upper half of a rank's row) and the
    collectives the rank takes part in (lower half), coloured by parallelism dimension."""
    plt = _plt()
    from matplotlib.patches import Patch
    lanes = min(view.world, MAX_RANKS)
    glen = view.op_group.lengths()
    pair_op = np.repeat(np.arange(len(view.op_kind)), glen)
    pair_rank = view.op_group.values.astype(np.int64)
    ok = (view.op_iteration[pair_op] == iteration) & (view.op_start_ns[pair_op] >= 0) & (pair_rank < lanes)
    pair_op, pair_rank = pair_op[ok], pair_rank[ok]
    first = np.zeros(len(glen) and len(view.op_group.values), bool)
    first[view.op_group.ptr[:-1][glen > 0]] = True
    first = first[ok]
    kind = view.op_kind[pair_op]
    start, end = view.op_start_ns[pair_op], view.op_end_ns[pair_op]
    t0 = max(0, int((start - view.op_gap_ns[pair_op]).min())) if len(start) else 0
    t1 = int(end.max()) if len(end) else 1
    unit, div = _time_unit(t1 - t0)
    fig, ax = plt.subplots(figsize=(13, 2.0 + 0.3 * lanes), dpi=110)
    legend = [Patch(color=COMPUTE_COLOUR, label="compute")]
    # compute: the gap before each op's release, on its members (p2p: the sender only)
    gap_sel = (view.op_gap_ns[pair_op] > 0) & ((kind != CollKind.SENDRECV) | first)
    for rank in range(lanes):
        sel = gap_sel & (pair_rank == rank)
        s, e = _merge(start[sel] - view.op_gap_ns[pair_op[sel]], start[sel])
        ax.broken_barh(list(zip((s - t0) / div, (e - s) / div)), (rank - 0.42, 0.38), color=COMPUTE_COLOUR,
                       linewidth=0)
    # collectives: long background ones (DP, EDP) first, the per-layer ones on top
    real = kind != CollKind.MARKER
    order = [Dim.DP, Dim.EDP, Dim.EMB, Dim.PP, Dim.EP, Dim.CP, Dim.SP, Dim.TP]
    for d in order:
        sel_d = real & (view.op_dim[pair_op] == d)
        if not sel_d.any():
            continue
        for rank in range(lanes):
            sel = sel_d & (pair_rank == rank)
            s, e = _merge(start[sel], np.maximum(end[sel], start[sel] + 1))
            ax.broken_barh(list(zip((s - t0) / div, (e - s) / div)), (rank + 0.02, 0.40),
                           color=DIM_COLOURS[d], linewidth=0)
        legend.append(Patch(color=DIM_COLOURS[d], label=f"{d.name} collective"))
    ax.set_ylim(lanes - 0.5, -0.5)
    ax.set_xlim(0, (t1 - t0) / div)
    ax.set_yticks(range(lanes))
    ax.set_yticklabels([str(r) for r in range(lanes)], fontsize=8 if lanes <= 32 else 6)
    ax.set_xlabel(f"time since the iteration's first compute ({unit})")
    ax.set_ylabel("rank (upper: compute, lower: collectives)")
    more = f", first {lanes} of {view.world} ranks" if view.world > lanes else ""
    ax.set_title(f"{view.title}: per-rank Gantt, iteration {iteration}{more}")
    ax.grid(axis="x", alpha=0.3)
    return _save(_legend_below(fig, legend, ncol=len(legend)), path)


# --- NIC-to-NIC traffic matrix -----------------------------------------------------------------

def traffic_matrix(view: TraceView, path: Path) -> Path:
    """Payload bytes each NIC sends to each NIC over the fabric (log colour scale), NICs ordered by
    rail then node, so rail-aligned traffic sits in blocks on the diagonal."""
    plt = _plt()
    from matplotlib.colors import LogNorm
    n = view.n_nics
    order = np.lexsort((view.nic_node, view.nic_rail))          # rail-major
    pos = np.empty(n, np.int64)
    pos[order] = np.arange(n)
    bins = min(n, MAX_MATRIX)
    bin_of = pos * bins // max(n, 1)
    net = view.link == LinkKind.NET
    m = np.zeros((bins, bins))
    if net.any():
        np.add.at(m, (bin_of[view.src_nic[net]], bin_of[view.dst_nic[net]]), view.nbytes[net].astype(np.float64))
    size = min(11, 4 + 0.09 * bins)
    fig, ax = plt.subplots(figsize=(size + 2.2, size), dpi=110)
    shown = np.ma.masked_equal(m, 0)
    vmax = m.max() if m.max() > 0 else 1
    vmin = max(m[m > 0].min() if (m > 0).any() else 1, vmax / 1e6)
    im = ax.imshow(shown, cmap="viridis", norm=LogNorm(vmin=vmin, vmax=vmax), interpolation="nearest")
    ax.set_facecolor("white")
    cb = fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    cb.set_label("payload bytes sent (log scale)")
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator
    lo, hi = int(np.ceil(np.log2(vmin * 1.15))), int(np.floor(np.log2(vmax / 1.15)))
    step = max(1, (hi - lo + 1) // 6)
    cb.ax.yaxis.set_major_locator(FixedLocator([vmin, *[2.0 ** k for k in range(lo, hi + 1, step)], vmax]))
    cb.ax.yaxis.set_minor_locator(NullLocator())
    cb.ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _human_bytes(v)))
    cb.ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    if bins == n and n <= 32:
        names = [view.nic_names[i] for i in order]
        ax.set_xticks(range(n))
        ax.set_xticklabels(names, rotation=90, fontsize=7)
        ax.set_yticks(range(n))
        ax.set_yticklabels(names, fontsize=7)
        if n <= 16:
            for i in range(n):
                for j in range(n):
                    if m[i, j] > 0:
                        ax.text(j, i, _human_bytes(m[i, j]).replace(" ", "\n"), ha="center", va="center",
                                fontsize=6, color="white" if m[i, j] < vmax ** 0.5 * vmin ** 0.5 else "black")
    # rail boundaries
    rails = view.nic_rail[order]
    for k in np.flatnonzero(np.diff(rails)) + 1:
        b = k * bins / n - 0.5
        ax.axhline(b, color="black", linewidth=0.8)
        ax.axvline(b, color="black", linewidth=0.8)
    what = "NIC" if bins == n else f"group of {-(-n // bins)} NICs"
    ax.set_xlabel(f"destination {what} (rail-major: rail, then node)")
    ax.set_ylabel(f"source {what}")
    ax.set_title(f"{view.title}: NIC-to-NIC traffic on the fabric ({n} NICs)")
    fig.tight_layout()
    return _save(fig, path)


# --- timeline: when each rank sends (network and NVLink) ---------------------------------------

def timeline(view: TraceView, path: Path) -> Path:
    return draw_timeline(view, path)


def link_utilisation(view: TraceView, path: Path) -> Path:
    """Utilisation over time (% of line rate) of the busiest fabric links (most bytes over the
    iteration), as the schedule's
    fluid model loads them (bins of 1/200 of the iteration)."""
    plt = _plt()
    lu = view.links.get("utilisation") or {}
    fig, ax = plt.subplots(figsize=(12, 5), dpi=110)
    if not lu.get("name"):
        ax.text(0.5, 0.5, "no traffic crosses the fabric", ha="center", va="center", fontsize=14)
        ax.set_axis_off()
        return _save(fig, path)
    width = lu["bin_ns"]
    util = np.asarray(lu["util"], np.float64)
    t_end = width * util.shape[1]
    unit, div = _time_unit(t_end)
    x = (np.arange(util.shape[1]) + 0.5) * width / div
    for name, g, u in zip(lu["name"], lu["gbps"], util):
        ax.step(x, 100 * u, where="mid", lw=1.4, label=f"{name} ({g}G, peak {u.max():.0%})")
    ax.set_xlabel(f"time ({unit})")
    ax.set_ylabel("utilisation (% of line rate)")
    ax.set_ylim(0, 105)
    ax.set_title(f"{view.title}: the {len(util)} busiest fabric links, bins of {width / div:.3g} {unit}")
    ax.grid(alpha=0.3)
    return _save(_legend_below(fig, ax.get_legend_handles_labels()[0], 2), path)


PICTURES: dict[str, Callable[[TraceView, Path], Path]] = {
    "timeline.png": timeline,
    "gantt.png": gantt,
    "traffic_matrix.png": traffic_matrix,
    "link_utilisation.png": link_utilisation,
}


def draw_all(view: TraceView, dest: Path) -> list[Path]:
    paths = []
    for name, draw in PICTURES.items():
        paths.append(draw(view, Path(dest) / name))
        progress.report(len(paths), len(PICTURES))           # the CLI's bar, per picture
    return paths
