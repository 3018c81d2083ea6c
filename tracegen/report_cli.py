"""`tracegen report DIR`: redraw a written trace's pictures from its tables (flows.parquet or
flows.csv, ops.*) and summary.json — after editing a picture's code, or for a trace written with
`output.pictures: false`."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from .errors import ConfigError, OutputError


@click.command("report")
@click.argument("trace_dir", type=click.Path(file_okay=False))
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False),
              help="Folder for the PNGs (default: TRACE_DIR itself).")
@click.option("--only", metavar="NAMES", help="Comma list of pictures to draw (default: all), e.g. gantt,timeline.")
def report(trace_dir, out_dir, only):
    """Redraw the pictures of a trace folder (timeline, Gantt, traffic matrix) from its tables."""
    from .emit.plots import PICTURES, TraceView
    try:
        src = Path(trace_dir)
        if not src.is_dir():
            raise OutputError(f"{trace_dir}: no such folder — give a folder written by `tracegen generate`")
        names = list(PICTURES)
        if only:
            wanted = [x.strip().removesuffix(".png") + ".png" for x in only.split(",") if x.strip()]
            bad = [w for w in wanted if w not in PICTURES]
            if bad:
                raise ConfigError(f"--only: {bad[0][:-4]!r} is no picture — use "
                                  + ", ".join(n[:-4] for n in PICTURES))
            names = wanted
        dest = Path(out_dir) if out_dir else src
        dest.mkdir(parents=True, exist_ok=True)
        view = TraceView.from_dir(src)
        for name in names:
            # each picture is drawn beside and renamed into place: never a half-written PNG
            tmp = dest / f".{name}.tmp.png"
            PICTURES[name](view, tmp)
            tmp.replace(dest / name)
            click.echo(f"wrote {dest / name}")
    except (ConfigError, OutputError) as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(2)
