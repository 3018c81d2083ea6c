"""`tracegen generate JOB`: the job's pcaps, flows.csv, ns-3 scenario and summary.md in one folder
(outdir.Writer: a temp folder swapped into place; emit/bundle.py writes the files)."""
from __future__ import annotations

import sys

import click

from ..output import folder as outdir
from ..output.guard import signals_as_interrupts
from ..errors import ConfigError, Interrupted, OutputError
from ..tables import LinkKind
from ..timing.work import DEFAULT_MAX_WORK, estimate, parse_work
from .common import (check_environment, choose_target, fail, job_options, load, output_options, pcap_options,
                     retime, run_job, stages)


@click.command("generate")
@job_options
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
@click.option("--scenario", "scenario_file", metavar="FILE", type=click.Path(dir_okay=False),
              help="Several jobs on one fabric, with events (a scenario file): its tables, pictures, "
                   "every NIC's pcap and the ns-3 scenario of the mix (README: Scenarios).")
@output_options
@click.option("-q", "--quiet", is_flag=True, help="No progress output.")
def generate(job_file, preset, sets, detail, out_dir, snaplen, payload, max_bytes, time_window, nics, ranks,
             collectives, iteration, fmt, comments, merge, switch, lab, lab_rate, no_pcap, no_ns3, workers,
             scheduler, force, max_work, quiet, scenario_file):
    """Generate pcaps, flows.csv, an ns-3 scenario and summary.md for one training job."""
    with signals_as_interrupts():
        try:
            if scenario_file:
                pcap_only = (snaplen, payload, max_bytes, time_window, nics, ranks, collectives, iteration, fmt,
                             comments, merge or None, switch, lab, lab_rate)
                if job_file or preset or sets or detail or any(v is not None for v in pcap_only) or workers \
                        or scheduler:
                    raise ConfigError("--scenario FILE takes no job, --preset, --set, --detail or pcap options "
                                      "but --no-pcap and --no-ns3: it writes the scenario's tables, every NIC's "
                                      "pcap and the ns-3 scenario of the mix")
                return _generate_scenario(scenario_file, out_dir, force, quiet, max_work, not no_pcap, not no_ns3)
            job = load(job_file, preset, sets, detail)
            job = pcap_options(job, snaplen=snaplen, payload=payload, max_bytes=max_bytes,
                                time_window=time_window, nics=nics, ranks=ranks, collectives=collectives,
                                iteration=iteration, format=fmt, comments=comments, merge=merge or None,
                                switch=switch, lab=lab, pcap=False if no_pcap else None,
                                ns3=False if no_ns3 else None,
                                lab_gbps=parse_rate(lab_rate) if lab_rate is not None else None)
            job = retime(job)
            check_environment()
            if scheduler:                       # before any work (emit/views/distributed.py)
                from ..emit.views.distributed import check_scheduler
                check_scheduler(scheduler)
            from ..timing.alltoall_agg import check_generate
            check_generate(job)
            target = choose_target(out_dir, job, job_file, force)
            with stages(quiet) as stage:
                stage("work estimate: the job's collectives")
                estimate(job, parse_work(max_work) if max_work is not None else DEFAULT_MAX_WORK,
                         pcap=job.output.pcap)
            from ..emit.bundle import write_bundle
            with outdir.Writer(target, force) as w:
                run = run_job(job, quiet, pcap=job.output.pcap)
                counts = {}
                with stages(quiet):            # each output file a stage (progress.stage), pcaps in bytes
                    w.write(lambda tmp: counts.update(write_bundle(run, tmp, workers=workers, scheduler=scheduler)))
            for warning in [*w.warnings, *run.report.notes]:
                click.echo(f"warning: {warning}", err=True)
            if not quiet:
                what = ", ".join(f"{v} {k}" for k, v in counts.items())
                click.echo(f"wrote {target.shown}/ ({what}; iteration "
                           f"{run.report.iteration_ns / 1e6:.3f} ms scheduled)")
        except (ConfigError, OutputError) as e:
            fail(e)
        except Interrupted as e:
            done = (f"the new trace was already in place in {e.written}/" if e.written else
                    "the temp folder was removed, nothing was replaced")
            click.echo(f"error: interrupted by {e.name}; {done}", err=True)
            sys.exit(e.exit_code)


def _check_timed_pfc(sc, fabric) -> None:
    """Queue-mode marks with PFC run the frames through pfc_pass.py, which holds one rate per
    port (t=0's): frames on each epoch's routes and rates (emit/packets/epoch_paths.py) are
    written without PFC only. Refused before any work."""
    out, net = sc.hardware.output, sc.hardware.network
    if not fabric.epochs or out.ecn_marking != "queue" or not net.pfc:
        return
    from ..config import show_path
    first = min(e.at_ns for e in fabric.epochs)
    raise ConfigError(f"{show_path(sc.path)}: output.ecn_marking: queue with network.pfc: the PFC pass holds "
                      f"each port at its t=0 rate, but the fabric changes during the run (first timed event at "
                      f"{first:,} ns); set network.pfc: false in the jobs' files, or give the events at_ns: 0")


def _generate_scenario(path, out_dir, force, quiet, max_work, pcap, ns3) -> None:
    """`generate --scenario FILE`: the scenario's tables and summary in one folder, and (pcap)
    every NIC's capture: one address and QPN plan (the scenario's fabric and connections), so the
    jobs' captures never collide, each job's frames in its class - timed per connection, each
    NIC's chunks placed in its connections (emit/views/placed.py) as for a job; (ns3) the ns-3
    scenario of the mix (every chunk: `detail: auto` times per chunk then)."""
    from ..scenario import report, run, spec
    sc = spec.load_scenario(path)
    prepared = run.prepare(sc)
    if pcap and sc.hardware.output.pcap:
        _check_timed_pfc(sc, prepared[1])
    with stages(quiet) as stage:
        stage("work estimate: the jobs' collectives")
        run.check_work(sc, parse_work(max_work) if max_work is not None else DEFAULT_MAX_WORK,
                       chunks=ns3 and sc.hardware.output.ns3)
    from ..output import place
    shown_path, shown = place.choose(out_dir, "", sc.name)
    files = (*report.SCENARIO_FILES, *place.TRACE_NAMES)
    target = place.inspect(shown_path, shown, force, protect=(path,), names=files)
    with outdir.Writer(target, force, names=files) as w:
        with stages(quiet) as stage:
            hw = sc.hardware
            sim = ns3 and hw.output.ns3
            done = run.run_scenario(sc, stage, prepared=prepared, rates=True, chunks=sim)
        texts = report.scenario_files(done)
        pcaps = pcap and hw.output.pcap and bool((done.flows.rows["link"] == LinkKind.NET).any())

        def fill(tmp):
            for name, text in texts.items():
                (tmp / name).write_text(text, encoding="utf-8")
            from ..emit.tables.flows import fabric_columns, write_flows_csv
            with stages(quiet) as stage:       # the schedule's rows (op_id: ops.csv's, the job beside it)
                stage(f"flows.csv: {len(done.flows):,} rows", "rows")
                write_flows_csv(done.flows, tmp / "flows.csv", extra=fabric_columns(done.flows))
            if pcaps:
                from ..emit.views.pcap import write_pcaps
                (tmp / "pcap").mkdir()
                with stages(quiet) as stage:
                    flows = done.flows
                    if done.detail == "conn":       # the chunks of every NIC, placed in their connections
                        from ..emit.views.placed import placed_flows
                        stage("pcap estimate: chunks of every NIC, placed in their connections", "ops")
                        flows = placed_flows(done.placed())
                    stage("pcap files")
                    texts["pcaps"] = write_pcaps(flows, done.fabric, hw.output, tmp / "pcap", nccl=hw.nccl,
                                                 network=hw.network)
                    from ..emit.views.pcap import causality_note, frame_causality
                    w.warnings.extend(causality_note(frame_causality(flows, done.fabric, hw.output, nccl=hw.nccl,
                                                                     network=hw.network)))
                if hw.output.switch:     # the counters that switch should show, as a job's switch view writes them
                    from ..config import table_formats
                    from ..emit.tables.counters import write_counters
                    from ..emit.views.counters import COLUMNS
                    from ..emit.views.pcap import port_counters
                    rows = port_counters(flows, done.fabric, hw.output, nccl=hw.nccl, network=hw.network)
                    write_counters(COLUMNS, rows, tmp, table_formats(hw.output), sc.name)
            if hw.output.pictures:        # from the files just written, as `report DIR` draws them
                from ..emit.pictures.scenario_plots import scenario_pictures
                from ..scenario.saved import read_scenario_texts
                with stages(quiet) as stage:
                    stage("pictures")
                    for name, draw in scenario_pictures(read_scenario_texts(texts)).items():
                        draw(tmp / name)
            if sim:
                from ..emit.sims.ns3 import write_ns3
                with stages(quiet) as stage:
                    stage("ns-3 scenario")
                    write_ns3(done.flows, done.fabric, hw, tmp / "ns3", warnings_out=w.warnings)
        w.write(fill)
    for warning in w.warnings:
        click.echo(f"warning: {warning}", err=True)
    if not quiet:
        worst = max(done.jobs, key=lambda j: j.slowdown)
        n = len(texts.pop("pcaps", []))
        top = sum(1 for f in w.t.path.iterdir() if f.is_file() and not f.name.startswith("."))   # tables, pictures
        click.echo(f"wrote {w.t.shown}/ ({top} files, {n} pcaps; {len(done.jobs)} jobs, largest slowdown "
                   f"{worst.slowdown:.3f} ({worst.name}), Jain fairness {done.fairness:.4f})")


def parse_rate(text):
    """--lab-rate: '100G' -> Gb/s (emit/views/lab.py; loaded only when given)."""
    from ..emit.views.lab import parse_rate as parse
    return parse(text)
