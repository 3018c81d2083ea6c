"""`tracegen ns3 run|compare TRACE_DIR`: simulate a generated scenario in ns-3 (mainline, pip `ns3`,
through ns3_scenarios) and join a simulator's fct.txt to the schedule (emit/sims/ns3_compare.py)."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from ..output.put import check_file, write_file
from .common import command_errors


@click.group("ns3")
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
        check_file(png, shown)          # never over a user's file: refused before any work
        j = join(trace_dir, fct_path, sport)
        k = joined_kpis(j)
        png = write_file(png, shown, lambda tmp: plot(j, tmp))
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
