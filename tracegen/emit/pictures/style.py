"""What the pictures share: the colour of each parallelism dimension, the matplotlib backend, the
time axis unit, the legend strip, and how a figure is saved (plots.py, timeline.py)."""
from __future__ import annotations

from pathlib import Path

from ...tables import Dim

# Strong, distinct colours per parallelism dimension (Tableau 10, reordered so the busy ones differ).
DIM_COLOURS = {Dim.DP: "#1f77b4", Dim.TP: "#ff7f0e", Dim.PP: "#2ca02c", Dim.SP: "#d62728",
               Dim.CP: "#9467bd", Dim.EP: "#bcbd22", Dim.EDP: "#17becf", Dim.EMB: "#e377c2"}
COMPUTE_COLOUR = "#7f7f7f"


def plt():
    """matplotlib.pyplot on the Agg backend (no display needed)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def time_unit(t_end_ns: int) -> tuple[str, float]:
    """The axis unit of a picture spanning t_end_ns, and ns per unit."""
    if t_end_ns >= 10_000_000:
        return "ms", 1e6
    return "µs", 1e3


def save(fig, path: Path) -> Path:
    """Write the PNG without a Software tag (the same bytes whatever the matplotlib version) and close it."""
    fig.savefig(path, metadata={"Software": None})
    import matplotlib.pyplot as plt
    plt.close(fig)
    return path


def legend_below(fig, handles, ncol: int):
    """A legend in a strip of its own under the axes (never over the x label)."""
    rows = -(-len(handles) // ncol)
    strip = (0.15 + 0.25 * rows) / fig.get_figheight()
    fig.legend(handles=handles, loc="lower center", ncol=ncol, fontsize=9, frameon=False)
    fig.tight_layout(rect=(0, strip, 1, 1))
    return fig
