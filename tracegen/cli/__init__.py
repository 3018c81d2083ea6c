"""Command line: argv -> the pipeline stages, progress, exit codes.

User mistakes (ConfigError, OutputError, bad arguments) print one line and exit 2; a write the
system refuses (disk full, read-only, ...) exits 1; SIGINT/SIGTERM/SIGHUP exit 128 + signal.
Where `generate` writes, what it may replace and how (a temp folder swapped into place, a lock,
a manifest of our files): outdir.py. Work is estimated and bounded before the pipeline: work.py.

The package: the group and the commands generate, plan, presets and ns3 here; a module per
further command (export, tokens, report, collective); what they share in common. Commands
import common, never each other or this package. Everything may be imported from here.
"""
from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import click

from .. import __version__
from ..output import folder as outdir
from ..config import list_presets
from ..errors import ConfigError, Interrupted, OutputError
from ..timing.work import DEFAULT_MAX_WORK, estimate, parse_work
from .common import (command_errors, fail as _fail, job_options as _job_options,  # noqa: F401
                     load as _load, pcap_options as _pcap_options, print_whole)

# The pipeline, numba and matplotlib load only once a job is valid: a mistake costs ~0.5 s.


class _OneLineErrors(click.Group):
    """Usage errors (bad option values, unknown options) as one `error:` line, exit 2."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except getattr(click.exceptions, "NoArgsIsHelpError", ()) as e:
            e.show()
            sys.exit(e.exit_code)
        except click.UsageError as e:
            where = f" (see {e.ctx.command_path} --help)" if e.ctx is not None else ""
            click.echo(f"error: {' '.join(e.format_message().split())}{where}", err=True)
            sys.exit(2)
        except click.ClickException as e:
            click.echo(f"error: {' '.join(e.format_message().split())}", err=True)
            sys.exit(e.exit_code)
        except click.exceptions.Abort:
            click.echo("error: interrupted", err=True)
            sys.exit(130)
        sys.exit(rv if isinstance(rv, int) else 0)


def _check_environment() -> None:
    """Nothing to refuse today: with NUMBA_DISABLE_JIT the engine runs as plain Python (slowly)."""


def _output_options(f):
    f = click.option("--max-work", default=None, metavar="N",
                     help=f"Refuse jobs estimated beyond N work units (~transfers; default "
                          f"{DEFAULT_MAX_WORK // 10**6}M, ~13 GB; 0: no limit).")(f)
    f = click.option("--force", is_flag=True,
                     help="Write into a folder tracegen would refuse (not its own, the current "
                          "folder, ...), beside what is there; deletes only files tracegen wrote.")(f)
    return f


def _where(out_dir, job, job_file, force):
    path, shown = outdir.choose(out_dir, job.output.dir, job.name)
    return outdir.inspect(path, shown, force, protect=(job_file, job.output.lab))


@click.group(cls=_OneLineErrors)
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
              help="Lab mode: one replayable pcap per tester port of the lab plan (see emit/views/lab.py).")
@click.option("--lab-rate", default=None, metavar="RATE",
              help="Testers slower than the NICs (e.g. 100G): schedule the whole trace again at that rate.")
@click.option("--no-pcap", is_flag=True, help="Skip the pcap files.")
@click.option("--no-ns3", is_flag=True, help="Skip the ns-3 scenario files.")
@click.option("--workers", type=click.IntRange(0, 256), default=0, metavar="N",
              help="Write the pcap files on a local Dask cluster of N worker processes (same bytes; "
                   "pip install 'tracegen[dask]').")
@click.option("--scheduler", default="", metavar="tcp://HOST:PORT",
              help="Write the pcap files on an existing Dask cluster (the output folder must be one "
                   "every worker sees).")
@_output_options
@click.option("-q", "--quiet", is_flag=True, help="No progress output.")
def generate(job_file, preset, sets, detail, out_dir, snaplen, payload, max_bytes, time_window, nics, ranks,
             collectives, iteration, fmt, comments, merge, switch, lab, lab_rate, no_pcap, no_ns3, workers,
             scheduler, force, max_work, quiet):
    """Generate pcaps, flows.csv, an ns-3 scenario and summary.md for one training job."""
    with outdir.signals_as_interrupts():
        try:
            job = _load(job_file, preset, sets, detail)
            job = _pcap_options(job, snaplen=snaplen, payload=payload, max_bytes=max_bytes,
                                time_window=time_window, nics=nics, ranks=ranks, collectives=collectives,
                                iteration=iteration, format=fmt, comments=comments, merge=merge or None,
                                switch=switch, lab=lab, pcap=False if no_pcap else None,
                                ns3=False if no_ns3 else None,
                                lab_gbps=parse_rate(lab_rate) if lab_rate is not None else None)
            job = retime(job)
            _check_environment()
            if scheduler:                       # before any work (emit/views/distributed.py)
                from ..emit.views.distributed import check_scheduler
                check_scheduler(scheduler)
            target = _where(out_dir, job, job_file, force)
            with _stages(quiet) as stage:
                stage("work estimate: the job's collectives")
                estimate(job, parse_work(max_work) if max_work is not None else DEFAULT_MAX_WORK,
                         pcap=job.output.pcap)
            from ..emit.bundle import write_bundle
            with outdir.Writer(target, force) as w:
                run = _run(job, quiet, pcap=job.output.pcap)
                counts = {}
                with _stages(quiet):            # each output file a stage (progress.stage), pcaps in bytes
                    w.write(lambda tmp: counts.update(write_bundle(run, tmp, workers=workers, scheduler=scheduler)))
            for warning in [*w.warnings, *run.report.notes]:
                click.echo(f"warning: {warning}", err=True)
            if not quiet:
                what = ", ".join(f"{v} {k}" for k, v in counts.items())
                click.echo(f"wrote {target.shown}/ ({what}; iteration "
                           f"{run.report.iteration_ns / 1e6:.3f} ms scheduled)")
        except (ConfigError, OutputError) as e:
            _fail(e)
        except Interrupted as e:
            done = (f"the new trace was already in place in {e.written}/" if e.written else
                    "the temp folder was removed, nothing was replaced")
            click.echo(f"error: interrupted by {e.name}; {done}", err=True)
            sys.exit(e.exit_code)


def _run(job, quiet: bool, pcap: bool = True, budget: bool = True):
    """The pipeline, the pcap estimate and the checks on it (nothing selected, budget)."""
    from ..emit.bundle import wire_note, with_pcap_estimate
    from ..emit.packets.select import check_budget, check_not_empty
    from ..pipeline import run_pipeline
    with _stages(quiet) as stage:
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


def parse_rate(text):
    from ..emit.views.lab import parse_rate as parse
    return parse(text)


def retime(job):
    from ..emit.views.lab import retime as again
    return again(job)


@main.command()
@_job_options
@click.option("--corpus", metavar="PATH", help="Also size one epoch of this corpus (file, folder, or dante-it/dante-en).")
@click.option("--tokenizer", default="cl100k_base", show_default=True, help="Tokenizer for --corpus.")
@click.option("--json", "as_json", is_flag=True, help="The plan as JSON on stdout (keys in the README).")
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False),
              help="Where generate would write (default traces/<job name>): plan says what it would do there.")
@_output_options
def plan(job_file, preset, sets, detail, corpus, tokenizer, as_json, out_dir, force, max_work):
    """Dry run: per-accelerator byte volumes, counts and output size estimates. Writes nothing."""
    try:
        job = retime(_pcap_options(_load(job_file, preset, sets, detail)))
        _check_environment()
        if corpus:                          # a missing corpus or tokenizer: before any work
            from ..corpus.reader import open_corpus
            from ..corpus.tokenizers import resolve_tokenizer
            open_corpus(corpus)
            resolve_tokenizer(tokenizer)
        try:
            target = _where(out_dir, job, job_file, force)
            where = f"generate would write {target.shown}/ ({target.note})"
        except OutputError as e:
            where = f"generate would refuse: {e}"
        with _stages(as_json) as stage:
            stage("work estimate: the job's collectives")
            estimate(job, parse_work(max_work) if max_work is not None else DEFAULT_MAX_WORK, pcap=True, emit=False)
        run = _run(job, as_json, budget=False)
        if as_json:
            import json
            from ..report.build import plan_json
            click.echo(json.dumps(plan_json(run), indent=1))
            return
        corpus_lines = []
        if corpus:                          # read whole (a bad byte is an error) before anything is printed
            from ..corpus.traffic import corpus_plan_lines
            corpus_lines = corpus_plan_lines(job, corpus, tokenizer, report=run.report)
        _print_plan(run)
        for note in run.report.notes:
            click.echo(f"warning: {note}", err=True)
        click.echo(where)
        for line in corpus_lines:
            click.echo(line)
    except (ConfigError, OutputError) as e:
        _fail(e)


@main.command()
def presets():
    """List the shipped job, model and cluster presets."""
    for kind, items in list_presets().items():
        click.echo(f"{kind}:")
        for name, desc in items:
            click.echo(f"  {name:<14} {desc}")


class _stages:
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


def _print_plan(run) -> None:
    """The plan's tables, made to fit 100 columns: numbers right-aligned and never wrapped, the
    per-NIC bytes summarised (sum / min / median / max and the busiest NICs). Into a pipe or a
    file (no terminal width to respect) each table is as wide as it needs: nothing is cut."""
    from rich import box
    from rich.console import Console
    from ..report.build import report_tables
    from rich.table import Table
    console = Console()
    if not console.is_terminal:
        console = Console(width=100)
    names = [run.fabric.nic_name(i) for i in range(run.fabric.n_nics)]
    for title, header, rows in report_tables(run.report, exact=False, nic_names=names):
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


# ---------------------------------------------------------------- ns-3 (mainline, pip `ns3`)

@main.group("ns3")
def ns3_group() -> None:
    """Simulate a generated scenario in ns-3 and compare it with the schedule."""


@ns3_group.command("run")
@click.argument("trace_dir", type=click.Path(file_okay=False))
@click.option("--pcap", is_flag=True, help="Also write one Ethernet pcap per host NIC into ns3/sim/pcap/ (PFC frames included).")
@click.option("--max-bytes", default=None, metavar="SIZE",
              help="Refuse --pcap captures whose estimate exceeds SIZE (e.g. 500MB; 0: no limit; default 2GiB).")
@click.option("--gap", type=click.Choice(["zero", "analytic"]), default="zero", show_default=True,
              help="Wait between a flow's last dependency and its start: zero (NCCL computes "
                   "nothing between ring steps) or the analytic schedule's start - dep end.")
@click.option("--dcqcn/--no-dcqcn", default=None,
              help="Senders react to CNPs (DCQCN per QP). Default: on when the job's network.cc_mode is dcqcn.")
@click.option("--dcqcn-state", type=click.Choice(["qp", "message"]), default=None,
              help="DCQCN rate state per QP across its messages (ConnectX) or per message (each "
                   "starts at line rate, as HPCC and SimAI). Default: the job's "
                   "network.dcqcn_per_message_reset.")
@click.option("--pfc/--no-pfc", default=None, help="PFC on the RoCE priority. Default: the job's network.pfc.")
@click.option("--nic", type=click.Choice(["auto", "fifo", "rr"]), default="auto", show_default=True,
              help="How a NIC picks the QP to send from: fifo (one message after the other, as a "
                   "serial schedule), rr (packet round robin: fair share), auto (as the schedule).")
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False),
              help="Output folder (default: ns3/sim/ in the scenario); a new folder or one tracegen wrote.")
@click.option("--force", is_flag=True,
              help="Write into a folder tracegen would refuse (not its own), beside what is there; "
                   "deletes only files tracegen wrote.")
@click.option("-q", "--quiet", is_flag=True, help="No progress output.")
def ns3_run(trace_dir, pcap, max_bytes, gap, dcqcn, dcqcn_state, pfc, nic, out_dir, force, quiet):
    """Run TRACE_DIR (a `tracegen generate` folder or its ns3/) in ns-3; writes ns3/sim/."""
    from ns3_scenarios import run_scenario
    from ns3_scenarios.run import DEFAULT_MAX_PCAP_BYTES
    from ..emit.packets.select import parse_bytes
    with command_errors():   # signals stop the simulation (ns3_scenarios/stop.h); no partial sim/
        budget = DEFAULT_MAX_PCAP_BYTES if max_bytes is None else parse_bytes(max_bytes)
        say = None if quiet else (lambda msg: click.echo(msg, err=True))
        s = run_scenario(trace_dir, gap=gap, dcqcn=dcqcn, pfc=pfc, nic=nic, pcap=pcap,
                         max_bytes=budget, progress=say, dcqcn_state=dcqcn_state, out=out_dir,
                         force=force)
    for warning in s["warnings"]:
        click.echo(f"warning: {warning}", err=True)
    if not quiet:
        k = s["kpis"]["all"]
        click.echo(f"wrote {s['dir']}/: {s['completed']}/{s['flows']} flows, "
                   f"iteration {s['sim_iteration_ns'] / 1e3:,.2f} µs simulated vs "
                   f"{s['analytic_iteration_ns'] / 1e3:,.2f} µs scheduled "
                   f"(x{s['sim_over_analytic']}), flow/schedule p50 {s['flow_vs_schedule_p50']:.3f}, "
                   f"{s['ce_packets']:,} CE-marked packets, {s['pfc']['pause_frames']:,} PFC pauses, "
                   f"busbw {k['simulated']['busbw_pct'] or 0:.0f}% of line rate, "
                   f"{s['wall_s']:.1f} s wall")
    if s["completed"] < s["flows"]:
        click.echo(f"error: {s['flows'] - s['completed']} flows never completed (see "
                   f"{s['dir']}/flows.csv, end_ns -1; {s['drops']} packets dropped)", err=True)
        sys.exit(1)


@ns3_group.command("compare")
@click.argument("trace_dir", type=click.Path(file_okay=False))
@click.option("--fct", "fct_path", type=click.Path(dir_okay=False),
              help="fct file to read (default ns3/sim/fct.txt; HPCC's fct.txt or SimAI's fct_simai.txt work too).")
@click.option("--sport", type=click.Choice(["auto", "pair", "host", "hpcc", "simai"]), default="auto",
              show_default=True,
              help="The fct file's source-port numbering: pair (HPCC since 2020-07, SimAI, tracegen; "
                   "hpcc and simai mean pair), host (HPCC before 2020-07); auto refuses an ambiguous join.")
@click.option("--png", "png_path", type=click.Path(dir_okay=False),
              help="Plot of analytic vs simulated end times and FCTs (default: compare.png beside the fct file).")
def ns3_compare(trace_dir, fct_path, sport, png_path):
    """Join a simulator's fct.txt to the schedule: the AI-fabric benchmark KPIs, analytic vs simulated."""
    from ns3_scenarios.inputs import scenario_dir
    from ..config import show_path
    from ..emit.sims.ns3_compare import REPORT_HEADER, join, joined_kpis, plot, report_notes, report_rows
    with command_errors():
        png = Path(png_path) if png_path else \
            (Path(fct_path).parent if fct_path else scenario_dir(trace_dir) / "sim") / "compare.png"
        shown = png_path or show_path(str(png))
        outdir.check_file(png, shown)          # never over a user's file: refused before any work
        j = join(trace_dir, fct_path, sport)
        k = joined_kpis(j)
        png = outdir.write_file(png, shown, lambda tmp: plot(j, tmp))
    from rich import box
    from rich.console import Console
    from rich.table import Table
    table = Table(title=f"Analytic schedule (ana) vs {fct_path or 'ns3/sim/fct.txt'} (sports "
                        f"numbered per {j.sport}): JCT = first start to last end, busbw = median "
                        "over ops as % of NIC line rate, FCT p99, Jain fairness of flow rates, "
                        "ECN-CE share of data packets",
                  title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for h in REPORT_HEADER:
        table.add_column(h, justify="left" if h == "group" else "right", no_wrap=True)
    for section in report_rows(j, k):
        for i, r in enumerate(section):
            table.add_row(*r, end_section=i == len(section) - 1)
    console = Console()
    if not console.is_terminal:
        console = Console(width=132)
    console.print(table)
    for note in report_notes(j, k):
        click.echo(note)
    if j.unmatched or j.missing:
        click.echo(f"warning: {j.unmatched} fct rows match no flow; {j.missing} flows have no fct row",
                   err=True)
    click.echo(f"wrote {png}")


from .tokens import tokens as _tokens  # noqa: E402
main.add_command(_tokens)
from .collective import collective as _collective; main.add_command(_collective)  # noqa: E402,E702
from .report import report as _report  # noqa: E402
main.add_command(_report)
from .export import export as _export  # noqa: E402
main.add_command(_export)


if __name__ == "__main__":
    main()
