"""What every command shares: the job options and loading, generate's output options over a job,
generate's and plan's run of the pipeline (output folder, work estimate, the stages' progress), and
the one-line handling of the errors a user can act on (exit 2; a refused write: exit 1;
SIGINT/SIGTERM/SIGHUP: 128 + signal). The commands' modules import this, never each other."""
from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import replace

import click

from ..output import place
from ..output.guard import signals_as_interrupts
from ..config import Job, load_job, validate
from ..errors import ConfigError, Interrupted, OutputError
from ..timing.work import DEFAULT_MAX_WORK


def fail(msg, code: int = 2) -> None:
    click.echo(f"error: {' '.join(str(msg).split())}", err=True)      # one line, whatever it holds
    sys.exit(getattr(msg, "exit_code", code))


@contextlib.contextmanager
def command_errors():
    """The body of a command that reads or writes: SIGINT/SIGTERM/SIGHUP become Interrupted (temp
    files removed on the way out); ConfigError and OutputError are one line, exit 2 (WriteError:
    exit 1); Interrupted says whether the output was already in place, exit 128 + signal."""
    with signals_as_interrupts():
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


def check_environment() -> None:
    """Nothing to refuse today: with NUMBA_DISABLE_JIT the engine runs as plain Python (slowly)."""


def output_options(f):
    """generate's and plan's --max-work and --force."""
    f = click.option("--max-work", default=None, metavar="N",
                     help=f"Refuse jobs estimated beyond N work units (~transfers; default "
                          f"{DEFAULT_MAX_WORK // 10**6}M, ~13 GB; 0: no limit).")(f)
    f = click.option("--force", is_flag=True,
                     help="Write into a folder tracegen would refuse (not its own, the current "
                          "folder, ...), beside what is there; deletes only files tracegen wrote.")(f)
    return f


def choose_target(out_dir, job, job_file, force):
    """The folder generate writes (place.choose), inspected: refused or what it holds."""
    path, shown = place.choose(out_dir, job.output.dir, job.name)
    return place.inspect(path, shown, force, protect=(job_file, job.output.lab))


def run_job(job, quiet: bool, pcap: bool = True, budget: bool = True):
    """The pipeline, the pcap estimate and the checks on it (nothing selected, budget)."""
    from ..emit.bundle import wire_note, with_pcap_estimate
    from ..emit.packets.select import check_budget, check_not_empty
    from ..pipeline import run_pipeline
    with stages(quiet) as stage:
        run = run_pipeline(job, stage, emit=budget and (job.output.pcap or job.output.ns3))
        note = wire_note(run) if budget else None
        if note:                    # generate, nothing crosses a NIC: tables etc. only, one line
            run, pcap = replace(run, report=replace(run.report, notes=[*run.report.notes, note])), False
        if pcap:
            stage("pcap estimate")
            run = with_pcap_estimate(run)
    if job.output.pcap and pcap and budget and run.flows.detail == "conn":
        from ..emit.bundle import pcap_flows
        if pcap_flows(run) is None:
            raise ConfigError("this job is timed per connection (detail conn): its pcaps are written for "
                              "the NICs they show - select some (--nics, --ranks, --switch or --lab), or --no-pcap")
    if pcap:
        check_not_empty(run.report.pcap_packets, run.flows, run.fabric, job.output)
    if job.output.pcap and pcap and budget:
        check_budget(run.report.pcap_packets, run.report.pcap_bytes, job.output)
    return run


def retime(job):
    """A lab's slower testers (output.lab_gbps): the whole job scheduled at their rate (emit/views/lab.py)."""
    from ..emit.views.lab import retime as again
    return again(job)


class stages:
    """The pipeline stage that runs, one line each (stderr, terminals only): a spinner and the
    time so far, and - for stages that report how far they are (tracegen.progress: the workload's
    streams, the schedule's items, the connection table's ops, the pcap estimate, each output
    file's rows or bytes) - a bar with the count, the rate and the time left. Stages deep in the
    pipeline name themselves through progress.stage; one display for the whole sequence."""

    def __init__(self, quiet: bool, console=None):
        self.bar, self.task = None, None
        if not quiet:
            from rich.console import Console
            console = console or Console(stderr=True)
            if console.is_terminal:
                from rich.progress import (BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn,
                                           TimeRemainingColumn)
                self.bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                    _count_column(), _rate_column(), TimeElapsedColumn(),
                                    TimeRemainingColumn(), console=console, transient=True)

    def __enter__(self):
        if self.bar is not None:
            from .. import progress
            self.bar.__enter__()
            progress.hook, progress.stage_hook = self.update, self
        return self

    def __call__(self, text: str, unit: str = "") -> None:
        if self.bar is not None:
            if self.task is not None:
                self.bar.remove_task(self.task)
            self.task = self.bar.add_task(text, total=None, unit=unit)
            self.bar.refresh()

    def update(self, done: int, total: int) -> None:
        if self.bar is not None and self.task is not None:
            self.bar.update(self.task, completed=done, total=total)

    def __exit__(self, *exc):
        if self.bar is not None:
            from .. import progress
            progress.hook, progress.stage_hook = None, None
            self.bar.__exit__(*exc)
        return False


def _count_column():
    from rich.filesize import decimal
    from rich.progress import ProgressColumn
    from rich.text import Text

    class CountColumn(ProgressColumn):
        """done/total of a stage that reports its progress, in its unit (sizes for bytes)."""

        def render(self, task):
            if task.total is None:
                return Text("")
            unit = task.fields.get("unit", "")
            if unit == "bytes":
                return Text(f"{decimal(int(task.completed))}/{decimal(int(task.total))}", style="progress.download")
            if unit == "%":
                return Text(f"{100 * task.completed / max(task.total, 1):.0f} %", style="progress.download")
            return Text(f"{int(task.completed):,}/{int(task.total):,}" + (f" {unit}" if unit else ""),
                        style="progress.download")
    return CountColumn()


def _rate_column():
    from rich.filesize import decimal
    from rich.progress import ProgressColumn
    from rich.text import Text

    class RateColumn(ProgressColumn):
        """Units per second of a stage that reports its progress."""

        def render(self, task):
            if not task.speed:
                return Text("")
            unit = task.fields.get("unit", "")
            if unit == "%":
                return Text("")
            text = f"{decimal(int(task.speed))}/s" if unit == "bytes" else f"{task.speed:,.0f}/s"
            return Text(text, style="progress.data.speed")
    return RateColumn()


def print_tables(tables, console=None) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table
    if console is None:
        console = Console()
        if not console.is_terminal:
            console = Console(width=100)
    for title, header, rows in tables:
        table = Table(title=title, title_justify="left", box=box.SQUARE)
        for k, h in enumerate(header):
            numeric = k > 0 and all(_numeric(r[k]) for r in rows)
            table.add_column(h, justify="right" if numeric else "left", no_wrap=numeric or k == 0,
                             overflow="fold")
        for r in rows:
            table.add_row(*r)
        print_whole(console, table)


def _numeric(cell: str) -> bool:
    head = cell.split(" ")[0].replace(",", "").replace(".", "")
    return head.isdigit() or cell == "—"
