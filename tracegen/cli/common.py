"""What every command shares: the job options and loading, generate's output options over a job,
and the one-line handling of the errors a user can act on (exit 2; a refused write: exit 1;
SIGINT/SIGTERM/SIGHUP: 128 + signal). The commands' modules import this, never each other."""
from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import replace

import click

from ..output import folder as outdir
from ..config import Job, load_job, validate
from ..errors import ConfigError, Interrupted, OutputError


def fail(msg, code: int = 2) -> None:
    click.echo(f"error: {' '.join(str(msg).split())}", err=True)      # one line, whatever it holds
    sys.exit(getattr(msg, "exit_code", code))


@contextlib.contextmanager
def command_errors():
    """The body of a command that reads or writes: SIGINT/SIGTERM/SIGHUP become Interrupted (temp
    files removed on the way out); ConfigError and OutputError are one line, exit 2 (WriteError:
    exit 1); Interrupted says whether the output was already in place, exit 128 + signal."""
    with outdir.signals_as_interrupts():
        try:
            yield
        except (ConfigError, OutputError) as e:
            fail(e)
        except Interrupted as e:
            done = (f"the new output was already in place in {e.written}/" if e.written else
                    "the temp files were removed, nothing was replaced")
            click.echo(f"error: interrupted by {e.name}; {done}", err=True)
            sys.exit(e.exit_code)


def job_options(f):
    f = click.option("--detail", type=click.Choice(["auto", "full", "conn"]), default=None,
                     help="Schedule granularity: every chunk (full), per NCCL connection per op (conn, "
                          "for big jobs), or by size (auto, the default).")(f)
    f = click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
                     help="Override a job key, e.g. --set parallelism.dp=4 (repeatable).")(f)
    f = click.option("--preset", metavar="NAME", help="Start from a shipped job preset (see `tracegen presets`).")(f)
    f = click.argument("job_file", required=False, type=click.Path(dir_okay=False))(f)
    return f


def load(job_file, preset, sets, detail=None) -> Job:
    if job_file and not os.path.lexists(job_file):
        raise ConfigError(f"job file {job_file!r} not found; give the path of a YAML job file")
    return load_job(job_file, preset=preset, sets=list(sets) + ([f"detail={detail}"] if detail else []))


def pcap_options(job, max_bytes=None, **options):
    """generate's options over the job's output section, validated with the job like YAML keys;
    a lab plan is read and checked here too (before any work)."""
    from ..emit.packets.select import parse_bytes
    changes = {k: v for k, v in options.items() if v is not None}
    if max_bytes is not None:
        changes["max_bytes"] = parse_bytes(max_bytes)
    job = validate(replace(job, output=replace(job.output, **changes)))
    if job.output.lab:
        from ..emit.views.lab import check_plan
        check_plan(job.output)
    return job


def print_whole(console, table) -> None:
    """A table at the console's width, or wider when a value would be cut (not a terminal)."""
    if console.is_terminal:
        console.print(table)
        return
    width = console.width             # print(width=) is capped at the console's width: widen it
    console.width = max(width, uncut_width(console, table))
    try:
        console.print(table, crop=False)
    finally:
        console.width = width


def uncut_width(console, table) -> int:
    """The narrowest width at which rich cuts no value of `table`: its no_wrap columns as wide as
    their widest cell, the others as their longest word (rich's own measure of a table takes
    every column at its longest word, so it would cut no_wrap ones with an ellipsis)."""
    from rich.measure import Measurement
    from rich.padding import Padding
    opts = console.options.update(width=10_000)
    _, right, _, left = Padding.unpack(table.padding)
    total = 0
    for col in table.columns:
        sizes = [Measurement.get(console, opts, cell) for cell in (col.header, *col.cells)]
        total += max(m.maximum if col.no_wrap else m.minimum for m in sizes) + left + right
    if not table.pad_edge and table.columns:
        total -= left + right
    if table.box:
        total += len(table.columns) - 1 + (2 if table.show_edge else 0)
    return total
