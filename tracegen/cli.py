"""Command line: argv -> the pipeline stages, progress, exit codes.

User mistakes (ConfigError, OutputError) print one line and exit 2. Outputs are written into a
temporary directory beside the target and renamed into place, so an error or Ctrl-C never leaves a
half-written trace.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import click

from . import __version__
from .config import Job, list_presets, load_job
from .errors import ConfigError, OutputError
from .emit.bundle import with_pcap_estimate, write_bundle
from .emit.lab import parse_rate, retime
from .emit.select import check_budget, parse_bytes
from .pipeline import run_pipeline
from .report import report_tables


def _fail(msg: str) -> None:
    click.echo(f"error: {msg}", err=True)
    sys.exit(2)


def _job_options(f):
    f = click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
                     help="Override a job key, e.g. --set parallelism.dp=4 (repeatable).")(f)
    f = click.option("--preset", metavar="NAME", help="Start from a shipped job preset (see `tracegen presets`).")(f)
    f = click.argument("job_file", required=False, type=click.Path(dir_okay=False))(f)
    return f


def _load(job_file, preset, sets) -> Job:
    if job_file and not Path(job_file).is_file():
        raise ConfigError(f"job file {job_file!r} not found; give the path of a YAML job file")
    return load_job(job_file, preset=preset, sets=list(sets))


@click.group()
@click.version_option(__version__)
def main() -> None:
    """tracegen: LLM training jobs -> timed collective flows -> RoCEv2 pcaps and ns-3 scenarios."""


@main.command()
@_job_options
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False), help="Output folder (default traces/<job name>).")
@click.option("--snaplen", type=int, default=None, help="Capture only the first N bytes of each frame (orig_len stays real).")
@click.option("--payload", type=click.Choice(["zero", "pattern", "none"]), default=None,
              help="Payload bytes: zeros, a byte pattern, or none (records end after the headers; orig_len real).")
@click.option("--max-bytes", default=None, metavar="SIZE",
              help="Refuse pcaps whose estimate exceeds SIZE (e.g. 500MB, 2GiB; 0: no limit; default 2GiB).")
@click.option("--time-window", default=None, metavar="START_NS:END_NS",
              help="Only packets that start in [START_NS, END_NS).")
@click.option("--nics", default=None, metavar="LIST", help="Only these NICs' pcaps (indices or names, comma list).")
@click.option("--ranks", default=None, metavar="LIST", help="Only the pcaps of the NICs these ranks use (comma list).")
@click.option("--collective", "collectives", default=None, metavar="LIST",
              help="Only packets of these collectives: dims (dp,tp,pp,sp,cp,ep,emb,edp) or kinds (allreduce,...).")
@click.option("--iteration", type=int, default=None, metavar="N", help="Only packets of iteration N.")
@click.option("--format", "fmt", type=click.Choice(["pcap", "pcapng"]), default=None,
              help="Nanosecond pcap, or pcapng with one interface block per NIC / port.")
@click.option("--comments/--no-comments", default=None, help="pcapng: comment every packet with its collective, op, step, chunk.")
@click.option("--merge", is_flag=True, default=None, help="One merged file for the selected NICs instead of one per NIC.")
@click.option("--switch", default=None, metavar="NAME", help="One file per port of this switch (leaf3, spine0) instead.")
@click.option("--lab", default=None, type=click.Path(dir_okay=False), metavar="PLAN.yaml",
              help="Lab mode: one replayable pcap per tester port of the lab plan (see emit/lab.py).")
@click.option("--lab-rate", default=None, metavar="RATE",
              help="Testers slower than the NICs (e.g. 100G): schedule the whole trace again at that rate.")
@click.option("--no-pcap", is_flag=True, help="Skip the pcap files.")
@click.option("--no-ns3", is_flag=True, help="Skip the ns-3 scenario files.")
@click.option("-q", "--quiet", is_flag=True, help="No progress output.")
def generate(job_file, preset, sets, out_dir, snaplen, payload, max_bytes, time_window, nics, ranks,
             collectives, iteration, fmt, comments, merge, switch, lab, lab_rate, no_pcap, no_ns3, quiet):
    """Generate pcaps, flows.csv, an ns-3 scenario and summary.md for one training job."""
    try:
        job = _load(job_file, preset, sets)
        out = job.output
        if snaplen is not None:
            if snaplen < 0:
                raise ConfigError("--snaplen must be >= 0 (0 keeps whole frames)")
            out = replace(out, snaplen=snaplen)
        out = _pcap_options(out, payload=payload, max_bytes=max_bytes, time_window=time_window, nics=nics,
                            ranks=ranks, collectives=collectives, iteration=iteration, format=fmt,
                            comments=comments, merge=merge or None, switch=switch, lab=lab,
                            lab_gbps=parse_rate(lab_rate) if lab_rate is not None else None)
        if no_pcap:
            out = replace(out, pcap=False)
        if no_ns3:
            out = replace(out, ns3=False)
        job = retime(replace(job, output=out))
        target = Path(out_dir or job.output.dir or Path("traces") / job.name)
        with _stages(quiet) as stage:
            run = run_pipeline(job, stage)
        if job.output.pcap:
            run = with_pcap_estimate(run)
            check_budget(run.report.pcap_packets, run.report.pcap_bytes, job.output)
        counts = {}
        with _progress(quiet) as bar:
            _write_atomically(target, lambda tmp: counts.update(write_bundle(run, tmp, progress=bar)))
        if not quiet:
            what = ", ".join(f"{v} {k}" for k, v in counts.items())
            click.echo(f"wrote {target}/ ({what}; iteration {run.report.iteration_ns / 1e6:.3f} ms scheduled)")
    except (ConfigError, OutputError) as e:
        _fail(str(e))


def _pcap_options(out, max_bytes=None, **options):
    """generate's pcap options over the job's output section (validated like the YAML keys)."""
    from .config import validate
    changes = {k: v for k, v in options.items() if v is not None}
    if max_bytes is not None:
        changes["max_bytes"] = parse_bytes(max_bytes)
    out = replace(out, **changes)
    validate(Job(output=out))
    return out


@main.command()
@_job_options
@click.option("--corpus", metavar="PATH", help="Also size one epoch of this corpus (file, folder, or dante-it/dante-en).")
@click.option("--tokenizer", default="cl100k_base", show_default=True, help="Tokenizer for --corpus.")
def plan(job_file, preset, sets, corpus, tokenizer):
    """Dry run: per-accelerator byte volumes, counts and output size estimates. Writes nothing."""
    try:
        job = retime(_load(job_file, preset, sets))
        with _stages(False) as stage:
            run = with_pcap_estimate(run_pipeline(job, stage))
        _print_plan(run)
        if corpus:
            from .corpus.traffic import corpus_plan_lines
            for line in corpus_plan_lines(job, corpus, tokenizer, report=run.report):
                click.echo(line)
    except (ConfigError, OutputError) as e:
        _fail(str(e))


@main.command()
def presets():
    """List the shipped job, model and cluster presets."""
    for kind, items in list_presets().items():
        click.echo(f"{kind}:")
        for name, desc in items:
            click.echo(f"  {name:<14} {desc}")


class _stages:
    """A transient status line naming the pipeline stage that runs (stderr, terminals only)."""

    def __init__(self, quiet: bool):
        self.status = None
        if not quiet:
            from rich.console import Console
            console = Console(stderr=True)
            if console.is_terminal:
                self.status = console.status("tracegen")

    def __enter__(self):
        if self.status is not None:
            self.status.__enter__()
        return self

    def __call__(self, text: str) -> None:
        if self.status is not None:
            self.status.update(text)

    def __exit__(self, *exc):
        if self.status is not None:
            self.status.__exit__(*exc)
        return False


class _progress:
    """A rich progress bar over the pcap bytes written (speed, time left); a no-op when quiet."""

    def __init__(self, quiet: bool):
        self.quiet, self.bar, self.task = quiet, None, None

    def __enter__(self):
        if not self.quiet:
            from rich.progress import (BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn,
                                       TransferSpeedColumn)
            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                                TransferSpeedColumn(), TimeRemainingColumn(), transient=True)
            self.bar.__enter__()
        return self

    def __call__(self, done_bytes: int, total_bytes: int) -> None:
        if self.bar is None:
            return
        if self.task is None:
            self.task = self.bar.add_task("pcap", total=total_bytes)
        self.bar.update(self.task, completed=done_bytes)

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.__exit__(*exc)
        return False


def _print_plan(run) -> None:
    from rich.console import Console
    from rich.table import Table
    console = Console()
    for title, header, rows in report_tables(run.report, exact=False):
        if title.startswith("Payload") and len(rows) > 33:
            rows = rows[:16] + [["…"] * len(header)] + rows[-17:]
        table = Table(title=title, title_justify="left")
        for h in header:
            table.add_column(h)
        for r in rows:
            table.add_row(*r)
        console.print(table)


def _write_atomically(target: Path, write) -> None:
    """Write into a temp dir beside `target`, then swap it into place."""
    target = target.resolve()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"cannot create {target.parent}: {e.strerror}") from None
    if target.exists() and not target.is_dir():
        raise OutputError(f"output {target} exists and is not a folder; choose another -o")
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        write(tmp)
        os.chmod(tmp, 0o755)
        if target.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old.", dir=target.parent))
            os.rename(target, old / "x")
            os.rename(tmp, target)
            shutil.rmtree(old)
        else:
            os.rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


# ---------------------------------------------------------------- ns-3 (mainline, pip `ns3`)

@main.group("ns3")
def ns3_group() -> None:
    """Simulate a generated scenario in ns-3 and compare it with the schedule."""


@ns3_group.command("run")
@click.argument("trace_dir", type=click.Path(file_okay=False))
@click.option("--pcap", is_flag=True, help="Also write one ns-3 pcap per host NIC into ns3/sim/pcap/.")
@click.option("--gap", type=click.Choice(["zero", "analytic"]), default="zero", show_default=True,
              help="Wait between a flow's last dependency and its start: zero (NCCL computes "
                   "nothing between ring steps) or the analytic schedule's start - dep end.")
@click.option("--dcqcn", is_flag=True, help="Senders react to CNPs (DCQCN rate control).")
@click.option("-q", "--quiet", is_flag=True, help="No progress output.")
def ns3_run(trace_dir, pcap, gap, dcqcn, quiet):
    """Run TRACE_DIR (a `tracegen generate` folder or its ns3/) in ns-3; writes ns3/sim/."""
    from .ns3_scenarios import run_scenario
    try:
        say = None if quiet else (lambda msg: click.echo(msg, err=True))
        s = run_scenario(trace_dir, gap=gap, dcqcn=dcqcn, pcap=pcap, progress=say)
    except (ConfigError, OutputError) as e:
        _fail(str(e))
    if not quiet:
        click.echo(f"wrote {s['dir']}/: {s['completed']}/{s['flows']} flows, "
                   f"iteration {s['sim_iteration_ns'] / 1e3:,.2f} µs simulated vs "
                   f"{s['analytic_iteration_ns'] / 1e3:,.2f} µs scheduled "
                   f"(x{s['sim_over_analytic']}), {s['ce_packets']:,} CE-marked packets, "
                   f"{s['wall_s']:.1f} s wall")
    if s["completed"] < s["flows"]:
        click.echo(f"error: {s['flows'] - s['completed']} flows never completed (see "
                   f"{s['dir']}/flows.csv, end_ns -1)", err=True)
        sys.exit(1)


@ns3_group.command("compare")
@click.argument("trace_dir", type=click.Path(file_okay=False))
@click.option("--fct", "fct_path", type=click.Path(dir_okay=False),
              help="fct file to read (default ns3/sim/fct.txt; HPCC's fct.txt or SimAI's fct_simai.txt work too).")
@click.option("--sport", type=click.Choice(["auto", "hpcc", "simai"]), default="auto", show_default=True,
              help="Which source-port numbering the fct file uses.")
@click.option("--png", "png_path", type=click.Path(dir_okay=False),
              help="Plot of analytic vs simulated end times (default: compare.png beside the fct file).")
def ns3_compare(trace_dir, fct_path, sport, png_path):
    """Join a simulator's fct.txt to the schedule: completion, slowdown, ECN per collective."""
    from .ns3_compare import REPORT_HEADER, join, plot, report_rows
    try:
        j = join(trace_dir, fct_path, sport)
        png = plot(j, Path(png_path) if png_path else
                   (Path(fct_path).parent if fct_path else j.sc.dir / "sim") / "compare.png")
    except (ConfigError, OutputError) as e:
        _fail(str(e))
    from rich import box
    from rich.console import Console
    from rich.table import Table
    table = Table(title=f"Analytic schedule (ana) vs {fct_path or 'ns3/sim/fct.txt'} (sports as "
                        f"{j.sport}): last flow end after t0, sim/ana ratio, slowdown "
                        "(fct / standalone fct) p50 p99 max, ECN-CE packets",
                  title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for h in REPORT_HEADER:
        table.add_column(h, justify="left" if h == "group" else "right", no_wrap=True)
    for section in report_rows(j):
        for k, r in enumerate(section):
            table.add_row(*r, end_section=k == len(section) - 1)
    Console().print(table)
    if j.unmatched or j.missing:
        click.echo(f"warning: {j.unmatched} fct rows match no flow; {j.missing} flows have no fct row",
                   err=True)
    click.echo(f"wrote {png}")


from .tokens_cli import tokens as _tokens  # noqa: E402
main.add_command(_tokens)


if __name__ == "__main__":
    main()
