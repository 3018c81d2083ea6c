"""Long stages report how far they are (tracegen.progress): the workload per stream, the schedule's
engine per finished item; the CLI shows them as bars with rate and time left."""
from __future__ import annotations

import dataclasses
import io

from rich.console import Console

from tracegen import progress
from tracegen.cli import _stages
from tracegen.config import job_from_dict
from tracegen.pipeline import run_pipeline

M = {"layers": 4, "hidden": 512, "heads": 8, "vocab": 4096, "seq_len": 512}


def test_workload_and_schedule_report_progress(monkeypatch):
    from tracegen import fluid
    monkeypatch.setattr(fluid, "PROGRESS_EVERY", 64)
    seen = []
    progress.hook = lambda done, total: seen.append((done, total))
    try:
        j = job_from_dict(dict(model=M, parallelism=dict(dp=4, tp=2, pp=4, global_batch=64)), name="p")
        run_pipeline(dataclasses.replace(j, detail="full"))
    finally:
        progress.hook = None
    totals = sorted({t for _, t in seen})
    assert len(totals) >= 2                                  # the workload's streams, the engine's items
    for total in totals:
        done = [d for d, t in seen if t == total]
        assert done == sorted(done) and all(0 <= d <= total for d in done)
    assert any(d > 0 for d, t in seen if t == max(totals))


def test_the_cli_draws_a_bar_with_rate_and_time_left():
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=120)
    with _stages(False, console=console) as stage:
        stage("schedule: 3 ops")
        assert progress.hook is not None
        progress.report(50, 200)
        stage.bar.refresh()
    assert progress.hook is None
    text = buf.getvalue()
    assert "schedule: 3 ops" in text and "50/200" in text
