"""timeline.png: the rasterized occupancy is where the transfers are."""
from __future__ import annotations

import numpy as np

from tracegen.emit.pictures import timeline


def test_occupancy_marks_exactly_the_busy_columns():
    cols = timeline.COLUMNS
    ns_per_col = 10.0
    lane = np.array([0, 0, 1])
    start = np.array([0, 500, 100])
    end = np.array([20, 505, cols * 10])            # 2 columns, a sliver (1 column), to the end
    occ = timeline._occupancy(lane, start, end, 2, ns_per_col)
    assert occ[0, :2].all() and not occ[0, 2:50].any()
    assert occ[0, 50] and not occ[0, 51:].any()
    assert occ[1, 10:].all() and not occ[1, :10].any()


def test_png_is_written_for_the_default_job(tmp_path):
    from tracegen.config import Job
    from tracegen.pipeline import run_pipeline
    run = run_pipeline(Job())
    path = timeline.write_timeline(run.flows, run.fabric.world, tmp_path / "t.png", title="t")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
