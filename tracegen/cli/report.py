"""`tracegen report DIR`: redraw a written trace's pictures from its tables (flows.parquet or
flows.csv, ops.*) and summary.json — after editing a picture's code, or for a trace written with
`output.pictures: false`.

The pictures go into the trace folder itself (default) or `-o DIR`, through the output guard
(output/put.py put_files): into a folder tracegen wrote, each picture replaces the old one by a rename and
the folder's manifest is updated; a new folder is written whole; any other folder (the current one,
one holding a user's timeline.png, ...) is refused before anything is read, unless --force, which
writes beside the user's files and never over one. A damaged trace is one line (emit/tables/read.py).
"""
from __future__ import annotations

from pathlib import Path

import click

from ..errors import ConfigError, OutputError


@click.command("report")
@click.argument("trace_dir", type=click.Path(file_okay=False))
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False),
              help="Folder for the PNGs (default: TRACE_DIR itself).")
@click.option("--only", metavar="NAMES", help="Comma list of pictures to draw (default: all), e.g. gantt,timeline.")
@click.option("--force", is_flag=True,
              help="Write into a folder tracegen would refuse (not its own, the current folder, ...), "
                   "beside what is there; never over a file tracegen did not write.")
def report(trace_dir, out_dir, only, force):
    """Redraw the pictures of a trace folder (timeline, Gantt, traffic matrix) from its tables; of a
    scenario's folder (generate --scenario), print its jobs' slowdowns and Jain fairness and redraw
    its pictures (jobs_gantt, link_load_by_job, slowdowns) from its files."""
    from ..output.put import check_put, put_files
    from .common import command_errors
    from ..config import show_path
    from ..emit.pictures.plots import PICTURES, TraceView
    from ..emit.tables.read import read_summary
    with command_errors():
        src = Path(trace_dir)
        if not src.is_dir():
            raise OutputError(f"{trace_dir}: no such folder — give a folder written by `tracegen generate`")
        if (src / "scenario.json").is_file() and not (src / "summary.json").is_file():
            return _report_scenario(src, trace_dir, out_dir, only, force)
        names = list(PICTURES)
        if only:
            wanted = list(dict.fromkeys(x.strip().removesuffix(".png") + ".png" for x in only.split(",")
                                        if x.strip()))
            bad = [w for w in wanted if w not in PICTURES]
            if bad or not wanted:
                what = f"{bad[0][:-4]!r} is no picture" if bad else "name a picture"
                raise ConfigError(f"--only: {what} — use " + ", ".join(n[:-4] for n in PICTURES))
            names = wanted
        read_summary(src)                   # is it a trace at all (small: summary.json)
        dest = Path(out_dir) if out_dir else src
        shown = show_path(out_dir) if out_dir else show_path(trace_dir)
        check_put(dest, shown, names, force=force)      # refused before the tables are read
        view = TraceView.from_dir(src)
        # each picture is drawn into a temp folder and renamed into place: never a half-written PNG
        files = {name: (lambda path, n=name: PICTURES[n](view, path)) for name in names}
        for path in put_files(dest, shown, files, force=force):
            click.echo(f"wrote {Path(shown) / path.name}")


def _report_scenario(src: Path, trace_dir, out_dir, only, force) -> None:
    """A scenario's folder: its files read back (scenario.json, ops.csv, link_time.csv; damaged:
    one line), its jobs' table (slowdown = JCT / alone) and Jain's fairness printed, and every
    picture the files hold redrawn into the folder or -o - from the files, never timing the
    scenario again: the bytes generate drew (emit/pictures/scenario_plots.py)."""
    from ..config import show_path
    from ..emit.pictures.scenario_plots import PICTURES, scenario_pictures
    from ..output.put import check_put, put_files
    from ..scenario.saved import read_scenario_folder, saved_tables
    from .common import print_tables
    wanted = list(PICTURES)
    if only:
        wanted = list(dict.fromkeys(x.strip().removesuffix(".png") + ".png" for x in only.split(",") if x.strip()))
        bad = [x for x in wanted if x not in PICTURES]
        if bad or not wanted:
            what = f"{bad[0][:-4]!r} is no picture of a scenario" if bad else "name a picture"
            raise ConfigError(f"--only: {what} — use " + ", ".join(n[:-4] for n in PICTURES))
    dest = Path(out_dir) if out_dir else src
    shown = show_path(out_dir) if out_dir else show_path(trace_dir)
    check_put(dest, shown, wanted, force=force)        # refused before the tables are read
    saved = read_scenario_folder(src)
    can = scenario_pictures(saved)
    missing = [n for n in wanted if n not in can]
    if missing and only:
        why = "no ops.csv" if missing[0] == "jobs_gantt.png" else "no link_time.csv (or no link carries bytes)"
        raise ConfigError(f"--only: {missing[0][:-4]} cannot be drawn: {show_path(src)} has {why}")
    print_tables(saved_tables(saved))
    for path in put_files(dest, shown, {n: can[n] for n in wanted if n in can}, force=force):
        click.echo(f"wrote {Path(shown) / path.name}")
