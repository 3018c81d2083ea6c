"""Long stages report how far they are (tracegen.progress): the workload per stream, the schedule's
engine per finished item; the CLI shows them as bars with rate and time left."""
from __future__ import annotations

import dataclasses
import io
from pathlib import Path

from rich.console import Console

from tracegen import progress
from tracegen.cli import _stages
from tracegen.config import job_from_dict
from tracegen.pipeline import run_pipeline

M = {"layers": 4, "hidden": 512, "heads": 8, "vocab": 4096, "seq_len": 512}


def test_workload_and_schedule_report_progress(monkeypatch):
    from tracegen.timing import fluid_engine
    monkeypatch.setattr(fluid_engine, "PROGRESS_EVERY", 64)
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


# A job timed per connection whose pcaps (two NICs, a time window: every packet scheduled) come
# from placed chunks: it runs every phase that has a bar, in small blocks so each reports often.
CONN = dict(model=M, parallelism=dict(dp=4, tp=2, pp=2, global_batch=16), fabric="leaf-spine-2to1",
            detail="conn", output=dict(nics="0,5", time_window="0:1000000000", ns3=False))

# stage name (its start) -> the least reports it must make with these block sizes
PHASES = {"connections: edges": 2, "connections: links": 5, "fill:": 2,
          "schedule:": 2, "report": 3,
          "pcap estimate: chunks of the selected NICs": 2, "pcap estimate: every packet": 2,
          "flows.csv": 2, "ops.csv": 2, "perfetto.json": 2, "pcap files": 1, "pictures": 4}


def _phases_of(job, dest, monkeypatch):
    """(stage text, [(done, total)...]) in the order the stages ran, the whole of generate."""
    from tracegen.emit.bundle import with_pcap_estimate, write_bundle
    monkeypatch.setattr(progress, "BLOCK_ROWS", 16)
    monkeypatch.setattr(progress, "BLOCK_OPS", 2)
    from tracegen.timing import fluid_engine
    monkeypatch.setattr(fluid_engine, "PROGRESS_EVERY", 64)        # the engine runs as Python below 2,000 items
    seen = []
    progress.stage_hook = lambda text, unit="": seen.append((text, []))
    progress.hook = lambda done, total: seen[-1][1].append((done, total)) if seen else None
    try:
        run = run_pipeline(job, progress.stage, emit=True)
        progress.stage("pcap estimate")
        run = with_pcap_estimate(run)
        write_bundle(run, dest)
    finally:
        progress.hook = progress.stage_hook = None
    return seen


def test_every_long_phase_reports_under_its_own_stage(tmp_path, monkeypatch):
    job = job_from_dict(CONN, name="p")
    seen = _phases_of(job, tmp_path, monkeypatch)
    names = [text for text, _ in seen]
    for start, least in PHASES.items():
        hits = [reports for text, reports in seen if text.startswith(start) and reports]
        assert hits, f"no stage {start!r} reported progress; stages: {names}"
        reports = hits[-1]
        done = [d for d, _ in reports]
        total = {t for _, t in reports}
        assert len(total) == 1, (start, reports)              # one bar per stage, no foreign counts
        assert done == sorted(done) and all(0 <= d <= max(total) for d in done), (start, reports)
        assert done[-1] == max(total) > 0, (start, reports)   # the bar fills
        assert len(reports) >= least, (start, reports)
    # the outputs come in the order write_bundle writes them, each a stage of its own
    order = [next(i for i, n in enumerate(names) if n.startswith(s)) for s in
             ("flows.csv", "ops.csv", "perfetto.json", "pcap files", "pictures", "summary")]
    assert order == sorted(order)


def _monotone_to_total(reports):
    done, total = [d for d, _ in reports], {t for _, t in reports}
    return len(total) == 1 and done == sorted(done) and done[0] >= 0 and done[-1] == max(total) > 0


def test_counting_chunk_transfers_for_detail_auto_reports_per_block_of_ops(monkeypatch):
    from tracegen.pipeline import chunk_transfer_count
    from tracegen.fabric.topology import build_fabric
    from tracegen.workload import build_commops
    job = job_from_dict(CONN, name="p")
    fabric, ops = build_fabric(job), build_commops(job)
    quiet = chunk_transfer_count(ops, fabric, job)
    monkeypatch.setattr(progress, "BLOCK_OPS", 16)
    seen = []
    progress.hook = lambda done, total: seen.append((done, total))
    try:
        assert chunk_transfer_count(ops, fabric, job) == quiet > 0
    finally:
        progress.hook = None
    assert len(seen) >= 3 and _monotone_to_total(seen) and seen[-1][1] == len(ops)


def test_progress_never_changes_the_outputs(tmp_path, monkeypatch):
    """The same bundle, byte for byte, with the bars' hooks set (small blocks) and without."""
    from tracegen.emit.bundle import with_pcap_estimate, write_bundle
    job = job_from_dict(CONN, name="p")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    _phases_of(job, tmp_path / "a", monkeypatch)
    write_bundle(with_pcap_estimate(run_pipeline(job, emit=True)), tmp_path / "b")
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(tmp_path / "b") for p in (tmp_path / "b").rglob("*") if p.is_file())
    assert any(f.suffix == ".pcap" for f in files) and Path("perfetto.json") in files
    for f in files:
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f


def test_quiet_prints_nothing_where_a_terminal_shows_the_stages(tmp_path, monkeypatch):
    from click.testing import CliRunner
    from tracegen.cli import main
    monkeypatch.setenv("TTY_COMPATIBLE", "1")                 # rich draws as on a terminal
    args = ["generate", "--preset", "default", "--no-ns3", "--nics", "0"]
    shown = CliRunner().invoke(main, args + ["-o", str(tmp_path / "shown")])
    assert shown.exit_code == 0, shown.output
    for stage in ("schedule", "flows.csv", "perfetto.json", "pcap files", "pictures"):
        assert stage in shown.stderr, stage
    quiet = CliRunner().invoke(main, args + ["-o", str(tmp_path / "quiet"), "-q"])
    assert quiet.exit_code == 0, quiet.output
    assert quiet.stdout == "" and quiet.stderr == ""
    assert (tmp_path / "quiet" / "flows.csv").read_bytes() == (tmp_path / "shown" / "flows.csv").read_bytes()
